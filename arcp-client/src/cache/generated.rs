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

/// The longest job id kept inline (the published runtimes' are 30 bytes
/// (`job_` and a ULID) or 36 (a UUID)); a longer one is kept in a block
/// of its own.
const JOB_INLINE: usize = 46;

/// What one binding costs, its map slot and order record included: the
/// byte bound's share for bindings is counted at this.
pub(super) const BINDING_BYTES: usize = 192;

/// The job a key was bound to.
enum BoundJob {
    Unknown,
    Inline { len: u8, bytes: [u8; JOB_INLINE] },
    Long(Box<str>),
}

impl BoundJob {
    fn of(job: Option<&str>) -> Self {
        match job {
            None => BoundJob::Unknown,
            Some(job) => match u8::try_from(job.len()) {
                Ok(len) if job.len() <= JOB_INLINE => {
                    let mut bytes = [0; JOB_INLINE];
                    bytes[..job.len()].copy_from_slice(job.as_bytes());
                    BoundJob::Inline { len, bytes }
                }
                _ => BoundJob::Long(job.into()),
            },
        }
    }

    fn get(&self) -> Option<&str> {
        match self {
            BoundJob::Unknown => None,
            // Copied from a `str` whole (never cut), so still UTF-8.
            BoundJob::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).ok()
            }
            BoundJob::Long(job) => Some(job),
        }
    }
}

struct Binding {
    fingerprint: u64,
    job: BoundJob,
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
    /// At most `capacity` bindings, none older than `ttl`.
    pub(super) fn new(capacity: usize, ttl: Duration) -> Self {
        GeneratedBindings {
            by_key: FastMap::default(),
            order: VecDeque::new(),
            hasher: foldhash::quality::RandomState::default(),
            capacity,
            ttl,
        }
    }

    /// At most `max_bytes` of bindings, counted at [`BINDING_BYTES`] each.
    pub(super) fn bound_bytes(&mut self, max_bytes: usize) {
        self.capacity = self.capacity.min(max_bytes / BINDING_BYTES);
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
                job: BoundJob::of(job),
                stored: now,
            },
        );
        self.order.push_back((hash, now));
        // A key remembered again leaves a stale order record behind.
        if self.order.len() > self.capacity.max(16).saturating_mul(2) {
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
        // A job id too long to keep inline is kept all the same.
        let long = "j".repeat(JOB_INLINE + 1);
        bindings.remember(&keys[1], 1, Some(&long), t0);
        assert!(matches!(bindings.get(&keys[1], 1, t0), Some(Seen::Same(Some(j))) if j == long));
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
    fn the_largest_capacity_and_a_byte_bound_hold() {
        let t0 = Instant::now();
        let mut bindings = GeneratedBindings::new(usize::MAX, Duration::from_secs(10));
        let key = IdempotencyKey::new();
        for i in 0..100 {
            bindings.remember(&key, i, None, t0);
        }
        assert!(bindings.get(&key, 99, t0).is_some());
        bindings.bound_bytes(3 * BINDING_BYTES);
        for _ in 0..10 {
            bindings.remember(&IdempotencyKey::new(), 1, None, t0);
        }
        assert_eq!(bindings.len(), 3);
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
