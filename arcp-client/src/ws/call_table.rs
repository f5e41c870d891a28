//! The core's calls and their two indexes: by key (a second caller of the
//! key joins the call) and by job (frames that name only their job).
//!
//! The invariant, kept here and nowhere else: every index entry names a
//! call in the table whose key, or job, it is; a call is reachable by its
//! key (its own entry, one call per key) and, once bound, by its job (a job
//! a misbehaving runtime gave two calls is indexed to the later one). Only
//! [`CallTable::insert`], [`CallTable::bind_job`] and
//! [`CallTable::remove`] touch the indexes, each keeping the invariant for
//! the call it changes (checked in debug builds).

use std::sync::Arc;

use arcp_types::IdempotencyKey;

use super::calls::Call;
use super::ids::CallId;
use crate::fast_map::FastMap;

/// The calls of one connection core, by id, key and job.
#[derive(Default)]
pub(crate) struct CallTable {
    calls: FastMap<CallId, Box<Call>>,
    by_key: FastMap<IdempotencyKey, CallId>,
    by_job: FastMap<Arc<str>, CallId>,
    next_id: CallId,
}

impl CallTable {
    /// Adds a call under a fresh id, reachable by its key; bound to
    /// `prior_job` (a journal record of an earlier process names it) when
    /// given.
    pub(crate) fn insert(&mut self, call: Call, prior_job: Option<&str>) -> CallId {
        let id = self.next_id;
        self.next_id += 1;
        self.by_key.insert(call.key().clone(), id);
        self.calls.insert(id, Box::new(call));
        if let Some(job) = prior_job {
            self.bind_job(id, job);
        }
        self.check(id);
        id
    }

    /// Binds call `id` to `job` (see [`Call::bind`]) and indexes it by the
    /// job, in place of a job it was bound to before. Returns the job, or
    /// `None` when there is no such call.
    pub(crate) fn bind_job(&mut self, id: CallId, job: &str) -> Option<Arc<str>> {
        let call = self.calls.get_mut(&id)?;
        let (job, replaced) = call.bind(job);
        if let Some(old) = replaced {
            // Another call may hold that job now: its entry stays.
            if self.by_job.get(&old) == Some(&id) {
                self.by_job.remove(&old);
            }
        }
        // Already indexed (the common case: a result naming the job it was
        // accepted as): no clone, no insert.
        if self.by_job.get(&job) != Some(&id) {
            self.by_job.insert(job.clone(), id);
        }
        self.check(id);
        Some(job)
    }

    /// Removes call `id` and its index entries (those still naming it).
    pub(crate) fn remove(&mut self, id: CallId) -> Option<Box<Call>> {
        let call = self.calls.remove(&id)?;
        if self.by_key.get(call.key()) == Some(&id) {
            self.by_key.remove(call.key());
        }
        if let Some(job) = call.job_id() {
            if self.by_job.get(job) == Some(&id) {
                self.by_job.remove(job);
            }
        }
        Some(call)
    }

    /// The call running under `key`.
    pub(crate) fn by_key(&self, key: &IdempotencyKey) -> Option<CallId> {
        self.by_key.get(key).copied()
    }

    /// The call bound to `job`.
    pub(crate) fn by_job(&self, job: &str) -> Option<CallId> {
        self.by_job.get(job).copied()
    }

    /// Call `id`.
    pub(crate) fn get(&self, id: &CallId) -> Option<&Call> {
        self.calls.get(id).map(|call| &**call)
    }

    /// Call `id`, to change it (its key and job stay as indexed: binding
    /// goes through [`bind_job`](Self::bind_job)).
    pub(crate) fn get_mut(&mut self, id: &CallId) -> Option<&mut Call> {
        self.calls.get_mut(id).map(|call| &mut **call)
    }

    /// Whether call `id` is in the table.
    pub(crate) fn contains_key(&self, id: &CallId) -> bool {
        self.calls.contains_key(id)
    }

    /// How many calls.
    pub(crate) fn len(&self) -> usize {
        self.calls.len()
    }

    /// Whether there are none.
    pub(crate) fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The ids of every call, in no order.
    pub(crate) fn ids(&self) -> Vec<CallId> {
        self.calls.keys().copied().collect()
    }

    /// Every call, to change, in no order.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&CallId, &mut Call)> {
        self.calls.iter_mut().map(|(id, call)| (id, &mut **call))
    }

    /// The invariant for call `id` (module docs), in debug builds: its
    /// key's entry and its job's entry name it.
    fn check(&self, id: CallId) {
        if cfg!(debug_assertions) {
            if let Some(call) = self.calls.get(&id) {
                debug_assert_eq!(self.by_key.get(call.key()), Some(&id), "key index");
                if let Some(job) = call.job_id() {
                    debug_assert_eq!(self.by_job.get(job), Some(&id), "job index");
                }
            }
        }
    }

    /// The whole invariant, for tests: every entry names a call in the
    /// table whose key or job it is, and every call is reachable.
    #[cfg(test)]
    fn assert_consistent(&self) {
        for (key, id) in &self.by_key {
            let call = self.calls.get(id).expect("a key entry names a call");
            assert_eq!(call.key(), key);
        }
        for (job, id) in &self.by_job {
            let call = self.calls.get(id).expect("a job entry names a call");
            assert_eq!(call.job_id(), Some(job));
        }
        for (id, call) in &self.calls {
            assert_eq!(self.by_key.get(call.key()), Some(id));
            if let Some(job) = call.job_id() {
                let holder = self.by_job.get(job).expect("a bound call's job is indexed");
                assert_eq!(self.calls[holder].job_id(), Some(job));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use arcp_types::Invoke;
    use serde_json::json;
    use tokio::sync::oneshot;

    use super::*;
    use crate::cache::KeyOrigin;
    use crate::deadline::Deadline;
    use crate::request::{CallRequest, CallShared, EventsEnd, PreparedCall, TraceId};
    use crate::ws::waiters::Waiter;

    fn call(key: &IdempotencyKey, now: Instant) -> Call {
        let shared = Arc::new(CallShared::default());
        let mut req = CallRequest {
            key: key.clone(),
            trace_id: TraceId::random(),
            invoke: Invoke::new("echo", json!({})),
            deadline: Duration::from_secs(5),
            started: now,
            events_end: EventsEnd(shared.clone()),
            shared: shared.clone(),
            recorder: None,
            in_doubt: false,
            prior_job: None,
            key_supplied: false,
            prepared: None,
            claim: None,
        };
        req.seal();
        let prepared = PreparedCall::new(&mut req, None);
        let waiter = Waiter {
            reply: oneshot::channel().0,
            shared,
            deadline: Deadline::new(now, req.deadline),
            _events_end: EventsEnd(Arc::new(CallShared::default())),
            joined_sent: false,
        };
        Call::new(
            (key.clone(), KeyOrigin::Generated),
            None,
            prepared,
            waiter,
            false,
            now,
        )
    }

    /// Every way the indexes change keeps them consistent: insert (with
    /// and without a prior job), binding, rebinding to another job, a job
    /// that moved to another call, and removal.
    #[test]
    fn the_indexes_follow_every_change() {
        let now = Instant::now();
        let mut table = CallTable::default();
        let (k1, k2, k3) = (
            IdempotencyKey::new(),
            IdempotencyKey::new(),
            IdempotencyKey::new(),
        );
        let a = table.insert(call(&k1, now), None);
        let b = table.insert(call(&k2, now), Some("job-b"));
        assert_ne!(a, b);
        table.assert_consistent();
        assert_eq!((table.by_key(&k1), table.by_key(&k2)), (Some(a), Some(b)));
        assert_eq!(table.by_job("job-b"), Some(b));

        // Bound, then bound again to another job (a lost attempt's retry
        // ran afresh): the old job's entry goes.
        assert_eq!(table.bind_job(a, "job-a1").as_deref(), Some("job-a1"));
        assert_eq!(table.bind_job(a, "job-a2").as_deref(), Some("job-a2"));
        assert_eq!(table.by_job("job-a1"), None);
        assert_eq!(table.by_job("job-a2"), Some(a));
        table.assert_consistent();

        // A job given to two calls is indexed to the later one; a call
        // rebound away from a job leaves another call's entry alone.
        let c = table.insert(call(&k3, now), None);
        table.bind_job(c, "job-shared");
        table.bind_job(a, "job-shared");
        assert_eq!(table.by_job("job-shared"), Some(a));
        table.assert_consistent();
        table.bind_job(c, "job-c");
        assert_eq!(table.by_job("job-shared"), Some(a), "a's entry stays");
        assert_eq!(table.bind_job(a, "job-a3").as_deref(), Some("job-a3"));
        assert_eq!(table.by_job("job-shared"), None);
        table.assert_consistent();

        // Removal takes every entry naming the call, and no other.
        let removed = table.remove(a).expect("there");
        assert_eq!(removed.key(), &k1);
        assert_eq!((table.by_key(&k1), table.by_job("job-a3")), (None, None));
        assert_eq!(table.by_job("job-c"), Some(c));
        assert!(table.remove(a).is_none());
        assert!(table.bind_job(a, "job-x").is_none());
        table.assert_consistent();
        assert_eq!(table.len(), 2);
        table.remove(b);
        table.remove(c);
        assert!(table.is_empty());
        table.assert_consistent();
    }
}
