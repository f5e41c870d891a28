//! The bindings of finished calls under generated keys: what a repeat under
//! such a key needs (its intent, and the job the key was bound to), kept as
//! plain values.
//!
//! A generated key is known only to its call's own handles, so the call's
//! outcome is not cached (see the parent module). A repeat taken from a
//! handle must still start bound to the job, or the runtime's unmarked
//! replay of that job (the Python runtime's stored acceptance, on the
//! session that ran the key) would read as a fresh run; and another intent
//! under the key must still be refused here. Entries hold no block of their
//! own (the key by its hash, the job inline): keeping each call's key and
//! outcome alive until eviction, then freeing them on the connection's
//! thread, cost a tenth of the client's CPU per call at 64 in flight.

use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

use arcp_types::IdempotencyKey;

use crate::fast_map::FastMap;

/// The longest job id kept inline; a longer one is kept as unknown (a
/// repeat then asks the runtime without knowing the job).
const JOB_INLINE: usize = 46;

/// A job id inline, or none.
#[derive(Clone, Copy)]
struct InlineJob {
    len: u8,
    bytes: [u8; JOB_INLINE],
}

impl InlineJob {
    fn of(job: Option<&str>) -> Self {
        let mut inline = InlineJob {
            len: 0,
            bytes: [0; JOB_INLINE],
        };
        if let Some(job) = job.filter(|j| j.len() <= JOB_INLINE) {
            inline.bytes[..job.len()].copy_from_slice(job.as_bytes());
            // At most JOB_INLINE, so it fits.
            inline.len = job.len() as u8;
        }
        inline
    }

    fn get(&self) -> Option<&str> {
        match self.len {
            0 => None,
            // Copied from a `str` whole (never cut), so still UTF-8.
            n => std::str::from_utf8(&self.bytes[..usize::from(n)]).ok(),
        }
    }
}

#[derive(Clone, Copy)]
struct Binding {
    fingerprint: u64,
    job: InlineJob,
    stored: Instant,
}

/// What the bindings know of a key.
pub(super) enum Seen<'a> {
    /// The same intent, bound to this job when known.
    Same(Option<&'a str>),
    /// Another intent.
    Other,
}

/// Bounded in count and age, like the outcome cache whose limits it takes.
pub(super) struct GeneratedBindings {
    /// By the key's hash (`hasher`: seeded at random per client). Two keys
    /// with one hash would only make a repeat ask the runtime as a call that
    /// may have run, or be refused here as "not sent": never a false "did
    /// not run".
    by_key: FastMap<u64, Binding>,
    order: VecDeque<(u64, Instant)>,
    hasher: foldhash::quality::RandomState,
    capacity: usize,
    ttl: Duration,
}

impl GeneratedBindings {
    pub(super) fn new(capacity: usize, ttl: Duration) -> Self {
        GeneratedBindings {
            by_key: FastMap::default(),
            order: VecDeque::new(),
            hasher: foldhash::quality::RandomState::default(),
            capacity,
            ttl,
        }
    }

    fn hash(&self, key: &IdempotencyKey) -> u64 {
        self.hasher.hash_one(key.as_str())
    }

    /// Remembers that `key` is bound to this intent (and `job`).
    pub(super) fn remember(
        &mut self,
        key: &IdempotencyKey,
        fingerprint: u64,
        job: Option<&str>,
        now: Instant,
    ) {
        if self.capacity == 0 {
            return;
        }
        self.expire(now);
        while self.by_key.len() >= self.capacity {
            match self.order.pop_front() {
                Some((hash, stored)) => self.remove_if_stored(hash, stored),
                None => break,
            }
        }
        let hash = self.hash(key);
        self.by_key.insert(
            hash,
            Binding {
                fingerprint,
                job: InlineJob::of(job),
                stored: now,
            },
        );
        self.order.push_back((hash, now));
        // A key remembered again leaves a stale order record behind.
        if self.order.len() > 2 * self.capacity.max(16) {
            let by_key = &self.by_key;
            self.order
                .retain(|(h, s)| by_key.get(h).is_some_and(|b| b.stored == *s));
        }
    }

    /// What is known of `key` with this intent, if anything.
    pub(super) fn get(
        &mut self,
        key: &IdempotencyKey,
        fingerprint: u64,
        now: Instant,
    ) -> Option<Seen<'_>> {
        self.expire(now);
        let binding = self.by_key.get(&self.hash(key))?;
        Some(if binding.fingerprint == fingerprint {
            Seen::Same(binding.job.get())
        } else {
            Seen::Other
        })
    }

    /// Drops every binding older than the TTL.
    fn expire(&mut self, now: Instant) {
        while let Some(&(hash, stored)) = self.order.front() {
            if now.duration_since(stored) < self.ttl {
                break;
            }
            self.order.pop_front();
            self.remove_if_stored(hash, stored);
        }
    }

    fn remove_if_stored(&mut self, hash: u64, stored: Instant) {
        if self.by_key.get(&hash).is_some_and(|b| b.stored == stored) {
            self.by_key.remove(&hash);
        }
    }

    /// Bindings held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.by_key.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binding_answers_its_intent_with_its_job_within_its_bounds() {
        let t0 = Instant::now();
        let mut bindings = GeneratedBindings::new(2, Duration::from_secs(10));
        let keys: Vec<_> = (0..3).map(|_| IdempotencyKey::new()).collect();
        bindings.remember(&keys[0], 1, Some("job_0"), t0);
        assert!(matches!(
            bindings.get(&keys[0], 1, t0),
            Some(Seen::Same(Some("job_0")))
        ));
        assert!(matches!(bindings.get(&keys[0], 2, t0), Some(Seen::Other)));
        assert!(bindings.get(&keys[1], 1, t0).is_none());
        // A job id too long to keep inline is kept as unknown.
        let long = "j".repeat(JOB_INLINE + 1);
        bindings.remember(&keys[1], 1, Some(&long), t0);
        assert!(matches!(
            bindings.get(&keys[1], 1, t0),
            Some(Seen::Same(None))
        ));
        // The oldest goes first past the capacity.
        bindings.remember(&keys[2], 1, None, t0);
        assert_eq!(bindings.len(), 2);
        assert!(bindings.get(&keys[0], 1, t0).is_none());
        // None outlives the TTL.
        assert!(bindings
            .get(&keys[2], 1, t0 + Duration::from_secs(11))
            .is_none());
        assert_eq!(bindings.len(), 0);
    }

    #[test]
    fn a_key_remembered_again_and_again_keeps_the_order_bounded() {
        let t0 = Instant::now();
        let mut bindings = GeneratedBindings::new(4, Duration::from_secs(10));
        let key = IdempotencyKey::new();
        for i in 0..1000 {
            bindings.remember(&key, i, None, t0 + Duration::from_micros(i));
        }
        assert!(bindings.order.len() <= 32, "{}", bindings.order.len());
        assert!(matches!(
            bindings.get(&key, 999, t0 + Duration::from_millis(1)),
            Some(Seen::Same(None))
        ));
    }
}
