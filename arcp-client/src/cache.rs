//! Terminal outcomes by key: bounded in count, in bytes and in age (expired
//! on the owner's timer, [`OutcomeCache::next_expiry`], not only when the
//! next call looks).
//!
//! Lets a repeated call with a key that already finished in this process
//! answer at once, even against runtimes that replay only `job.accepted`.
//! A key whose call ended with its outcome unknown (it may have run) is
//! remembered too, without an outcome: a repeated call with the same intent
//! asks the runtime again, and one with another intent is refused as a
//! duplicate, since the key may be bound to the first intent.
//!
//! A binding keeps the job the key was bound to, when known: a repeated
//! call starts bound to it, so the runtime's replay of that job reads as a
//! replay even when the runtime does not mark it (the Python runtime's
//! stored acceptance on the session that ran the key).
//!
//! Only outcomes of keys a caller names are kept ([`KeyOrigin::Named`]:
//! supplied, used by an earlier call or process, or joined by a second
//! caller). A key generated for a call is known only to that call's own
//! handles, whose holder gets the outcome itself: of a finished call under
//! such a key only its binding is kept, as plain values
//! ([`generated::GeneratedBindings`]), so the rare repeat under it is
//! answered by the runtime, starting bound to the job. Keeping those
//! outcomes cost a tenth of the client's CPU per call at 64 in flight
//! (BENCHMARKS.md).

mod generated;
mod intent;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arcp_types::IdempotencyKey;

use self::generated::{GeneratedBindings, Seen};
#[cfg(feature = "http")]
pub(crate) use self::intent::intent_of_payload;
pub(crate) use self::intent::{fingerprint_of, serialized_size, Intent};
use crate::error::{Error, Execution};
use crate::fast_map::FastMap;
use crate::outcome::{value_bytes, ToolOutput};

/// What a call ends with.
pub(crate) type Outcome = Result<ToolOutput, Error>;

/// An outcome as a transport hands it out and the outcome cache keeps it.
///
/// A plainly successful result travels in parts ([`PlainResult`]): its
/// value as wire text and its job id shared, not copied. The caller that
/// receives it builds the [`ToolOutput`] (parses the value, copies the job
/// id), so those blocks are allocated and freed on the caller's thread
/// rather than the connection task's, and keeping the outcome in the cache
/// costs no copy. (A block freed on another thread than the one that
/// allocated it contends for the allocator's lock: measured, it was most of
/// the client's futex waits.)
#[derive(Debug, Clone)]
pub(crate) enum Settled {
    /// A successful result whose value is still its text.
    Plain(PlainResult),
    /// Any other outcome, whole.
    Whole(Outcome),
}

/// A successful result in shared parts (see [`Settled`]).
#[derive(Debug, Clone)]
pub(crate) struct PlainResult {
    /// The result's value as JSON text (checked JSON: it was read as such).
    pub(crate) value_text: Arc<str>,
    /// The job the runtime bound the call to, when it said.
    pub(crate) job_id: Option<Arc<str>>,
    /// The call's key.
    pub(crate) key: IdempotencyKey,
    /// Whether the answer was a stored outcome.
    pub(crate) replayed: bool,
    /// Attempts the call took.
    pub(crate) attempts: u32,
}

impl From<Outcome> for Settled {
    fn from(outcome: Outcome) -> Self {
        Settled::Whole(outcome)
    }
}

impl Settled {
    /// The outcome with its value in place, parsed here if it is text. Its
    /// `trace_id` is left empty: the caller's own is set where it awaits.
    pub(crate) fn into_outcome(self) -> Outcome {
        match self {
            Settled::Plain(plain) => match serde_json::from_str(&plain.value_text) {
                Ok(value) => Ok(ToolOutput {
                    value,
                    job_id: plain.job_id.as_deref().map(str::to_owned),
                    key: plain.key,
                    replayed: plain.replayed,
                    attempts: plain.attempts,
                    trace_id: String::new(),
                }),
                // The text was read as JSON by the same parser: not reached.
                Err(e) => Err(Error::Internal(
                    format!("a result's value could not be read back: {e}").into(),
                )),
            },
            Settled::Whole(outcome) => outcome,
        }
    }

    /// Whether a result is a stored outcome (a replay).
    pub(crate) fn replayed_result(&self) -> bool {
        match self {
            Settled::Plain(plain) => plain.replayed,
            Settled::Whole(Ok(out)) => out.replayed,
            Settled::Whole(Err(_)) => false,
        }
    }

    /// The job the runtime bound the call to, when it said.
    fn job_str(&self) -> Option<&str> {
        match self {
            Settled::Plain(plain) => plain.job_id.as_deref(),
            Settled::Whole(Ok(out)) => out.job_id.as_deref(),
            Settled::Whole(Err(e)) => e.job_id(),
        }
    }

    /// [`job_str`](Self::job_str), shared.
    fn job_id(&self) -> Option<Arc<str>> {
        match self {
            Settled::Plain(plain) => plain.job_id.clone(),
            Settled::Whole(Ok(out)) => out.job_id.as_deref().map(Arc::from),
            Settled::Whole(Err(e)) => e.job_id().map(Arc::from),
        }
    }

    /// The error the call ends with; `None` for a result.
    pub(crate) fn error(&self) -> Option<&Error> {
        match self {
            Settled::Whole(Err(e)) => Some(e),
            Settled::Plain(_) | Settled::Whole(Ok(_)) => None,
        }
    }

    /// The same outcome, its error (if any) counting `attempts`.
    pub(crate) fn with_attempts(self, attempts: u32) -> Settled {
        match self {
            Settled::Whole(Err(e)) => Settled::Whole(Err(e.with_attempts(attempts))),
            other => other,
        }
    }

    /// The same outcome marked as a stored one handed to a repeated call
    /// (or to a caller that joined a call after its request went out).
    pub(crate) fn replayed(self) -> Settled {
        match self {
            Settled::Plain(mut plain) => {
                plain.replayed = true;
                Settled::Plain(plain)
            }
            Settled::Whole(outcome) => Settled::Whole(replayed(outcome)),
        }
    }

    /// Whether the cache keeps it (see [`admits`]).
    fn admitted(&self) -> bool {
        match self {
            Settled::Plain(_) => true,
            Settled::Whole(outcome) => admits(outcome),
        }
    }
}

/// The admission rule, one for both transports: an outcome is cached when
/// it is the key's outcome on the runtime (a result, a tool error of the
/// job, a cancellation). A refusal before acceptance, a duplicate key or an
/// unknown outcome is not: a repeated call must ask the runtime again.
pub(crate) fn admits(outcome: &Outcome) -> bool {
    match outcome {
        Ok(_) => true,
        // A job the runtime cancelled; not a call stopped before it was sent.
        Err(Error::Cancelled { attempts, .. }) => *attempts > 0,
        Err(Error::Tool(e)) => e.execution == Execution::Ran,
        Err(_) => false,
    }
}

/// What a call gets when the cache knows its key with another intent: this
/// call sent nothing ("not sent"), and that is all the client knows. Its
/// entry cannot prove the key still bound to the other intent: the runtime
/// may have forgotten the key since, or its answer may have been a replay
/// of an earlier send (of unknown date, and not always marked), and another
/// process may have run this intent under the key. Only the runtime's own
/// refusal proves "did not run".
pub(crate) fn conflict(key: IdempotencyKey) -> Error {
    Error::DuplicateKey {
        key,
        message: "the key was already used by a call with a different intent in this client".into(),
        attempts: 0,
        execution: Execution::NotSent,
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
    /// `None`: the key is bound to this intent (it may have run, or ran
    /// under a generated key); its outcome is not kept.
    outcome: Option<Settled>,
    /// The job the key is bound to, when known and the outcome is not kept.
    job: Option<Arc<str>>,
    stored: Instant,
    /// What the entry holds, in bytes ([`held_bytes`]).
    size: usize,
}

pub(crate) struct OutcomeCache {
    entries: FastMap<IdempotencyKey, Entry>,
    /// Finished calls under generated keys, by their bindings alone.
    generated: GeneratedBindings,
    order: VecDeque<(IdempotencyKey, Instant)>,
    capacity: usize,
    ttl: Duration,
    /// The most bytes the entries may hold together, and what they hold.
    max_bytes: usize,
    bytes: usize,
}

/// What an entry costs besides its strings: the map slot, the order record,
/// the outcome's own fields.
const ENTRY_OVERHEAD: usize = 128;

/// An estimate of the bytes an entry holds: its key, and its outcome's
/// strings and values (a value counted by its text and a few bytes a node).
fn held_bytes(key: &IdempotencyKey, outcome: Option<&Settled>, job: Option<&str>) -> usize {
    let text = |t: Option<&str>| t.map_or(0, str::len);
    let outcome = match outcome {
        None => 0,
        Some(Settled::Plain(plain)) => plain.value_text.len() + text(plain.job_id.as_deref()),
        Some(Settled::Whole(Ok(out))) => value_bytes(&out.value) + text(out.job_id.as_deref()),
        Some(Settled::Whole(Err(Error::Tool(e)))) => {
            e.message.len() + e.details.as_ref().map_or(0, value_bytes) + text(e.job_id.as_deref())
        }
        Some(Settled::Whole(Err(e))) => std::mem::size_of_val(e) + text(e.job_id()),
    };
    ENTRY_OVERHEAD + key.as_str().len() + outcome + text(job)
}

/// Whether a caller could name a call's key before the call ended (see the
/// module's docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyOrigin {
    /// Generated for this call: no earlier call has it, and only the
    /// call's own handles know it.
    Generated,
    /// Supplied by the caller, used by an earlier call or process, or
    /// joined by a second caller.
    Named,
}

impl KeyOrigin {
    /// The origin of a key `supplied` by the caller or `in_doubt` (an
    /// earlier process may have sent it).
    pub(crate) fn of(supplied: bool, in_doubt: bool) -> Self {
        if supplied || in_doubt {
            KeyOrigin::Named
        } else {
            KeyOrigin::Generated
        }
    }
}

/// What the cache knows about a key.
pub(crate) enum Cached {
    /// The same intent finished: its outcome.
    Hit(Settled),
    /// The key finished with a different intent.
    Conflict,
    /// The same intent was sent before and may have run; its outcome is
    /// not kept. Ask the runtime again, but the call may already have run:
    /// it must never be reported as not run. With the job the key was
    /// bound to, when known: the runtime's replay of it is a replay.
    Bound(Option<Arc<str>>),
    Miss,
}

impl OutcomeCache {
    pub(crate) fn new(capacity: usize, ttl: Duration) -> Self {
        OutcomeCache {
            entries: FastMap::default(),
            generated: GeneratedBindings::new(capacity, ttl),
            order: VecDeque::new(),
            capacity,
            ttl,
            max_bytes: usize::MAX,
            bytes: 0,
        }
    }

    /// The same cache, holding at most `max_bytes` of outcomes, and at most
    /// as much again of generated keys' bindings.
    pub(crate) fn with_max_bytes(mut self, max_bytes: usize) -> Self {
        self.max_bytes = max_bytes;
        self.generated.bound_bytes(max_bytes);
        self
    }

    /// When the oldest entry expires: the owner's timer calls
    /// [`expire`](Self::expire) then, so an idle client frees its outcomes.
    pub(crate) fn next_expiry(&self) -> Option<Instant> {
        self.order
            .front()
            .map(|&(_, stored)| crate::retry::saturating_deadline(stored, self.ttl))
    }

    pub(crate) fn get(&mut self, key: &IdempotencyKey, fingerprint: u64, now: Instant) -> Cached {
        self.expire(now);
        match self.entries.get(key) {
            Some(e) if e.fingerprint == fingerprint => match &e.outcome {
                Some(settled) => Cached::Hit(settled.clone().replayed()),
                None => Cached::Bound(e.job.clone()),
            },
            Some(_) => Cached::Conflict,
            None => match self.generated.get(key, fingerprint, now) {
                Some(Seen::Same(job)) => Cached::Bound(job.map(Arc::from)),
                Some(Seen::Other) => Cached::Conflict,
                None => Cached::Miss,
            },
        }
    }

    /// Records a call's outcome (cloned only when it is admitted and its
    /// key `origin` is [`KeyOrigin::Named`]; a value kept as text is
    /// shared, not copied).
    pub(crate) fn insert(
        &mut self,
        key: IdempotencyKey,
        fingerprint: u64,
        settled: &Settled,
        origin: KeyOrigin,
        now: Instant,
    ) {
        if self.capacity == 0 {
            return;
        }
        let outcome = if settled.admitted() {
            if origin == KeyOrigin::Generated {
                self.generated
                    .remember(&key, fingerprint, settled.job_str(), now);
                return;
            }
            Some(settled.clone())
        } else if settled
            .error()
            .is_some_and(|e| e.execution() == Execution::MayHaveRun)
        {
            None
        } else {
            return;
        };
        let job = match outcome {
            Some(_) => None,
            None => settled.job_id(),
        };
        self.store(key, fingerprint, outcome, job, now);
    }

    fn store(
        &mut self,
        key: IdempotencyKey,
        fingerprint: u64,
        outcome: Option<Settled>,
        job: Option<Arc<str>>,
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
        // (Looked up only then: a result, the common case, costs one hash.)
        if outcome.is_none() && self.entries.get(&key).is_some_and(|e| e.outcome.is_some()) {
            return;
        }
        let (mut outcome, mut job) = (outcome, job);
        let mut size = held_bytes(&key, outcome.as_ref(), job.as_deref());
        if size > self.max_bytes {
            // Too large to keep: remember the binding alone, so a repeated
            // call asks the runtime and never reads as not run.
            job = outcome.as_ref().and_then(Settled::job_id).or(job);
            outcome = None;
            size = held_bytes(&key, None, job.as_deref());
            if size > self.max_bytes {
                // Still too large: the binding without its job.
                job = None;
                size = held_bytes(&key, None, None);
                if size > self.max_bytes {
                    return;
                }
            }
        }
        if let Some(old) = self.entries.remove(&key) {
            self.bytes -= old.size;
        }
        while self.entries.len() >= self.capacity || self.bytes + size > self.max_bytes {
            match self.order.pop_front() {
                Some((old, stored)) => self.remove_if_stored(old, stored),
                None => break,
            }
        }
        self.order.push_back((key.clone(), now));
        self.bytes += size;
        self.entries.insert(
            key,
            Entry {
                fingerprint,
                outcome,
                job,
                stored: now,
                size,
            },
        );
    }

    /// Remembers that `key` may be bound to this intent on the runtime,
    /// when a call ends with nobody waiting for its outcome.
    /// `job`: the job it was bound to, when known.
    pub(crate) fn remember_binding(
        &mut self,
        key: IdempotencyKey,
        fingerprint: u64,
        job: Option<Arc<str>>,
        now: Instant,
    ) {
        self.store(key, fingerprint, None, job, now);
    }

    /// Removes `key`'s entry if it is the one stored at `stored` (an order
    /// record outlives the entry it named when the key was stored again).
    fn remove_if_stored(&mut self, key: IdempotencyKey, stored: Instant) {
        if let std::collections::hash_map::Entry::Occupied(entry) = self.entries.entry(key) {
            if entry.get().stored == stored {
                self.bytes -= entry.remove().size;
            }
        }
    }

    /// Drops every entry older than the TTL.
    pub(crate) fn expire(&mut self, now: Instant) {
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
        if self.order.len() > self.capacity.max(16).saturating_mul(2) {
            self.order
                .retain(|(k, s)| self.entries.get(k).is_some_and(|e| e.stored == *s));
        }
    }

    /// Outcomes held.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Bytes held ([`held_bytes`] of every entry).
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
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
    fn a_generated_keys_outcome_is_kept_as_its_binding_and_job() {
        let t0 = Instant::now();
        let mut cache = OutcomeCache::new(8, Duration::from_secs(10));
        let (done, unsure) = (IdempotencyKey::new(), IdempotencyKey::new());
        let mut result = plain(&done, &format!("\"{}\"", "x".repeat(1000)));
        if let Settled::Plain(p) = &mut result {
            p.job_id = Some("job_0".into());
        }
        cache.insert(done.clone(), 1, &result, KeyOrigin::Generated, t0);
        assert!(
            matches!(cache.get(&done, 1, t0), Cached::Bound(Some(job)) if &*job == "job_0"),
            "a repeat asks the runtime, bound to the job"
        );
        assert!(matches!(cache.get(&done, 2, t0), Cached::Conflict));
        assert_eq!((cache.len(), cache.bytes()), (0, 0), "no outcome kept");
        let may_have_run = Error::Interrupted {
            key: unsure.clone(),
            job_id: Some("job_1".into()),
            attempts: 1,
        };
        cache.insert(
            unsure.clone(),
            1,
            &Err(may_have_run).into(),
            KeyOrigin::Generated,
            t0,
        );
        assert!(
            matches!(cache.get(&unsure, 1, t0), Cached::Bound(Some(job)) if &*job == "job_1"),
            "a repeat asks the runtime, bound to the job"
        );
        assert!(matches!(cache.get(&unsure, 2, t0), Cached::Conflict));
    }

    #[test]
    fn bounded_by_capacity_and_ttl() {
        let mut cache = OutcomeCache::new(2, Duration::from_secs(10));
        let t0 = Instant::now();
        let keys: Vec<_> = (0..3).map(|_| IdempotencyKey::new()).collect();
        for k in &keys {
            cache.insert(k.clone(), 1, &out(k).into(), KeyOrigin::Named, t0);
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
        cache.insert(key.clone(), 1, &unknown.into(), KeyOrigin::Named, t0);
        // The same intent asks the runtime again; another is refused.
        assert!(matches!(cache.get(&key, 1, t0), Cached::Bound(_)));
        assert!(matches!(cache.get(&key, 2, t0), Cached::Conflict));
        // A refusal that proves nothing ran is not remembered at all.
        let other = IdempotencyKey::new();
        let refused = Err(Error::RetriesExhausted {
            key: other.clone(),
            attempts: 3,
            last_error: "UNAVAILABLE".into(),
        });
        cache.insert(other.clone(), 1, &refused.into(), KeyOrigin::Named, t0);
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
        cache.insert(key.clone(), 1, &Settled::from(ok), KeyOrigin::Named, now);
        // Another intent under the key ended "may have run".
        cache.remember_binding(key.clone(), 2, None, now);
        // The first intent is still answered from its outcome, not refused.
        assert!(matches!(cache.get(&key, 1, now), Cached::Hit(_)));
        assert!(matches!(cache.get(&key, 2, now), Cached::Conflict));
        // Another caller of the same intent that stopped waiting (its call
        // dropped while a request was out) leaves the outcome as it is.
        cache.remember_binding(key.clone(), 1, None, now);
        assert!(matches!(cache.get(&key, 1, now), Cached::Hit(_)));
    }

    fn plain(key: &IdempotencyKey, text: &str) -> Settled {
        Settled::Plain(PlainResult {
            value_text: text.into(),
            job_id: None,
            key: key.clone(),
            replayed: false,
            attempts: 1,
        })
    }

    #[test]
    fn bounded_by_total_bytes_oldest_first() {
        let big = format!("\"{}\"", "x".repeat(1000));
        let keys: Vec<_> = (0..3).map(|_| IdempotencyKey::new()).collect();
        let per_entry = held_bytes(&keys[0], Some(&plain(&keys[0], &big)), None);
        // Room for two such entries, not three.
        let bound = 2 * per_entry + 10;
        let mut cache = OutcomeCache::new(100, Duration::from_secs(60)).with_max_bytes(bound);
        let t0 = Instant::now();
        for (i, key) in keys.iter().enumerate() {
            let at = t0 + Duration::from_millis(i as u64);
            cache.insert(key.clone(), 1, &plain(key, &big), KeyOrigin::Named, at);
        }
        assert_eq!(cache.len(), 2);
        assert!(cache.bytes() <= bound);
        assert!(matches!(cache.get(&keys[0], 1, t0), Cached::Miss));
        assert!(matches!(cache.get(&keys[2], 1, t0), Cached::Hit(_)));
        // Replacing an entry counts its bytes once.
        let small = plain(&keys[2], "1");
        cache.insert(keys[2].clone(), 1, &small, KeyOrigin::Named, t0);
        assert_eq!(cache.len(), 2);
        assert_eq!(
            cache.bytes(),
            per_entry + held_bytes(&keys[2], Some(&small), None)
        );
    }

    #[test]
    fn an_outcome_larger_than_the_bound_keeps_only_the_binding() {
        let mut cache = OutcomeCache::new(100, Duration::from_secs(60)).with_max_bytes(1024);
        let key = IdempotencyKey::new();
        let huge = format!("\"{}\"", "x".repeat(4096));
        let t0 = Instant::now();
        cache.insert(key.clone(), 1, &plain(&key, &huge), KeyOrigin::Named, t0);
        assert!(matches!(cache.get(&key, 1, t0), Cached::Bound(_)));
        assert!(matches!(cache.get(&key, 2, t0), Cached::Conflict));
        assert!(cache.bytes() < 1024);
    }

    #[test]
    fn expiry_is_due_on_a_timer_and_frees_the_bytes() {
        let ttl = Duration::from_secs(10);
        let mut cache = OutcomeCache::new(100, ttl);
        assert_eq!(cache.next_expiry(), None);
        let key = IdempotencyKey::new();
        let t0 = Instant::now();
        cache.insert(key.clone(), 1, &plain(&key, "1"), KeyOrigin::Named, t0);
        assert_eq!(cache.next_expiry(), Some(t0 + ttl));
        cache.expire(t0 + ttl);
        assert_eq!(cache.len(), 0);
        assert_eq!(cache.bytes(), 0);
        assert_eq!(cache.next_expiry(), None);
    }
}
