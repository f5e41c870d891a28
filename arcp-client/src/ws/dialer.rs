//! [`Dialer`]: when the core dials again. It owns the reconnect state (the
//! backoff between dials, the bucket of immediate reconnects, the
//! `min_connection_lifetime` floor, the failed dials since the last
//! session) and answers each step of the link with the next dial's instant.
//! Pure: time is passed in; the only randomness is the backoff's jitter.
//!
//! | step | what it answers |
//! |---|---|
//! | [`connected`](Dialer::connected) | nothing: the failed-dial count restarts (the backoff does not: a connection must prove useful first) |
//! | [`lost`](Dialer::lost) | at once, if the connection was useful, lived long enough and a token is left (the backoff restarts); else after the next backoff |
//! | [`dial_failed`](Dialer::dial_failed) | stop (definitive: the backoff is forgotten), or again after the next backoff (at least the runtime's floor), flagged when that falls past `connect()`'s budget |
//!
//! What becomes of the calls and of the link on each step is the core's
//! (`core/link_events.rs`); the link's states are `link_state.rs`.

use std::time::{Duration, Instant};

use tracing::debug;

use super::reconnect::ReconnectBucket;
use crate::config::{Config, RetryPolicy};
use crate::retry::{saturating_deadline, Schedule};

/// The reconnect state of one client's connection.
#[derive(Debug)]
pub(super) struct Dialer {
    policy: RetryPolicy,
    /// The backoff between dials; `None` until a dial must wait (and again
    /// after an immediate reconnect or a definitive failure), so the next
    /// wait starts from the policy's first delay.
    backoff: Option<Schedule>,
    /// Immediate reconnects left (`reconnect.rs`).
    immediate: ReconnectBucket,
    /// A connection lost sooner than this does not reset the backoff.
    min_lifetime: Duration,
    /// Transient dial failures since the last established session.
    failed_dials: u32,
}

/// The connection that was lost, as far as reconnecting cares.
#[derive(Debug, Clone, Copy)]
pub(super) struct LostLink {
    /// It carried something after its handshake.
    pub(super) useful: bool,
    /// How long it was up.
    pub(super) lived: Duration,
    /// Submits answered on it.
    pub(super) answered: u64,
}

/// When to dial after a loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Redial {
    /// Dial not before this instant.
    pub(super) at: Instant,
    /// How long from the loss (zero: at once).
    pub(super) delay: Duration,
}

/// What to do after a dial that produced no session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AfterDialFailure {
    /// The failure is definitive: dialing again would fail the same way.
    Stop,
    /// Dial again.
    Retry {
        /// Not before this instant.
        at: Instant,
        /// How long from the failure.
        delay: Duration,
        /// The number of the next dial since the last session (2 after
        /// the first failure).
        attempt: u32,
        /// That dial falls at or past the `connect()` budget passed in:
        /// `connect()` gives up instead.
        past_connect_budget: bool,
    },
}

impl Dialer {
    /// A dialer with the configured retry policy, immediate reconnects and
    /// minimum connection lifetime.
    pub(super) fn new(config: &Config) -> Self {
        Dialer {
            policy: config.retry.clone(),
            backoff: None,
            immediate: ReconnectBucket::new(config.reconnect_burst, config.reconnect_per_second),
            min_lifetime: config.min_connection_lifetime,
            failed_dials: 0,
        }
    }

    /// A session was established.
    pub(super) fn connected(&mut self) {
        self.failed_dials = 0;
    }

    /// The live connection was lost at `now`: when to dial again. A
    /// connection that carried something after its handshake (and lived at
    /// least `min_connection_lifetime`) is followed by an immediate
    /// reconnect while the bucket has a token; otherwise the next dial
    /// backs off (a runtime that answers once, then drops every
    /// connection, must not get a reconnect loop).
    pub(super) fn lost(&mut self, link: LostLink, now: Instant) -> Redial {
        let useful = link.useful && link.lived >= self.min_lifetime;
        let immediate = useful && self.immediate.take(link.answered, now);
        if useful && !immediate {
            debug!(
                answered = link.answered,
                "no immediate reconnect left (`immediate_reconnects`): backing off"
            );
        }
        let delay = if immediate {
            self.backoff = None;
            Duration::ZERO
        } else {
            self.next_backoff(None)
        };
        Redial {
            at: saturating_deadline(now, delay),
            delay,
        }
    }

    /// A dial failed at `now`. `transient`: dialing again may work;
    /// `floor`: the runtime's `Retry-After`; `connect_budget`: the instant
    /// `connect()` gives up at, while it still waits for a first session.
    pub(super) fn dial_failed(
        &mut self,
        transient: bool,
        floor: Option<Duration>,
        connect_budget: Option<Instant>,
        now: Instant,
    ) -> AfterDialFailure {
        if !transient {
            self.backoff = None;
            return AfterDialFailure::Stop;
        }
        let delay = self.next_backoff(floor);
        self.failed_dials = self.failed_dials.saturating_add(1);
        let at = saturating_deadline(now, delay);
        AfterDialFailure::Retry {
            at,
            delay,
            attempt: self.failed_dials.saturating_add(1),
            past_connect_budget: connect_budget.is_some_and(|budget| at >= budget),
        }
    }

    fn next_backoff(&mut self, floor: Option<Duration>) -> Duration {
        self.backoff
            .get_or_insert_with(|| self.policy.schedule())
            .next_delay(floor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(edit: impl FnOnce(&mut Config)) -> Config {
        let mut config = Config::new("ws://127.0.0.1:9/arcp".into());
        config.retry = RetryPolicy::exponential()
            .initial_delay(Duration::from_millis(100))
            .max_delay(Duration::from_secs(10));
        edit(&mut config);
        config
    }

    const USEFUL: LostLink = LostLink {
        useful: true,
        lived: Duration::from_secs(60),
        answered: 0,
    };
    const USELESS: LostLink = LostLink {
        useful: false,
        lived: Duration::from_secs(60),
        answered: 0,
    };

    /// The ceiling of the `n`th wait in a row (0-based) under `config`.
    fn ceiling(n: u32) -> Duration {
        Duration::from_millis(100 * 2u64.pow(n)).min(Duration::from_secs(10))
    }

    #[test]
    fn a_useful_connection_is_redialed_at_once_while_tokens_last() {
        let t0 = Instant::now();
        let mut dialer = Dialer::new(&config(|c| {
            c.reconnect_burst = 2;
            c.reconnect_per_second = 0.0;
        }));
        for _ in 0..2 {
            let redial = dialer.lost(USEFUL, t0);
            assert_eq!(
                redial,
                Redial {
                    at: t0,
                    delay: Duration::ZERO
                }
            );
        }
        // The bucket is empty: the backoff, from its first ceiling.
        let redial = dialer.lost(USEFUL, t0);
        assert!(redial.delay <= ceiling(0), "{redial:?}");
        assert_eq!(redial.at, t0 + redial.delay);
        // Four answers on the lost connection earn the next one.
        let earned = LostLink {
            answered: 4,
            ..USEFUL
        };
        assert_eq!(dialer.lost(earned, t0).delay, Duration::ZERO);
    }

    #[test]
    fn losses_of_useless_connections_back_off_further_each_time() {
        let t0 = Instant::now();
        let mut dialer = Dialer::new(&config(|_| {}));
        let mut total = Duration::ZERO;
        for n in 0..8 {
            let redial = dialer.lost(USELESS, t0);
            assert!(redial.delay <= ceiling(n), "wait {n}: {redial:?}");
            total += redial.delay;
        }
        // Full jitter over ceilings 0.1 s .. 10 s (sum 22.7 s): the
        // chance of under a second in all is far below one in a million.
        assert!(total > Duration::from_secs(1), "{total:?}");
    }

    /// Whether every one of five waits is within the first ceiling: with
    /// a backoff that did not restart (ceiling 6.4 s), the chance of that
    /// is below one in a billion.
    fn restarted(mut wait: impl FnMut() -> Duration) -> bool {
        (0..5).all(|_| wait() <= ceiling(0))
    }

    #[test]
    fn an_immediate_reconnect_restarts_the_backoff() {
        let t0 = Instant::now();
        assert!(restarted(|| {
            let mut dialer = Dialer::new(&config(|_| {}));
            for _ in 0..6 {
                dialer.lost(USELESS, t0);
            }
            assert_eq!(dialer.lost(USEFUL, t0).delay, Duration::ZERO);
            dialer.lost(USELESS, t0).delay
        }));
    }

    #[test]
    fn a_connection_shorter_than_the_floor_does_not_reset_the_backoff() {
        let t0 = Instant::now();
        let mut dialer = Dialer::new(&config(|c| {
            c.min_connection_lifetime = Duration::from_millis(200);
        }));
        let short = LostLink {
            lived: Duration::from_millis(199),
            answered: 100,
            ..USEFUL
        };
        let waits: Vec<Duration> = (0..10).map(|_| dialer.lost(short, t0).delay).collect();
        assert!(waits.iter().any(|d| !d.is_zero()), "{waits:?}");
        let long = LostLink {
            lived: Duration::from_millis(200),
            ..short
        };
        assert_eq!(dialer.lost(long, t0).delay, Duration::ZERO);
    }

    /// What a transient failure gets: (at, delay, attempt, past the
    /// connect budget).
    fn retried(after: AfterDialFailure) -> (Instant, Duration, u32, bool) {
        match after {
            AfterDialFailure::Retry {
                at,
                delay,
                attempt,
                past_connect_budget,
            } => (at, delay, attempt, past_connect_budget),
            AfterDialFailure::Stop => panic!("a transient failure is retried"),
        }
    }

    #[test]
    fn transient_dial_failures_count_attempts_and_keep_the_runtimes_floor() {
        let t0 = Instant::now();
        let mut dialer = Dialer::new(&config(|_| {}));
        let floor = Duration::from_secs(3);
        for attempt in 2..6 {
            let (at, delay, got, past) = retried(dialer.dial_failed(true, Some(floor), None, t0));
            assert_eq!(got, attempt);
            assert!(delay >= floor, "{delay:?}");
            assert_eq!(at, t0 + delay);
            assert!(!past);
        }
        dialer.connected();
        let (_, _, attempt, _) = retried(dialer.dial_failed(true, None, None, t0));
        assert_eq!(attempt, 2, "the count restarts with each session");
    }

    #[test]
    fn a_dial_past_the_connect_budget_is_flagged() {
        let t0 = Instant::now();
        let mut dialer = Dialer::new(&config(|_| {}));
        let floor = Some(Duration::from_secs(2));
        let mut flagged =
            |budget: Instant| retried(dialer.dial_failed(true, floor, Some(budget), t0)).3;
        assert!(flagged(t0 + Duration::from_secs(1)));
        assert!(!flagged(t0 + Duration::from_secs(60)));
        // A budget exactly at the next dial is spent.
        let mut twin = Dialer::new(&config(|_| {}));
        let (at, ..) = retried(twin.dial_failed(true, floor, None, t0));
        let mut other = Dialer::new(&config(|_| {}));
        assert!(retried(other.dial_failed(true, Some(at - t0), Some(at), t0)).3);
    }

    #[test]
    fn a_definitive_failure_stops_and_forgets_the_backoff() {
        let t0 = Instant::now();
        assert!(restarted(|| {
            let mut dialer = Dialer::new(&config(|_| {}));
            for _ in 0..6 {
                dialer.dial_failed(true, None, None, t0);
            }
            assert_eq!(
                dialer.dial_failed(false, None, None, t0),
                AfterDialFailure::Stop
            );
            retried(dialer.dial_failed(true, None, None, t0)).1
        }));
    }
}
