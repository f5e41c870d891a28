//! The durable invocation journal: a call is recorded *before* it is sent, so
//! a process that crashes mid-call resumes the same call (same key, same
//! intent) after a restart instead of starting a new one.
//!
//! ```text
//!  prepare (durable, awaited) ──▶ sent(attempts) ──▶ accepted(job id) ──▶ terminal(outcome)
//!       the call is sent only          recorded asynchronously: lookup and
//!       after this write commits       recovery precision, never needed for safety
//! ```
//!
//! The prepared record alone is what prevents a duplicate: it holds the key
//! and the byte-exact intent (the serialized `Invoke` payload), so a
//! restarted process can re-send exactly what the crashed one may have sent,
//! and the runtime deduplicates it. [`Client::recover`](crate::Client::recover)
//! re-drives unfinished records; [`Client::lookup`](crate::Client::lookup)
//! reads what became of a key.
//!
//! Three implementations ship: [`SqliteJournal`] (one file, WAL mode, held
//! exclusively by one client: one host), `PostgresJournal` (feature
//! `postgres`: one database shared by a fleet of workers, each unfinished
//! call owned by one worker under a lease and a fencing generation) and
//! [`MemoryJournal`] (for tests, and for in-process lookups without
//! durability). Any store can implement [`Journal`].

mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;
mod writer;

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use arcp_types::{ErrorCode, IdempotencyKey, Invoke};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Execution, ToolError};
pub use crate::error::{JournalError, JournalErrorKind};
use crate::outcome::ToolOutput;

pub use memory::MemoryJournal;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres::{PostgresJournal, PostgresOptions};
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use sqlite::{SqliteJournal, SqliteOptions, Synchronous};
pub(crate) use writer::{JournalHandle, JournalSetup, RECOVER_BATCH};

/// Storage for the invocation journal.
///
/// The client calls these methods from one dedicated writer thread per
/// client (never from an async task), so an implementation may block on
/// I/O. The client never shares one journal *instance* between two
/// clients; a store shared by several processes (a fleet) decides which
/// one drives each call through the ownership methods below.
///
/// The contract that makes recovery safe is on [`Journal::apply`]: when it
/// returns `Ok`, every write in the batch survives a crash of the process.
///
/// **Ownership (shared stores).** [`Journal::claim`], [`Journal::acquire`],
/// [`Journal::renew`], [`Journal::take_fenced`] and
/// [`JournalWrite::Release`] let a store shared by many workers give each
/// unfinished call one owner at a time. Their defaults describe a journal
/// held by one client (everything unfinished is this client's), so a
/// single-process implementation needs none of them.
pub trait Journal: Send + Sync + 'static {
    /// Applies `writes` in order, atomically (all or none) and durably.
    ///
    /// - [`JournalWrite::Prepare`] inserts the record, replacing any record
    ///   with the same key.
    /// - [`JournalWrite::Sent`] and [`JournalWrite::Accepted`] update a
    ///   record that is not terminal; a `Sent` never moves a record back
    ///   from `Accepted`. They are ignored when there is no such record.
    /// - [`JournalWrite::Terminal`] marks the record terminal (ignored when
    ///   there is no record).
    /// - [`JournalWrite::Remove`] deletes the record, if any.
    /// - [`JournalWrite::Release`] gives up this client's ownership of an
    ///   unfinished record (ignored without owners).
    ///
    /// A shared store also refuses (skips, and reports through
    /// [`Journal::take_fenced`]) a write for a call this client does not
    /// own; the rest of the batch still applies.
    fn apply(&self, writes: &[JournalWrite]) -> Result<(), JournalError>;

    /// Applies `writes` as [`Journal::apply`] does and, in the same
    /// transaction after them, records each entry of `new` whose key has no
    /// record; returns, per entry of `new`, whether it was recorded. A key
    /// that has a record keeps it untouched (the client then reads it and
    /// decides). No write of `writes` concerns a key of `new`, and the keys
    /// of `new` are distinct.
    ///
    /// This is how the client records a burst of new calls: a store with a
    /// round trip per statement answers it with one insert that skips
    /// existing keys, instead of a read before the write. Default:
    /// [`Journal::get_many`], then [`Journal::apply`] with the absent
    /// entries (exact for a store with one writer).
    fn apply_and_insert_new(
        &self,
        writes: &[JournalWrite],
        new: &[JournalEntry],
    ) -> Result<Vec<bool>, JournalError> {
        let keys: Vec<IdempotencyKey> = new.iter().map(|e| e.key.clone()).collect();
        let existing: std::collections::HashSet<IdempotencyKey> =
            self.get_many(&keys)?.into_iter().map(|e| e.key).collect();
        let inserted: Vec<bool> = new.iter().map(|e| !existing.contains(&e.key)).collect();
        let mut all = writes.to_vec();
        all.extend(
            new.iter()
                .zip(&inserted)
                .filter(|(_, inserted)| **inserted)
                .map(|(e, _)| JournalWrite::Prepare(e.clone())),
        );
        self.apply(&all)?;
        Ok(inserted)
    }

    /// The record of `key`, if any.
    fn get(&self, key: &IdempotencyKey) -> Result<Option<JournalEntry>, JournalError>;

    /// The records of `keys` that exist, in any order. The client reads a
    /// burst of prepares' keys with one call; a store with a round trip
    /// per read can answer them with one query. Default: [`Journal::get`]
    /// for each.
    fn get_many(&self, keys: &[IdempotencyKey]) -> Result<Vec<JournalEntry>, JournalError> {
        keys.iter()
            .filter_map(|k| self.get(k).transpose())
            .collect()
    }

    /// Up to `limit` records that are not terminal, oldest first.
    fn unfinished(&self, limit: usize) -> Result<Vec<JournalEntry>, JournalError>;

    /// Applies the retention policy at `now`: deletes terminal records older
    /// than [`Retention::terminal_ttl`] and unfinished ones untouched for
    /// [`Retention::unfinished_ttl`], then the oldest terminal records while
    /// more than [`Retention::max_records`] remain. Unfinished records are
    /// never evicted to make room.
    fn purge(&self, retention: &Retention, now: SystemTime) -> Result<PurgeReport, JournalError>;

    /// Where the journal lives, for error messages (a path, `memory`, ...).
    fn location(&self) -> String {
        "journal".into()
    }

    /// Takes ownership of up to `limit` unfinished calls for
    /// [`Client::recover`](crate::Client::recover), oldest first: the calls
    /// this client may drive, except those in `driving` (this client drives
    /// them right now). A shared store returns only calls nobody else holds
    /// (their owner's lease expired) and makes them this client's, so
    /// running it again, or on two workers at once, claims each call once.
    /// Default: the unfinished records not in `driving` (a journal with one
    /// client owns everything in it).
    fn claim(
        &self,
        limit: usize,
        driving: &HashSet<IdempotencyKey>,
    ) -> Result<Vec<JournalEntry>, JournalError> {
        let mut out = self.unfinished(limit.saturating_add(driving.len()))?;
        out.retain(|e| !driving.contains(&e.key));
        out.truncate(limit);
        Ok(out)
    }

    /// Whether this client may drive the unfinished call `key` (a caller
    /// re-issuing a recorded key): `true` when it already holds it or could
    /// take it over (an expired lease), `false` when another live worker
    /// owns it. Default `true`.
    fn acquire(&self, key: &IdempotencyKey) -> Result<bool, JournalError> {
        let _ = key;
        Ok(true)
    }

    /// How often the client calls [`Journal::renew`]; `None` (the default)
    /// for a journal without leases.
    fn lease_interval(&self) -> Option<Duration> {
        None
    }

    /// Extends the leases of the calls this client holds; returns the keys
    /// it found it no longer holds (another worker claimed them while this
    /// one was silent). The client stops driving those calls: they end
    /// with [`JournalErrorKind::Fenced`]. Default: nothing held, nothing
    /// lost.
    fn renew(&self) -> Result<Vec<IdempotencyKey>, JournalError> {
        Ok(Vec::new())
    }

    /// The keys whose writes [`Journal::apply`] refused since the last call
    /// because another owner holds them (fenced); the client stops driving
    /// them. Default: none.
    fn take_fenced(&self) -> Vec<IdempotencyKey> {
        Vec::new()
    }

    /// How long this client's authority over its calls lasts past a
    /// successful [`Journal::renew`] (counted from when the renewal began):
    /// when no renewal succeeds within it, the client stops driving every
    /// call it holds before another worker may claim them. `None` (the
    /// default): authority does not lapse (a journal without owners).
    fn lease_ttl(&self) -> Option<Duration> {
        None
    }
}

/// One write of a batch given to [`Journal::apply`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum JournalWrite {
    /// Record a call before its first send (its state is
    /// [`JournalState::Prepared`]); replaces any record with the same key.
    Prepare(JournalEntry),
    /// An attempt was handed to the transport.
    Sent {
        /// The call's key.
        key: IdempotencyKey,
        /// Requests sent so far (the record keeps the highest count seen).
        attempts: u32,
        /// When.
        at: SystemTime,
    },
    /// The runtime bound the call to a job.
    Accepted {
        /// The call's key.
        key: IdempotencyKey,
        /// The job.
        job_id: String,
        /// When.
        at: SystemTime,
    },
    /// The call ended with a terminal outcome.
    Terminal {
        /// The call's key.
        key: IdempotencyKey,
        /// What it ended with.
        outcome: JournalOutcome,
        /// When.
        at: SystemTime,
    },
    /// Forget the record.
    Remove {
        /// The call's key.
        key: IdempotencyKey,
    },
    /// This client stopped driving the call without learning its outcome
    /// (the deadline passed, the caller dropped it, the outcome was
    /// unavailable): the record stays unfinished (silence is not success)
    /// and a shared store lets any worker's recovery claim it at once
    /// instead of after the lease. A journal without owners ignores it.
    Release {
        /// The call's key.
        key: IdempotencyKey,
    },
}

/// Where a journaled call stands.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum JournalState {
    /// Recorded; possibly sent (the send is recorded asynchronously).
    Prepared,
    /// At least one attempt was handed to the transport.
    Sent,
    /// The runtime accepted the call as this job.
    Accepted {
        /// The job.
        job_id: String,
    },
    /// The call ended with this outcome.
    Terminal(JournalOutcome),
}

impl JournalState {
    /// Whether the call ended (nothing to recover).
    pub fn is_terminal(&self) -> bool {
        matches!(self, JournalState::Terminal(_))
    }

    /// `prepared`, `sent`, `accepted` or `terminal`.
    pub fn name(&self) -> &'static str {
        match self {
            JournalState::Prepared => "prepared",
            JournalState::Sent => "sent",
            JournalState::Accepted { .. } => "accepted",
            JournalState::Terminal(_) => "terminal",
        }
    }
}

/// How a journaled call ended. Stored as JSON (externally tagged, snake case:
/// `{"ok": {...}}`, `{"tool_error": {...}}`, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum JournalOutcome {
    /// The tool's result ([`Ok(ToolOutput)`](crate::ToolOutput)).
    Ok {
        /// The result.
        value: Value,
        /// The job, when the runtime said.
        #[serde(default)]
        job_id: Option<String>,
        /// Whether the result was a stored one replayed.
        #[serde(default)]
        replayed: bool,
        /// Requests sent.
        #[serde(default)]
        attempts: u32,
    },
    /// A terminal tool error ([`Error::Tool`]).
    ToolError {
        /// The wire code.
        code: String,
        /// The runtime's message.
        message: String,
        /// Whether a new call (new key) may succeed.
        #[serde(default)]
        retryable: bool,
        /// Structured details.
        #[serde(default)]
        details: Option<Value>,
        /// The job.
        #[serde(default)]
        job_id: Option<String>,
        /// Whether the error was a stored one replayed.
        #[serde(default)]
        replayed: bool,
        /// Requests sent.
        #[serde(default)]
        attempts: u32,
        /// The runtime refused the request before accepting it: the tool
        /// did not run ([`Execution::NotRun`]).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        refused: bool,
    },
    /// The key is bound to a different intent ([`Error::DuplicateKey`]).
    DuplicateKey {
        /// The runtime's explanation.
        message: String,
        /// Requests sent.
        #[serde(default)]
        attempts: u32,
    },
    /// The job was cancelled ([`Error::Cancelled`]).
    Cancelled {
        /// The job.
        #[serde(default)]
        job_id: Option<String>,
        /// Requests sent.
        #[serde(default)]
        attempts: u32,
    },
    /// Every attempt was refused before acceptance: the tool did not run
    /// ([`Error::RetriesExhausted`]). Final, because the caller was told so
    /// and may have re-issued the work under another key: re-driving it
    /// after a restart could run it twice.
    NotAccepted {
        /// The last reason an attempt failed.
        last_error: String,
        /// Requests sent.
        #[serde(default)]
        attempts: u32,
    },
    /// The call was refused before it was sent ([`Error::InvalidCall`]).
    Invalid {
        /// Why.
        message: String,
    },
    /// The runtime accepted the call (or may have) and will never hand its
    /// outcome to a later request: it replays only `job.accepted`
    /// ([`Error::OutcomeUnavailable`] with `permanent`). Final, so recovery
    /// does not re-send a hopeless call; the tool ran at most once.
    OutcomeUnknown {
        /// The job, when the runtime said.
        #[serde(default)]
        job_id: Option<String>,
        /// What the client knows, in words.
        reason: String,
        /// Requests sent.
        #[serde(default)]
        attempts: u32,
    },
}

impl JournalOutcome {
    /// The journal outcome of a call's result, or `None` when the record
    /// must stay unfinished for a later recovery to re-drive: the tool may
    /// have run and its outcome can still be learned. Follows the execution
    /// rule ([`Error::execution`]): a call proven not run is final (the
    /// caller was told so and may re-issue the work; re-driving it could
    /// run it twice), and so is one whose runtime never replays outcomes.
    pub(crate) fn from_result(result: &Result<ToolOutput, Error>) -> Option<Self> {
        Some(match result {
            Ok(out) => JournalOutcome::Ok {
                value: out.value.clone(),
                job_id: out.job_id.clone(),
                replayed: out.replayed,
                attempts: out.attempts,
            },
            Err(Error::Tool(e)) => JournalOutcome::ToolError {
                code: e.code.to_string(),
                message: e.message.clone(),
                retryable: e.retryable,
                details: e.details.clone(),
                job_id: e.job_id.clone(),
                replayed: e.replayed,
                attempts: e.attempts,
                refused: e.execution == Execution::NotRun,
            },
            Err(Error::DuplicateKey {
                message, attempts, ..
            }) => JournalOutcome::DuplicateKey {
                message: message.clone(),
                attempts: *attempts,
            },
            Err(Error::Cancelled {
                job_id, attempts, ..
            }) => JournalOutcome::Cancelled {
                job_id: job_id.clone(),
                attempts: *attempts,
            },
            Err(Error::RetriesExhausted {
                attempts,
                last_error,
                ..
            }) => JournalOutcome::NotAccepted {
                last_error: last_error.clone(),
                attempts: *attempts,
            },
            Err(Error::InvalidCall(message)) => JournalOutcome::Invalid {
                message: message.clone(),
            },
            Err(Error::OutcomeUnavailable {
                job_id,
                reason,
                attempts,
                permanent: true,
                ..
            }) => JournalOutcome::OutcomeUnknown {
                job_id: job_id.clone(),
                reason: reason.clone(),
                attempts: *attempts,
            },
            // The journal itself failed (or gave the call to another
            // worker): this call wrote nothing that a recovery would send,
            // and a record of an earlier attempt must stay as it is.
            Err(Error::Journal(_)) => return None,
            Err(e) if e.execution() == Execution::NotRun => JournalOutcome::NotAccepted {
                last_error: e.to_string(),
                attempts: e.attempts().unwrap_or(0),
            },
            Err(_) => return None,
        })
    }

    /// Whether a repeated call with the same key and intent is answered with
    /// this outcome (as the in-process outcome cache does): a result, a tool
    /// error or a cancellation is the key's outcome. The others are not (the
    /// key belongs to another intent, or the call never ran), so a repeated
    /// call is sent again.
    pub(crate) fn answers_repeat(&self) -> bool {
        matches!(
            self,
            JournalOutcome::Ok { .. }
                | JournalOutcome::ToolError { refused: false, .. }
                | JournalOutcome::Cancelled { .. }
        )
    }

    /// The job, when known.
    pub fn job_id(&self) -> Option<&str> {
        match self {
            JournalOutcome::Ok { job_id, .. }
            | JournalOutcome::ToolError { job_id, .. }
            | JournalOutcome::Cancelled { job_id, .. }
            | JournalOutcome::OutcomeUnknown { job_id, .. } => job_id.as_deref(),
            _ => None,
        }
    }

    /// Requests sent, as recorded with the outcome.
    pub fn attempts(&self) -> u32 {
        match self {
            JournalOutcome::Ok { attempts, .. }
            | JournalOutcome::ToolError { attempts, .. }
            | JournalOutcome::DuplicateKey { attempts, .. }
            | JournalOutcome::Cancelled { attempts, .. }
            | JournalOutcome::NotAccepted { attempts, .. }
            | JournalOutcome::OutcomeUnknown { attempts, .. } => *attempts,
            JournalOutcome::Invalid { .. } => 0,
        }
    }

    /// The outcome as the call returned it.
    pub fn to_result(&self, key: &IdempotencyKey, trace_id: &str) -> Result<ToolOutput, Error> {
        match self.clone() {
            JournalOutcome::Ok {
                value,
                job_id,
                replayed,
                attempts,
            } => Ok(ToolOutput {
                value,
                job_id,
                key: key.clone(),
                replayed,
                attempts,
                trace_id: trace_id.to_owned(),
            }),
            JournalOutcome::ToolError {
                code,
                message,
                retryable,
                details,
                job_id,
                replayed,
                attempts,
                refused,
            } => Err(Error::Tool(Box::new(ToolError {
                code: ErrorCode::parse(&code),
                message,
                retryable,
                details,
                replayed,
                job_id,
                key: key.clone(),
                attempts,
                execution: if refused {
                    Execution::NotRun
                } else {
                    Execution::Ran
                },
            }))),
            JournalOutcome::OutcomeUnknown {
                job_id,
                reason,
                attempts,
            } => Err(Error::OutcomeUnavailable {
                key: key.clone(),
                job_id,
                reason,
                attempts,
                permanent: true,
            }),
            JournalOutcome::DuplicateKey { message, attempts } => Err(Error::DuplicateKey {
                key: key.clone(),
                message,
                attempts,
            }),
            JournalOutcome::Cancelled { job_id, attempts } => Err(Error::Cancelled {
                key: key.clone(),
                job_id,
                attempts,
            }),
            JournalOutcome::NotAccepted {
                last_error,
                attempts,
            } => Err(Error::RetriesExhausted {
                key: key.clone(),
                attempts,
                last_error,
            }),
            JournalOutcome::Invalid { message } => Err(Error::InvalidCall(message)),
        }
    }
}

/// One journaled call.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct JournalEntry {
    /// The call's idempotency key (unique in the journal).
    pub key: IdempotencyKey,
    /// The tool.
    pub tool: String,
    /// The intent exactly as sent: the serialized `Invoke` payload (tool,
    /// arguments, key and every option) as JSON text. A recovered call
    /// re-sends exactly these bytes' value; see [`JournalEntry::invoke`].
    pub intent: String,
    /// The W3C trace id shared by every attempt.
    pub trace_id: String,
    /// The call's deadline (a recovered call gets it again, counted from
    /// the recovery).
    pub deadline: Duration,
    /// Where the call stands.
    pub state: JournalState,
    /// Requests sent, as far as recorded.
    pub attempts: u32,
    /// When the call was prepared.
    pub created_at: SystemTime,
    /// When the record last changed.
    pub updated_at: SystemTime,
}

impl JournalEntry {
    /// A record in state [`JournalState::Prepared`], created and updated
    /// now, with no attempt recorded. For [`Journal`] implementations
    /// rebuilding records from their store (set the other fields after).
    pub fn new(
        key: IdempotencyKey,
        tool: impl Into<String>,
        intent: impl Into<String>,
        trace_id: impl Into<String>,
        deadline: Duration,
    ) -> Self {
        let now = SystemTime::now();
        JournalEntry {
            key,
            tool: tool.into(),
            intent: intent.into(),
            trace_id: trace_id.into(),
            deadline,
            state: JournalState::Prepared,
            attempts: 0,
            created_at: now,
            updated_at: now,
        }
    }

    /// Whether the call ended.
    pub fn is_terminal(&self) -> bool {
        self.state.is_terminal()
    }

    /// The job the runtime bound the call to, when recorded.
    pub fn job_id(&self) -> Option<&str> {
        match &self.state {
            JournalState::Accepted { job_id } => Some(job_id),
            JournalState::Terminal(outcome) => outcome.job_id(),
            _ => None,
        }
    }

    /// The terminal outcome as the call returned it, once it ended.
    pub fn outcome(&self) -> Option<Result<ToolOutput, Error>> {
        match &self.state {
            JournalState::Terminal(outcome) => Some(outcome.to_result(&self.key, &self.trace_id)),
            _ => None,
        }
    }

    /// The recorded intent, parsed back. Fails (with
    /// [`JournalErrorKind::Intent`]) unless it re-serializes to exactly the
    /// recorded bytes and carries the record's key: a recovered call never
    /// sends a payload that differs from the one the runtime may have seen.
    pub fn invoke(&self) -> Result<Invoke, JournalError> {
        let fail = |message: String| {
            JournalError::new(
                JournalErrorKind::Intent,
                "journal",
                format!("call {}: {message}", self.key),
            )
        };
        let invoke: Invoke = serde_json::from_str(&self.intent)
            .map_err(|e| fail(format!("the recorded intent does not parse: {e}")))?;
        let again = serde_json::to_string(&invoke)
            .map_err(|e| fail(format!("the recorded intent does not serialize: {e}")))?;
        if again != self.intent {
            return Err(fail(
                "the recorded intent does not re-serialize byte-identically".into(),
            ));
        }
        if invoke.idempotency_key.as_deref() != Some(self.key.as_str()) {
            return Err(fail("the recorded intent carries another key".into()));
        }
        if !arcp_types::is_trace_id(&self.trace_id) {
            return Err(fail(format!(
                "the recorded trace id {:?} is not 32 lowercase hex digits",
                self.trace_id
            )));
        }
        Ok(invoke)
    }
}

/// How long the journal keeps records, and how many.
///
/// ```
/// use std::time::Duration;
/// use arcp_sdk::Retention;
/// let retention = Retention::default()
///     .terminal_ttl(Duration::from_secs(3600))
///     .max_records(10_000);
/// # let _ = retention;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Retention {
    /// Terminal records older than this are deleted (default 24 hours).
    pub terminal_ttl: Duration,
    /// Unfinished records untouched for this long are deleted with a warning
    /// (default 7 days): a call nobody recovered in a week is abandoned.
    pub unfinished_ttl: Duration,
    /// At most this many records (default 100 000). The oldest terminal
    /// records make room; when only unfinished ones remain, new calls fail
    /// with [`JournalErrorKind::Full`] until they are recovered or
    /// discarded.
    pub max_records: usize,
    /// How often the retention policy runs besides start-up (default 5 minutes).
    pub purge_interval: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            terminal_ttl: Duration::from_secs(24 * 3600),
            unfinished_ttl: Duration::from_secs(7 * 24 * 3600),
            max_records: 100_000,
            purge_interval: Duration::from_secs(300),
        }
    }
}

impl Retention {
    /// Sets [`Retention::terminal_ttl`].
    pub fn terminal_ttl(mut self, d: Duration) -> Self {
        self.terminal_ttl = d;
        self
    }

    /// Sets [`Retention::unfinished_ttl`].
    pub fn unfinished_ttl(mut self, d: Duration) -> Self {
        self.unfinished_ttl = d;
        self
    }

    /// Sets [`Retention::max_records`] (at least 1).
    pub fn max_records(mut self, n: usize) -> Self {
        self.max_records = n.max(1);
        self
    }

    /// Sets [`Retention::purge_interval`] (at least 10 ms).
    pub fn purge_interval(mut self, d: Duration) -> Self {
        self.purge_interval = d.max(Duration::from_millis(10));
        self
    }
}

/// What one [`Journal::purge`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PurgeReport {
    /// Terminal records deleted for age.
    pub expired_terminal: u64,
    /// Unfinished records deleted for age.
    pub expired_unfinished: u64,
    /// Terminal records deleted to respect `max_records`.
    pub evicted: u64,
    /// Records left.
    pub remaining: u64,
    /// Unfinished records left.
    pub unfinished: u64,
}

/// Whether a client re-drives unfinished calls by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RecoveryMode {
    /// The caller decides: [`Client::recover`](crate::Client::recover)
    /// returns the unfinished calls as [`Invocation`](crate::Invocation)s
    /// to await. The default.
    #[default]
    Manual,
    /// On connect, the client re-drives every unfinished call in the
    /// background (at most 64 at a time); their outcomes land in the journal
    /// ([`Client::lookup`](crate::Client::lookup)). The background task
    /// holds a clone of the client, so the connection stays open until the
    /// recovered calls end (each is bounded by its deadline).
    Automatic,
}

/// Milliseconds since the Unix epoch (0 before it; saturating).
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) fn to_millis(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The inverse of [`to_millis`] (negative values clamp to the epoch).
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) fn from_millis(ms: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH
        .checked_add(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(intent: &Invoke, key: &IdempotencyKey) -> JournalEntry {
        let now = SystemTime::now();
        JournalEntry {
            key: key.clone(),
            tool: intent.tool.clone(),
            intent: serde_json::to_string(intent).unwrap(),
            trace_id: arcp_types::new_trace_id(),
            deadline: Duration::from_secs(5),
            state: JournalState::Prepared,
            attempts: 0,
            created_at: now,
            updated_at: now,
        }
    }

    #[test]
    fn intent_round_trips_byte_exact() {
        let key = IdempotencyKey::new();
        let mut extra = serde_json::Map::new();
        extra.insert("lease_request".into(), json!({}));
        extra.insert("max_runtime_sec".into(), json!(1.0));
        let invoke = Invoke::new(
            "refund",
            json!({"b": 1, "a": 1.0, "c": [0.1, 1e300, -0.0, 18446744073709551615u64, -9223372036854775808i64], "z": "é\u{1F600}\n"}),
        )
        .with_idempotency_key(key.as_str())
        .with_extra(extra);
        let e = entry(&invoke, &key);
        let back = e.invoke().unwrap();
        assert_eq!(back, invoke);
        assert_eq!(serde_json::to_string(&back).unwrap(), e.intent);
    }

    #[test]
    fn intent_that_is_not_canonical_is_refused() {
        let key = IdempotencyKey::new();
        let invoke = Invoke::new("t", json!({})).with_idempotency_key(key.as_str());
        let mut e = entry(&invoke, &key);
        e.intent = e.intent.replace(':', " : ");
        assert_eq!(e.invoke().unwrap_err().kind, JournalErrorKind::Intent);
        let mut e = entry(&invoke, &key);
        e.key = IdempotencyKey::new();
        assert_eq!(e.invoke().unwrap_err().kind, JournalErrorKind::Intent);
        let mut e = entry(&invoke, &key);
        e.intent = "not json".into();
        assert_eq!(e.invoke().unwrap_err().kind, JournalErrorKind::Intent);
    }

    #[test]
    fn outcomes_round_trip_through_json() {
        let key = IdempotencyKey::new();
        let outcomes = [
            JournalOutcome::Ok {
                value: json!({"x": 0.30000000000000004}),
                job_id: Some("job_1".into()),
                replayed: true,
                attempts: 3,
            },
            JournalOutcome::ToolError {
                code: "PERMISSION_DENIED".into(),
                message: "no".into(),
                retryable: false,
                details: Some(json!({"a": 1})),
                job_id: None,
                replayed: false,
                attempts: 1,
                refused: true,
            },
            JournalOutcome::OutcomeUnknown {
                job_id: Some("job_2".into()),
                reason: "accepted only".into(),
                attempts: 2,
            },
            JournalOutcome::DuplicateKey {
                message: "bound".into(),
                attempts: 1,
            },
            JournalOutcome::Cancelled {
                job_id: None,
                attempts: 2,
            },
            JournalOutcome::NotAccepted {
                last_error: "UNAVAILABLE".into(),
                attempts: 4,
            },
            JournalOutcome::Invalid {
                message: "too big".into(),
            },
        ];
        for o in outcomes {
            let text = serde_json::to_string(&o).unwrap();
            let back: JournalOutcome = serde_json::from_str(&text).unwrap();
            assert_eq!(back, o);
            let result = o.to_result(&key, "t");
            assert_eq!(JournalOutcome::from_result(&result), Some(o));
        }
    }
}
