//! Scriptable faults.

use std::collections::VecDeque;
use std::time::Duration;

use arcp_types::ErrorCode;

/// A fault to inject with [`MockRuntime::inject`](crate::MockRuntime::inject)
/// (one-shot) or [`MockRuntime::inject_always`](crate::MockRuntime::inject_always).
///
/// One-shot faults wait in a FIFO queue; each event consumes the oldest queued
/// fault that applies to it (a submit consumes the oldest `DropOnSubmit` or
/// `RejectNextSubmit`, an outbound frame the oldest `DelayReplies` and counts
/// down the oldest `DropAfterFrames`, ...), on whichever connection the event
/// happens. "Drop" always means abruptly: the TCP connection is closed with no
/// WebSocket close frame, as the legacy Rust runtime does; jobs keep running.
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
}

#[derive(Debug)]
struct Queued {
    fault: Fault,
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
    always: Vec<Fault>,
}

/// Bound on queued and standing faults (a test injects a handful).
const MAX_FAULTS: usize = 1024;

impl Faults {
    pub(crate) fn push(&mut self, fault: Fault) {
        if self.queue.len() >= MAX_FAULTS {
            self.queue.pop_front();
        }
        let remaining = match fault {
            Fault::DropAfterFrames(n) => n,
            _ => 0,
        };
        self.queue.push_back(Queued { fault, remaining });
    }

    pub(crate) fn push_always(&mut self, fault: Fault) {
        if self.always.len() < MAX_FAULTS {
            self.always.push(fault);
        }
    }

    pub(crate) fn clear(&mut self) {
        self.queue.clear();
        self.always.clear();
    }

    /// Consumes the oldest queued fault matching `pred`, else returns a
    /// standing one.
    pub(crate) fn take(&mut self, pred: impl Fn(&Fault) -> bool) -> Option<Fault> {
        if let Some(i) = self.queue.iter().position(|q| pred(&q.fault)) {
            return self.queue.remove(i).map(|q| q.fault);
        }
        self.always.iter().find(|f| pred(f)).cloned()
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
            .position(|q| matches!(q.fault, Fault::DropAfterFrames(_)))
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
        for fault in &self.always {
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
