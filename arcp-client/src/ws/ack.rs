//! When the client acknowledges the runtime's bytes with an ACK packet of
//! its own, and when it lets its next request carry the ACK.
//!
//! A runtime that writes each frame on its own with Nagle on (arcp-runtime
//! 2.0.0 writes `job.accepted`, `job.started` and `job.completed` so) sends
//! the first frame of a reply and holds the rest until that frame is
//! acknowledged. Linux delays the ACK by up to 40 ms unless data goes back
//! first, so a call whose caller sends nothing waits that long. An ACK of
//! its own (`TCP_QUICKACK`, which sends the pending ACK at once) ends the
//! wait, but costs a packet through both ends' stacks and splits the
//! runtime's frames into a segment each: measured against that runtime at
//! 64 calls in flight, re-arming after every read sent 2.6 ACK packets and
//! took 2.9 runtime segments per call, where a client whose requests
//! carry the ACKs takes 0.7.
//!
//! The rule, from what is pending when bytes were read:
//!
//! ```text
//!   read ─┬─ no call waits ─────────────────────────────▶ nothing owed (the next request carries it)
//!         ├─ one call waits, no caller freed since the last write
//!         │                                             ─▶ ACK now: nothing else can carry it
//!         └─ otherwise ─────────────────────────────────▶ owe it for GRACE: a freed caller's
//!                                                         request, or one freed by another
//!                                                         call's reply, carries it
//!   a write starts ──▶ nothing owed (its segment carries the ACK)
//!   owed for GRACE with no write ──▶ ACK now
//! ```
//!
//! So a lone call gets its ACK at once, several calls' ACKs ride on their
//! requests, and the runtime's frames gather into fewer segments while the
//! ACK is owed; a wave of calls whose callers stop calling costs at most
//! [`GRACE`], never the kernel's 40 ms. Measured against arcp-runtime 2.0.0
//! (BENCHMARKS.md, `arcp-bench/diagnose-runtime.sh`): at 64 calls in flight
//! 0.55 runtime segments and 0.35 ACK packets per call, where re-arming
//! after every read took 2.7-2.9 and 2.6.

use std::time::{Duration, Instant};

/// How long an owed ACK waits for a request to carry it: the driver's
/// timer resolution (tokio's timers fire on millisecond ticks), far below
/// the kernel's 40 ms.
pub(super) const GRACE: Duration = Duration::from_millis(1);

/// The connection's owed ACK (see the module docs). Pure: time is passed in.
#[derive(Debug, Default)]
pub(super) struct OwedAck {
    /// When the owed ACK is sent on its own, if one is owed.
    due: Option<Instant>,
    /// Whether a caller got its outcome since the last write started (its
    /// next request may carry the ACK).
    caller_freed: bool,
}

impl OwedAck {
    /// Outcomes were handed to `n` callers.
    pub(super) fn handed_out(&mut self, n: usize) {
        self.caller_freed |= n > 0;
    }

    /// Bytes were read; `waiting`: the calls that still wait for the
    /// runtime. Returns whether to send the ACK now.
    pub(super) fn on_read(&mut self, now: Instant, waiting: usize) -> bool {
        match waiting {
            0 => {
                self.due = None;
                false
            }
            1 if !self.caller_freed => {
                self.due = None;
                true
            }
            _ => {
                self.due.get_or_insert(now + GRACE);
                false
            }
        }
    }

    /// A write started: its first segment carries the ACK.
    pub(super) fn on_write(&mut self) {
        self.due = None;
        self.caller_freed = false;
    }

    /// When the owed ACK is due, if one is owed.
    pub(super) fn due(&self) -> Option<Instant> {
        self.due
    }

    /// Whether the owed ACK is due at `now` (then it is no longer owed).
    pub(super) fn take_due(&mut self, now: Instant) -> bool {
        match self.due {
            Some(at) if now >= at => {
                self.due = None;
                true
            }
            _ => false,
        }
    }

    /// The connection ended: nothing is owed on the next one.
    pub(super) fn reset(&mut self) {
        *self = OwedAck::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_waiting_call_is_acked_at_once() {
        let (mut ack, t) = (OwedAck::default(), Instant::now());
        assert!(ack.on_read(t, 1), "its caller sends nothing meanwhile");
        assert_eq!(ack.due(), None);
    }

    #[test]
    fn nothing_waiting_owes_nothing() {
        let (mut ack, t) = (OwedAck::default(), Instant::now());
        ack.handed_out(1);
        assert!(!ack.on_read(t, 0));
        assert_eq!(ack.due(), None, "the next request carries it, whenever");
    }

    #[test]
    fn a_freed_callers_request_carries_the_ack() {
        let (mut ack, t) = (OwedAck::default(), Instant::now());
        ack.handed_out(3);
        assert!(!ack.on_read(t, 1), "owed, not sent");
        assert_eq!(ack.due(), Some(t + GRACE));
        ack.on_write();
        assert_eq!(ack.due(), None);
        assert!(!ack.take_due(t + GRACE * 2), "the write carried it");
        // After the write, no caller is freed: the next read is acked at once.
        assert!(ack.on_read(t + GRACE, 1));
    }

    #[test]
    fn several_waiting_calls_owe_the_ack_to_a_coming_request() {
        let (mut ack, t) = (OwedAck::default(), Instant::now());
        assert!(!ack.on_read(t, 2), "another reply may free a caller");
        assert_eq!(ack.due(), Some(t + GRACE));
    }

    #[test]
    fn an_owed_ack_goes_out_after_the_grace() {
        let (mut ack, t) = (OwedAck::default(), Instant::now());
        ack.handed_out(1);
        assert!(!ack.on_read(t, 4));
        // A later read keeps the first due time: the grace is not extended.
        assert!(!ack.on_read(t + GRACE / 2, 4));
        assert!(!ack.take_due(t + GRACE / 2));
        assert!(ack.take_due(t + GRACE));
        assert_eq!(ack.due(), None, "sent once");
    }

    #[test]
    fn a_lost_connection_owes_nothing() {
        let (mut ack, t) = (OwedAck::default(), Instant::now());
        ack.handed_out(1);
        ack.on_read(t, 4);
        ack.reset();
        assert_eq!(ack.due(), None);
        assert!(ack.on_read(t, 1));
    }
}
