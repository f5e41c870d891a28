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
//! While the ACK is owed the runtime sends nothing more (Nagle holds its
//! next frames), so waiting pays only while a request is coming (one
//! already queued, or one a caller freed since the last write may still
//! submit) or while the runtime is busy anyway, working through requests
//! it has not answered: then its frames gather behind the ACK at no cost
//! in latency. The rule decides from what is pending when the driver is
//! about to sleep, not from a fixed delay:
//!
//! ```text
//!   read, no call waits ──────────────────────▶ nothing owed (the next request carries it)
//!   read, calls wait ─────────────────────────▶ owed, for its hold: GRACE, or
//!                                               PER_UNANSWERED per request the
//!                                               runtime has not answered, up to MAX_HOLD
//!   a write starts ───────────────────────────▶ nothing owed (its segment carries the ACK)
//!
//!   owed, the driver about to sleep:
//!     no call waits any more ─────────────────▶ nothing owed
//!     past its hold ──────────────────────────▶ ACK now
//!     a request is queued for writing ────────▶ keep owing: its write carries the ACK
//!     a caller was freed since the last write,
//!     fewer than YIELDS yields spent ─────────▶ yield once: the freed callers run and
//!                                               may submit (then a write carries it)
//!     BACKLOG or more requests unanswered ────▶ keep owing (its hold at most): the runtime
//!                                               works through them meanwhile, and its
//!                                               frames gather into fewer segments
//!     otherwise ──────────────────────────────▶ ACK now: nothing else will carry it
//! ```
//!
//! So a lone call, or a few calls whose runtime has caught up, get the ACK
//! in the same turn (no timer tick: at 4 calls in flight against
//! arcp-runtime 2.0.0 the p50 fell from 2.6-2.8 ms to 1.2-1.3 ms); the
//! ACKs of calls whose callers call again ride on their requests; under a
//! backlog (16 and 64 in flight) the runtime's frames gather as before
//! (0.45-0.6 runtime segments per call at 64); a wave of calls whose
//! callers stop calling costs a few yields, never the kernel's 40 ms.
//!
//! The hold grows with the backlog it was owed under: a runtime with many
//! requests to work through stays busy for longer without the ACK, and
//! every ACK packet it is spared is one wake-up less for both sides (its
//! frames arrive in fewer segments, read in fewer turns, whose callers are
//! freed in fewer batches). Measured against arcp-runtime 2.0.0 at 64
//! calls in flight (BENCHMARKS.md): against a fixed 1 ms hold, our own
//! quickacks fell from 0.14 to 0.01 per call, the client's syscalls from
//! 3.0 to 1.8 and its CPU per call by a third; at 16 in flight its
//! syscalls by a quarter. A fixed longer hold (3-5 ms whatever the
//! backlog) cut as much at 64 but cost throughput at 16.
//! Measured with `arcp-bench/diagnose-runtime.sh` (BENCHMARKS.md).

use std::time::{Duration, Instant};

/// The shortest hold of an owed ACK: a queued write normally starts within
/// the turn (tokio's timers fire on millisecond ticks).
pub(super) const GRACE: Duration = Duration::from_millis(1);

/// How much longer an owed ACK is held per request the runtime had not
/// answered when it was owed (arcp-runtime 2.0.0 spends 300-450 us of its
/// CPU per call on the machine measured): measured against it at 16 calls
/// in flight, 300 us cost throughput, as a fixed 5 ms hold did; 150 us
/// did not.
pub(super) const PER_UNANSWERED: Duration = Duration::from_micros(150);

/// The longest hold, however deep the backlog: a bound on how long a
/// caller's outcome may wait behind the ACK.
pub(super) const MAX_HOLD: Duration = Duration::from_millis(5);

/// How long an ACK owed under `unanswered` unanswered requests is held at
/// most (see the module docs).
pub(super) fn hold(unanswered: usize) -> Duration {
    let unanswered = u32::try_from(unanswered).unwrap_or(u32::MAX);
    PER_UNANSWERED
        .saturating_mul(unanswered)
        .clamp(GRACE, MAX_HOLD)
}

/// Yields, with nothing else to do, that an owed ACK waits for the callers
/// freed since the last write to submit: a freed caller is runnable at
/// once, so a few turns of the scheduler are enough for it.
pub(super) const YIELDS: u32 = 4;

/// Unanswered requests from which the runtime is busy for about [`GRACE`]
/// without the ACK: arcp-runtime 2.0.0 spends 300-450 us of its CPU per
/// call on the machine measured. Fewer, and a held ACK idles it (measured
/// at 4 calls in flight: holding from 1 or 2 unanswered requests kept the
/// p50 at 2.6 ms, from 4 it fell to 1.2-1.3 ms; the runtime's segments per
/// call at 64 in flight were the same from 1, 2 or 4, and at 16 the same
/// as with a fixed 1 ms hold).
pub(super) const BACKLOG: usize = 4;

/// What the driver does with the owed ACK before it sleeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AtRest {
    /// Nothing owed, or a queued write carries it: sleep as usual.
    Sleep,
    /// Yield once (freed callers may submit), then ask again.
    Yield,
    /// Send the ACK on its own now.
    AckNow,
}

/// The connection's owed ACK (see the module docs). Pure: time is passed in.
#[derive(Debug, Default)]
pub(super) struct OwedAck {
    /// When the owed ACK goes out at the latest, if one is owed.
    due: Option<Instant>,
    /// Whether a caller got its outcome since the last write started (its
    /// next request may carry the ACK).
    caller_freed: bool,
    /// Yields spent waiting for a freed caller since the ACK was owed.
    yields: u32,
}

impl OwedAck {
    /// Outcomes were handed to `n` callers.
    pub(super) fn handed_out(&mut self, n: usize) {
        self.caller_freed |= n > 0;
    }

    /// Bytes were read; `waiting`: the calls that still wait for the
    /// runtime; `unanswered`: the requests it has not answered yet (they
    /// set the hold of an ACK owed from now, [`hold`]).
    pub(super) fn on_read(&mut self, now: Instant, waiting: usize, unanswered: usize) {
        if waiting == 0 {
            self.clear();
        } else {
            self.due.get_or_insert(now + hold(unanswered));
        }
    }

    /// A write started: its first segment carries the ACK.
    pub(super) fn on_write(&mut self) {
        self.clear();
        self.caller_freed = false;
    }

    /// The driver yielded with nothing else to do.
    pub(super) fn on_yield(&mut self) {
        if self.due.is_some() {
            self.yields += 1;
        }
    }

    /// The driver is about to sleep at `now`: `waiting` calls wait for the
    /// runtime, `queued` says whether a request waits to be written, and
    /// `unanswered` counts the requests the runtime has not answered yet.
    pub(super) fn at_rest(
        &mut self,
        now: Instant,
        waiting: usize,
        queued: bool,
        unanswered: usize,
    ) -> AtRest {
        let Some(due) = self.due else {
            return AtRest::Sleep;
        };
        if waiting == 0 {
            self.clear();
            return AtRest::Sleep;
        }
        if now < due && queued {
            return AtRest::Sleep;
        }
        if now < due && self.caller_freed && self.yields < YIELDS {
            return AtRest::Yield;
        }
        if now < due && unanswered >= BACKLOG {
            return AtRest::Sleep;
        }
        self.clear();
        AtRest::AckNow
    }

    /// Whether an ACK is owed.
    pub(super) fn owed(&self) -> bool {
        self.due.is_some()
    }

    /// When the owed ACK goes out at the latest, if one is owed.
    pub(super) fn due(&self) -> Option<Instant> {
        self.due
    }

    /// The connection ended: nothing is owed on the next one.
    pub(super) fn reset(&mut self) {
        *self = OwedAck::default();
    }

    fn clear(&mut self) {
        self.due = None;
        self.yields = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_waiting_call_is_acked_in_the_same_turn() {
        let (mut ack, t) = (OwedAck::default(), Instant::now());
        ack.on_read(t, 1, 0);
        assert_eq!(
            ack.at_rest(t, 1, false, 0),
            AtRest::AckNow,
            "its caller sends nothing meanwhile"
        );
        assert!(!ack.owed());
    }

    #[test]
    fn a_read_that_freed_no_caller_is_acked_in_the_same_turn() {
        // Several calls wait, none ended, the runtime has few requests to
        // work on: no request is coming, and it holds its next frames
        // until the ACK.
        let (mut ack, t) = (OwedAck::default(), Instant::now());
        ack.on_read(t, 4, 0);
        assert_eq!(ack.at_rest(t, 4, false, BACKLOG - 1), AtRest::AckNow);
    }

    #[test]
    fn a_runtime_with_a_backlog_gathers_its_frames_behind_the_ack() {
        let (mut ack, t) = (OwedAck::default(), Instant::now());
        ack.on_read(t, 64, BACKLOG);
        assert_eq!(ack.at_rest(t, 64, false, BACKLOG), AtRest::Sleep);
        assert_eq!(ack.due(), Some(t + GRACE), "the timer sends it");
        // Still busy, but the grace is over.
        assert_eq!(ack.at_rest(t + GRACE, 64, false, 40), AtRest::AckNow);
        assert!(!ack.owed());
    }

    #[test]
    fn freed_callers_get_their_yields_before_the_backlog_is_looked_at() {
        let (mut ack, t) = (OwedAck::default(), Instant::now());
        ack.handed_out(5);
        ack.on_read(t, 64, 0);
        assert_eq!(ack.at_rest(t, 64, false, 40), AtRest::Yield);
        ack.on_yield();
        assert_eq!(
            ack.at_rest(t, 64, true, 40),
            AtRest::Sleep,
            "they submitted"
        );
        ack.on_write();
        assert!(!ack.owed());
    }

    #[test]
    fn a_deeper_backlog_holds_the_ack_longer_up_to_a_bound() {
        let t = Instant::now();
        let due = |unanswered| {
            let mut ack = OwedAck::default();
            ack.on_read(t, 64, unanswered);
            ack.due().expect("owed") - t
        };
        assert_eq!(due(0), GRACE);
        assert_eq!(due(BACKLOG), GRACE, "a short backlog: the shortest hold");
        assert_eq!(due(20), PER_UNANSWERED * 20);
        assert!(due(20) > GRACE && due(20) < MAX_HOLD);
        assert_eq!(due(64), MAX_HOLD);
        assert_eq!(due(usize::MAX), MAX_HOLD);
        // Held while the runtime is busy, sent once the hold is over.
        let mut ack = OwedAck::default();
        ack.on_read(t, 64, 40);
        assert_eq!(ack.at_rest(t + GRACE, 64, false, 40), AtRest::Sleep);
        assert_eq!(
            ack.at_rest(t + PER_UNANSWERED * 40, 64, false, 40),
            AtRest::AckNow
        );
        // A later read under a deeper backlog does not extend it.
        let mut ack = OwedAck::default();
        ack.on_read(t, 64, 8);
        ack.on_read(t + GRACE / 2, 64, 64);
        assert_eq!(ack.due(), Some(t + GRACE.max(PER_UNANSWERED * 8)));
    }

    #[test]
    fn nothing_waiting_owes_nothing() {
        let (mut ack, t) = (OwedAck::default(), Instant::now());
        ack.handed_out(1);
        ack.on_read(t, 0, 0);
        assert!(!ack.owed(), "the next request carries it, whenever");
        assert_eq!(ack.at_rest(t, 0, false, 0), AtRest::Sleep);
    }

    #[test]
    fn a_freed_callers_request_carries_the_ack() {
        let (mut ack, t) = (OwedAck::default(), Instant::now());
        ack.handed_out(3);
        ack.on_read(t, 1, 0);
        assert_eq!(ack.at_rest(t, 1, false, 0), AtRest::Yield, "owed, not sent");
        ack.on_yield();
        // The freed caller submitted: its request is queued, then written.
        assert_eq!(ack.at_rest(t, 1, true, 0), AtRest::Sleep);
        ack.on_write();
        assert!(!ack.owed());
        assert_eq!(
            ack.at_rest(t, 1, false, 0),
            AtRest::Sleep,
            "the write carried it"
        );
        // After the write no caller is freed: the next read is acked at once.
        ack.on_read(t, 1, 0);
        assert_eq!(ack.at_rest(t, 1, false, 0), AtRest::AckNow);
    }

    #[test]
    fn freed_callers_that_submit_nothing_get_a_few_yields() {
        let (mut ack, t) = (OwedAck::default(), Instant::now());
        ack.handed_out(2);
        ack.on_read(t, 2, 0);
        for _ in 0..YIELDS {
            assert_eq!(ack.at_rest(t, 2, false, 0), AtRest::Yield);
            ack.on_yield();
        }
        assert_eq!(ack.at_rest(t, 2, false, 0), AtRest::AckNow);
        assert!(!ack.owed(), "sent once");
    }

    #[test]
    fn a_later_read_neither_extends_the_grace_nor_refunds_yields() {
        let (mut ack, t) = (OwedAck::default(), Instant::now());
        ack.handed_out(1);
        ack.on_read(t, 4, 0);
        assert_eq!(ack.at_rest(t, 4, true, 0), AtRest::Sleep);
        ack.on_read(t + GRACE / 2, 4, 0);
        assert_eq!(ack.due(), Some(t + GRACE));
        assert_eq!(ack.at_rest(t + GRACE / 2, 4, true, 0), AtRest::Sleep);
        // A queued write that has not started by the grace: ACK anyway.
        assert_eq!(ack.at_rest(t + GRACE, 4, true, 0), AtRest::AckNow);
    }

    #[test]
    fn yields_are_counted_only_while_owed() {
        let (mut ack, t) = (OwedAck::default(), Instant::now());
        ack.handed_out(1);
        for _ in 0..10 {
            ack.on_yield();
        }
        ack.on_read(t, 2, 0);
        assert_eq!(ack.at_rest(t, 2, false, 0), AtRest::Yield);
    }

    #[test]
    fn an_ack_owed_when_the_last_call_ends_is_dropped() {
        let (mut ack, t) = (OwedAck::default(), Instant::now());
        ack.handed_out(1);
        ack.on_read(t, 2, 0);
        assert_eq!(ack.at_rest(t, 0, false, 0), AtRest::Sleep);
        assert!(!ack.owed());
    }

    #[test]
    fn a_lost_connection_owes_nothing() {
        let (mut ack, t) = (OwedAck::default(), Instant::now());
        ack.handed_out(1);
        ack.on_read(t, 4, 0);
        ack.reset();
        assert!(!ack.owed());
        ack.on_read(t, 1, 0);
        assert_eq!(ack.at_rest(t, 1, false, 0), AtRest::AckNow);
    }
}
