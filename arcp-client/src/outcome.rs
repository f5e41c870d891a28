//! What a call ends with, and what it reports on the way: the successful
//! output, job events, and the outcome of a cancel request.
//!
//! A leaf: imports no other module of the crate.

use arcp_types::{EventBody, IdempotencyKey, JobEvent};
use serde_json::Value;

/// The successful outcome of a call: the tool's result (`T`: a JSON
/// [`Value`] for [`Client::invoke_tool`](crate::Client::invoke_tool), the
/// result type of a typed call through a [`Tool`](crate::Tool)) and how it
/// was obtained.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolOutput<T = Value> {
    /// The tool's result.
    pub value: T,
    /// The job the runtime bound the call to, when it said.
    pub job_id: Option<String>,
    /// The call's idempotency key.
    pub key: IdempotencyKey,
    /// Whether the runtime's answer shows it was a stored outcome (see
    /// [`ToolError::replayed`](crate::ToolError::replayed) for the rule), or
    /// it was answered from the client's outcome cache or journal, or this
    /// call joined another caller's call of the same key and intent after
    /// that call's request went out (the tool ran, if it did, for that one).
    pub replayed: bool,
    /// How many times the request was sent (1 when nothing went wrong).
    pub attempts: u32,
    /// The W3C trace id shared by every attempt of the call.
    pub trace_id: String,
}

impl<T> ToolOutput<T> {
    /// A successful outcome with `value`, for the call with `key`: answered
    /// directly (not replayed), one attempt, no job id and an empty trace
    /// id; the `with_*` methods set the rest. The client builds these from
    /// the runtime's answers; this is for tests of code that handles them
    /// (a fake that returns what a call would), since the struct is
    /// `#[non_exhaustive]`.
    ///
    /// ```
    /// use arcp_sdk::{IdempotencyKey, ToolOutput};
    /// use serde_json::json;
    ///
    /// let key = IdempotencyKey::new();
    /// let out = ToolOutput::new(key.clone(), json!({"refunded": 4812}))
    ///     .with_job_id("job_1")
    ///     .with_attempts(2)
    ///     .with_replayed(true);
    /// assert_eq!((out.key.clone(), out.attempts, out.replayed), (key, 2, true));
    /// assert_eq!(out.map(|v| v["refunded"].as_u64()).value, Some(4812));
    /// ```
    pub fn new(key: IdempotencyKey, value: T) -> Self {
        ToolOutput {
            value,
            job_id: None,
            key,
            replayed: false,
            attempts: 1,
            trace_id: String::new(),
        }
    }

    /// Sets [`job_id`](Self::job_id).
    pub fn with_job_id(mut self, job_id: impl Into<String>) -> Self {
        self.job_id = Some(job_id.into());
        self
    }

    /// Sets [`replayed`](Self::replayed).
    pub fn with_replayed(mut self, replayed: bool) -> Self {
        self.replayed = replayed;
        self
    }

    /// Sets [`attempts`](Self::attempts).
    pub fn with_attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts;
        self
    }

    /// Sets [`trace_id`](Self::trace_id).
    pub fn with_trace_id(mut self, trace_id: impl Into<String>) -> Self {
        self.trace_id = trace_id.into();
        self
    }

    /// The same outcome with its result mapped by `f` (key, job id,
    /// attempts, replay flag and trace id unchanged).
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> ToolOutput<U> {
        ToolOutput {
            value: f(self.value),
            job_id: self.job_id,
            key: self.key,
            replayed: self.replayed,
            attempts: self.attempts,
            trace_id: self.trace_id,
        }
    }
}

/// A non-terminal event of a call's job (progress, log, metric, result chunk, ...).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct InvocationEvent {
    /// The session-scoped sequence number, when the runtime sent one.
    pub event_seq: Option<u64>,
    /// The event as received.
    pub event: JobEvent,
}

impl InvocationEvent {
    /// The body typed by kind.
    pub fn typed(&self) -> EventBody {
        self.event.typed()
    }

    /// An estimate of the bytes the event holds, for the byte bound of a
    /// watcher's buffer.
    pub(crate) fn held_bytes(&self) -> usize {
        let e = &self.event;
        std::mem::size_of::<Self>()
            + e.kind.len()
            + e.ts.as_ref().map_or(0, String::len)
            + value_bytes(&e.body)
            + e.extra
                .iter()
                .map(|(k, v)| k.len() + value_bytes(v))
                .sum::<usize>()
    }
}

/// An estimate of a JSON value's bytes: its strings, and a node's worth
/// for every value.
pub(crate) fn value_bytes(value: &serde_json::Value) -> usize {
    use serde_json::Value;
    const NODE: usize = std::mem::size_of::<Value>();
    NODE + match value {
        Value::String(s) => s.len(),
        Value::Array(items) => items.iter().map(value_bytes).sum(),
        Value::Object(map) => map.iter().map(|(k, v)| k.len() + value_bytes(v)).sum(),
        _ => 0,
    }
}

/// What became of a cancel request. Dispatch and acknowledgement are
/// reported separately: a cancel that was sent is not a cancel that happened.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelOutcome {
    /// Nothing was written to a connection (for example the call is not
    /// accepted yet, so there is no job to cancel, or no connection was up
    /// within the cancel timeout). A call not yet handed to a connection
    /// (waiting for an in-flight slot, or not awaited yet) is stopped: it is
    /// never sent, and ends with [`Error::Cancelled`](crate::Error::Cancelled)
    /// with no attempts (as the cause of [`Error::NotSent`](crate::Error::NotSent)
    /// under a supplied key).
    NotDispatched {
        /// Why.
        reason: String,
    },
    /// The cancel was written to the connection but the runtime did not
    /// confirm it within the cancel timeout. While the call is live, a
    /// cancel lost with its connection is re-sent on the next one.
    Dispatched,
    /// The runtime confirmed the cancel (or the job ended cancelled).
    Acknowledged,
    /// The runtime refused the cancel.
    Refused {
        /// The runtime's reason.
        reason: String,
    },
    /// The call had already ended; its outcome stands.
    AlreadyFinished,
}

impl CancelOutcome {
    /// Whether a cancel request reached the wire.
    pub fn is_dispatched(&self) -> bool {
        matches!(
            self,
            CancelOutcome::Dispatched | CancelOutcome::Acknowledged | CancelOutcome::Refused { .. }
        )
    }

    /// Whether the runtime confirmed the cancellation.
    pub fn is_acknowledged(&self) -> bool {
        matches!(self, CancelOutcome::Acknowledged)
    }
}
