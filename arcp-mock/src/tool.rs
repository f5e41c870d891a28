//! Tools: the closures a test registers, what they can do while running, and
//! how they fail.
//!
//! A running tool reaches the runtime only through [`EventSink`], which the
//! engine implements: this module knows nothing of the engine.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use arcp_types::ErrorCode;
use serde_json::{json, Value};

/// A registered tool, type-erased.
pub(crate) type ToolFn = Arc<
    dyn Fn(Value, ToolContext) -> Pin<Box<dyn Future<Output = Result<Value, ToolFailure>> + Send>>
        + Send
        + Sync,
>;

/// The registered tools, by name.
pub(crate) type Tools = HashMap<String, ToolFn>;

/// Type-erases a tool closure.
pub(crate) fn erase<F, Fut>(tool: F) -> ToolFn
where
    F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ToolFailure>> + Send + 'static,
{
    Arc::new(move |args, ctx| Box::pin(tool(args, ctx)))
}

/// Where a running tool's job events go. The runtime shapes them in its
/// dialect and delivers them; events of a job that has ended are dropped.
pub(crate) trait EventSink: Send + Sync {
    /// A job event of `kind` with `body`.
    fn event(&self, job_id: &str, kind: &str, body: Value);
    /// Progress: `current` of `total` steps (each dialect has its own body).
    fn progress(&self, job_id: &str, current: u64, total: u64);
    /// One streamed piece of the result.
    fn result_chunk(&self, job_id: &str, data: String, more: bool);
    /// Drops the connection the job's frames go to.
    fn drop_connection(&self, job_id: &str);
}

/// What a running tool can see and do: emit job events, sleep, and read
/// which job, key and principal it runs for.
///
/// Events go out as job events of this job, in the dialect's own shape
/// (v1.1: `job.event {kind, ts, body}`; legacy: `job.progress`, `log`,
/// `metric`, `job.result_chunk`). Cheap to clone.
#[derive(Clone)]
pub struct ToolContext {
    inner: Arc<Inner>,
}

struct Inner {
    sink: Arc<dyn EventSink>,
    job_id: String,
    tool: String,
    key: Option<String>,
    principal: String,
}

impl fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolContext")
            .field("job_id", &self.inner.job_id)
            .field("tool", &self.inner.tool)
            .field("idempotency_key", &self.inner.key)
            .field("principal", &self.inner.principal)
            .finish()
    }
}

impl ToolContext {
    pub(crate) fn new(
        sink: Arc<dyn EventSink>,
        job_id: String,
        tool: String,
        key: Option<String>,
        principal: String,
    ) -> Self {
        ToolContext {
            inner: Arc::new(Inner {
                sink,
                job_id,
                tool,
                key,
                principal,
            }),
        }
    }

    /// The job this execution belongs to.
    pub fn job_id(&self) -> &str {
        &self.inner.job_id
    }

    /// The tool name the client asked for.
    pub fn tool(&self) -> &str {
        &self.inner.tool
    }

    /// The idempotency key of the submission, if it had one.
    pub fn idempotency_key(&self) -> Option<&str> {
        self.inner.key.as_deref()
    }

    /// The principal the bearer token mapped to (`anonymous` when the mock
    /// has no tokens registered).
    pub fn principal(&self) -> &str {
        &self.inner.principal
    }

    /// Reports progress: `current` of `total` steps. v1.1 body
    /// `{current, total}`; legacy `job.progress {percent}`.
    pub async fn progress(&self, current: u64, total: u64) {
        self.inner.sink.progress(&self.inner.job_id, current, total);
        tokio::task::yield_now().await;
    }

    /// Emits a log line (`level` such as `info` or `warn`).
    pub async fn log(&self, level: &str, message: impl Into<String>) {
        let message: String = message.into();
        self.event("log", json!({ "level": level, "message": message }))
            .await;
    }

    /// Emits a metric, such as `("cost.tick", 0.0, "USD")`.
    pub async fn metric(&self, name: &str, value: f64, unit: &str) {
        self.event(
            "metric",
            json!({ "name": name, "value": value, "unit": unit }),
        )
        .await;
    }

    /// Streams one UTF-8 piece of the result (`more: false` on the last).
    /// The mock numbers the chunks and names the result; the terminal then
    /// carries that `result_id`.
    pub async fn result_chunk(&self, data: impl Into<String>, more: bool) {
        self.inner
            .sink
            .result_chunk(&self.inner.job_id, data.into(), more);
        tokio::task::yield_now().await;
    }

    /// Emits any job event: v1.1 `job.event {kind, ts, body}`; legacy: the
    /// dedicated message type for `progress`, `log`, `metric` and
    /// `result_chunk` (with `body` as the payload), `job.event` otherwise.
    pub async fn event(&self, kind: &str, body: Value) {
        self.inner.sink.event(&self.inner.job_id, kind, body);
        // Let the connection writer drain between bursts of events.
        tokio::task::yield_now().await;
    }

    /// Drops the connection this job's answer would go to, abruptly (no
    /// close frame), once the frames already queued on it are sent: the
    /// way to script a lost answer *after* the side effect. The tool keeps
    /// running; what it returns is stored as the job's terminal, so a retry
    /// with the same key gets it replayed (per the
    /// [`ReplayPolicy`](crate::ReplayPolicy)) and the tool still ran once.
    ///
    /// Over v1.1 it is the connection attached to the job's session now;
    /// over the legacy dialect and the HTTP binding, the submitting one.
    /// Nothing happens when that connection is already gone.
    ///
    /// ```
    /// # use arcp_mock::MockRuntime;
    /// # use serde_json::json;
    /// let builder = MockRuntime::builder().tool("refund", |args, ctx| async move {
    ///     // ... the side effect happens here ...
    ///     ctx.drop_connection().await; // the client never hears back
    ///     Ok(json!({"refunded": args["order"]}))
    /// });
    /// ```
    pub async fn drop_connection(&self) {
        self.inner.sink.drop_connection(&self.inner.job_id);
        tokio::task::yield_now().await;
    }

    /// Sleeps. Cancelling the job interrupts the sleep (the tool's future is
    /// dropped).
    pub async fn sleep(&self, duration: Duration) {
        tokio::time::sleep(duration).await;
    }
}

/// A tool's failure, sent as the job's terminal error (v1.1 `job.error`,
/// legacy `job.failed`).
///
/// ```
/// use arcp_mock::ToolFailure;
/// use arcp_types::ErrorCode;
/// use serde_json::json;
///
/// let f = ToolFailure::new(ErrorCode::Unavailable, "try later")
///     .retryable(true)
///     .details(json!({"retry_after_seconds": 1}));
/// assert_eq!(f.code(), &ErrorCode::Unavailable);
/// let g = ToolFailure::new("PERMISSION_DENIED", "nope"); // any wire spelling
/// assert!(!g.is_retryable());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ToolFailure {
    code: ErrorCode,
    message: String,
    retryable: Option<bool>,
    details: Option<Value>,
}

impl ToolFailure {
    /// A failure with an error code (an [`ErrorCode`] or its wire spelling)
    /// and a message. `retryable` defaults to the code's default.
    pub fn new(code: impl Into<ErrorCode>, message: impl Into<String>) -> Self {
        ToolFailure {
            code: code.into(),
            message: message.into(),
            retryable: None,
            details: None,
        }
    }

    /// Sets `retryable` explicitly.
    pub fn retryable(mut self, retryable: bool) -> Self {
        self.retryable = Some(retryable);
        self
    }

    /// Attaches structured `details`.
    pub fn details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// The error code.
    pub fn code(&self) -> &ErrorCode {
        &self.code
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// `retryable` as set, else the code's default.
    pub fn is_retryable(&self) -> bool {
        self.retryable
            .unwrap_or_else(|| self.code.default_retryable())
    }

    /// The details, if any.
    pub fn details_value(&self) -> Option<&Value> {
        self.details.as_ref()
    }
}

impl fmt::Display for ToolFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ToolFailure {}

impl From<ErrorCode> for ToolFailure {
    fn from(code: ErrorCode) -> Self {
        let message = code.to_string();
        ToolFailure::new(code, message)
    }
}
