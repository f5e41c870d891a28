//! Terminal outcomes by key: bounded in size and age.
//!
//! Lets a repeated call with a key that already finished in this process
//! answer at once, even against runtimes that replay only `job.accepted`.
//! A key whose call ended with its outcome unknown (it may have run) is
//! remembered too, without an outcome: a repeated call with the same intent
//! asks the runtime again, and one with another intent is refused as a
//! duplicate, since the key may be bound to the first intent.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arcp_types::{IdempotencyKey, Invoke};

use crate::error::{Error, Execution};
use crate::outcome::ToolOutput;
use crate::FastMap;

/// What a call ends with.
pub(crate) type Outcome = Result<ToolOutput, Error>;

/// An outcome as the connection task hands it out and the outcome cache
/// keeps it. A plainly successful result's value may still be its wire
/// text: the caller that receives it parses it, so the value is built (and
/// later freed) on the caller's thread rather than the connection task's,
/// and the cache keeps one shared copy of the text instead of a tree.
/// (A block freed on another thread than the one that allocated it
/// contends for the allocator's lock: measured, it was most of the
/// client's futex waits.)
#[derive(Debug, Clone)]
pub(crate) struct Settled {
    /// The outcome; with `value_text`, its value is a placeholder.
    pub(crate) outcome: Outcome,
    /// The result's value as JSON text (checked JSON: it was read as such).
    pub(crate) value_text: Option<Arc<str>>,
}

impl From<Outcome> for Settled {
    fn from(outcome: Outcome) -> Self {
        Settled {
            outcome,
            value_text: None,
        }
    }
}

impl Settled {
    /// The outcome with its value in place, parsed here if it is text.
    pub(crate) fn into_outcome(self) -> Outcome {
        match (self.outcome, self.value_text) {
            (Ok(mut out), Some(text)) => match serde_json::from_str(&text) {
                Ok(value) => {
                    out.value = value;
                    Ok(out)
                }
                // The text was read as JSON by the same parser: not reached.
                Err(e) => Err(Error::Internal(
                    format!("a result's value could not be read back: {e}").into(),
                )),
            },
            (outcome, _) => outcome,
        }
    }
}

/// An intent (tool, arguments and every option, as serialized) reduced to
/// what the outcome cache and call joining compare: a fingerprint, and the
/// serialized size for the frame-size check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Intent {
    pub(crate) fingerprint: u64,
    pub(crate) size: usize,
}

/// The [`Intent`] of a request, serialized straight into the hasher (no
/// copy of the text is kept). Fingerprints are compared only inside this
/// process, so the hash need not be stable across builds; foldhash's
/// quality hasher (fixed seed: equal intents must meet) takes serde's many
/// small writes at a fraction of SipHash's cost.
pub(crate) fn intent_of(invoke: &Invoke) -> Intent {
    use std::hash::{BuildHasher, Hasher};
    struct Hashing {
        hasher: foldhash::quality::FoldHasher<'static>,
        size: usize,
    }
    impl std::io::Write for Hashing {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.hasher.write(bytes);
            self.size += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Hashing {
        hasher: foldhash::quality::FixedState::with_seed(INTENT_SEED).build_hasher(),
        size: 0,
    };
    // An `Invoke` holds strings and JSON values only: it always serializes.
    let _ = serde_json::to_writer(&mut out, invoke);
    Intent {
        fingerprint: out.hasher.finish(),
        size: out.size,
    }
}

/// The [`Intent`] of a request from its payload encoded once
/// ([`arcp_types::EncodedRequest`]): the same payload text is the same
/// intent (the encoding is a function of the intent). For a transport that
/// keeps only encoded requests in its cache; a fingerprint is compared only
/// with others made the same way.
#[cfg(feature = "http")]
pub(crate) fn intent_of_payload(payload: &str) -> Intent {
    use std::hash::BuildHasher;
    Intent {
        fingerprint: foldhash::quality::FixedState::with_seed(INTENT_SEED).hash_one(payload),
        size: payload.len(),
    }
}

/// Any constant: it only has to be the same for every call of a process.
const INTENT_SEED: u64 = 0x6172_6370_696e_7465;

/// The admission rule, one for both transports: an outcome is cached when
/// it is the key's outcome on the runtime (a result, a tool error of the
/// job, a cancellation). A refusal before acceptance, a duplicate key or an
/// unknown outcome is not: a repeated call must ask the runtime again.
pub(crate) fn admits(outcome: &Outcome) -> bool {
    match outcome {
        Ok(_) | Err(Error::Cancelled { .. }) => true,
        Err(Error::Tool(e)) => e.execution == Execution::Ran,
        Err(_) => false,
    }
}

/// What a call gets when the cache knows its key with another intent.
pub(crate) fn conflict(key: IdempotencyKey) -> Error {
    Error::DuplicateKey {
        key,
        message: "the key was already used by a call with a different intent in this client".into(),
        attempts: 0,
    }
}

/// A stored outcome handed to a repeated call: marked replayed, whether it
/// is a result or a tool error.
pub(crate) fn replayed(outcome: Outcome) -> Outcome {
    match outcome {
        Ok(mut out) => {
            out.replayed = true;
            Ok(out)
        }
        Err(Error::Tool(mut e)) => {
            e.replayed = true;
            Err(Error::Tool(e))
        }
        other => other,
    }
}

struct Entry {
    fingerprint: u64,
    /// `None`: the key may be bound to this intent; its outcome is unknown.
    outcome: Option<Settled>,
    stored: Instant,
}

pub(crate) struct OutcomeCache {
    entries: FastMap<IdempotencyKey, Entry>,
    order: VecDeque<(IdempotencyKey, Instant)>,
    capacity: usize,
    ttl: Duration,
}

/// What the cache knows about a key.
pub(crate) enum Cached {
    /// The same intent finished: its outcome.
    Hit(Settled),
    /// The key finished with a different intent.
    Conflict,
    /// The same intent was sent before and may have run; its outcome is
    /// unknown. Ask the runtime again, but the call may already have run:
    /// it must never be reported as not run.
    Bound,
    Miss,
}

impl OutcomeCache {
    pub(crate) fn new(capacity: usize, ttl: Duration) -> Self {
        OutcomeCache {
            entries: FastMap::default(),
            order: VecDeque::new(),
            capacity,
            ttl,
        }
    }

    pub(crate) fn get(&mut self, key: &IdempotencyKey, fingerprint: u64, now: Instant) -> Cached {
        self.expire(now);
        match self.entries.get(key) {
            Some(e) if e.fingerprint == fingerprint => match &e.outcome {
                Some(settled) => Cached::Hit(Settled {
                    outcome: replayed(settled.outcome.clone()),
                    value_text: settled.value_text.clone(),
                }),
                None => Cached::Bound,
            },
            Some(_) => Cached::Conflict,
            None => Cached::Miss,
        }
    }

    /// Records a call's outcome (cloned only when it is admitted; a value
    /// kept as text is shared, not copied).
    pub(crate) fn insert(
        &mut self,
        key: IdempotencyKey,
        fingerprint: u64,
        settled: &Settled,
        now: Instant,
    ) {
        if self.capacity == 0 {
            return;
        }
        let outcome = &settled.outcome;
        let outcome = if admits(outcome) {
            Some(settled.clone())
        } else if outcome
            .as_ref()
            .is_err_and(|e| e.execution() == Execution::MayHaveRun)
        {
            None
        } else {
            return;
        };
        self.store(key, fingerprint, outcome, now);
    }

    fn store(
        &mut self,
        key: IdempotencyKey,
        fingerprint: u64,
        outcome: Option<Settled>,
        now: Instant,
    ) {
        if self.capacity == 0 {
            return;
        }
        self.expire(now);
        // The key's own outcome says which intent it is bound to: a call of
        // another intent that may have run did not bind it (the runtime
        // refused it, or will), and one of the same intent adds nothing to
        // it, so neither replaces that outcome.
        let settled = self.entries.get(&key).is_some_and(|e| e.outcome.is_some());
        if outcome.is_none() && settled {
            return;
        }
        while self.entries.len() >= self.capacity {
            match self.order.pop_front() {
                Some((old, stored)) => self.remove_if_stored(old, stored),
                None => break,
            }
        }
        self.order.push_back((key.clone(), now));
        self.entries.insert(
            key,
            Entry {
                fingerprint,
                outcome,
                stored: now,
            },
        );
    }

    /// Remembers that `key` may be bound to this intent on the runtime,
    /// when a call ends with nobody waiting for its outcome.
    pub(crate) fn remember_binding(&mut self, key: IdempotencyKey, fingerprint: u64, now: Instant) {
        self.store(key, fingerprint, None, now);
    }

    /// Removes `key`'s entry if it is the one stored at `stored` (an order
    /// record outlives the entry it named when the key was stored again).
    fn remove_if_stored(&mut self, key: IdempotencyKey, stored: Instant) {
        if let std::collections::hash_map::Entry::Occupied(entry) = self.entries.entry(key) {
            if entry.get().stored == stored {
                entry.remove();
            }
        }
    }

    fn expire(&mut self, now: Instant) {
        while let Some(&(_, stored)) = self.order.front() {
            if now.duration_since(stored) < self.ttl {
                break;
            }
            if let Some((key, stored)) = self.order.pop_front() {
                self.remove_if_stored(key, stored);
            }
        }
        // Entries replaced by a newer insert leave stale order records; keep
        // the queue from outgrowing the map.
        if self.order.len() > 2 * self.capacity.max(16) {
            self.order
                .retain(|(k, s)| self.entries.get(k).is_some_and(|e| e.stored == *s));
        }
    }

    /// Outcomes held.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(key: &IdempotencyKey) -> Outcome {
        Err(Error::Cancelled {
            key: key.clone(),
            job_id: None,
            attempts: 1,
        })
    }

    #[test]
    fn equal_intents_meet_and_any_difference_parts_them() {
        let invoke = |tool: &str, arguments: serde_json::Value| {
            Invoke::new(tool, arguments).with_idempotency_key("k1")
        };
        let base = invoke("refund", serde_json::json!({"order": 7, "cents": 100}));
        let intent = intent_of(&base);
        assert_eq!(intent, intent_of(&base.clone()));
        assert_eq!(intent.size, serde_json::to_string(&base).unwrap().len());
        for other in [
            invoke("refund", serde_json::json!({"order": 7, "cents": 101})),
            invoke("refund", serde_json::json!({"order": 8, "cents": 100})),
            invoke("refunds", serde_json::json!({"order": 7, "cents": 100})),
            invoke("refund", serde_json::json!({"order": 7})),
            base.clone().with_idempotency_key("k2"),
        ] {
            assert_ne!(
                intent_of(&other).fingerprint,
                intent.fingerprint,
                "{other:?}"
            );
        }
    }

    #[test]
    fn bounded_by_capacity_and_ttl() {
        let mut cache = OutcomeCache::new(2, Duration::from_secs(10));
        let t0 = Instant::now();
        let keys: Vec<_> = (0..3).map(|_| IdempotencyKey::new()).collect();
        for k in &keys {
            cache.insert(k.clone(), 1, &out(k).into(), t0);
        }
        assert_eq!(cache.len(), 2);
        assert!(matches!(cache.get(&keys[0], 1, t0), Cached::Miss));
        assert!(matches!(cache.get(&keys[2], 1, t0), Cached::Hit(_)));
        assert!(matches!(cache.get(&keys[2], 2, t0), Cached::Conflict));
        assert!(matches!(
            cache.get(&keys[2], 1, t0 + Duration::from_secs(11)),
            Cached::Miss
        ));
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn an_unknown_outcome_keeps_the_binding_not_the_outcome() {
        let mut cache = OutcomeCache::new(8, Duration::from_secs(10));
        let t0 = Instant::now();
        let key = IdempotencyKey::new();
        let unknown = Err(Error::OutcomeUnavailable {
            key: key.clone(),
            job_id: Some("job_1".into()),
            reason: "cut".into(),
            attempts: 2,
            permanent: false,
        });
        cache.insert(key.clone(), 1, &unknown.into(), t0);
        // The same intent asks the runtime again; another is refused.
        assert!(matches!(cache.get(&key, 1, t0), Cached::Bound));
        assert!(matches!(cache.get(&key, 2, t0), Cached::Conflict));
        // A refusal that proves nothing ran is not remembered at all.
        let other = IdempotencyKey::new();
        let refused = Err(Error::RetriesExhausted {
            key: other.clone(),
            attempts: 3,
            last_error: "UNAVAILABLE".into(),
        });
        cache.insert(other.clone(), 1, &refused.into(), t0);
        assert!(matches!(cache.get(&other, 2, t0), Cached::Miss));
    }

    #[test]
    fn a_maybe_bound_intent_does_not_replace_the_keys_own_outcome() {
        let mut cache = OutcomeCache::new(8, Duration::from_secs(60));
        let key = IdempotencyKey::new();
        let now = Instant::now();
        let ok: Outcome = Ok(ToolOutput {
            value: serde_json::json!(1),
            job_id: Some("j".into()),
            key: key.clone(),
            replayed: false,
            attempts: 1,
            trace_id: String::new(),
        });
        cache.insert(key.clone(), 1, &Settled::from(ok), now);
        // Another intent under the key ended "may have run".
        cache.remember_binding(key.clone(), 2, now);
        // The first intent is still answered from its outcome, not refused.
        assert!(matches!(cache.get(&key, 1, now), Cached::Hit(_)));
        assert!(matches!(cache.get(&key, 2, now), Cached::Conflict));
        // Another caller of the same intent that stopped waiting (its call
        // dropped while a request was out) leaves the outcome as it is.
        cache.remember_binding(key.clone(), 1, now);
        assert!(matches!(cache.get(&key, 1, now), Cached::Hit(_)));
    }
}
