//! Re-driving the calls a journal holds as unfinished: one batch
//! ([`Client::recover`]), or a whole pass that hands each call out once
//! ([`RecoveryPass`]), and the [`Invocation`] each recovered call becomes.

use std::collections::HashSet;
use std::time::Instant;

use arcp_types::IdempotencyKey;

use super::{keep, CallHandle, Invocation};
use crate::client::Client;
use crate::error::Error;
use crate::journal::{ClaimPosition, DriveGuard, JournalEntry};
use crate::request::{CallRequest, CallShared, EventsEnd, TraceId};
#[cfg(doc)]
use crate::{Journal, RecoveryMode};

/// Handing out recovered calls.
impl Client {
    /// Re-drives the calls the journal holds as unfinished (a call whose
    /// process crashed, or whose outcome was unavailable), at most 256 of
    /// them, oldest first, with their recorded key, intent (byte-identical)
    /// and trace id, and their recorded deadline counted again from each
    /// invocation's first await. Await the returned invocations for their
    /// outcomes; the runtime deduplicates by key, so a call that already ran
    /// is not run again.
    ///
    /// The journal decides which unfinished calls are this client's to
    /// re-drive ([`Journal::claim`]): never one this client is driving right
    /// now, so calling `recover` again while recovered calls run hands out
    /// nothing twice. A journal shared by a fleet (`PostgresJournal`) hands
    /// out only the calls whose owner's lease lapsed, each to one worker.
    ///
    /// A recovered call may already have run (its record of a send can lag
    /// the send), so it never reports "did not run": refused until its
    /// budget is spent, or failed by the journal, it ends with its outcome
    /// unknown and its record stays unfinished. An invocation dropped
    /// without being awaited gives its claim back (another worker of a
    /// fleet may take it at once).
    ///
    /// A call whose outcome stays unknown comes back among the oldest at
    /// the next `recover`: to drive every unfinished call once, batch after
    /// batch, use a [`RecoveryPass`] ([`Client::recovery_pass`]).
    /// [`RecoveryMode::Automatic`] does that on connect. Returns an empty
    /// list without a journal, or when nothing is left to claim.
    ///
    /// # Errors
    ///
    /// [`Error::Journal`] when the journal cannot be read or the claims
    /// cannot be recorded (then nothing is handed out, and nothing was
    /// sent); each recovered call then ends as
    /// [`Client::invoke_tool`]'s do, but never
    /// with "did not run".
    ///
    /// ```no_run
    /// # async fn demo(journal: impl arcp_sdk::Journal) -> Result<(), arcp_sdk::Error> {
    /// use arcp_sdk::Client;
    /// // `journal`: a durable one, e.g. `SqliteJournal` (feature `sqlite`).
    /// let client = Client::builder("ws://127.0.0.1:7777/arcp")
    ///     .journal(journal)
    ///     .connect()
    ///     .await?;
    /// for call in client.recover().await? {
    ///     let key = call.key().cloned();
    ///     println!("{key:?}: {:?}", call.await);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn recover(&self) -> Result<Vec<Invocation>, Error> {
        let claimed = self.claim_unfinished(None).await?;
        Ok(claimed
            .calls
            .into_iter()
            .map(|(entry, held)| Invocation::recovered(self.clone(), entry, held))
            .collect())
    }

    /// A pass over every call the journal holds as unfinished, handing
    /// each out once: see [`RecoveryPass`].
    pub fn recovery_pass(&self) -> RecoveryPass {
        RecoveryPass {
            client: self.clone(),
            after: None,
            handed_out: HashSet::new(),
        }
    }
}

/// One pass of recovery: the journal's unfinished calls, batch after batch
/// (at most 256 each, oldest first), each call handed out at most once in
/// the pass. [`Client::recover`] alone hands a call whose outcome stayed
/// unknown back at its next claim, among the oldest, so 256 such calls
/// would keep the younger ones from ever being claimed; a pass goes on
/// from where its last claim ended ([`Journal::claim_after`]), so each
/// claim costs the same however deep the pass. A call that becomes
/// claimable behind that place (another worker's lease lapsed meanwhile)
/// waits for the next pass. The pass is over when
/// [`next_batch`](RecoveryPass::next_batch) returns an empty list.
///
/// ```no_run
/// # async fn demo(client: arcp_sdk::Client) -> Result<(), arcp_sdk::Error> {
/// use futures_util::StreamExt;
/// let mut pass = client.recovery_pass();
/// loop {
///     let batch = pass.next_batch().await?;
///     if batch.is_empty() {
///         break;
///     }
///     // At most 64 at a time: each call's deadline counts from its first
///     // await, so the later ones wait without expiring.
///     futures_util::stream::iter(batch)
///         .for_each_concurrent(64, |call| async move {
///             let key = call.key().cloned();
///             println!("{key:?}: {:?}", call.await);
///         })
///         .await;
/// }
/// println!("{} calls recovered", pass.handed_out().len());
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a recovery pass hands out nothing until `next_batch` is called"]
pub struct RecoveryPass {
    client: Client,
    /// Where the last claim ended.
    after: Option<ClaimPosition>,
    handed_out: HashSet<IdempotencyKey>,
}

impl RecoveryPass {
    /// The next unfinished calls this client may drive (as
    /// [`Client::recover`] claims them), after those this pass claimed
    /// before; empty once none is left. Claims that only end calls (past
    /// the runtime's key retention) do not end the pass: it claims on.
    /// Drive (or drop) a batch before asking for the next, so that a shared
    /// journal's claims are not held longer than needed.
    ///
    /// # Errors
    ///
    /// [`Error::Journal`] as for [`Client::recover`]: nothing handed out,
    /// nothing sent. The pass may be asked again: it goes on from the last
    /// claim that succeeded.
    pub async fn next_batch(&mut self) -> Result<Vec<Invocation>, Error> {
        loop {
            let claimed = self.client.claim_unfinished(self.after.clone()).await?;
            // Nothing claimed, or (a journal that does not keep the claim
            // order) nothing further along: the pass is over.
            let Some(last) = claimed.last.filter(|last| self.after.as_ref() < Some(last)) else {
                return Ok(Vec::new());
            };
            self.after = Some(last);
            let calls: Vec<Invocation> = claimed
                .calls
                .into_iter()
                .map(|(entry, held)| Invocation::recovered(self.client.clone(), entry, held))
                // A journal whose `claim_after` ignores the place: a call
                // handed out again is dropped here, which gives its claim
                // back.
                .filter(|call| {
                    call.key()
                        .is_none_or(|key| self.handed_out.insert(key.clone()))
                })
                .collect();
            if !calls.is_empty() {
                return Ok(calls);
            }
        }
    }

    /// The keys this pass has handed out so far.
    pub fn handed_out(&self) -> &HashSet<IdempotencyKey> {
        &self.handed_out
    }
}

impl Invocation {
    /// A call re-driven from its journal record: the recorded key, intent
    /// (parsed back, byte-exact), trace id and deadline (counted from the
    /// call's first await). A record whose intent cannot be re-sent
    /// identically resolves to [`Error::Journal`] without sending anything.
    /// `held` counts the call as driven here until its own prepare does.
    pub(crate) fn recovered(client: Client, entry: JournalEntry, held: DriveGuard) -> Invocation {
        let shared = std::sync::Arc::new(CallShared::default());
        let key = entry.key.clone();
        let prior_job = entry.job_id().map(str::to_owned);
        let request = entry
            .invoke()
            .map_err(Error::Journal)
            .map(|invoke| CallRequest {
                key: entry.key,
                trace_id: TraceId::new(&entry.trace_id),
                invoke,
                deadline: entry.deadline,
                started: Instant::now(),
                events_end: EventsEnd(shared.clone()),
                shared: shared.clone(),
                recorder: None,
                in_doubt: true,
                prior_job,
                key_supplied: true,
                prepared: None,
                claim: None,
            });
        let dispatcher = client.clone();
        // Claimed for this client: until the call is dispatched (or if it
        // never is: the invocation dropped unawaited, an intent that no
        // longer reads), nobody here drives it, so the claim is given back
        // and another worker of a fleet may take it at once.
        let unclaimed = ReleaseUnlessDriven {
            client: client.clone(),
            key: Some(key.clone()),
            held: Some(held),
        };
        let future = async move {
            let mut unclaimed = unclaimed;
            let mut request = request?;
            // The record's deadline counts from the first await: a worker
            // driving a batch a few calls at a time must not find the later
            // ones expired before they were sent.
            request.started = Instant::now();
            // From here on the dispatch releases the call if it stops
            // without an outcome; the claim is held until its prepare.
            unclaimed.key = None;
            request.claim = unclaimed
                .held
                .take()
                .map(|held| Box::new(held) as Box<dyn Send + Sync>);
            dispatcher.dispatch(Box::new(request)).await
        };
        Invocation {
            future: Box::pin(future),
            decode: keep,
            handle: CallHandle {
                shared,
                key: Some(key),
                client,
            },
        }
    }
}

/// Gives a recovered call's claim back when it is dropped before its
/// dispatch began (see [`Invocation::recovered`]).
struct ReleaseUnlessDriven {
    client: Client,
    key: Option<IdempotencyKey>,
    /// The claim, counted as driven here until the dispatch takes it.
    held: Option<DriveGuard>,
}

impl Drop for ReleaseUnlessDriven {
    fn drop(&mut self) {
        // Not driven any more before the release, which a driven call's
        // claim would keep.
        drop(self.held.take());
        if let Some(key) = self.key.take() {
            self.client.release_claim(&key);
        }
    }
}
