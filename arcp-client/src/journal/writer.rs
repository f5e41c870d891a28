//! The client's side of the journal: one writer thread per client owns the
//! [`Journal`], so no journal I/O ever runs on an async task.
//!
//! - `prepare` (before the first send) is queued and **awaited**: the call is
//!   handed to the connection task only once its record is committed.
//!   Prepares that queue up while a commit is in progress are committed
//!   together (group commit: one `fsync` for a burst of calls).
//! - `sent` and `accepted` come from the connection task through a
//!   [`Recorder`]: a short lock and a map insert, never a wait. They are
//!   merged per key (latest wins), so their memory is bounded by the calls
//!   in flight, and committed with the next batch.
//! - `terminal` is queued by the caller's task after the outcome arrives;
//!   it waits only when the writer is far behind (bounded memory).
//! - lookups, listings and removals are queued behind the writes, so they
//!   read what was recorded before them.
//! - with a shared journal (leases), the writer renews this client's leases
//!   every [`Journal::lease_interval`], and tells the calls it lost
//!   (claimed by another worker while this one was silent, or refused by
//!   the store) to stop: they end with `JOURNAL_FENCED`.

use std::collections::{HashMap, HashSet};
use std::fmt;
#[cfg(feature = "sqlite")]
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use arcp_types::IdempotencyKey;
use tokio::sync::{oneshot, watch, Notify};
use tracing::{debug, info, warn};

use super::memory::transition;
#[cfg(feature = "sqlite")]
use super::SqliteJournal;
use super::{
    to_millis, Journal, JournalEntry, JournalError, JournalErrorKind, JournalOutcome, JournalState,
    JournalWrite, PurgeReport, RecoveryMode, Retention,
};
use crate::cache::Outcome;
use crate::error::{Error, Execution};
use crate::request::{CallRecorder, CallRequest};

/// The journal settings of a `ClientBuilder`.
#[derive(Clone, Default)]
pub(crate) struct JournalSetup {
    source: Option<Source>,
    retention: Retention,
    recovery: RecoveryMode,
}

#[derive(Clone)]
enum Source {
    #[cfg(feature = "sqlite")]
    Path(PathBuf),
    /// Taken by the first `connect`: one journal serves one client.
    Instance(Arc<Mutex<Option<Box<dyn Journal>>>>),
}

impl fmt::Debug for JournalSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            None => "none".to_owned(),
            #[cfg(feature = "sqlite")]
            Some(Source::Path(p)) => format!("sqlite {}", p.display()),
            Some(Source::Instance(_)) => "custom".to_owned(),
        };
        f.debug_struct("JournalSetup")
            .field("source", &source)
            .field("retention", &self.retention)
            .field("recovery", &self.recovery)
            .finish()
    }
}

impl JournalSetup {
    pub(crate) fn set_journal(&mut self, journal: Box<dyn Journal>) {
        self.source = Some(Source::Instance(Arc::new(Mutex::new(Some(journal)))));
    }

    #[cfg(feature = "sqlite")]
    pub(crate) fn set_path(&mut self, path: PathBuf) {
        self.source = Some(Source::Path(path));
    }

    pub(crate) fn set_retention(&mut self, retention: Retention) {
        self.retention = retention;
    }

    pub(crate) fn set_recovery(&mut self, recovery: RecoveryMode) {
        self.recovery = recovery;
    }

    /// Opens the journal (if one is configured), applies the retention
    /// policy once and starts the writer thread. Fails with a typed
    /// [`Error::Journal`] on a corrupt, foreign or locked journal.
    pub(crate) async fn open(&self, max_in_flight: usize) -> Result<Option<JournalHandle>, Error> {
        let journal: Box<dyn Journal> = match &self.source {
            None => return Ok(None),
            #[cfg(feature = "sqlite")]
            Some(Source::Path(path)) => {
                let path = path.clone();
                let opened = tokio::task::spawn_blocking(move || SqliteJournal::open(&path))
                    .await
                    .map_err(|e| Error::Internal(format!("journal open task: {e}").into()))?;
                Box::new(opened.map_err(Error::Journal)?)
            }
            Some(Source::Instance(slot)) => lock(slot).take().ok_or_else(|| {
                Error::Journal(JournalError::new(
                    JournalErrorKind::Locked,
                    "journal",
                    "this journal instance already serves another client (a cloned builder \
                     was connected twice); give each client its own journal",
                ))
            })?,
        };
        let handle = JournalHandle::start(
            journal,
            self.retention.clone(),
            self.recovery,
            max_in_flight,
        )
        .await?;
        Ok(Some(handle))
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here only moves values in or out of plain
    // collections, so a poisoned lock still guards consistent data.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What `prepare` decided.
enum Prepared {
    /// Send the call: a new record, or a record with this intent that an
    /// earlier attempt (this process's or another's) may have sent.
    Proceed(Prior),
    /// The key already ended with this intent: the recorded outcome.
    Answer(JournalEntry),
    /// The key is recorded with a different intent.
    Conflict(JournalEntry),
}

enum Request {
    Get(
        IdempotencyKey,
        oneshot::Sender<Result<Option<JournalEntry>, JournalError>>,
    ),
    Unfinished(oneshot::Sender<Result<Vec<JournalEntry>, JournalError>>),
    Remove(IdempotencyKey, oneshot::Sender<Result<bool, JournalError>>),
    Close(oneshot::Sender<()>),
}

/// Transitions recorded for one key since the last commit.
#[derive(Default, Clone)]
struct Pending {
    sent: Option<(u32, SystemTime)>,
    accepted: Option<(String, SystemTime)>,
    terminal: Option<(JournalOutcome, SystemTime)>,
    /// The client stopped driving the call without an outcome.
    released: bool,
}

impl Pending {
    /// These transitions followed by `newer` ones, as one.
    fn then(self, newer: Pending) -> Pending {
        Pending {
            sent: match (self.sent, newer.sent) {
                (Some(a), Some(b)) => Some(if b.0 >= a.0 { b } else { a }),
                (a, b) => b.or(a),
            },
            released: newer.released || (self.released && newer.terminal.is_none()),
            accepted: newer.accepted.or(self.accepted),
            terminal: newer.terminal.or(self.terminal),
        }
    }

    /// The writes these transitions make. A terminal write carries the
    /// attempts and the job (every store takes the higher count and keeps
    /// a known job), so the sent and accepted marks of a call that ended
    /// since the last commit ride in it: one statement per call instead of
    /// three.
    fn writes(self, key: &IdempotencyKey) -> Vec<JournalWrite> {
        if let Some((outcome, at)) = self.terminal {
            return vec![JournalWrite::Terminal {
                key: key.clone(),
                outcome,
                at,
            }];
        }
        let mut out = Vec::with_capacity(3);
        if let Some((attempts, at)) = self.sent {
            out.push(JournalWrite::Sent {
                key: key.clone(),
                attempts,
                at,
            });
        }
        if let Some((job_id, at)) = self.accepted {
            out.push(JournalWrite::Accepted {
                key: key.clone(),
                job_id,
                at,
            });
        }
        if self.released {
            out.push(JournalWrite::Release { key: key.clone() });
        }
        out
    }
}

/// What the journal knew of a key before this call: whether an earlier
/// attempt may have sent it, and the job the runtime bound it to.
#[derive(Debug, Clone, Default, PartialEq)]
struct Prior {
    in_doubt: bool,
    job_id: Option<String>,
}

impl Prior {
    /// What `existing`, a record with this intent that is unfinished or
    /// ended with its outcome unknown, says of `entry`'s call: it may have
    /// run, unless it is this very call's own record, still only prepared
    /// (its prepare committed, though the store's answer was lost).
    fn of(existing: &JournalEntry, entry: &JournalEntry) -> Prior {
        // Stores keep times in milliseconds.
        let own = existing.trace_id == entry.trace_id
            && to_millis(existing.created_at) == to_millis(entry.created_at)
            && existing.state == JournalState::Prepared;
        Prior {
            in_doubt: !own,
            job_id: existing.job_id().map(str::to_owned),
        }
    }
}

type PrepareReply = oneshot::Sender<Result<Prepared, JournalError>>;

/// Told once a terminal write is durable, or why it is not.
type DurableReply = oneshot::Sender<Result<(), JournalError>>;

#[derive(Default)]
struct Queue {
    prepares: Vec<(JournalEntry, PrepareReply)>,
    transitions: HashMap<IdempotencyKey, Pending>,
    /// Callers waiting for their terminal write to be durable.
    durable: Vec<(IdempotencyKey, DurableReply)>,
    requests: Vec<Request>,
    /// Every handle is gone: drain and stop.
    closing: bool,
    /// The writer stopped; nothing is accepted any more.
    stopped: bool,
}

impl Queue {
    fn is_empty(&self) -> bool {
        self.prepares.is_empty() && self.transitions.is_empty() && self.requests.is_empty()
    }
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    /// Signalled after the writer takes a batch (room for transitions).
    space: Notify,
    location: String,
    /// Soft bound on keys with pending transitions.
    capacity: usize,
    /// Calls another worker owns now: their drivers here stop.
    fenced: Mutex<HashSet<IdempotencyKey>>,
    /// Calls this client drives right now (from prepare to outcome), with
    /// how many drivers each: `recover` never hands them out again.
    driving: Mutex<HashMap<IdempotencyKey, usize>>,
    /// Bumped when `fenced` grows (a watch: a driver that subscribed
    /// before checking `fenced` misses no change).
    fence: watch::Sender<u64>,
    /// When this client's authority over the calls it drives lapses unless
    /// a renewal succeeds first (`None`: it never lapses). Drivers stop at
    /// that instant on their own (`JournalHandle::fenced`), whatever the
    /// writer thread is blocked on.
    lease: watch::Sender<Option<Instant>>,
}

impl Shared {
    fn closed_error(&self) -> JournalError {
        JournalError::new(
            JournalErrorKind::Closed,
            &self.location,
            "the journal was closed with its client",
        )
    }

    /// Records a transition without waiting (the connection task's path).
    fn note(&self, key: &IdempotencyKey, f: impl FnOnce(&mut Pending)) {
        let mut q = lock(&self.queue);
        if q.stopped {
            return;
        }
        match q.transitions.get_mut(key) {
            Some(p) => f(p),
            None => {
                let mut p = Pending::default();
                f(&mut p);
                q.transitions.insert(key.clone(), p);
            }
        }
        drop(q);
        self.wake.notify_one();
    }

    /// Marks `keys` as owned elsewhere and wakes their drivers. Only keys a
    /// driver here drives are kept: the set holds nothing once they stop
    /// ([`Driving`]'s drop prunes it).
    fn fence(&self, keys: Vec<IdempotencyKey>) {
        let fenced = {
            // In the order `Driving::drop` takes them: a driver that stops
            // meanwhile prunes what this adds.
            let driving = lock(&self.driving);
            let keys: Vec<IdempotencyKey> = keys
                .into_iter()
                .filter(|k| driving.contains_key(k))
                .collect();
            let n = keys.len();
            lock(&self.fenced).extend(keys);
            n
        };
        if fenced == 0 {
            return;
        }
        warn!(
            journal = %self.location,
            calls = fenced,
            "another worker owns these calls now (this worker lost its lease); they stop here"
        );
        self.fence.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn request(&self, request: Request) -> Result<(), JournalError> {
        let mut q = lock(&self.queue);
        if q.stopped {
            return Err(self.closed_error());
        }
        q.requests.push(request);
        drop(q);
        self.wake.notify_one();
        Ok(())
    }
}

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
    shared: Arc<Shared>,
    recovery: RecoveryMode,
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
    async fn start(
        journal: Box<dyn Journal>,
        retention: Retention,
        recovery: RecoveryMode,
        max_in_flight: usize,
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
        Ok(JournalHandle { shared, recovery })
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
    ) -> Result<Result<Driving, Outcome>, Error> {
        // The intent exactly as the transport will send it.
        request.seal();
        let intent = serde_json::to_string(&request.invoke)
            .map_err(|e| Error::InvalidCall(format!("the arguments do not serialize: {e}")))?;
        if intent.len() > max_frame_size {
            return Err(Error::InvalidCall(format!(
                "the request is {} bytes; the frame size limit is {max_frame_size}",
                intent.len()
            )));
        }
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
        }
        self.shared.wake.notify_one();
        let decision = rx
            .await
            .map_err(|_| Error::Journal(self.shared.closed_error()))?
            .map_err(Error::Journal)?;
        match decision {
            Prepared::Proceed(prior) => {
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
            Prepared::Conflict(existing) => Ok(Err(Err(Error::DuplicateKey {
                key: existing.key,
                message: format!(
                    "the journal records this key for a different intent (tool {:?}, prepared \
                     {:?} ago)",
                    existing.tool,
                    now.duration_since(existing.created_at).unwrap_or_default()
                ),
                attempts: 0,
            }))),
        }
    }

    /// The call will be sent: attach the recorder and count it as driven.
    fn drive(&self, request: &mut CallRequest) -> Driving {
        request.recorder = Some(Box::new(Recorder(self.shared.clone())));
        *lock(&self.shared.driving)
            .entry(request.key.clone())
            .or_default() += 1;
        Driving {
            shared: self.shared.clone(),
            key: request.key.clone(),
        }
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
        durable_by: tokio::time::Instant,
    ) -> Result<(), JournalError> {
        let Some(outcome) = JournalOutcome::from_result(result) else {
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
                    p.terminal = outcome.take().map(|o| (o, at));
                    let durable = must_be_durable.then(|| {
                        let (tx, rx) = oneshot::channel();
                        q.durable.push((key.clone(), tx));
                        rx
                    });
                    drop(q);
                    self.shared.wake.notify_one();
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

    fn not_durable(&self, key: &IdempotencyKey, why: &str) -> JournalError {
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
    pub(crate) async fn unfinished(&self) -> Result<Vec<JournalEntry>, Error> {
        let (tx, rx) = oneshot::channel();
        self.shared
            .request(Request::Unfinished(tx))
            .map_err(Error::Journal)?;
        self.answer(rx).await
    }

    /// Deletes the record of `key`; whether there was one.
    pub(crate) async fn discard(&self, key: &IdempotencyKey) -> Result<bool, Error> {
        let (tx, rx) = oneshot::channel();
        self.shared
            .request(Request::Remove(key.clone(), tx))
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

    async fn answer<T>(&self, rx: oneshot::Receiver<Result<T, JournalError>>) -> Result<T, Error> {
        rx.await
            .map_err(|_| Error::Journal(self.shared.closed_error()))?
            .map_err(Error::Journal)
    }
}

/// A call this client drives: while it lives, `recover` does not hand the
/// call out again (dropped when the call ends, however it ends).
pub(crate) struct Driving {
    shared: Arc<Shared>,
    key: IdempotencyKey,
}

impl Drop for Driving {
    fn drop(&mut self) {
        let mut driving = lock(&self.shared.driving);
        if let Some(n) = driving.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                driving.remove(&self.key);
                // Nobody here drives it any more: its fence stops nothing.
                lock(&self.shared.fenced).remove(&self.key);
            }
        }
    }
}

/// The first wait before retrying a batch the store could not take, and
/// the longest (the wait doubles in between).
const RETRY_FIRST: Duration = Duration::from_millis(20);
const RETRY_MAX: Duration = Duration::from_millis(500);

/// The most unfinished calls one `Client::recover` claims.
pub(crate) const RECOVER_BATCH: usize = 256;

/// How long `Client::close` waits for the journal to commit and close.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long transitions alone wait for a prepare to share its commit.
const TRANSITION_LINGER: Duration = Duration::from_millis(5);

/// The writer thread's state.
struct Writer {
    /// `None` once closed.
    journal: Option<Box<dyn Journal>>,
    shared: Arc<Shared>,
    retention: Retention,
    /// Records in the journal (from the last purge, plus inserts since).
    records: u64,
    /// Set while the store is unavailable: how long to wait before the
    /// next try.
    retry_delay: Option<Duration>,
    /// Since when the store has been unavailable.
    unavailable_since: Option<Instant>,
    /// Keys whose prepare was in a commit whose fate is unknown (the store
    /// did not answer): their record may land late, so a "did not run"
    /// terminal for them is never taken as durable. Pruned when the key's
    /// prepare commits, or its call ends (terminal or release).
    unsure: HashSet<IdempotencyKey>,
}

impl Drop for Writer {
    /// However the writer ends (even by a panic in a `Journal`
    /// implementation), nothing waits on it forever: queued work is
    /// dropped, which fails each waiter with `JOURNAL_CLOSED`.
    fn drop(&mut self) {
        let leftover = {
            let mut q = lock(&self.shared.queue);
            let leftover = std::mem::take(&mut *q);
            q.stopped = true;
            q.closing = true;
            leftover
        };
        drop(leftover);
        self.shared.space.notify_waiters();
    }
}

/// One batch taken from the queue.
struct Batch {
    prepares: Vec<(JournalEntry, PrepareReply)>,
    transitions: HashMap<IdempotencyKey, Pending>,
    durable: Vec<(IdempotencyKey, DurableReply)>,
    requests: Vec<Request>,
}

impl Writer {
    fn run(mut self, ready: oneshot::Sender<Result<PurgeReport, JournalError>>) {
        match self.purge() {
            Ok(report) => {
                if ready.send(Ok(report)).is_err() {
                    return;
                }
            }
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        }
        let mut next_purge = Instant::now() + self.retention.purge_interval;
        // Nothing is held yet: the first lease runs from now.
        if let Some(journal) = self.journal.as_deref() {
            extend_lease(&self.shared, journal, Instant::now());
        }
        let lease_interval = self.journal.as_deref().and_then(|j| j.lease_interval());
        let mut next_renew = lease_interval.map(|every| Instant::now() + every);
        loop {
            let (batch, closing) = {
                let mut q = lock(&self.shared.queue);
                loop {
                    if !q.is_empty() || q.closing {
                        break;
                    }
                    let now = Instant::now();
                    let wake_at = next_renew.map_or(next_purge, |r| r.min(next_purge));
                    if now >= wake_at {
                        break;
                    }
                    q = self
                        .shared
                        .wake
                        .wait_timeout(q, wake_at - now)
                        .map(|(g, _)| g)
                        .unwrap_or_else(|e| e.into_inner().0);
                }
                // Only transitions queued: nobody waits for them, so let
                // them ride on the next commit a prepare needs anyway (one
                // fsync for both) if one comes soon.
                let linger_until = Instant::now() + TRANSITION_LINGER;
                while q.prepares.is_empty() && q.requests.is_empty() && !q.closing {
                    let now = Instant::now();
                    if now >= linger_until {
                        break;
                    }
                    q = self
                        .shared
                        .wake
                        .wait_timeout(q, linger_until - now)
                        .map(|(g, _)| g)
                        .unwrap_or_else(|e| e.into_inner().0);
                }
                let batch = Batch {
                    prepares: std::mem::take(&mut q.prepares),
                    transitions: std::mem::take(&mut q.transitions),
                    durable: std::mem::take(&mut q.durable),
                    requests: std::mem::take(&mut q.requests),
                };
                if q.closing && batch.prepares.is_empty() && batch.transitions.is_empty() {
                    q.stopped = true;
                }
                (batch, q.stopped)
            };
            self.shared.space.notify_waiters();
            let close_waiters = self.process(batch);
            if !close_waiters.is_empty() || closing {
                self.stop();
                for waiter in close_waiters {
                    let _ = waiter.send(());
                }
                return;
            }
            if let (Some(every), Some(at)) = (lease_interval, next_renew) {
                if Instant::now() >= at {
                    self.renew();
                    next_renew = Some(Instant::now() + every);
                }
            }
            if let Some(delay) = self.retry_delay {
                self.back_off(delay);
            }
            if Instant::now() >= next_purge {
                if let Err(e) = self.purge() {
                    warn!(error = %e, "journal purge failed; retrying at the next interval");
                }
                next_purge = Instant::now() + self.retention.purge_interval;
            }
        }
    }

    /// Waits `delay` before retrying a batch the store could not take
    /// (closing too: a store that refuses connections at once would make
    /// the drain a busy loop).
    fn back_off(&self, delay: Duration) {
        let until = Instant::now() + delay;
        let mut q = lock(&self.shared.queue);
        while !q.stopped {
            let now = Instant::now();
            if now >= until {
                break;
            }
            q = self
                .shared
                .wake
                .wait_timeout(q, until - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// Closes the journal and fails whatever is still queued.
    fn stop(&mut self) {
        let leftover = {
            let mut q = lock(&self.shared.queue);
            q.stopped = true;
            Batch {
                prepares: std::mem::take(&mut q.prepares),
                transitions: std::mem::take(&mut q.transitions),
                durable: std::mem::take(&mut q.durable),
                requests: std::mem::take(&mut q.requests),
            }
        };
        // Commit what can still be committed before letting go of the file.
        let waiters = self.process(leftover);
        self.journal = None;
        for waiter in waiters {
            let _ = waiter.send(());
        }
        self.shared.space.notify_waiters();
        debug!(journal = %self.shared.location, "journal closed");
    }

    /// Commits one batch and answers its requests. Returns the waiters of
    /// a requested close (answered once the journal is closed).
    fn process(&mut self, batch: Batch) -> Vec<oneshot::Sender<()>> {
        let Some(journal) = self.journal.take() else {
            let err = self.shared.closed_error();
            for (_, reply) in batch.prepares {
                let _ = reply.send(Err(err.clone()));
            }
            for (_, reply) in batch.durable {
                let _ = reply.send(Err(err.clone()));
            }
            answer_closed(batch.requests, &err);
            return Vec::new();
        };
        let waiters = self.process_with(journal.as_ref(), batch);
        self.journal = Some(journal);
        waiters
    }

    /// One batch, in named steps: drop the prepares nobody waits for,
    /// [`commit`](Self::commit) (merge transitions, decide prepares, one
    /// transaction), then [`answer`](Self::answer) the waiters, or
    /// [`requeue`](Self::requeue) the batch when the store is unavailable;
    /// then serve the requests.
    fn process_with(&mut self, journal: &dyn Journal, batch: Batch) -> Vec<oneshot::Sender<()>> {
        let Batch {
            prepares,
            transitions,
            durable,
            requests,
        } = batch;
        // A prepare whose caller stopped waiting is not written: nobody
        // would send it, and its caller may have been told it did not run
        // (that record comes in a later batch, and must find no prepare
        // after it).
        let prepares: Vec<(JournalEntry, PrepareReply)> = prepares
            .into_iter()
            .filter(|(_, reply)| !reply.is_closed())
            .collect();
        match self.commit(journal, &prepares, &transitions) {
            Ok(committed) => {
                self.retry_delay = None;
                self.unavailable_since = None;
                // The store answers again after this client's leases lapsed
                // (its drivers stopped): renew now, so the calls prepared
                // here are driven instead of stopping at once.
                if self.lease_lapsed() {
                    self.renew_on(journal);
                }
                self.answer(committed, prepares, durable);
            }
            Err(unavailable) => self.requeue(unavailable, prepares, transitions, durable),
        }
        self.serve(journal, requests)
    }

    /// Decides every prepare of the batch against its record as it will be
    /// after the batch's transitions, and commits the transitions and the
    /// new records in one transaction. `Err`: the store was unavailable
    /// before anything of the batch committed; the batch is to be retried
    /// whole.
    fn commit(
        &mut self,
        journal: &dyn Journal,
        prepares: &[(JournalEntry, PrepareReply)],
        transitions: &HashMap<IdempotencyKey, Pending>,
    ) -> Result<Committed, JournalError> {
        let unavailable = |e: &JournalError| e.kind == JournalErrorKind::Unavailable;
        // A call prepared again in this batch is being driven again: its
        // queued release (from an earlier attempt) must not give it away.
        let preparing: HashSet<&IdempotencyKey> = prepares.iter().map(|(e, _)| &e.key).collect();
        let mut transition_writes: Vec<JournalWrite> = Vec::new();
        // Terminals whose "did not run" cannot be taken as durable.
        let mut doubtful: HashSet<IdempotencyKey> = HashSet::new();
        {
            // A key another caller here still drives keeps its record: one
            // caller's "did not run" or release must not end or give away
            // the call the other drives.
            let driving = lock(&self.shared.driving);
            for (key, p) in transitions {
                let driven = driving.contains_key(key);
                for w in pending_writes(key, p) {
                    match &w {
                        JournalWrite::Release { .. } => {
                            self.unsure.remove(key);
                            if preparing.contains(key) || driven {
                                continue;
                            }
                        }
                        JournalWrite::Terminal { outcome, .. } => {
                            let unsure = self.unsure.remove(key);
                            if !outcome.answers_repeat() {
                                if driven {
                                    doubtful.insert(key.clone());
                                    continue;
                                }
                                if unsure {
                                    doubtful.insert(key.clone());
                                }
                            }
                        }
                        _ => {}
                    }
                    transition_writes.push(w);
                }
            }
        }
        // The stored records of every key prepared in this batch, in one read.
        let fetched: HashMap<IdempotencyKey, JournalEntry> = {
            let mut keys: Vec<IdempotencyKey> =
                prepares.iter().map(|(e, _)| e.key.clone()).collect();
            keys.sort_unstable();
            keys.dedup();
            if keys.is_empty() {
                HashMap::new()
            } else {
                match journal.get_many(&keys) {
                    Ok(found) => found.into_iter().map(|e| (e.key.clone(), e)).collect(),
                    Err(e) if unavailable(&e) => return Err(e),
                    Err(e) => {
                        // Every prepare fails with the store's error; the
                        // transitions still commit.
                        let result = journal.apply(&transition_writes);
                        return Ok(Committed {
                            decisions: prepares.iter().map(|_| (Err(e.clone()), false)).collect(),
                            transitions: result.clone(),
                            result,
                            refused: journal.take_fenced().into_iter().collect(),
                            doubtful,
                        });
                    }
                }
            }
        };
        // Each key's record as this batch leaves it, decision by decision.
        let mut view: HashMap<IdempotencyKey, Option<JournalEntry>> = HashMap::new();
        let mut decisions = Vec::with_capacity(prepares.len());
        let mut inserts: Vec<JournalWrite> = Vec::new();
        let mut created = 0u64;
        let mut purged_for_room = false;
        let mut transitions_apart: Option<Result<(), JournalError>> = None;
        for (entry, _) in prepares {
            let current = match view.get(&entry.key) {
                Some(current) => current.clone(),
                None => {
                    let mut current = fetched.get(&entry.key).cloned();
                    if let (Some(e), Some(p)) = (current.as_mut(), transitions.get(&entry.key)) {
                        for w in pending_writes(&entry.key, p) {
                            transition(e, &w);
                        }
                    }
                    current
                }
            };
            let (decision, written) = match self.decide(journal, entry, current.as_ref()) {
                Ok(decided) => decided,
                Err(e) if unavailable(&e) => return Err(e),
                Err(e) => {
                    decisions.push((Err(e), false));
                    continue;
                }
            };
            if written.is_some() && current.is_none() {
                let max = self.retention.max_records as u64;
                if self.records + created >= max && !purged_for_room {
                    purged_for_room = true;
                    // Terminal outcomes still queued make their records
                    // evictable: commit them first.
                    if !transition_writes.is_empty() {
                        match journal.apply(&transition_writes) {
                            Ok(()) => {
                                transition_writes.clear();
                                transitions_apart = Some(Ok(()));
                            }
                            Err(e) => warn!(error = %e, "journal commit failed"),
                        }
                    }
                    self.make_room(journal);
                }
                if self.records + created >= max {
                    let err = JournalError::new(
                        JournalErrorKind::Full,
                        &self.shared.location,
                        format!(
                            "{} records and at most {max} allowed, all unfinished or too recent \
                             to evict: recover() or discard() unfinished calls, or raise \
                             Retention::max_records",
                            self.records + created
                        ),
                    );
                    decisions.push((Err(err), false));
                    continue;
                }
                created += 1;
            }
            match written {
                Some(record) => {
                    view.insert(entry.key.clone(), Some(record.clone()));
                    inserts.push(JournalWrite::Prepare(record));
                    decisions.push((Ok(decision), true));
                }
                None => {
                    view.insert(entry.key.clone(), current);
                    decisions.push((Ok(decision), false));
                }
            }
        }
        // One transaction: transitions first (a replacing prepare wins).
        let transition_count = transition_writes.len();
        let mut writes = transition_writes;
        writes.extend(inserts);
        let result = journal.apply(&writes);
        match &result {
            // Nothing of the transaction committed: retry it whole, except
            // transitions that committed apart.
            Err(e) if unavailable(e) && transitions_apart.is_none() => return Err(e.clone()),
            Ok(()) => self.records += created,
            Err(e) => warn!(
                error = %e,
                transitions = transition_count,
                "journal commit failed: calls being prepared fail; sent/accepted/terminal \
                 records of this batch are lost (those calls stay unfinished and a recovery \
                 re-drives them under their keys)"
            ),
        }
        // A prepare whose commit failed may still land (its answer may be
        // what was lost); one that committed is certain.
        for ((entry, _), (decision, wrote)) in prepares.iter().zip(&decisions) {
            if *wrote || matches!(decision, Ok(Prepared::Proceed(_))) {
                match &result {
                    Ok(()) => self.unsure.remove(&entry.key),
                    Err(_) => self.unsure.insert(entry.key.clone()),
                };
            }
        }
        Ok(Committed {
            decisions,
            transitions: transitions_apart.unwrap_or_else(|| result.clone()),
            result,
            // Writes the store refused: the calls belong to another worker.
            refused: journal.take_fenced().into_iter().collect(),
            doubtful,
        })
    }

    /// What to do with one prepare given the key's record: the decision,
    /// and the record to write, if any.
    fn decide(
        &self,
        journal: &dyn Journal,
        entry: &JournalEntry,
        current: Option<&JournalEntry>,
    ) -> Result<(Prepared, Option<JournalEntry>), JournalError> {
        let Some(existing) = current else {
            return Ok((Prepared::Proceed(Prior::default()), Some(entry.clone())));
        };
        if existing.intent != entry.intent {
            return Ok((Prepared::Conflict(existing.clone()), None));
        }
        Ok(match &existing.state {
            JournalState::Terminal(o) if o.answers_repeat() => {
                (Prepared::Answer(existing.clone()), None)
            }
            // Ended with its outcome unknown: it may have run. A new attempt,
            // in doubt from the start, whose record keeps what was known
            // (sent, and the job).
            JournalState::Terminal(JournalOutcome::OutcomeUnknown { job_id, .. }) => {
                let mut record = entry.clone();
                record.state = match job_id {
                    Some(job_id) => JournalState::Accepted {
                        job_id: job_id.clone(),
                    },
                    None => JournalState::Sent,
                };
                (Prepared::Proceed(Prior::of(existing, entry)), Some(record))
            }
            // Ended without being the key's outcome (refused as a duplicate,
            // never accepted, invalid): proven not run, a new attempt.
            JournalState::Terminal(_) => (Prepared::Proceed(Prior::default()), Some(entry.clone())),
            // Unfinished with this intent: the same call again (a recovery,
            // the caller re-issuing it, or this very prepare retried after
            // an unavailable store), if no other worker owns it.
            _ => {
                if journal.acquire(&entry.key)? {
                    (Prepared::Proceed(Prior::of(existing, entry)), None)
                } else {
                    return Err(JournalError::new(
                        JournalErrorKind::Fenced,
                        &self.shared.location,
                        format!(
                            "call {}: another live worker owns it; it finishes the call",
                            entry.key
                        ),
                    ));
                }
            }
        })
    }

    /// Answers a committed batch's waiters.
    fn answer(
        &mut self,
        committed: Committed,
        prepares: Vec<(JournalEntry, PrepareReply)>,
        durable: Vec<(IdempotencyKey, DurableReply)>,
    ) {
        let Committed {
            decisions,
            result,
            transitions,
            refused,
            doubtful,
        } = committed;
        for (key, reply) in durable {
            let answer = match &transitions {
                Err(e) => Err(e.clone()),
                Ok(()) if doubtful.contains(&key) => Err(JournalError::new(
                    JournalErrorKind::Io,
                    &self.shared.location,
                    format!(
                        "call {key}: its record is another caller's to finish, or may still \
                         be landing from a commit whose answer was lost"
                    ),
                )),
                Ok(()) if refused.contains(&key) => Err(JournalError::new(
                    JournalErrorKind::Fenced,
                    &self.shared.location,
                    format!("call {key}: another worker owns it; its outcome was not recorded"),
                )),
                Ok(()) => Ok(()),
            };
            let _ = reply.send(answer);
        }
        let mut driving = Vec::new();
        for ((entry, reply), (decision, wrote)) in prepares.into_iter().zip(decisions) {
            let key = entry.key;
            let answer = match (decision, &result) {
                (Ok(_), Err(e)) if wrote => Err(e.clone()),
                (Ok(Prepared::Proceed(prior)), Ok(())) => {
                    if refused.contains(&key) {
                        Err(JournalError::new(
                            JournalErrorKind::Fenced,
                            &self.shared.location,
                            format!("call {key}: another live worker owns it"),
                        ))
                    } else {
                        driving.push(key);
                        Ok(Prepared::Proceed(prior))
                    }
                }
                (d, _) => d,
            };
            let _ = reply.send(answer);
        }
        if !driving.is_empty() {
            // Driven here again: an old fence no longer applies.
            let mut fenced = lock(&self.shared.fenced);
            for key in &driving {
                fenced.remove(key);
            }
        }
        self.shared.fence(
            refused
                .into_iter()
                .filter(|k| !driving.contains(k))
                .collect(),
        );
    }

    /// Puts a batch the store could not take back in the queue, ahead of
    /// what came since, and backs off before the next try. Its callers keep
    /// waiting, each within its own deadline (a caller that gives up is
    /// dropped from the queue, see [`process_with`](Self::process_with)). A
    /// stopped journal answers them with the store's error instead.
    fn requeue(
        &mut self,
        unavailable: JournalError,
        prepares: Vec<(JournalEntry, PrepareReply)>,
        transitions: HashMap<IdempotencyKey, Pending>,
        durable: Vec<(IdempotencyKey, DurableReply)>,
    ) {
        // These prepares' commit may still land.
        for (entry, _) in &prepares {
            self.unsure.insert(entry.key.clone());
        }
        let since = *self.unavailable_since.get_or_insert_with(Instant::now);
        let mut q = lock(&self.shared.queue);
        // Every handle is gone and the store stays away: stop waiting for it.
        if q.closing && since.elapsed() >= CLOSE_TIMEOUT {
            q.stopped = true;
        }
        if q.stopped {
            drop(q);
            for (_, reply) in prepares {
                let _ = reply.send(Err(unavailable.clone()));
            }
            for (_, reply) in durable {
                let _ = reply.send(Err(unavailable.clone()));
            }
            return;
        }
        let newer = std::mem::replace(&mut q.prepares, prepares);
        q.prepares.extend(newer);
        for (key, older) in transitions {
            let merged = match q.transitions.remove(&key) {
                Some(newer) => older.then(newer),
                None => older,
            };
            q.transitions.insert(key, merged);
        }
        let newer = std::mem::replace(&mut q.durable, durable);
        q.durable.extend(newer);
        drop(q);
        let delay = self
            .retry_delay
            .map_or(RETRY_FIRST, |d| (d * 2).min(RETRY_MAX));
        self.retry_delay = Some(delay);
        warn!(
            journal = %self.shared.location,
            error = %unavailable,
            retry_in = ?delay,
            "the journal is unavailable; its writes wait (each call within its deadline)"
        );
    }

    /// Serves the batch's requests (reads, claims, removals, a close).
    /// Returns the waiters of a requested close.
    fn serve(&mut self, journal: &dyn Journal, requests: Vec<Request>) -> Vec<oneshot::Sender<()>> {
        let mut close = Vec::new();
        for request in requests {
            match request {
                Request::Get(key, reply) => {
                    let _ = reply.send(journal.get(&key));
                }
                Request::Unfinished(reply) => {
                    let driving: HashSet<IdempotencyKey> =
                        lock(&self.shared.driving).keys().cloned().collect();
                    // In batches: a worker never takes more at once than it
                    // can start driving soon (a fleet's other workers take
                    // the rest).
                    let limit = self.retention.max_records.min(RECOVER_BATCH);
                    let claimed = journal.claim(limit, &driving);
                    if let Ok(entries) = &claimed {
                        // Recovered here: an old fence no longer applies.
                        let mut fenced = lock(&self.shared.fenced);
                        for e in entries {
                            fenced.remove(&e.key);
                        }
                    }
                    // A `recover` that gave up waiting (cancelled, timed
                    // out) never hands these calls to anyone: give them back.
                    if let Err(Ok(entries)) = reply.send(claimed) {
                        for e in entries {
                            self.shared.note(&e.key, |p| p.released = true);
                        }
                    }
                }
                Request::Remove(key, reply) => {
                    let result = journal.get(&key).and_then(|existing| match existing {
                        Some(_) => {
                            journal.apply(&[JournalWrite::Remove { key: key.clone() }])?;
                            let refused = journal.take_fenced();
                            if refused.contains(&key) {
                                return Err(JournalError::new(
                                    JournalErrorKind::Fenced,
                                    &self.shared.location,
                                    format!(
                                        "call {key}: another live worker drives it; it is not \
                                         discarded"
                                    ),
                                ));
                            }
                            Ok(true)
                        }
                        None => Ok(false),
                    });
                    if let Ok(true) = result {
                        self.records = self.records.saturating_sub(1);
                    }
                    let _ = reply.send(result);
                }
                Request::Close(reply) => close.push(reply),
            }
        }
        close
    }

    /// Renews this client's leases; fences the calls it lost.
    fn renew(&mut self) {
        if let Some(journal) = self.journal.take() {
            self.renew_on(journal.as_ref());
            self.journal = Some(journal);
        }
    }

    /// [`renew`](Self::renew) on `journal` (taken out of `self` while a
    /// batch is processed).
    fn renew_on(&self, journal: &dyn Journal) {
        let started = Instant::now();
        match journal.renew() {
            Ok(lost) => {
                extend_lease(&self.shared, journal, started);
                self.shared.fence(lost);
            }
            Err(e) => warn!(
                error = %e,
                "journal lease renewal failed; retrying (the leases lapse if it keeps failing, \
                 and this worker's calls then go to another worker)"
            ),
        }
    }

    /// Whether this client's leases lapsed without a renewal.
    fn lease_lapsed(&self) -> bool {
        self.shared
            .lease
            .borrow()
            .is_some_and(|at| Instant::now() >= at)
    }

    /// Applies the retention policy; logs what it deleted.
    fn purge(&mut self) -> Result<PurgeReport, JournalError> {
        let Some(journal) = self.journal.as_deref() else {
            return Err(self.shared.closed_error());
        };
        let report = journal.purge(&self.retention, SystemTime::now())?;
        self.records = report.remaining;
        log_purge(&self.shared.location, &report);
        Ok(report)
    }

    /// Full: evict terminal records down to 90 % of the cap (at least one
    /// below it).
    fn make_room(&mut self, journal: &dyn Journal) {
        let max = self.retention.max_records;
        let target = Retention {
            max_records: max - (max / 10).max(1),
            ..self.retention.clone()
        };
        match journal.purge(&target, SystemTime::now()) {
            Ok(report) => {
                self.records = report.remaining;
                log_purge(&self.shared.location, &report);
            }
            Err(e) => warn!(error = %e, "journal purge failed"),
        }
    }
}

/// A renewal that began at `started` succeeded: the leases it renewed last
/// until `started + lease_ttl` at the earliest (the database stamped them
/// later, by its own clock, which runs at the rate this one does). Drivers
/// stop a tenth of the lease before that, unless a later renewal succeeds.
fn extend_lease(shared: &Shared, journal: &dyn Journal, started: Instant) {
    if let Some(ttl) = journal.lease_ttl() {
        shared
            .lease
            .send_replace(Some(crate::retry::later(started, ttl - ttl / 10)));
    }
}

/// A batch's commit: per prepare (in order) its decision and whether it
/// wrote a record; the transaction's result and the transitions' (they may
/// commit apart); the writes the store refused (fenced).
struct Committed {
    decisions: Vec<(Result<Prepared, JournalError>, bool)>,
    result: Result<(), JournalError>,
    transitions: Result<(), JournalError>,
    refused: HashSet<IdempotencyKey>,
    /// Keys whose terminal, if a "did not run", is not durable: withheld
    /// (another caller drives the key) or its record's fate unknown.
    doubtful: HashSet<IdempotencyKey>,
}

fn pending_writes(key: &IdempotencyKey, p: &Pending) -> Vec<JournalWrite> {
    p.clone().writes(key)
}

fn answer_closed(requests: Vec<Request>, err: &JournalError) {
    for request in requests {
        match request {
            Request::Get(_, reply) => {
                let _ = reply.send(Err(err.clone()));
            }
            Request::Unfinished(reply) => {
                let _ = reply.send(Err(err.clone()));
            }
            Request::Remove(_, reply) => {
                let _ = reply.send(Err(err.clone()));
            }
            Request::Close(reply) => {
                let _ = reply.send(());
            }
        }
    }
}

fn log_purge(location: &str, report: &PurgeReport) {
    if report.expired_unfinished > 0 {
        warn!(
            journal = %location,
            count = report.expired_unfinished,
            "deleted unfinished calls older than the retention's unfinished_ttl (never recovered)"
        );
    }
    if report.expired_terminal + report.evicted > 0 {
        debug!(
            journal = %location,
            expired = report.expired_terminal,
            evicted = report.evicted,
            remaining = report.remaining,
            "journal purged"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> Arc<Shared> {
        Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            space: Notify::new(),
            location: "test".into(),
            capacity: 8,
            fenced: Mutex::new(HashSet::new()),
            driving: Mutex::new(HashMap::new()),
            fence: watch::Sender::new(0),
            lease: watch::Sender::new(None),
        })
    }

    fn drive(shared: &Arc<Shared>, key: &IdempotencyKey) -> Driving {
        *lock(&shared.driving).entry(key.clone()).or_default() += 1;
        Driving {
            shared: shared.clone(),
            key: key.clone(),
        }
    }

    #[test]
    fn the_fenced_set_holds_only_keys_driven_here_and_empties_with_them() {
        let shared = shared();
        let (driven, idle) = (IdempotencyKey::new(), IdempotencyKey::new());
        let first = drive(&shared, &driven);
        let second = drive(&shared, &driven);
        shared.fence(vec![driven.clone(), idle.clone()]);
        assert!(lock(&shared.fenced).contains(&driven));
        assert!(
            !lock(&shared.fenced).contains(&idle),
            "nobody drives it here"
        );
        drop(first);
        assert!(lock(&shared.fenced).contains(&driven), "still driven once");
        drop(second);
        assert!(
            lock(&shared.fenced).is_empty(),
            "pruned with its last driver"
        );
    }

    #[test]
    fn transitions_merge_newer_over_older() {
        let at = SystemTime::now();
        let older = Pending {
            sent: Some((3, at)),
            accepted: Some(("job_1".into(), at)),
            terminal: None,
            released: true,
        };
        let newer = Pending {
            sent: Some((2, at)),
            accepted: None,
            terminal: None,
            released: false,
        };
        let merged = older.then(newer);
        assert_eq!(merged.sent.map(|s| s.0), Some(3), "the higher count");
        assert_eq!(merged.accepted.map(|a| a.0), Some("job_1".to_owned()));
        assert!(
            merged.released,
            "a release stands unless a terminal follows"
        );
    }
}
