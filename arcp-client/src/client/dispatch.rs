//! One call's path from the handle to the backend: its deadline over every
//! wait (the in-flight slot, the journal's prepare, every attempt), the
//! journal's records before and after, and the fate it shares with other
//! callers of its key.

use std::sync::Arc;
use std::time::Duration;

use arcp_types::IdempotencyKey;

use crate::cache::Outcome;
use crate::classify::{give_up, not_recorded, not_sent, outcome_unknown, shared_fate, Ending};
use crate::deadline::Deadline;
use crate::error::{Error, Execution, JournalErrorKind};
use crate::fate::{KeyFate, LiveKeys};
use crate::journal::JournalHandle;
use crate::request::{CallRequest, CallShared};
use crate::telemetry::{self, Answered};

use super::Client;

impl Client {
    /// Runs a call to its outcome within its deadline: the in-flight slot,
    /// the journal's prepare and every attempt all count against it. With a
    /// journal, the call is recorded durably before it is handed on
    /// (prepared before send) and its outcome recorded after.
    ///
    /// The common call (no journal, a free in-flight slot) goes straight to
    /// the backend, which holds it to its deadline; its future keeps only
    /// what that needs (a few hundred bytes less per call in flight than
    /// the general path, which every other call runs in a box of its own).
    pub(crate) async fn dispatch(&self, mut request: Box<CallRequest>) -> Outcome {
        if self.inner.journal.is_some() || self.inner.broken.is_some() {
            if let Err(e) = Box::pin(self.usable_for(&request)).await {
                let supplied = request.key_supplied || request.in_doubt;
                return with_key_origin(Err(e), supplied, &request.key);
            }
            return Box::pin(self.dispatch_held(request)).await;
        }
        // Borrowed, not owned: no shared reference count to bump.
        let Ok(_permit) = self.inner.in_flight.try_acquire() else {
            return Box::pin(self.dispatch_held(request)).await;
        };
        request.seal();
        telemetry::call_started();
        let started = request.started;
        let key_supplied = request.key_supplied || request.in_doubt;
        let mut guard = AbandonOnDrop {
            client: self,
            key: request.key.clone(),
            shared: request.shared.clone(),
            armed: true,
        };
        let fate = (!self.inner.backend.joins_callers())
            .then(|| KeyFateGuard::join(&self.inner.live_keys, &guard.key));
        let outcome = self.inner.backend.invoke(request).await;
        guard.armed = false;
        let shared = &guard.shared;
        telemetry::call_ended(
            outcome.as_ref().map(|out| out.replayed),
            started,
            shared.attempts(),
            shared.answered(),
        );
        // Settled as this caller leaves the key's callers: one that joins
        // later starts a fate of its own.
        let joined = fate.is_some_and(KeyFateGuard::leave);
        let outcome = with_shared_fate(outcome, joined, &guard.key, shared);
        with_key_origin(outcome, key_supplied, &guard.key)
    }

    /// Whether this client can take the call at all: a configuration that
    /// can never work (`connect_lazy`), or a journal that cannot be opened
    /// (opened here on first use, within the call's deadline), ends it
    /// before anything is sent.
    async fn usable_for(&self, request: &CallRequest) -> Result<(), Error> {
        if let Some(e) = &self.inner.broken {
            return Err(e.clone());
        }
        let deadline = Deadline::new(request.started, request.deadline);
        let opening = self.inner.journal.get();
        match tokio::time::timeout_at(deadline.at().into(), opening).await {
            Ok(opened) => opened.map(drop),
            Err(_) => {
                // Not handed to a transport: nothing went out but what an
                // earlier process may have sent.
                let ended = request.shared.ended(request.in_doubt);
                Err(deadline.exceeded_error(ended.of(&request.key)))
            }
        }
    }

    /// [`dispatch`](Self::dispatch) for any call: a journal's records, a
    /// wait for an in-flight slot, each bounded by the call's deadline.
    async fn dispatch_held(&self, mut request: Box<CallRequest>) -> Outcome {
        request.seal();
        telemetry::call_started();
        let key = request.key.clone();
        let shared = request.shared.clone();
        let deadline = Deadline::new(request.started, request.deadline);
        let request_started = request.started;
        let in_doubt = request.in_doubt;
        // A journal that fails before it could read the key's record cannot
        // say an earlier process never sent it: only a key generated for
        // this call is known to be new.
        let key_may_be_known = in_doubt || request.key_supplied;
        let deadline_at = tokio::time::Instant::from_std(deadline.at());
        let mut guard = AbandonOnDrop {
            client: self,
            key: key.clone(),
            shared: shared.clone(),
            armed: true,
        };
        // Both transports hold every caller to its own deadline (the
        // connection task in one heap of timers for every call, the HTTP
        // binding in its attempt loop, which knows what each attempt
        // exposed); a call that needs no other wait runs no timer
        // (`dispatch`). This one waits for a slot or the journal: bounded
        // here.
        // Callers of one key share their fate from here: the transport
        // joins them only later (after the journal's record), or never
        // (HTTP). The WebSocket transport alone joins them at once.
        let joined_at_once = self.inner.journal.is_none() && self.inner.backend.joins_callers();
        let fate = (!joined_at_once).then(|| KeyFateGuard::join(&self.inner.live_keys, &key));
        let timed = tokio::time::timeout_at(deadline_at, self.run_call(request)).await;
        let outcome = match timed {
            Ok(outcome) => {
                guard.armed = false;
                outcome
            }
            Err(_) => {
                let ended = shared.ended(shared.abandon() || in_doubt);
                Err(deadline.exceeded_error(ended.of(&key)))
            }
        };
        // The client closed before this call's request went out: that proves
        // nothing when the journal found the key in doubt (an earlier attempt
        // may have run it; the prepare marked the call sent).
        let outcome = match outcome {
            Err(Error::Closed) if shared.abandon() => {
                Err(give_up(shared.ended(true).of(&key), Ending::Closed))
            }
            other => other,
        };
        // A journal that fails while driving a call an earlier process may
        // have sent cannot say "did not run": the outcome is unknown, and
        // the record (if any) stays as it was for the next recovery.
        let outcome = match outcome {
            Err(Error::Journal(e)) if key_may_be_known && e.kind != JournalErrorKind::Fenced => {
                Err(outcome_unknown(
                    shared.ended(true).of(&key),
                    format!(
                        "the journal failed, and an earlier process may have sent a call with \
                         this key ({e})"
                    ),
                ))
            }
            other => other,
        };
        // A journaled call that ended before the journal decided its prepare
        // (its deadline passed while the prepare waited, say) sent nothing,
        // but the key's record was never read: an earlier call with this
        // key, here or in another process, may have run; and this call's own
        // prepare may land unseen and be sent by a recovery. Only a key
        // generated for this call is known to be new.
        let undecided = self.inner.journal.is_some()
            && !shared.is_recorded()
            && shared.answered() != Answered::Journal;
        let unproven = undecided && key_may_be_known;
        let outcome = match outcome {
            Err(e)
                if unproven
                    && e.execution() == Execution::NotRun
                    && !matches!(e, Error::InvalidCall { .. } | Error::ArgumentsEncode { .. }) =>
            {
                // Nothing was sent, so no job is known.
                Err(outcome_unknown(
                    shared.ended(true).of(&key),
                    format!(
                        "the call ended before the journal read its key's record, and an \
                         earlier call with this key may have run ({e})"
                    ),
                ))
            }
            other => other,
        };
        telemetry::call_ended(
            outcome.as_ref().map(|out| out.replayed),
            request_started,
            shared.attempts(),
            shared.answered(),
        );
        // Another caller of the key alongside may have run it: neither
        // this answer nor the journal's record of the key may say "did not
        // run" (a record saying so would vouch for the key to its next
        // caller, here or in another process).
        let joined = fate.as_ref().is_some_and(KeyFateGuard::is_shared);
        let mut outcome = with_shared_fate(outcome, joined, &key, &shared);
        // "Did not run" is proven for the key by this call only if the key
        // was generated for it. A journal proves nothing of a supplied key:
        // with or without a record of it, the store may be new, or have
        // purged it, or the key may have run through another client (before
        // or after the record).
        let key_unused = !key_may_be_known;
        // An outcome the journal itself answered (the key's stored
        // outcome, or a conflict with its record) is not written back.
        let journal = self
            .inner
            .journal
            .as_ref()
            .filter(|_| shared.answered() != Answered::Journal);
        if let (Some(journal), true) = (journal, unproven) {
            // The key's record (if any) is not this call's to end: it is
            // let go as it is, for a recovery to finish (a prepare of this
            // call that landed unseen is released with it).
            journal.release(&key);
        } else if let Some(journal) = journal {
            // "Did not run" is said only once the journal records it
            // durably; a call ending at its deadline gets a short grace.
            let now = tokio::time::Instant::now();
            let durable_by = now + deadline.remaining(now.into_std()).max(DURABLE_GRACE);
            // Boxed: only journaled calls pay for this future's size.
            let recorded =
                Box::pin(journal.finish_call(&key, &outcome, key_unused, durable_by)).await;
            if let (Err(why), Err(e)) = (recorded, &outcome) {
                if e.execution() == Execution::NotRun {
                    outcome = Err(not_recorded(&key, e, &why, shared.job_id()));
                }
            }
        }
        // A caller of the key that joined while this one's ending was being
        // recorded shares its fate too: this caller's answer is settled only
        // as it leaves the key's callers, and a caller joining later starts
        // afresh. (A "did not run" record this one wrote is the prior record
        // that caller's prepare reads and replaces.)
        let joined = fate.is_some_and(KeyFateGuard::leave);
        let outcome = with_shared_fate(outcome, joined, &key, &shared);
        with_key_origin(outcome, !key_unused, &key)
    }

    async fn run_call(&self, request: Box<CallRequest>) -> Outcome {
        // A cancel asked while the call waits for its slot stops it here.
        let shared = request.shared.clone();
        let _permit = tokio::select! {
            permit = self.inner.in_flight.acquire() => permit.map_err(|_| Error::Closed)?,
            () = shared.cancelled_before_handover() => {
                return Err(crate::backend::cancelled_before_sent(request.key.clone()));
            }
        };
        if let Some(journal) = self.inner.journal.as_ref() {
            let max_frame_size = self.inner.config.max_frame_size;
            // Boxed: only journaled calls pay for these futures' size.
            return Box::pin(self.run_journaled(journal, request, max_frame_size)).await;
        }
        self.inner.backend.invoke(request).await
    }

    /// A journaled call: prepared before it is sent, and stopped if a
    /// shared journal gives it to another worker while this one drives it
    /// (this worker froze past its lease); the new owner finishes it.
    async fn run_journaled(
        &self,
        journal: &JournalHandle,
        mut request: Box<CallRequest>,
        max_frame_size: usize,
    ) -> Outcome {
        let _driving = match journal.prepare_call(&mut request, max_frame_size).await? {
            Ok(driving) => driving,
            Err(answer) => {
                request.shared.set_answered(Answered::Journal);
                return answer;
            }
        };
        let key = request.key.clone();
        let shared = request.shared.clone();
        tokio::select! {
            outcome = self.inner.backend.invoke(request) => outcome,
            () = journal.fenced(&key) => {
                shared.abandon();
                self.inner.backend.abandon(key.clone(), shared);
                Err(journal.fenced_error(&key))
            }
        }
    }
}

/// Another caller of this key ran alongside, up to the moment this one is
/// answered: it may have run the tool.
fn with_shared_fate(
    outcome: Outcome,
    joined: bool,
    key: &IdempotencyKey,
    shared: &CallShared,
) -> Outcome {
    match outcome {
        Err(e) if joined => Err(shared_fate(e, key, shared.job_id())),
        outcome => outcome,
    }
}

/// A call that ran nothing says "did not run" only for a key generated for
/// it; a supplied key may belong to an
/// earlier call that ran: "not sent" ([`not_sent`]).
fn with_key_origin(outcome: Outcome, supplied: bool, key: &IdempotencyKey) -> Outcome {
    // The caller may need the key to retry or look the call up (a journal
    // that may have recorded it, another worker that drives it), a
    // generated one included.
    let outcome = outcome.map_err(|e| match e {
        Error::Journal(mut e) => {
            e.key.get_or_insert_with(|| key.clone());
            Error::Journal(e)
        }
        e => e,
    });
    match outcome {
        Err(e) if supplied => Err(not_sent(e, key)),
        outcome => outcome,
    }
}

/// How long past its deadline a call that did not run waits for the journal
/// to record that durably (else it says it may have run).
const DURABLE_GRACE: Duration = Duration::from_millis(50);

/// A caller's place among the callers of its key in flight; leaves when
/// dropped (however the call ends, or if its future is dropped).
struct KeyFateGuard<'a> {
    /// `None` once left.
    fate: Option<Arc<KeyFate>>,
    live: &'a LiveKeys,
    key: IdempotencyKey,
}

impl<'a> KeyFateGuard<'a> {
    fn join(live: &'a LiveKeys, key: &IdempotencyKey) -> Self {
        KeyFateGuard {
            fate: Some(live.join(key)),
            live,
            key: key.clone(),
        }
    }

    /// Whether another caller of the key was in flight alongside so far.
    fn is_shared(&self) -> bool {
        self.fate.as_ref().is_some_and(|fate| fate.is_shared())
    }

    /// Leaves the key's callers; whether another one was in flight
    /// alongside at any time until now.
    fn leave(mut self) -> bool {
        self.fate
            .take()
            .is_some_and(|fate| self.live.leave(&self.key, &fate))
    }
}

impl Drop for KeyFateGuard<'_> {
    fn drop(&mut self) {
        if let Some(fate) = self.fate.take() {
            self.live.leave(&self.key, &fate);
        }
    }
}

/// Tells the backend a caller gave up (deadline, or a dropped future), so
/// it forgets the call once nobody waits on it.
struct AbandonOnDrop<'a> {
    client: &'a Client,
    key: IdempotencyKey,
    shared: Arc<CallShared>,
    armed: bool,
}

impl Drop for AbandonOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.shared.abandon();
            self.client
                .inner
                .backend
                .abandon(self.key.clone(), self.shared.clone());
            // Nobody drives the call here any more: it stays unfinished,
            // and a shared journal lets another worker claim it at once.
            if let Some(journal) = self.client.inner.journal.as_ref() {
                journal.release(&self.key);
            }
        }
    }
}
