//! The open set of ARCP error codes (v1.1 §12 and legacy RFC-0001 §18.2).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An ARCP error code as carried in `code` fields on the wire.
///
/// The set is open: runtimes add codes between releases, so a code this crate
/// does not know decodes to [`ErrorCode::Unknown`] and re-encodes unchanged
/// instead of failing the whole frame.
///
/// Two spellings are folded on read: `RATE_LIMITED` is an alias of
/// [`ErrorCode::ResourceExhausted`] (legacy §18.2). `INTERNAL` (legacy) and
/// `INTERNAL_ERROR` (v1.1) are kept as two variants because each dialect
/// expects its own spelling back; [`ErrorCode::is_internal`] treats them alike.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// `OK`: not an error; reserved (legacy).
    Ok,
    /// `CANCELLED`: the operation or job was cancelled.
    Cancelled,
    /// `UNKNOWN`: an unspecified error (legacy).
    UnknownError,
    /// `INVALID_ARGUMENT`: malformed or invalid argument (legacy).
    InvalidArgument,
    /// `DEADLINE_EXCEEDED`: timed out before completion (legacy).
    DeadlineExceeded,
    /// `NOT_FOUND`: referenced entity does not exist (legacy).
    NotFound,
    /// `ALREADY_EXISTS`: creation conflicted with an existing entity (legacy).
    AlreadyExists,
    /// `PERMISSION_DENIED`: caller lacks permission or lease.
    PermissionDenied,
    /// `RESOURCE_EXHAUSTED` (alias `RATE_LIMITED`): quota or rate limit hit.
    ResourceExhausted,
    /// `FAILED_PRECONDITION`: a precondition is unmet (legacy).
    FailedPrecondition,
    /// `ABORTED`: concurrency conflict or hard termination (legacy).
    Aborted,
    /// `OUT_OF_RANGE`: argument out of range (legacy).
    OutOfRange,
    /// `UNIMPLEMENTED`: not supported by this runtime (legacy).
    Unimplemented,
    /// `INTERNAL`: internal runtime error (legacy spelling).
    Internal,
    /// `INTERNAL_ERROR`: unrecoverable runtime fault (v1.1 spelling).
    InternalError,
    /// `UNAVAILABLE`: transient unavailability (legacy).
    Unavailable,
    /// `DATA_LOSS`: unrecoverable data loss (legacy).
    DataLoss,
    /// `UNAUTHENTICATED`: missing or invalid credentials.
    Unauthenticated,
    /// `HEARTBEAT_LOST`: the peer stopped answering heartbeats.
    HeartbeatLost,
    /// `LEASE_EXPIRED`: the lease's `expires_at` was reached.
    LeaseExpired,
    /// `LEASE_REVOKED`: the lease was revoked (legacy).
    LeaseRevoked,
    /// `BACKPRESSURE_OVERFLOW`: a stream was dropped on overflow (legacy).
    BackpressureOverflow,
    /// `LEASE_SUBSET_VIOLATION`: delegation expanded the parent lease (v1.1).
    LeaseSubsetViolation,
    /// `JOB_NOT_FOUND`: the job does not exist or is not visible (v1.1).
    JobNotFound,
    /// `DUPLICATE_KEY`: idempotency key reused with a different intent.
    DuplicateKey,
    /// `AGENT_NOT_AVAILABLE`: the agent (tool) is not registered (v1.1).
    AgentNotAvailable,
    /// `AGENT_VERSION_NOT_AVAILABLE`: the requested agent version is unavailable.
    AgentVersionNotAvailable,
    /// `TIMEOUT`: the job exceeded `max_runtime_sec` (v1.1).
    Timeout,
    /// `RESUME_WINDOW_EXPIRED`: resume came after the buffer window closed (v1.1).
    ResumeWindowExpired,
    /// `BUDGET_EXHAUSTED`: a `cost.budget` counter reached zero (v1.1).
    BudgetExhausted,
    /// `INVALID_REQUEST`: malformed envelope or schema violation (v1.1).
    InvalidRequest,
    /// A code this crate does not know, kept verbatim.
    Unknown(String),
}

/// Every known code with its wire spelling, in one table so that parsing and
/// printing cannot drift apart.
const TABLE: &[(&str, ErrorCode)] = &[
    ("OK", ErrorCode::Ok),
    ("CANCELLED", ErrorCode::Cancelled),
    ("UNKNOWN", ErrorCode::UnknownError),
    ("INVALID_ARGUMENT", ErrorCode::InvalidArgument),
    ("DEADLINE_EXCEEDED", ErrorCode::DeadlineExceeded),
    ("NOT_FOUND", ErrorCode::NotFound),
    ("ALREADY_EXISTS", ErrorCode::AlreadyExists),
    ("PERMISSION_DENIED", ErrorCode::PermissionDenied),
    ("RESOURCE_EXHAUSTED", ErrorCode::ResourceExhausted),
    ("FAILED_PRECONDITION", ErrorCode::FailedPrecondition),
    ("ABORTED", ErrorCode::Aborted),
    ("OUT_OF_RANGE", ErrorCode::OutOfRange),
    ("UNIMPLEMENTED", ErrorCode::Unimplemented),
    ("INTERNAL", ErrorCode::Internal),
    ("INTERNAL_ERROR", ErrorCode::InternalError),
    ("UNAVAILABLE", ErrorCode::Unavailable),
    ("DATA_LOSS", ErrorCode::DataLoss),
    ("UNAUTHENTICATED", ErrorCode::Unauthenticated),
    ("HEARTBEAT_LOST", ErrorCode::HeartbeatLost),
    ("LEASE_EXPIRED", ErrorCode::LeaseExpired),
    ("LEASE_REVOKED", ErrorCode::LeaseRevoked),
    ("BACKPRESSURE_OVERFLOW", ErrorCode::BackpressureOverflow),
    ("LEASE_SUBSET_VIOLATION", ErrorCode::LeaseSubsetViolation),
    ("JOB_NOT_FOUND", ErrorCode::JobNotFound),
    ("DUPLICATE_KEY", ErrorCode::DuplicateKey),
    ("AGENT_NOT_AVAILABLE", ErrorCode::AgentNotAvailable),
    (
        "AGENT_VERSION_NOT_AVAILABLE",
        ErrorCode::AgentVersionNotAvailable,
    ),
    ("TIMEOUT", ErrorCode::Timeout),
    ("RESUME_WINDOW_EXPIRED", ErrorCode::ResumeWindowExpired),
    ("BUDGET_EXHAUSTED", ErrorCode::BudgetExhausted),
    ("INVALID_REQUEST", ErrorCode::InvalidRequest),
];

impl ErrorCode {
    /// Every code this crate knows, in wire spelling order (handy for tests
    /// and documentation tables).
    pub fn known() -> impl Iterator<Item = &'static ErrorCode> {
        TABLE.iter().map(|(_, code)| code)
    }

    /// Parses a wire spelling. Never fails: unknown spellings are kept.
    pub fn parse(s: &str) -> ErrorCode {
        if s == "RATE_LIMITED" {
            return ErrorCode::ResourceExhausted;
        }
        TABLE
            .iter()
            .find(|(name, _)| *name == s)
            .map(|(_, code)| code.clone())
            .unwrap_or_else(|| ErrorCode::Unknown(s.to_owned()))
    }

    /// The wire spelling.
    pub fn as_str(&self) -> &str {
        match self {
            ErrorCode::Unknown(s) => s,
            known => TABLE
                .iter()
                .find(|(_, code)| code == known)
                .map(|(name, _)| *name)
                .unwrap_or("UNKNOWN"),
        }
    }

    /// Whether this is either spelling of an internal runtime error.
    pub fn is_internal(&self) -> bool {
        matches!(self, ErrorCode::Internal | ErrorCode::InternalError)
    }

    /// Default retryability when the runtime does not say (`retryable`
    /// absent): legacy §18.3 lists `RESOURCE_EXHAUSTED`, `UNAVAILABLE`,
    /// `DEADLINE_EXCEEDED`, `INTERNAL` and `ABORTED`; v1.1 §12 makes
    /// `INTERNAL_ERROR` always retryable. Everything else, including unknown
    /// codes, is not retryable: retrying blindly is the unsafe default.
    pub fn default_retryable(&self) -> bool {
        matches!(
            self,
            ErrorCode::ResourceExhausted
                | ErrorCode::Unavailable
                | ErrorCode::DeadlineExceeded
                | ErrorCode::Internal
                | ErrorCode::InternalError
                | ErrorCode::Aborted
        )
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for ErrorCode {
    fn from(s: &str) -> Self {
        ErrorCode::parse(s)
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Ok(ErrorCode::parse(&s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_code_round_trips_through_its_spelling() {
        for code in ErrorCode::known() {
            assert_eq!(&ErrorCode::parse(code.as_str()), code);
        }
    }

    #[test]
    fn rate_limited_is_resource_exhausted_and_both_internals_read() {
        assert_eq!(
            ErrorCode::parse("RATE_LIMITED"),
            ErrorCode::ResourceExhausted
        );
        assert!(ErrorCode::parse("INTERNAL").is_internal());
        assert!(ErrorCode::parse("INTERNAL_ERROR").is_internal());
        assert!(ErrorCode::parse("INTERNAL_ERROR").default_retryable());
    }

    #[test]
    fn unknown_codes_round_trip_verbatim() {
        let code: ErrorCode = serde_json::from_str("\"arcpx.acme.QUOTA\"").unwrap();
        assert_eq!(code, ErrorCode::Unknown("arcpx.acme.QUOTA".into()));
        assert_eq!(
            serde_json::to_string(&code).unwrap(),
            "\"arcpx.acme.QUOTA\""
        );
        assert!(!code.default_retryable());
    }
}
