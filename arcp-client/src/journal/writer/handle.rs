//! What the client holds: the handle to its writer (prepare, finish, lookups,
//! recovery, close), the connection task's recorder, and the guard of a
//! call driven here.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime};

use arcp_types::IdempotencyKey;
use tokio::sync::{oneshot, watch, Notify};
use tracing::{debug, info, warn};

use super::expiry::send_time_left;
use super::queue::{Claimed, DriveGuard, Prepared, Queue, Request, Shared};
use super::state::Writer;
use super::CLOSE_TIMEOUT;
use crate::cache::Outcome;
use crate::error::{Error, Execution};
use crate::journal::{
    ClaimPosition, Journal, JournalEntry, JournalError, JournalErrorKind, JournalOutcome,
    JournalState, RecoveryMode, Redaction, Retention,
};
use crate::request::{CallRecorder, CallRequest};
use crate::sync::lock;

/// The connection task's hook: records `sent` and `accepted` without
/// blocking (a short lock, a map insert, a wake-up).
#[derive(Clone)]
pub(crate) struct Recorder(Arc<Shared>);

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Recorder").field(&self.0.location).finish()
    }
}

impl CallRecorder for Recorder {
    /// An attempt of the call was handed to the transport.
    fn sent(&self, key: &IdempotencyKey, attempts: u32) {
        let at = SystemTime::now();
        self.0.note(key, |p| {
            let n = p.sent.map_or(attempts, |(n, _)| n.max(attempts));
            p.sent = Some((n, at));
        });
    }

    /// The runtime bound the call to `job_id`.
    fn accepted(&self, key: &IdempotencyKey, job_id: &str) {
        let at = SystemTime::now();
        self.0
            .note(key, |p| p.accepted = Some((job_id.to_owned(), at)));
    }
}

/// A client's journal: the queue to its writer thread. Dropping the last
/// handle lets the writer drain its queue and close the journal.
pub(crate) struct JournalHandle {
    pub(super) shared: Arc<Shared>,
    pub(super) recovery: RecoveryMode,
    /// The application's hook applied to what is recorded (never to what
    /// is sent).
    pub(super) redaction: Option<Redaction>,
}

impl fmt::Debug for JournalHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JournalHandle")
            .field("location", &self.shared.location)
            .finish_non_exhaustive()
    }
}

impl Drop for JournalHandle {
    fn drop(&mut self) {
        lock(&self.shared.queue).closing = true;
        self.shared.wake.notify_one();
    }
}

impl JournalHandle {
    pub(super) async fn start(
        journal: Box<dyn Journal>,
        retention: Retention,
        recovery: RecoveryMode,
        runtime_key_retention: Duration,
        max_in_flight: usize,
        redaction: Option<Redaction>,
    ) -> Result<JournalHandle, Error> {
        let location = journal.location();
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            space: Notify::new(),
            location: location.clone(),
            capacity: max_in_flight.saturating_mul(4).max(1024),
            fenced: Mutex::new(HashSet::new()),
            driving: Mutex::new(HashMap::new()),
            fence: watch::Sender::new(0),
            lease: watch::Sender::new(None),
            runtime_key_retention,
        });
        let (ready_tx, ready_rx) = oneshot::channel();
        let writer = Writer {
            journal: Some(journal),
            shared: shared.clone(),
            retention,
            records: 0,
            retry_delay: None,
            unavailable_since: None,
            unsure: HashSet::new(),
            landing: HashMap::new(),
            late_writes: Default::default(),
            runtime_key_retention,
        };
        std::thread::Builder::new()
            .name("arcp-journal".into())
            .spawn(move || writer.run(ready_tx))
            .map_err(|e| {
                Error::Journal(JournalError::new(
                    JournalErrorKind::Io,
                    &location,
                    format!("could not start the journal writer thread: {e}"),
                ))
            })?;
        let report = ready_rx
            .await
            .map_err(|_| Error::Internal("the journal writer stopped at start-up".into()))?
            .map_err(Error::Journal)?;
        info!(
            journal = %location,
            records = report.remaining,
            unfinished = report.unfinished,
            "journal open"
        );
        Ok(JournalHandle {
            shared,
            recovery,
            redaction,
        })
    }

    /// Whether the client re-drives unfinished calls on connect.
    pub(crate) fn recovery(&self) -> RecoveryMode {
        self.recovery
    }

    /// Prepare-before-send: records the call durably, or answers it from the
    /// journal. `Ok(Ok(guard))`: send it (the request now carries a
    /// recorder), holding `guard` until the call ends (while it lives,
    /// `recover` does not hand the call out again); `Ok(Err(outcome))`: the
    /// journal answered (a key that already ended with this intent, or a
    /// key recorded with another intent).
    pub(crate) async fn prepare_call(
        &self,
        request: &mut CallRequest,
        max_frame_size: usize,
    ) -> Result<Result<DriveGuard, Outcome>, Error> {
        // A store may not hold a NUL in text (PostgreSQL refuses it, and
        // would refuse the whole batch with it): the caller's mistake, told
        // before anything is recorded or sent. Keys are printable ASCII, and
        // the intent is JSON, which escapes it.
        if request.invoke.tool.contains('\0') {
            return Err(Error::invalid_call(format!(
                "the tool name {:?} contains a NUL character, which the journal cannot record",
                request.invoke.tool
            )));
        }
        // The intent exactly as the transport will send it.
        request.seal();
        let intent = serde_json::to_string(&request.invoke)
            .map_err(|e| Error::invalid_call(format!("the arguments do not serialize: {e}")))?;
        if intent.len() > max_frame_size {
            return Err(Error::invalid_call(format!(
                "the request is {} bytes; the frame size limit is {max_frame_size}",
                intent.len()
            )));
        }
        // What is recorded: the hook's version of the arguments, if it
        // changed them (what is sent stays `request.invoke`).
        let intent = match &self.redaction {
            Some(redaction) => redaction.apply(&request.invoke, &intent)?.unwrap_or(intent),
            None => intent,
        };
        let now = SystemTime::now();
        let entry = JournalEntry {
            key: request.key.clone(),
            tool: request.invoke.tool.clone(),
            intent,
            trace_id: request.trace_id.to_string(),
            deadline: request.deadline,
            state: JournalState::Prepared,
            attempts: 0,
            created_at: now,
            updated_at: now,
        };
        let (tx, rx) = oneshot::channel();
        {
            let mut q = lock(&self.shared.queue);
            if q.stopped {
                return Err(Error::Journal(self.shared.closed_error()));
            }
            q.prepares.push((entry, tx));
            self.shared.wake_writer(q, None);
        }
        let decision = rx
            .await
            .map_err(|_| Error::Journal(self.shared.closed_error()))?
            .map_err(Error::Journal)?;
        match decision {
            Prepared::Proceed(prior) => {
                request.shared.mark_recorded();
                // No send of the key once the runtime may have forgotten
                // it: its record's first prepare plus the retention.
                let first = prior.first_prepared.unwrap_or(now);
                let left =
                    send_time_left(first, self.shared.runtime_key_retention, SystemTime::now());
                request.shared.set_send_limit(
                    crate::retry::saturating_deadline(std::time::Instant::now(), left),
                    self.shared.runtime_key_retention,
                );
                if prior.in_doubt {
                    // An earlier attempt may have run it: whatever happens
                    // now, this call cannot say "did not run".
                    request.in_doubt = true;
                    request.shared.mark_sent();
                }
                if let Some(job) = prior.job_id {
                    request.shared.set_job(&Arc::from(job.as_str()));
                    request.prior_job = Some(job);
                }
                Ok(Ok(self.drive(request)))
            }
            Prepared::Answer(existing) => {
                debug!(key = %existing.key, "answered from the journal");
                match existing.outcome() {
                    Some(outcome) => Ok(Err(crate::cache::replayed(outcome))),
                    // An answer is terminal, so this is not reached: send.
                    None => Ok(Ok(self.drive(request))),
                }
            }
            Prepared::Conflict(existing) => {
                // This call sends nothing, and the record proves no binding
                // the runtime still holds: it may have forgotten the key,
                // and the recorded answer may be a replay of an earlier send
                // (of unknown date, not always marked); another client may
                // have run this intent under the key since. Only the
                // runtime's refusal proves "did not run".
                Ok(Err(Err(Error::DuplicateKey {
                    key: existing.key,
                    message: format!(
                        "the journal records this key for a different intent (tool {:?}, \
                         prepared {:?} ago)",
                        existing.tool,
                        now.duration_since(existing.created_at).unwrap_or_default()
                    ),
                    attempts: 0,
                    execution: Execution::NotSent,
                })))
            }
        }
    }

    /// The call will be sent: attach the recorder and count it as driven.
    pub(super) fn drive(&self, request: &mut CallRequest) -> DriveGuard {
        request.recorder = Some(Box::new(Recorder(self.shared.clone())));
        let guard = DriveGuard::new(&self.shared, &request.key);
        // Driven from here: a recovered call's claim is held no longer
        // (after the count above, so that it never drops to zero between).
        request.claim = None;
        guard
    }

    /// Records a call's outcome when it is terminal. An unknown outcome
    /// (`OutcomeUnavailable`, `DeadlineExceeded`, ...) leaves the record
    /// unfinished, for a later recovery.
    ///
    /// A call that did not run is answered so only once the record saying
    /// so is durable: until then a recovery could still send it, after its
    /// caller re-issued the work under another key. So for such an outcome
    /// this waits for the commit, until `durable_by`, and returns why the
    /// record is not durable (an I/O error, the call fenced, the time up).
    /// Other outcomes return at once (a recovery of a call that ran is
    /// deduplicated by the runtime).
    pub(crate) async fn finish_call(
        &self,
        key: &IdempotencyKey,
        result: &Outcome,
        key_unused: bool,
        durable_by: tokio::time::Instant,
    ) -> Result<(), JournalError> {
        let Some(outcome) = JournalOutcome::from_result(result, key_unused) else {
            debug!(%key, "outcome unknown; the journal keeps the call for recovery");
            self.release(key);
            return Ok(());
        };
        let must_be_durable = result
            .as_ref()
            .is_err_and(|e| e.execution() == Execution::NotRun);
        let at = SystemTime::now();
        let mut outcome = Some(outcome);
        let durable = loop {
            let notified = self.shared.space.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut q = lock(&self.shared.queue);
                if q.stopped {
                    warn!(%key, "the journal is closed; the outcome was not recorded (a recovery would re-drive the call, and the runtime deduplicates it)");
                    return Err(self.shared.closed_error());
                }
                if q.transitions.len() < self.shared.capacity || q.transitions.contains_key(key) {
                    let p = q.transitions.entry(key.clone()).or_default();
                    // The key's outcome, queued by a call that ran, is never
                    // replaced by another caller's end that is not one.
                    let keeps_queued = p
                        .terminal
                        .as_ref()
                        .is_some_and(|(queued, _)| queued.answers_repeat())
                        && !outcome.as_ref().is_some_and(JournalOutcome::answers_repeat);
                    if keeps_queued {
                        // That call ran: this one cannot be recorded as
                        // "did not run".
                        if must_be_durable {
                            return Err(self.not_durable(
                                key,
                                "an earlier call with this key ran, and its outcome is the key's",
                            ));
                        }
                        break None;
                    }
                    p.terminal = outcome.take().map(|o| (o, at));
                    let durable = must_be_durable.then(|| {
                        let (tx, rx) = oneshot::channel();
                        q.durable.push((key.clone(), tx));
                        rx
                    });
                    self.shared.wake_writer(q, None);
                    break durable;
                }
            }
            if tokio::time::timeout_at(durable_by, notified).await.is_err() {
                return Err(self.not_durable(key, "the journal's queue stayed full"));
            }
        };
        let Some(durable) = durable else {
            return Ok(());
        };
        match tokio::time::timeout_at(durable_by, durable).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(self.shared.closed_error()),
            Err(_) => Err(self.not_durable(key, "the commit did not complete in time")),
        }
    }

    pub(super) fn not_durable(&self, key: &IdempotencyKey, why: &str) -> JournalError {
        JournalError::new(
            JournalErrorKind::Io,
            &self.shared.location,
            format!("call {key}: its outcome was not recorded durably: {why}"),
        )
    }

    /// This client stopped driving `key` without an outcome: the record
    /// stays unfinished and a shared journal lets any worker claim it. Never
    /// waits (callable from `Drop`).
    pub(crate) fn release(&self, key: &IdempotencyKey) {
        self.shared.note(key, |p| p.released = true);
    }

    /// Resolves once another worker owns `key` (this client lost it): its
    /// driver here must stop. Pending forever for a journal without owners.
    ///
    /// Also resolves when this client's leases lapse without a renewal (a
    /// database that does not answer): then another worker may claim the
    /// call, so this one stops first.
    pub(crate) async fn fenced(&self, key: &IdempotencyKey) {
        let mut changes = self.shared.fence.subscribe();
        let mut lease = self.shared.lease.subscribe();
        loop {
            if lock(&self.shared.fenced).contains(key) {
                return;
            }
            let lapses_at = *lease.borrow_and_update();
            let lapse = async {
                match lapses_at {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = changes.changed() => if changed.is_err() {
                    // The sender lives in `shared`, which `self` holds.
                    std::future::pending::<()>().await;
                },
                // Renewed meanwhile: wait for the new instant.
                _ = lease.changed() => {}
                () = lapse => {
                    if *lease.borrow() == lapses_at {
                        warn!(
                            journal = %self.shared.location,
                            %key,
                            "no lease renewal succeeded in time: this worker stops driving the \
                             call before another may claim it"
                        );
                        return;
                    }
                }
            }
        }
    }

    /// The error a fenced call ends with.
    pub(crate) fn fenced_error(&self, key: &IdempotencyKey) -> Error {
        Error::Journal(JournalError::new(
            JournalErrorKind::Fenced,
            &self.shared.location,
            format!(
                "call {key}: another worker claimed it (this worker lost its lease); the owner \
                 finishes it and the runtime deduplicates the key"
            ),
        ))
    }

    /// The record of `key`, including everything recorded before this call.
    pub(crate) async fn lookup(&self, key: &IdempotencyKey) -> Result<Option<JournalEntry>, Error> {
        let (tx, rx) = oneshot::channel();
        self.shared
            .request(Request::Get(key.clone(), tx))
            .map_err(Error::Journal)?;
        self.answer(rx).await
    }

    /// Every unfinished record, oldest first.
    pub(crate) async fn unfinished(&self, after: Option<ClaimPosition>) -> Result<Claimed, Error> {
        let (tx, rx) = oneshot::channel();
        self.shared
            .request(Request::Unfinished(after, tx))
            .map_err(Error::Journal)?;
        self.answer(rx).await
    }

    /// Deletes the record of `key`; whether there was one.
    pub(crate) async fn discard(&self, key: &IdempotencyKey) -> Result<bool, Error> {
        let (tx, rx) = oneshot::channel();
        self.shared
            .request(Request::Discard(key.clone(), tx))
            .map_err(Error::Journal)?;
        self.answer(rx).await
    }

    /// Commits everything queued, then closes the journal (releasing its
    /// file). Later journal operations fail with `JOURNAL_CLOSED`. Waits at
    /// most [`CLOSE_TIMEOUT`]: a store that hangs (a database link that
    /// went silent) does not hang the client's `close()`; the writer then
    /// finishes on its own, and whatever it could not commit stays
    /// unfinished for a recovery.
    pub(crate) async fn close(&self) {
        let (tx, rx) = oneshot::channel();
        if self.shared.request(Request::Close(tx)).is_ok()
            && tokio::time::timeout(CLOSE_TIMEOUT, rx).await.is_err()
        {
            warn!(
                journal = %self.shared.location,
                timeout = ?CLOSE_TIMEOUT,
                "the journal did not close in time; the client closes without waiting for it"
            );
        }
    }

    pub(super) async fn answer<T>(
        &self,
        rx: oneshot::Receiver<Result<T, JournalError>>,
    ) -> Result<T, Error> {
        rx.await
            .map_err(|_| Error::Journal(self.shared.closed_error()))?
            .map_err(Error::Journal)
    }
}
