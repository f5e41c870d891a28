//! Scriptable faults.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use arcp_types::ErrorCode;

/// A fault to inject with [`MockRuntime::inject`](crate::MockRuntime::inject)
/// (one-shot) or [`MockRuntime::inject_always`](crate::MockRuntime::inject_always).
///
/// One-shot faults wait in a FIFO queue; each event consumes the oldest queued
/// fault that applies to it (a submit consumes the oldest `DropOnSubmit` or
/// `RejectNextSubmit`, an outbound frame the oldest `DelayReplies` and counts
/// down the oldest `DropAfterFrames`, ...), on whichever connection the event
/// happens; a fault injected with
/// [`MockRuntime::inject_for`](crate::MockRuntime::inject_for) is consumed
/// only by an event of a call in its [`FaultScope`]. "Drop" always means
/// abruptly: the TCP connection is closed with no WebSocket close frame, as
/// the legacy Rust runtime does; jobs keep running.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Fault {
    /// Drop the connection when the next submit arrives, before executing it.
    DropOnSubmit,
    /// Send the next `job.accepted` (fresh or replayed), then drop the
    /// connection. The job keeps running.
    DropAfterAccepted,
    /// When the next job finishes, store its terminal (for idempotent replay,
    /// and in the v1.1 session buffer when
    /// [`resume_reattaches_jobs`](crate::MockRuntimeBuilder::resume_reattaches_jobs)
    /// is on), but drop its connection instead of sending it.
    DropBeforeTerminal,
    /// Drop after this many more outbound frames (0: at the next one, without
    /// sending it). With `inject_always`: every connection drops after this
    /// many frames of its own.
    DropAfterFrames(u64),
    /// Drop the connection on the next `session.hello` / `session.open`.
    DropDuringHandshake,
    /// Delay the next outbound frame (with `inject_always`: every frame).
    DelayReplies(Duration),
    /// Refuse the next submit before acceptance, without executing it: v1.1
    /// `job.error` with the request id, legacy `nack`; `retryable: true` and,
    /// when given, `details.retry_after_seconds`. The key is not bound.
    RejectNextSubmit {
        /// The code to refuse with, typically `UNAVAILABLE` or
        /// `RESOURCE_EXHAUSTED`.
        code: ErrorCode,
        /// Sent as `details.retry_after_seconds`.
        retry_after: Option<Duration>,
    },
    /// Stop answering and stop pinging on every connection, without closing
    /// anything: inbound frames are recorded but not processed, outbound
    /// frames are discarded (v1.1 session buffers still fill). Ends with
    /// [`Fault::Recover`] or [`MockRuntime::clear_faults`](crate::MockRuntime::clear_faults).
    BlackHole,
    /// End a [`Fault::BlackHole`].
    Recover,
    /// Answer the next WebSocket upgrade (with `inject_always`: every one)
    /// with this HTTP status instead of `101 Switching Protocols`, then
    /// close: `429` or `503` model an overloaded runtime, `401` refused
    /// credentials (with `WWW-Authenticate: Bearer`). `retry_after`, when
    /// given, is sent as a `Retry-After` header in whole seconds (rounded
    /// up). A status outside 400..=599 is sent as 503.
    RefuseUpgrade {
        /// The HTTP status, such as 429, 503 or 401.
        status: u16,
        /// Sent as `Retry-After` (seconds).
        retry_after: Option<Duration>,
    },
    /// Close the next connection that sends a submit with a WebSocket close
    /// frame carrying `code` (for example 1011 or 1013), before executing
    /// the submit. The HTTP binding ends the response abruptly instead.
    CloseWith {
        /// The WebSocket close code.
        code: u16,
    },
    /// After each job terminal is sent (one-shot: the next one), also send
    /// on the same connection an exact duplicate of that terminal, a
    /// `job.event` for the finished job, and a terminal error naming a job
    /// and a request that never existed. None of these count in the ground
    /// truth ([`MockRuntime::jobs`](crate::MockRuntime::jobs) and the
    /// execution counts).
    StrayFrames,
    /// The next accepted job waits this long in the runtime's queue before
    /// its tool starts (as behind a busy worker pool): `job.accepted` (and
    /// the legacy `job.started`) are sent at once, and a cancel meanwhile
    /// ends the job `cancelled` with its tool never run (its record in
    /// [`MockRuntime::jobs`](crate::MockRuntime::jobs) shows no execution;
    /// the per-tool and per-key counters count jobs at acceptance).
    QueueJob(Duration),
}

impl Fault {
    /// Whether the fault concerns one call (a submit, its `job.accepted`,
    /// its terminal), so that it can be scoped to a tool or a key.
    fn concerns_a_call(&self) -> bool {
        matches!(
            self,
            Fault::DropOnSubmit
                | Fault::DropAfterAccepted
                | Fault::DropBeforeTerminal
                | Fault::RejectNextSubmit { .. }
                | Fault::CloseWith { .. }
                | Fault::StrayFrames
                | Fault::QueueJob(_)
        )
    }
}

/// Which calls a scoped fault applies to, for
/// [`MockRuntime::inject_for`](crate::MockRuntime::inject_for) and
/// [`MockRuntime::inject_always_for`](crate::MockRuntime::inject_always_for):
/// the calls of one tool, or the calls with one idempotency key. Other calls
/// pass untouched (and do not consume a one-shot scoped fault).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FaultScope {
    /// Calls of this tool.
    Tool(String),
    /// Calls with this idempotency key (any principal).
    Key(String),
}

impl FaultScope {
    /// Calls of `tool`.
    pub fn tool(tool: impl Into<String>) -> Self {
        FaultScope::Tool(tool.into())
    }

    /// Calls with idempotency key `key`.
    pub fn key(key: impl Into<String>) -> Self {
        FaultScope::Key(key.into())
    }

    fn matches(&self, call: Call<'_>) -> bool {
        match self {
            FaultScope::Tool(tool) => call.tool == tool,
            FaultScope::Key(key) => call.key == Some(key.as_str()),
        }
    }
}

impl fmt::Display for FaultScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultScope::Tool(tool) => write!(f, "tool `{tool}`"),
            FaultScope::Key(key) => write!(f, "idempotency key `{key}`"),
        }
    }
}

/// A fault that cannot be scoped to a tool or key, refused by
/// [`MockRuntime::inject_for`](crate::MockRuntime::inject_for): it concerns
/// a connection or every frame, not one call (`DropAfterFrames`,
/// `DropDuringHandshake`, `DelayReplies`, `BlackHole`, `Recover`,
/// `RefuseUpgrade`). Inject it with
/// [`MockRuntime::inject`](crate::MockRuntime::inject) instead.
#[derive(Debug, Clone, PartialEq)]
pub struct UnscopableFault {
    fault: Fault,
    scope: FaultScope,
}

impl UnscopableFault {
    /// The fault that was refused.
    pub fn fault(&self) -> &Fault {
        &self.fault
    }

    /// The scope it was asked for.
    pub fn scope(&self) -> &FaultScope {
        &self.scope
    }
}

impl fmt::Display for UnscopableFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "arcp-mock: {:?} concerns a connection, not one call, so it cannot be scoped to {}; \
             inject it with `inject` or `inject_always`",
            self.fault, self.scope
        )
    }
}

impl std::error::Error for UnscopableFault {}

/// The call an event belongs to, for matching scoped faults.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Call<'a> {
    pub tool: &'a str,
    pub key: Option<&'a str>,
}

/// Whether a fault with `scope` applies to an event of `call` (`None`: an
/// event of no call, which only unscoped faults apply to).
fn applies(scope: Option<&FaultScope>, call: Option<Call<'_>>) -> bool {
    match (scope, call) {
        (None, _) => true,
        (Some(scope), Some(call)) => scope.matches(call),
        (Some(_), None) => false,
    }
}

#[derive(Debug)]
struct Queued {
    fault: Fault,
    scope: Option<FaultScope>,
    /// Frames still to send, for `DropAfterFrames`.
    remaining: u64,
}

/// What to do with one outbound frame.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FrameAction {
    pub delay: Option<Duration>,
    pub drop_before: bool,
    pub drop_after: bool,
}

/// Queued one-shot faults and standing ones.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    queue: VecDeque<Queued>,
    always: Vec<(Fault, Option<FaultScope>)>,
}

/// Bound on queued and standing faults (a test injects a handful).
const MAX_FAULTS: usize = 1024;

impl Faults {
    /// Checks that `fault` can be scoped to `scope`.
    pub(crate) fn scopable(fault: &Fault, scope: &FaultScope) -> Result<(), UnscopableFault> {
        if fault.concerns_a_call() {
            Ok(())
        } else {
            Err(UnscopableFault {
                fault: fault.clone(),
                scope: scope.clone(),
            })
        }
    }

    pub(crate) fn push(&mut self, fault: Fault, scope: Option<FaultScope>) {
        if self.queue.len() >= MAX_FAULTS {
            self.queue.pop_front();
        }
        let remaining = match fault {
            Fault::DropAfterFrames(n) => n,
            _ => 0,
        };
        self.queue.push_back(Queued {
            fault,
            scope,
            remaining,
        });
    }

    pub(crate) fn push_always(&mut self, fault: Fault, scope: Option<FaultScope>) {
        if self.always.len() < MAX_FAULTS {
            self.always.push((fault, scope));
        }
    }

    pub(crate) fn clear(&mut self) {
        self.queue.clear();
        self.always.clear();
    }

    /// Consumes the oldest unscoped queued fault matching `pred`, else
    /// returns an unscoped standing one: for events of no particular call.
    pub(crate) fn take(&mut self, pred: impl Fn(&Fault) -> bool) -> Option<Fault> {
        self.take_for(pred, None)
    }

    /// Consumes the oldest queued fault matching `pred` that applies to
    /// `call` (unscoped, or scoped to its tool or key), else returns such a
    /// standing one.
    pub(crate) fn take_for(
        &mut self,
        pred: impl Fn(&Fault) -> bool,
        call: Option<Call<'_>>,
    ) -> Option<Fault> {
        let fits = |fault: &Fault, scope: Option<&FaultScope>| pred(fault) && applies(scope, call);
        if let Some(i) = self
            .queue
            .iter()
            .position(|q| fits(&q.fault, q.scope.as_ref()))
        {
            return self.queue.remove(i).map(|q| q.fault);
        }
        self.always
            .iter()
            .find(|(f, scope)| fits(f, scope.as_ref()))
            .map(|(f, _)| f.clone())
    }

    /// Decides the fate of one outbound frame; `sent` counts the frames this
    /// connection has sent so far.
    pub(crate) fn on_frame(&mut self, sent: &mut u64) -> FrameAction {
        let mut action = FrameAction::default();
        if let Some(Fault::DelayReplies(d)) = self.take(|f| matches!(f, Fault::DelayReplies(_))) {
            action.delay = Some(d);
        }
        if let Some(i) = self
            .queue
            .iter()
            .position(|q| q.scope.is_none() && matches!(q.fault, Fault::DropAfterFrames(_)))
        {
            let q = &mut self.queue[i];
            if q.remaining == 0 {
                action.drop_before = true;
                self.queue.remove(i);
            } else {
                q.remaining -= 1;
                if q.remaining == 0 {
                    action.drop_after = true;
                    self.queue.remove(i);
                }
            }
        }
        *sent += 1;
        for (fault, _) in &self.always {
            if let Fault::DropAfterFrames(n) = fault {
                if *n == 0 {
                    action.drop_before = true;
                } else if *sent >= *n {
                    action.drop_after = true;
                }
            }
        }
        action
    }
}
