//! Adaptive spinning for a lone call's reply.
//!
//! A thread that sleeps while its one call is out takes a wake-up to see
//! the reply, and on a virtual machine a sleeping CPU is slow to wake:
//! measured on loopback against a fast runtime, about half of a lone
//! call's round trip (62 us, 31 us when the driver keeps polling). So
//! after writing the request of the only call in flight, the driver keeps
//! polling (yielding to every other task, polling the socket without
//! blocking) instead of sleeping, but only where that pays:
//!
//! ```text
//!   lone call written ──▶ expected (recent lone calls' time to their end)
//!        │                   unknown or >= limit: sleep as usual
//!        │                   < limit: poll until written + min(2 x expected, limit)
//!        ▼
//!   the call ends ──▶ its time from the write is a sample: expected = (3 x expected + sample) / 4
//! ```
//!
//! Against a runtime whose calls take longer than the limit nothing spins
//! (every lone call is still timed, so a runtime that becomes fast is
//! noticed); with two or more calls in flight nothing spins either (a
//! reply to one of them wakes the driver soon anyway, and the CPU is
//! better spent on them). A limit of zero turns it off.

use std::time::{Duration, Instant};

/// The spin state of one connection task (see the module docs).
#[derive(Debug)]
pub(super) struct Spin {
    limit: Duration,
    /// Recent lone calls' time from the write to their end.
    expected: Option<Duration>,
    /// The last lone call's write, until the call ends.
    written_at: Option<Instant>,
    /// Poll instead of sleeping until then.
    until: Option<Instant>,
}

impl Spin {
    pub(super) fn new(limit: Duration) -> Self {
        Spin {
            limit,
            expected: None,
            written_at: None,
            until: None,
        }
    }

    /// A write completed at `now`, with `calls` calls in flight: the first
    /// write of a lone call may open a window.
    pub(super) fn on_written(&mut self, now: Instant, calls: usize) {
        if calls != 1 || self.limit.is_zero() {
            self.written_at = None;
            self.until = None;
            return;
        }
        // Timed, and polled for, from its first write only: a later one (a
        // ping, a re-send) neither restarts the clock nor opens a window.
        if self.written_at.is_some() {
            return;
        }
        self.written_at = Some(now);
        self.until = self
            .expected
            .filter(|expected| *expected < self.limit)
            .map(|expected| now + (expected * 2).min(self.limit));
    }

    /// The end of a turn at `now`, with `calls` calls in flight: a lone
    /// call that ended gives a sample.
    pub(super) fn on_turn(&mut self, now: Instant, calls: usize) {
        if calls == 0 {
            if let Some(at) = self.written_at.take() {
                let sample = now.saturating_duration_since(at);
                self.expected = Some(match self.expected {
                    Some(expected) => (expected * 3 + sample) / 4,
                    None => sample,
                });
            }
            self.until = None;
        } else if calls > 1 {
            self.written_at = None;
            self.until = None;
        }
    }

    /// Whether to poll instead of sleeping at `now`.
    pub(super) fn spinning(&self, now: Instant) -> bool {
        self.until.is_some_and(|until| now < until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_micros(100);

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// A lone call written at `t0`, ended `took` later.
    fn lone_call(spin: &mut Spin, t0: Instant, took: Duration) -> bool {
        spin.on_written(t0, 1);
        let spun = spin.spinning(t0);
        spin.on_turn(t0 + took, 0);
        spun
    }

    #[test]
    fn the_first_lone_call_sleeps_and_teaches_the_next_to_spin() {
        let t = Instant::now();
        let mut spin = Spin::new(LIMIT);
        assert!(!lone_call(&mut spin, t, us(30)), "nothing known yet");
        spin.on_written(t + us(100), 1);
        assert!(spin.spinning(t + us(100)));
        // Up to twice the time expected, then sleep.
        assert!(spin.spinning(t + us(159)));
        assert!(!spin.spinning(t + us(160)));
        // The call's end stops it at once.
        spin.on_turn(t + us(130), 0);
        assert!(!spin.spinning(t + us(131)));
    }

    #[test]
    fn a_runtime_slower_than_the_limit_never_costs_a_spin_and_is_watched() {
        let t = Instant::now();
        let mut spin = Spin::new(LIMIT);
        for i in 0..20 {
            assert!(!lone_call(&mut spin, t + us(1000 * i), us(400)));
        }
        // It becomes fast: within a few calls the driver spins again.
        let spun: Vec<bool> = (20..30)
            .map(|i| lone_call(&mut spin, t + us(1000 * i), us(20)))
            .collect();
        assert!(!spun[0], "{spun:?}");
        assert!(spun[9], "{spun:?}");
    }

    #[test]
    fn the_window_never_passes_the_limit() {
        let t = Instant::now();
        let mut spin = Spin::new(LIMIT);
        lone_call(&mut spin, t, us(90));
        spin.on_written(t + us(200), 1);
        assert!(spin.spinning(t + us(299)));
        assert!(!spin.spinning(t + us(300)));
    }

    #[test]
    fn two_calls_in_flight_never_spin_nor_teach() {
        let t = Instant::now();
        let mut spin = Spin::new(LIMIT);
        lone_call(&mut spin, t, us(30));
        spin.on_written(t + us(100), 2);
        assert!(!spin.spinning(t + us(100)));
        // A second call joins a lone one: the spin stops, no sample taken.
        spin.on_written(t + us(200), 1);
        assert!(spin.spinning(t + us(200)));
        spin.on_turn(t + us(205), 2);
        assert!(!spin.spinning(t + us(206)));
        spin.on_turn(t + us(5000), 0);
        spin.on_written(t + us(6000), 1);
        assert!(
            spin.spinning(t + us(6059)),
            "the long wait with two in flight was not a sample"
        );
    }

    #[test]
    fn a_lone_call_is_timed_from_its_first_write() {
        let t = Instant::now();
        let mut spin = Spin::new(LIMIT);
        lone_call(&mut spin, t, us(20));
        spin.on_written(t + us(100), 1);
        assert!(spin.spinning(t + us(100)));
        // Another frame written while it waits (a ping): no new window.
        spin.on_written(t + us(500), 1);
        assert!(!spin.spinning(t + us(500)));
        spin.on_turn(t + us(610), 0);
        // (20 x 3 + 510) / 4 = 142 us expected: past the limit.
        spin.on_written(t + us(1000), 1);
        assert!(!spin.spinning(t + us(1000)), "timed from the first write");
    }

    #[test]
    fn a_limit_of_zero_turns_it_off() {
        let t = Instant::now();
        let mut spin = Spin::new(Duration::ZERO);
        for i in 0..5 {
            assert!(!lone_call(&mut spin, t + us(100 * i), us(1)));
        }
    }
}
