//! How many immediate reconnects a runtime can make the client do.
//!
//! A connection that carried answers is normally followed by an immediate
//! reconnect (the network cut it; the calls on it should not wait). A
//! runtime that answers once per connection and then drops it would turn
//! that into a hot reconnect loop. Immediate reconnects are therefore
//! rationed by a token bucket: `burst` of them at once, then `per_second`,
//! plus one per [`ANSWERS_PER_TOKEN`] requests answered on the connections
//! lost (a connection that does real work pays for its own reconnect, so a
//! network that cuts busy connections often is never slowed). A reconnect
//! without a token waits the retry policy's backoff.

use std::time::Instant;

/// Requests answered on a lost connection that earn one immediate
/// reconnect.
pub(crate) const ANSWERS_PER_TOKEN: f64 = 4.0;

/// The bucket of immediate reconnects.
#[derive(Debug, Clone)]
pub(super) struct ReconnectBucket {
    tokens: f64,
    burst: f64,
    per_second: f64,
    /// When tokens were last added.
    at: Option<Instant>,
}

impl ReconnectBucket {
    /// A full bucket of `burst` tokens, refilled at `per_second` (a rate
    /// that is not a finite positive number refills nothing).
    pub(super) fn new(burst: u32, per_second: f64) -> Self {
        let per_second = if per_second.is_finite() && per_second > 0.0 {
            per_second
        } else {
            0.0
        };
        ReconnectBucket {
            tokens: f64::from(burst),
            burst: f64::from(burst),
            per_second,
            at: None,
        }
    }

    /// A connection that answered `answered` requests was lost at `now`:
    /// whether the client may reconnect at once (a token is spent).
    pub(super) fn take(&mut self, answered: u64, now: Instant) -> bool {
        let elapsed = self
            .at
            .map_or(0.0, |at| now.saturating_duration_since(at).as_secs_f64());
        self.at = Some(now);
        // Precision is no concern: counts far below 2^53.
        #[allow(clippy::cast_precision_loss)]
        let earned = answered as f64 / ANSWERS_PER_TOKEN;
        self.tokens = (self.tokens + elapsed * self.per_second + earned).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_burst_then_the_rate_then_what_answers_earn() {
        let t0 = Instant::now();
        let mut bucket = ReconnectBucket::new(3, 2.0);
        // The burst, at one instant.
        assert!((0..3).all(|_| bucket.take(0, t0)));
        assert!(!bucket.take(0, t0));
        // Two answers earn half a token; two more complete it.
        assert!(!bucket.take(2, t0));
        assert!(bucket.take(2, t0));
        assert!(!bucket.take(0, t0));
        // Half a second at two per second: one.
        assert!(bucket.take(0, t0 + Duration::from_millis(500)));
        assert!(!bucket.take(0, t0 + Duration::from_millis(500)));
        // A busy connection pays for itself, capped at the burst.
        assert!(bucket.take(100, t0 + Duration::from_millis(500)));
        assert!((0..2).all(|_| bucket.take(0, t0 + Duration::from_millis(500))));
        assert!(!bucket.take(0, t0 + Duration::from_millis(500)));
    }

    #[test]
    fn a_rate_that_is_not_a_number_refills_nothing() {
        let t0 = Instant::now();
        for rate in [f64::NAN, f64::INFINITY, -1.0] {
            let mut bucket = ReconnectBucket::new(1, rate);
            assert!(bucket.take(0, t0));
            assert!(!bucket.take(0, t0 + Duration::from_secs(3600)), "{rate}");
        }
        let mut none = ReconnectBucket::new(0, 1.0);
        assert!(!none.take(0, t0));
    }
}
