//! A call's cancel: the callers waiting for its outcome and their bound,
//! its request on the current connection, and what became of it (written
//! to a socket, answered or refused by the runtime). The call holds one
//! while a cancel is asked for (`calls.rs`); the core drives it
//! (`core/commands.rs` sends it, `core/inbound.rs` and
//! `core/inbound/verdicts.rs` settle it, `core/link_events.rs` notes its
//! writes and losses).

use std::time::Instant;

use tokio::sync::oneshot;

use crate::outcome::CancelOutcome;

/// A cancel asked for while the call is live. Its fields change only
/// through its methods, one per step: asked, joined, queued on a
/// connection, written, lost with its connection, answered or refused.
pub(crate) struct CancelState {
    /// Callers waiting for the cancel's outcome, answered by `until`.
    waiters: Vec<oneshot::Sender<CancelOutcome>>,
    until: Instant,
    /// The request on the current connection, with its transmit order.
    request: Option<(String, u64)>,
    /// Some copy of the cancel was written to a socket.
    written: bool,
    /// The runtime confirmed it; nothing more to send.
    settled: bool,
}

impl CancelState {
    /// A cancel asked for by `reply`'s caller, answered by `until`.
    pub(super) fn new(reply: oneshot::Sender<CancelOutcome>, until: Instant) -> Self {
        CancelState {
            waiters: vec![reply],
            until,
            request: None,
            written: false,
            settled: false,
        }
    }

    /// Another caller asks for the same cancel: all are answered by the
    /// later bound.
    pub(crate) fn join(&mut self, reply: oneshot::Sender<CancelOutcome>, until: Instant) {
        self.waiters.push(reply);
        self.until = self.until.max(until);
    }

    /// Whether some copy of it reached a socket.
    pub(crate) fn is_written(&self) -> bool {
        self.written
    }

    /// When its callers are answered, while any wait.
    pub(crate) fn answer_by(&self) -> Option<Instant> {
        (!self.waiters.is_empty()).then_some(self.until)
    }

    /// Answers every caller waiting for it.
    pub(crate) fn answer(&mut self, outcome: CancelOutcome) {
        for waiter in self.waiters.drain(..) {
            let _ = waiter.send(outcome.clone());
        }
    }

    /// Whether the runtime answered it (nothing more to send).
    pub(crate) fn is_settled(&self) -> bool {
        self.settled
    }

    /// The id of its request on the current connection, if one is queued.
    pub(crate) fn request(&self) -> Option<&str> {
        self.request.as_ref().map(|(request, _)| request.as_str())
    }

    /// Whether callers still wait and their bound has passed at `now`.
    pub(crate) fn is_due(&self, now: Instant) -> bool {
        self.answer_by().is_some_and(|by| now >= by)
    }

    /// Its request is queued on the live connection as `request`, `seq`
    /// in the transmit order.
    pub(crate) fn queued(&mut self, request: String, seq: u64) {
        self.request = Some((request, seq));
    }

    /// A copy of it reached a socket.
    pub(crate) fn flushed(&mut self) {
        self.written = true;
    }

    /// Its connection was lost: a new connection sends it again.
    pub(crate) fn connection_lost(&mut self) {
        self.request = None;
    }

    /// The runtime refused it with an error: nothing more to send.
    pub(crate) fn refused(&mut self) {
        self.request = None;
        self.settled = true;
    }

    /// The runtime replied to it (so it was written): nothing more to send.
    pub(crate) fn answered(&mut self) {
        self.request = None;
        self.written = true;
        self.settled = true;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_cancel_is_due_at_its_latest_bound_while_callers_wait() {
        let t0 = Instant::now();
        let (first, _first_rx) = oneshot::channel();
        let mut cancel = CancelState::new(first, t0 + Duration::from_secs(1));
        assert!(!cancel.is_due(t0));
        assert!(cancel.is_due(t0 + Duration::from_secs(1)));
        let (second, _second_rx) = oneshot::channel();
        cancel.join(second, t0 + Duration::from_secs(3));
        let (third, _third_rx) = oneshot::channel();
        cancel.join(third, t0 + Duration::from_secs(2));
        assert_eq!(cancel.waiters.len(), 3);
        assert!(
            !cancel.is_due(t0 + Duration::from_secs(2)),
            "the later bound holds"
        );
        assert!(cancel.is_due(t0 + Duration::from_secs(3)));
        cancel.waiters.clear();
        assert!(
            !cancel.is_due(t0 + Duration::from_secs(9)),
            "no caller waits"
        );
    }

    #[test]
    fn a_cancel_request_lives_until_its_connection_or_an_answer_ends_it() {
        let t0 = Instant::now();
        let (reply, _rx) = oneshot::channel();
        let mut cancel = CancelState::new(reply, t0);
        assert_eq!(cancel.request(), None);
        cancel.queued("cancel-1".into(), 7);
        assert_eq!(cancel.request(), Some("cancel-1"));
        cancel.connection_lost();
        assert_eq!(cancel.request(), None);
        assert!(
            !cancel.written && !cancel.is_settled(),
            "lost before any write"
        );

        cancel.queued("cancel-2".into(), 9);
        cancel.flushed();
        assert!(cancel.written);
        cancel.refused();
        assert_eq!(cancel.request(), None);
        assert!(cancel.is_settled());

        let (reply, _rx) = oneshot::channel();
        let mut cancel = CancelState::new(reply, t0);
        cancel.queued("cancel-3".into(), 11);
        cancel.answered();
        assert_eq!(cancel.request(), None);
        assert!(cancel.written, "a reply proves the cancel was written");
        assert!(cancel.is_settled());
    }
}
