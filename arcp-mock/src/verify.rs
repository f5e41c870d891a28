//! What verification and inspection return: the report of unmet
//! expectations, and the ground-truth records of jobs and connections.

use std::fmt;

/// Expectations that a [`MockRuntime`](crate::MockRuntime) found unmet,
/// returned by [`MockRuntime::try_verify`](crate::MockRuntime::try_verify).
/// Its `Display` is the readable report that
/// [`MockRuntime::verify`](crate::MockRuntime::verify) panics with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyError {
    total: usize,
    failures: Vec<String>,
}

impl VerifyError {
    pub(crate) fn new(total: usize, failures: Vec<String>) -> Self {
        VerifyError { total, failures }
    }

    /// One line per unmet expectation, such as
    /// ``tool `echo`: expected 1 execution, got 2``.
    pub fn failures(&self) -> &[String] {
        &self.failures
    }
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "arcp-mock: {} of {} expectation{} not met:",
            self.failures.len(),
            self.total,
            if self.total == 1 { "" } else { "s" }
        )?;
        for failure in &self.failures {
            write!(f, "\n  - {failure}")?;
        }
        Ok(())
    }
}

impl std::error::Error for VerifyError {}

/// How far a job got, in [`JobRecord::status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum JobStatus {
    /// The tool is still running (or about to start).
    Running,
    /// The tool returned a value.
    Completed,
    /// The tool returned a [`ToolFailure`](crate::ToolFailure) or panicked.
    Failed,
    /// The job was cancelled.
    Cancelled,
}

/// Ground truth about one job, from [`MockRuntime::jobs`](crate::MockRuntime::jobs):
/// what was asked, how often the tool really ran, how it ended, and whether
/// its terminal frame ever reached a client.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct JobRecord {
    /// The job id.
    pub job_id: String,
    /// The submission's idempotency key, if it had one.
    pub idempotency_key: Option<String>,
    /// The tool the job runs.
    pub tool: String,
    /// The arguments the tool ran with (the first submission's: replays and
    /// conflicting resubmissions never change them).
    pub arguments: serde_json::Value,
    /// The principal that submitted it.
    pub principal: String,
    /// How many times the tool closure was called for this job: 1 once it
    /// started, 0 if it was cancelled before it could start. Never more.
    pub executions: u64,
    /// How far it got.
    pub status: JobStatus,
    /// Whether the job's terminal frame (result, error or cancellation) was
    /// ever written to a client connection, replays included (WebSocket or
    /// HTTP). Frames sent by [`Fault::StrayFrames`](crate::Fault::StrayFrames)
    /// do not count.
    pub terminal_delivered: bool,
}

/// What one connection received and sent, from
/// [`MockRuntime::connection_log`](crate::MockRuntime::connection_log).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ConnRecord {
    /// The connection's id, in accept order (1, 2, ...).
    pub id: u64,
    /// Whether this was one request of the HTTP binding (else a WebSocket).
    pub http: bool,
    /// Envelopes the client sent on it, oldest first (the last 10 000;
    /// frames that are not envelopes are not listed).
    pub received: Vec<arcp_types::Envelope>,
    /// Envelopes written to it, oldest first (the last 10 000), as encoded
    /// on the wire, stray frames included.
    pub sent: Vec<arcp_types::Envelope>,
}
