//! The fleet journal: one PostgreSQL database shared by many workers, each
//! unfinished call owned by one worker under a lease, every write fenced by
//! the owner's generation.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use arcp_types::IdempotencyKey;
use deadpool_postgres::{GenericClient, Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

use super::{
    from_millis, to_millis, Journal, JournalEntry, JournalError, JournalErrorKind, JournalOutcome,
    JournalState, JournalWrite, PurgeReport, Retention,
};

/// Serializes schema migrations between workers starting at once
/// (`pg_advisory_xact_lock`): "ARCP" in ASCII.
const MIGRATION_LOCK: i64 = 0x4152_4350;

/// The schema, as numbered migrations applied in order, each in the same
/// transaction as its row in `arcp_journal_schema`. Never edit a published
/// migration: add the next one.
const MIGRATIONS: &[(i32, &str, &str)] = &[(1, "calls, attempts, history, guards", MIGRATION_1)];

/// Version 1: the records, one active attempt per call, the history of
/// every state change, and the triggers that make the invariants the
/// database's (not only this code's).
const MIGRATION_1: &str = r#"
CREATE TABLE arcp_calls (
    key               text        NOT NULL PRIMARY KEY,
    tool              text        NOT NULL,
    intent            text        NOT NULL,
    trace_id          text        NOT NULL,
    deadline_ms       bigint      NOT NULL,
    state             text        NOT NULL
                      CHECK (state IN ('prepared', 'sent', 'accepted', 'terminal')),
    attempts          bigint      NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    job_id            text,
    outcome           text,
    created_ms        bigint      NOT NULL,
    updated_ms        bigint      NOT NULL,
    -- The worker with execution authority, and the fencing generation it
    -- holds it under (bumped by every claim).
    owner             text        NOT NULL,
    generation        bigint      NOT NULL CHECK (generation >= 1),
    -- Until when the owner's authority holds (the database's clock); NULL
    -- once terminal.
    lease_until       timestamptz,
    -- Who made the last change, under which generation (history and the
    -- fencing guard read these).
    writer            text        NOT NULL,
    writer_generation bigint      NOT NULL,
    CHECK (state <> 'accepted' OR job_id IS NOT NULL),
    CHECK ((state = 'terminal') = (outcome IS NOT NULL)),
    CHECK ((state = 'terminal') = (lease_until IS NULL))
);
CREATE INDEX arcp_calls_claimable ON arcp_calls (lease_until, created_ms) WHERE state <> 'terminal';
CREATE INDEX arcp_calls_by_state ON arcp_calls (state, updated_ms);
CREATE INDEX arcp_calls_by_owner ON arcp_calls (owner) WHERE state <> 'terminal';

CREATE TABLE arcp_attempts (
    key        text        NOT NULL REFERENCES arcp_calls (key) ON DELETE CASCADE,
    generation bigint      NOT NULL,
    worker     text        NOT NULL,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at   timestamptz,
    ended_by   text        CHECK (ended_by IN ('terminal', 'superseded')),
    PRIMARY KEY (key, generation),
    CHECK ((ended_at IS NULL) = (ended_by IS NULL))
);
-- Exactly one attempt per call has execution authority.
CREATE UNIQUE INDEX arcp_attempts_one_active ON arcp_attempts (key) WHERE ended_at IS NULL;

CREATE TABLE arcp_history (
    id         bigserial   PRIMARY KEY,
    key        text        NOT NULL REFERENCES arcp_calls (key) ON DELETE CASCADE,
    generation bigint      NOT NULL,
    worker     text        NOT NULL,
    event      text        NOT NULL,
    state      text        NOT NULL,
    attempts   bigint      NOT NULL,
    at         timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX arcp_history_by_key ON arcp_history (key, id);

-- Refuses every update that breaks an invariant, whoever sends it.
CREATE FUNCTION arcp_calls_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state = 'terminal' THEN
        RAISE EXCEPTION 'call %: a terminal record is final', OLD.key
            USING ERRCODE = 'AR001';
    END IF;
    IF NEW.key <> OLD.key OR NEW.tool <> OLD.tool OR NEW.intent <> OLD.intent
       OR NEW.trace_id <> OLD.trace_id OR NEW.created_ms <> OLD.created_ms THEN
        RAISE EXCEPTION 'call %: key, tool, intent and trace id never change', OLD.key
            USING ERRCODE = 'AR003';
    END IF;
    IF NEW.generation < OLD.generation
       OR NEW.generation > OLD.generation + 1
       OR (NEW.generation = OLD.generation AND NEW.owner <> OLD.owner) THEN
        RAISE EXCEPTION 'call %: ownership moves only to the next generation (% of % -> % of %)',
            OLD.key, OLD.generation, OLD.owner, NEW.generation, NEW.owner
            USING ERRCODE = 'AR002';
    END IF;
    IF NEW.writer <> NEW.owner OR NEW.writer_generation <> NEW.generation THEN
        RAISE EXCEPTION 'call %: write by % under generation % refused (fenced): the call is at generation % of %',
            OLD.key, NEW.writer, NEW.writer_generation, NEW.generation, NEW.owner
            USING ERRCODE = 'AR002';
    END IF;
    IF (OLD.state = 'sent' AND NEW.state = 'prepared')
       OR (OLD.state = 'accepted' AND NEW.state IN ('prepared', 'sent'))
       OR NEW.attempts < OLD.attempts THEN
        RAISE EXCEPTION 'call %: state % -> % (attempts % -> %) moves backwards',
            OLD.key, OLD.state, NEW.state, OLD.attempts, NEW.attempts
            USING ERRCODE = 'AR003';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER arcp_calls_guard BEFORE UPDATE ON arcp_calls
    FOR EACH ROW EXECUTE FUNCTION arcp_calls_guard();

-- Keeps attempts and history in the transaction of the change itself.
CREATE FUNCTION arcp_calls_record() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ev text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        ev := CASE WHEN NEW.state = 'terminal' THEN 'terminal' ELSE 'prepared' END;
        IF NEW.state <> 'terminal' THEN
            INSERT INTO arcp_attempts (key, generation, worker)
                VALUES (NEW.key, NEW.generation, NEW.owner);
        END IF;
    ELSE
        IF NEW.generation <> OLD.generation THEN
            UPDATE arcp_attempts SET ended_at = clock_timestamp(), ended_by = 'superseded'
                WHERE key = NEW.key AND ended_at IS NULL;
            INSERT INTO arcp_attempts (key, generation, worker)
                VALUES (NEW.key, NEW.generation, NEW.owner);
            ev := 'claimed';
        ELSIF NEW.state <> OLD.state OR NEW.attempts <> OLD.attempts
              OR NEW.job_id IS DISTINCT FROM OLD.job_id THEN
            ev := NEW.state;
        ELSE
            -- A lease renewal or release: not a state change.
            RETURN NULL;
        END IF;
        IF NEW.state = 'terminal' THEN
            UPDATE arcp_attempts SET ended_at = clock_timestamp(), ended_by = 'terminal'
                WHERE key = NEW.key AND ended_at IS NULL;
        END IF;
    END IF;
    INSERT INTO arcp_history (key, generation, worker, event, state, attempts)
        VALUES (NEW.key, NEW.writer_generation, NEW.writer, ev, NEW.state, NEW.attempts);
    RETURN NULL;
END
$$;
CREATE TRIGGER arcp_calls_record AFTER INSERT OR UPDATE ON arcp_calls
    FOR EACH ROW EXECUTE FUNCTION arcp_calls_record();
"#;

/// A new record under `$13` (generation), owned by `$12`; nothing when the
/// key exists.
const INSERT: &str = "INSERT INTO arcp_calls (key, tool, intent, trace_id, deadline_ms, state, \
     attempts, job_id, outcome, created_ms, updated_ms, owner, generation, lease_until, writer, \
     writer_generation) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, \
     CASE WHEN $6 = 'terminal' THEN NULL \
          ELSE clock_timestamp() + $14::bigint * interval '1 millisecond' END, $12, $13) \
     ON CONFLICT (key) DO NOTHING";

/// The transitions, each fenced: `$1` key, `$2` worker, `$3` generation.
/// Each names its writer (`writer`, `writer_generation`): the history row
/// records it, and the guard trigger refuses it unless it is the current
/// owner and generation, even if a `WHERE` clause were wrong.
const SENT: &str = "UPDATE arcp_calls SET writer = $2, writer_generation = $3, \
     attempts = GREATEST(attempts, $4), \
     state = CASE state WHEN 'prepared' THEN 'sent' ELSE state END, updated_ms = $5 \
     WHERE key = $1 AND owner = $2 AND generation = $3 AND state <> 'terminal'";
const ACCEPTED: &str = "UPDATE arcp_calls SET writer = $2, writer_generation = $3, \
     state = 'accepted', job_id = $4, updated_ms = $5 \
     WHERE key = $1 AND owner = $2 AND generation = $3 AND state <> 'terminal'";
const TERMINAL: &str = "UPDATE arcp_calls SET writer = $2, writer_generation = $3, \
     state = 'terminal', outcome = $4, \
     job_id = coalesce($5, job_id), attempts = GREATEST(attempts, $6), updated_ms = $7, \
     lease_until = NULL \
     WHERE key = $1 AND owner = $2 AND generation = $3 AND state <> 'terminal'";
const RELEASE: &str = "UPDATE arcp_calls SET writer = $2, writer_generation = $3, \
     lease_until = clock_timestamp() \
     WHERE key = $1 AND owner = $2 AND generation = $3 AND state <> 'terminal'";

/// A removal, fenced: a terminal record, one this worker holds (`$2` at
/// generation `$3`), or one whose lease lapsed.
const REMOVE: &str = "DELETE FROM arcp_calls WHERE key = $1 AND (state = 'terminal' \
     OR (owner = $2 AND generation = $3) OR lease_until <= clock_timestamp())";

/// The set-wise forms of `INSERT` and the transitions, over arrays (one
/// element per write; `unnest` pairs them up), each returning the keys it
/// changed; the same fencing as the one-row forms.
const INSERT_MANY: &str = "INSERT INTO arcp_calls (key, tool, intent, trace_id, deadline_ms, \
     state, attempts, job_id, outcome, created_ms, updated_ms, owner, generation, lease_until, \
     writer, writer_generation) \
     SELECT k, t, i, tr, d, s, a, j, o, c, u, $12, 1, \
       CASE WHEN s = 'terminal' THEN NULL \
            ELSE clock_timestamp() + $13::bigint * interval '1 millisecond' END, $12, 1 \
     FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[], \
                 $7::bigint[], $8::text[], $9::text[], $10::bigint[], $11::bigint[]) \
          AS x(k, t, i, tr, d, s, a, j, o, c, u) \
     ON CONFLICT (key) DO NOTHING RETURNING key";
const SENT_MANY: &str = "UPDATE arcp_calls c SET writer = $1, writer_generation = x.g, \
     attempts = GREATEST(c.attempts, x.a), \
     state = CASE c.state WHEN 'prepared' THEN 'sent' ELSE c.state END, updated_ms = x.u \
     FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::bigint[]) AS x(k, g, a, u) \
     WHERE c.key = x.k AND c.owner = $1 AND c.generation = x.g AND c.state <> 'terminal' \
     RETURNING c.key";
const ACCEPTED_MANY: &str = "UPDATE arcp_calls c SET writer = $1, writer_generation = x.g, \
     state = 'accepted', job_id = x.j, updated_ms = x.u \
     FROM unnest($2::text[], $3::bigint[], $4::text[], $5::bigint[]) AS x(k, g, j, u) \
     WHERE c.key = x.k AND c.owner = $1 AND c.generation = x.g AND c.state <> 'terminal' \
     RETURNING c.key";
const TERMINAL_MANY: &str = "UPDATE arcp_calls c SET writer = $1, writer_generation = x.g, \
     state = 'terminal', outcome = x.o, job_id = coalesce(x.j, c.job_id), \
     attempts = GREATEST(c.attempts, x.a), updated_ms = x.u, lease_until = NULL \
     FROM unnest($2::text[], $3::bigint[], $4::text[], $5::text[], $6::bigint[], $7::bigint[]) \
          AS x(k, g, o, j, a, u) \
     WHERE c.key = x.k AND c.owner = $1 AND c.generation = x.g AND c.state <> 'terminal' \
     RETURNING c.key";
const RELEASE_MANY: &str = "UPDATE arcp_calls c SET writer = $1, writer_generation = x.g, \
     lease_until = clock_timestamp() \
     FROM unnest($2::text[], $3::bigint[]) AS x(k, g) \
     WHERE c.key = x.k AND c.owner = $1 AND c.generation = x.g AND c.state <> 'terminal' \
     RETURNING c.key";

/// A segment of this many writes or more goes set-wise (fewer: one
/// pipelined statement each, which costs no more).
const SET_WISE_FROM: usize = 4;

/// The columns of new records, for [`INSERT_MANY`].
#[derive(Default)]
struct NewRows {
    keys: Vec<String>,
    tools: Vec<String>,
    intents: Vec<String>,
    traces: Vec<String>,
    deadlines: Vec<i64>,
    states: Vec<&'static str>,
    attempts: Vec<i64>,
    jobs: Vec<Option<String>>,
    outcomes: Vec<Option<String>>,
    created: Vec<i64>,
    updated: Vec<i64>,
}

impl NewRows {
    fn push(&mut self, e: &JournalEntry) {
        let (state, job_id, outcome) = state_columns(&e.state);
        self.keys.push(e.key.as_str().to_owned());
        self.tools.push(e.tool.clone());
        self.intents.push(e.intent.clone());
        self.traces.push(e.trace_id.clone());
        self.deadlines.push(millis(e.deadline));
        self.states.push(state);
        self.attempts.push(i64::from(e.attempts));
        self.jobs.push(job_id);
        self.outcomes.push(outcome);
        self.created.push(to_millis(e.created_at));
        self.updated.push(to_millis(e.updated_at));
    }
}

/// The columns of terminal writes, for [`TERMINAL_MANY`].
#[derive(Default)]
struct TerminalRows<'a> {
    keys: Vec<&'a str>,
    generations: Vec<i64>,
    outcomes: Vec<String>,
    jobs: Vec<Option<String>>,
    attempts: Vec<i64>,
    at: Vec<i64>,
}

impl<'a> TerminalRows<'a> {
    fn push(&mut self, key: &'a str, generation: i64, outcome: &JournalOutcome, at: SystemTime) {
        self.keys.push(key);
        self.generations.push(generation);
        // An outcome is plain data: it always serializes.
        self.outcomes
            .push(serde_json::to_string(outcome).unwrap_or_else(|_| "null".into()));
        self.jobs.push(outcome.job_id().map(str::to_owned));
        self.attempts.push(i64::from(outcome.attempts()));
        self.at.push(to_millis(at));
    }
}

const COLUMNS: &str = "key, tool, intent, trace_id, deadline_ms, state, attempts, job_id, \
                       outcome, created_ms, updated_ms";

/// Options of [`PostgresJournal::connect`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PostgresOptions {
    /// This worker's name in the journal (owner of its calls, author of its
    /// history rows). Unique per live worker; default
    /// `<host>-<pid>-<random>`. A restarted worker that reuses its name
    /// reclaims its previous incarnation's calls at once instead of after
    /// their lease.
    pub worker_id: String,
    /// How long a worker's authority over a call lasts without renewal
    /// (default 30 s): a worker that dies (or freezes) this long loses its
    /// calls to the next `recover` of another worker.
    pub lease_ttl: Duration,
    /// How often leases are renewed (default a third of the lease).
    pub renew_interval: Duration,
    /// Connections in the pool (default 2: the writer thread uses one at a
    /// time).
    pub pool_size: usize,
    /// How long connecting and each pool checkout may take (default 10 s).
    /// Each statement is bounded by the lease (`statement_timeout`, unless
    /// the URL's `options` set one), and TCP keepalives notice a server
    /// that vanished.
    pub connect_timeout: Duration,
    /// The client-side bound on one database round trip (a checkout and its
    /// statements; one that must open a connection first gets
    /// `connect_timeout` more): past it the operation fails with
    /// [`JournalErrorKind::Unavailable`] and the pool's idle connections
    /// are dropped, so a link that accepts and then hangs (a middlebox
    /// black-holing packets) costs at most this much, and a dead
    /// connection is replaced. `None` (the default): a quarter of the
    /// lease, at most `connect_timeout`.
    pub round_trip_timeout: Option<Duration>,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            worker_id: default_worker_id(),
            lease_ttl: Duration::from_secs(30),
            renew_interval: Duration::from_secs(10),
            pool_size: 2,
            connect_timeout: Duration::from_secs(10),
            round_trip_timeout: None,
        }
    }
}

impl PostgresOptions {
    /// Sets [`PostgresOptions::worker_id`].
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.worker_id = id.into();
        self
    }

    /// Sets [`PostgresOptions::lease_ttl`] (at least 100 ms) and the renew
    /// interval to a third of it.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl.max(Duration::from_millis(100));
        self.renew_interval = self.lease_ttl / 3;
        self
    }

    /// Sets [`PostgresOptions::renew_interval`] (at least 10 ms; keep it
    /// well under the lease).
    pub fn renew_interval(mut self, every: Duration) -> Self {
        self.renew_interval = every.max(Duration::from_millis(10));
        self
    }

    /// Sets [`PostgresOptions::pool_size`] (at least 1).
    pub fn pool_size(mut self, n: usize) -> Self {
        self.pool_size = n.max(1);
        self
    }

    /// Sets [`PostgresOptions::round_trip_timeout`].
    pub fn round_trip_timeout(mut self, d: Duration) -> Self {
        self.round_trip_timeout = Some(d);
        self
    }

    /// The bound on one round trip, as [`PostgresOptions::round_trip_timeout`] says.
    fn round_trip(&self) -> Duration {
        self.round_trip_timeout
            .unwrap_or_else(|| (self.lease_ttl / 4).min(self.connect_timeout))
            .max(Duration::from_millis(1))
    }

    /// Sets [`PostgresOptions::connect_timeout`].
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }
}

fn default_worker_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".into());
    format!(
        "{host}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// A [`Journal`] in a PostgreSQL database that a fleet of workers shares:
/// any worker finishes a dead worker's calls, and each tool still runs once.
///
/// **Ownership.** Every unfinished call is owned by one worker
/// ([`PostgresOptions::worker_id`]) under a lease
/// ([`PostgresOptions::lease_ttl`], renewed by the client's journal thread
/// while the worker lives) and a fencing *generation*. A worker's
/// [`Client::recover`](crate::Client::recover) claims the calls whose lease
/// expired (`SELECT ... FOR UPDATE SKIP LOCKED`, so two workers never claim
/// the same call) and bumps their generation. Every later write names the
/// generation its worker holds; the database refuses a write under an older
/// one (a `WHERE` guard, and a trigger behind it), so a worker that froze
/// past its lease and wakes up cannot overwrite the new owner's record: its
/// in-flight calls end with [`JournalErrorKind::Fenced`] and are not driven
/// further. The runtime deduplicates the key, so the call the new owner
/// re-sends runs once.
///
/// **Invariants held by the database** (schema version 1, applied by
/// [`PostgresJournal::connect`] under an advisory lock): a terminal record
/// is final (trigger); one active attempt per call (partial unique index on
/// `arcp_attempts`); state and attempt counts never move backwards, and
/// ownership only moves to the next generation (trigger); every state change
/// writes its `arcp_history` row (worker, generation) in its own
/// transaction (trigger). A worker that disappears leaves its calls
/// unfinished: only an outcome makes a record terminal.
///
/// **Why a runtime of its own.** [`Journal`] is called from the client's
/// dedicated writer thread, which blocks; `tokio-postgres` is async. The
/// journal owns a one-thread tokio runtime that drives its connections and
/// blocks the writer thread on each operation (`block_on`), so no journal
/// I/O runs on the application's runtime and the pool's connections live
/// on a runtime that outlives any caller's. (The sync `postgres` crate does
/// the same internally, without a pool.) Blocking methods called from
/// inside an async context run on a scoped helper thread instead of
/// panicking.
///
/// **Retention** ([`Retention`]) applies to the whole database: every
/// worker purges terminal records past `terminal_ttl`, and unfinished ones
/// untouched for `unfinished_ttl` whose lease has lapsed (a live worker's
/// long call renews its lease, so it is never purged under it).
///
/// No TLS: connect over a Unix socket or a trusted network (the URL's
/// `sslmode` must not require TLS).
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use arcp_client::{Client, PostgresJournal, PostgresOptions};
/// let journal = PostgresJournal::connect(
///     "postgres://arcp@db.internal/arcp",
///     PostgresOptions::default().lease_ttl(Duration::from_secs(15)),
/// )
/// .await?;
/// let client = Client::builder("ws://127.0.0.1:7777/arcp")
///     .journal(journal)
///     .connect()
///     .await?;
/// // Finish what dead workers left: each claimed call is this worker's now.
/// for call in client.recover().await? {
///     tokio::spawn(call);
/// }
/// # Ok(()) }
/// ```
pub struct PostgresJournal {
    /// `None` only while dropping.
    runtime: Option<tokio::runtime::Runtime>,
    pool: Pool,
    worker: String,
    lease_ms: i64,
    lease_ttl: Duration,
    /// The client-side bound on one round trip.
    round_trip: Duration,
    /// Round trips that timed out since the last that did not.
    timeouts_in_a_row: AtomicU32,
    renew_interval: Duration,
    connect_timeout: Duration,
    /// Calls this worker has authority over: key -> generation.
    held: Mutex<HashMap<String, i64>>,
    /// Keys whose writes were refused since the last `take_fenced`.
    fenced: Mutex<Vec<IdempotencyKey>>,
    location: String,
}

impl fmt::Debug for PostgresJournal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresJournal")
            .field("location", &self.location)
            .field("worker", &self.worker)
            .finish_non_exhaustive()
    }
}

impl Drop for PostgresJournal {
    fn drop(&mut self) {
        // Dropping a runtime blocks; this may run on an async task (a
        // journal never handed to a client), where that is forbidden.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Critical sections only swap plain collections: still consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a guarded update found when it changed nothing.
enum Missed {
    /// No record: the write is ignored (as for every journal).
    Gone,
    /// The record is terminal at this worker's own generation: a late
    /// transition, ignored.
    Finished,
    /// Another generation owns (or finished) the call: the write is refused.
    Fenced,
}

impl PostgresJournal {
    /// Connects to `url` (a libpq-style `postgres://user@host/db` or
    /// `host=/run/postgresql dbname=arcp` string), applies the schema
    /// migrations this version needs, and returns the journal for one
    /// client. Fails with [`JournalErrorKind::Io`] when the server cannot
    /// be reached, [`JournalErrorKind::Schema`] when the database holds a
    /// newer schema or foreign tables of the same names.
    pub async fn connect(url: &str, options: PostgresOptions) -> Result<Self, JournalError> {
        let journal = Self::build(url, options)?;
        let rt = journal.rt().handle().clone();
        let pool = journal.pool.clone();
        let location = journal.location.clone();
        let timeout = journal_timeout(&journal);
        rt.spawn(async move {
            tokio::time::timeout(timeout, migrate(&pool, &location))
                .await
                .unwrap_or_else(|_| {
                    Err(JournalError::new(
                        JournalErrorKind::Io,
                        &location,
                        format!("no answer from the server within {timeout:?}"),
                    ))
                })
        })
        .await
        .map_err(|e| JournalError::new(JournalErrorKind::Io, &journal.location, e.to_string()))??;
        Ok(journal)
    }

    /// [`PostgresJournal::connect`] for blocking code (no async runtime
    /// needed).
    pub fn connect_blocking(url: &str, options: PostgresOptions) -> Result<Self, JournalError> {
        let journal = Self::build(url, options)?;
        let timeout = journal_timeout(&journal);
        journal.run_blocking(async {
            tokio::time::timeout(timeout, migrate(&journal.pool, &journal.location))
                .await
                .unwrap_or_else(|_| {
                    Err(JournalError::new(
                        JournalErrorKind::Io,
                        &journal.location,
                        format!("no answer from the server within {timeout:?}"),
                    ))
                })
        })?;
        Ok(journal)
    }

    fn build(url: &str, options: PostgresOptions) -> Result<Self, JournalError> {
        // The fields are public: a renewal that does not come before the
        // lease lapses would hand this worker's calls to the others.
        if options.renew_interval >= options.lease_ttl {
            return Err(JournalError::new(
                JournalErrorKind::Io,
                "postgres",
                format!(
                    "the renew interval ({:?}) must be shorter than the lease ({:?}): leases \
                     would lapse between renewals and other workers would take this worker's calls",
                    options.renew_interval, options.lease_ttl
                ),
            ));
        }
        let mut config = tokio_postgres::Config::from_str(url).map_err(|e| {
            JournalError::new(
                JournalErrorKind::Io,
                "postgres",
                format!("invalid PostgreSQL URL: {e}"),
            )
        })?;
        config.connect_timeout(options.connect_timeout);
        config.application_name("arcp-journal");
        // Nothing waits on the database longer than a lease: past it the
        // worker has lost its calls anyway. A statement (a row lock held by
        // another worker, a stalled server) ends with an error, and a peer
        // that vanished is noticed by keepalives and unacknowledged writes.
        let lease_ms = options.lease_ttl.as_millis().max(1);
        let mut server_options = config.get_options().unwrap_or_default().to_owned();
        if !server_options.contains("statement_timeout") {
            server_options.push_str(&format!(" -c statement_timeout={lease_ms}"));
        }
        config.options(server_options.trim());
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(10));
        config.keepalives_interval(Duration::from_secs(5));
        config.keepalives_retries(3);
        config.tcp_user_timeout(options.lease_ttl);
        let location = describe(&config, &options.worker_id);
        if options.worker_id.is_empty() {
            return Err(JournalError::new(
                JournalErrorKind::Io,
                &location,
                "the worker id is empty",
            ));
        }
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(options.connect_timeout))
            .create_timeout(Some(options.connect_timeout))
            .recycle_timeout(Some(options.connect_timeout))
            .build()
            .map_err(|e| JournalError::new(JournalErrorKind::Io, &location, e.to_string()))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("arcp-journal-pg")
            .enable_all()
            .build()
            .map_err(|e| {
                JournalError::new(
                    JournalErrorKind::Io,
                    &location,
                    format!("could not start the journal's runtime: {e}"),
                )
            })?;
        let round_trip = options.round_trip();
        Ok(PostgresJournal {
            runtime: Some(runtime),
            pool,
            worker: options.worker_id,
            lease_ms: i64::try_from(options.lease_ttl.as_millis()).unwrap_or(i64::MAX),
            lease_ttl: options.lease_ttl,
            round_trip,
            timeouts_in_a_row: AtomicU32::new(0),
            renew_interval: options.renew_interval,
            connect_timeout: options.connect_timeout,
            held: Mutex::new(HashMap::new()),
            fenced: Mutex::new(Vec::new()),
            location,
        })
    }

    /// This worker's id.
    pub fn worker_id(&self) -> &str {
        &self.worker
    }

    /// The schema version of the database (the highest migration applied).
    /// Runs on the journal's own runtime: it never blocks the caller's.
    pub async fn schema_version(&self) -> Result<i32, JournalError> {
        self.off_thread(
            "SELECT max(version) FROM arcp_journal_schema",
            None,
            |_, row| Ok(row.get::<_, Option<i32>>(0).unwrap_or(0)),
        )
        .await
        .map(|versions| versions.into_iter().next().unwrap_or(0))
    }

    /// The schema version this code migrates to.
    pub fn latest_schema_version() -> i32 {
        MIGRATIONS.last().map_or(0, |m| m.0)
    }

    /// Up to `limit` records of every state and owner, the most recently
    /// changed first. Runs on the journal's own runtime: it never blocks the
    /// caller's.
    pub async fn list(&self, limit: usize) -> Result<Vec<JournalEntry>, JournalError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.off_thread(
            &format!("SELECT {COLUMNS} FROM arcp_calls ORDER BY updated_ms DESC, key LIMIT $1"),
            Some(limit),
            row_entry,
        )
        .await
    }

    /// Runs one query (with an optional `bigint` parameter) on the
    /// journal's runtime, bounded as every round trip is, and reads each
    /// row with `read`: for the async methods, which must not block the
    /// caller's runtime.
    async fn off_thread<T: Send + 'static>(
        &self,
        sql: &str,
        param: Option<i64>,
        read: fn(&str, &tokio_postgres::Row) -> Result<T, JournalError>,
    ) -> Result<Vec<T>, JournalError> {
        let (pool, location, sql) = (self.pool.clone(), self.location.clone(), sql.to_owned());
        let bound = self.round_trip.saturating_add(self.connect_timeout);
        let task = self.rt().spawn(async move {
            let query = async {
                let client = pool.get().await.map_err(|e| {
                    JournalError::new(
                        JournalErrorKind::Unavailable,
                        &location,
                        format!("no connection to the journal database: {e}"),
                    )
                })?;
                let rows = match &param {
                    Some(p) => client.query(&sql, &[p]).await,
                    None => client.query(&sql, &[]).await,
                }
                .map_err(|e| classify(&location, &e))?;
                rows.iter().map(|r| read(&location, r)).collect()
            };
            tokio::time::timeout(bound, query)
                .await
                .unwrap_or_else(|_| {
                    Err(JournalError::new(
                        JournalErrorKind::Unavailable,
                        &location,
                        format!("no answer from the database within {bound:?}"),
                    ))
                })
        });
        task.await
            .map_err(|e| JournalError::new(JournalErrorKind::Io, &self.location, e.to_string()))?
    }

    /// The calls this worker has authority over right now (key and
    /// generation), as far as it knows (a claim by another worker shows at
    /// the next renewal or write).
    pub fn held(&self) -> Vec<(IdempotencyKey, u64)> {
        lock(&self.held)
            .iter()
            .filter_map(|(k, g)| {
                Some((
                    IdempotencyKey::try_from(k.as_str()).ok()?,
                    u64::try_from(*g).ok()?,
                ))
            })
            .collect()
    }

    fn rt(&self) -> &tokio::runtime::Runtime {
        self.runtime
            .as_ref()
            .expect("the runtime is taken only by drop")
    }

    /// Runs one database round trip `f` on the journal's runtime, blocking
    /// this thread, bounded by the round-trip timeout: past it `f` is
    /// dropped (its connection with it) and every idle pooled connection
    /// too (a link that hangs hangs them all), and the operation fails with
    /// [`JournalErrorKind::Unavailable`].
    fn block<T: Send>(
        &self,
        f: impl Future<Output = Result<T, JournalError>> + Send,
    ) -> Result<T, JournalError> {
        // A round trip that must first open a connection (none idle) may
        // take the connect timeout more: opening one is bounded apart. After
        // timeouts in a row the bound doubles (up to four times): a link
        // that is slow, not dead, then still gets its batches through.
        let slow = self.timeouts_in_a_row.load(Ordering::Relaxed).min(2);
        let base = self.round_trip.saturating_mul(1 << slow);
        let bound = if self.pool.status().available > 0 {
            base
        } else {
            base.saturating_add(self.connect_timeout)
        };
        self.run_blocking(async {
            let outcome = tokio::time::timeout(bound, f).await;
            if outcome.is_ok() {
                self.timeouts_in_a_row.store(0, Ordering::Relaxed);
            }
            outcome.unwrap_or_else(|_| {
                self.timeouts_in_a_row.fetch_add(1, Ordering::Relaxed);
                let idle = self.pool.status().available;
                self.pool.retain(|_, _| false);
                tracing::warn!(
                    journal = %self.location,
                    ?bound,
                    dropped = idle,
                    "no answer from the journal database in time; its idle connections are dropped"
                );
                Err(JournalError::new(
                    JournalErrorKind::Unavailable,
                    &self.location,
                    format!("no answer from the database within {bound:?}"),
                ))
            })
        })
    }

    /// Runs `f` to completion on the journal's runtime, blocking this
    /// thread. Inside an async context (where `block_on` would panic), on a
    /// scoped helper thread.
    fn run_blocking<F>(&self, f: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        let rt = self.rt();
        if tokio::runtime::Handle::try_current().is_err() {
            return rt.block_on(f);
        }
        std::thread::scope(|s| match s.spawn(|| rt.block_on(f)).join() {
            Ok(out) => out,
            Err(panic) => std::panic::resume_unwind(panic),
        })
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, JournalError> {
        self.pool.get().await.map_err(|e| {
            JournalError::new(
                JournalErrorKind::Unavailable,
                &self.location,
                format!("no connection to the journal database: {e}"),
            )
        })
    }

    fn err(&self, e: tokio_postgres::Error) -> JournalError {
        classify(&self.location, &e)
    }

    fn select(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<JournalEntry>, JournalError> {
        self.block(async {
            let client = self.client().await?;
            let stmt = client.prepare_cached(sql).await.map_err(|e| self.err(e))?;
            let rows = client.query(&stmt, params).await.map_err(|e| self.err(e))?;
            rows.iter().map(|r| self.entry(r)).collect()
        })
    }

    /// Validates a row; one this code cannot have written is corruption.
    fn entry(&self, r: &tokio_postgres::Row) -> Result<JournalEntry, JournalError> {
        row_entry(&self.location, r)
    }

    /// The batch inside its transaction. Consecutive writes on distinct
    /// keys are pipelined (sent together on the connection, executed in
    /// order): the common case, a new record or a transition of a call this
    /// worker holds, is one statement each and one round trip per segment.
    /// A write whose fast statement changed nothing (a key that exists, a
    /// call not held) then takes the full path of [`Self::apply_one`].
    async fn apply_all(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        writes: &[JournalWrite],
        held: &mut HashMap<String, i64>,
        fenced: &mut Vec<IdempotencyKey>,
    ) -> Result<(), tokio_postgres::Error> {
        let mut start = 0;
        while start < writes.len() {
            let mut keys = HashSet::new();
            let mut end = start;
            while end < writes.len() && keys.insert(write_key(&writes[end])) {
                end += 1;
            }
            let segment = &writes[start..end];
            let tried = if segment.len() >= SET_WISE_FROM {
                self.set_wise(tx, segment, held).await?
            } else {
                let held = &*held;
                futures_util::future::join_all(segment.iter().map(|w| self.fast_path(tx, w, held)))
                    .await
            };
            for (write, tried) in segment.iter().zip(tried) {
                match (tried?, write) {
                    (Some(1), JournalWrite::Prepare(e)) => {
                        if e.state.is_terminal() {
                            held.remove(e.key.as_str());
                        } else {
                            held.insert(e.key.as_str().to_owned(), 1);
                        }
                    }
                    (Some(1), JournalWrite::Sent { .. } | JournalWrite::Accepted { .. }) => {}
                    (Some(1), JournalWrite::Terminal { key, .. })
                    | (Some(1), JournalWrite::Release { key }) => {
                        held.remove(key.as_str());
                    }
                    (Some(n), JournalWrite::Remove { key }) if n > 0 => {
                        held.remove(key.as_str());
                    }
                    _ => self.apply_one(tx, write, held, fenced).await?,
                }
            }
            start = end;
        }
        Ok(())
    }

    /// The fast forms of a segment's writes (distinct keys), set-wise: one
    /// statement per kind of write for the whole segment (new records,
    /// sent, accepted, terminal, release), each fenced as its one-row form
    /// is, returning the keys it changed. Per write, as
    /// [`fast_path`](Self::fast_path) answers: rows changed, or `None` for
    /// a write with no fast form (a call not held).
    async fn set_wise(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        segment: &[JournalWrite],
        held: &HashMap<String, i64>,
    ) -> Result<Vec<Result<Option<u64>, tokio_postgres::Error>>, tokio_postgres::Error> {
        let me = self.worker.as_str();
        let mut out: Vec<Option<u64>> = vec![Some(0); segment.len()];
        // Columns of each kind, and where each row came from.
        let mut new = NewRows::default();
        let mut sent: (Vec<&str>, Vec<i64>, Vec<i64>, Vec<i64>) = Default::default();
        let mut accepted: (Vec<&str>, Vec<i64>, Vec<&str>, Vec<i64>) = Default::default();
        let mut terminal: TerminalRows = Default::default();
        let mut release: (Vec<&str>, Vec<i64>) = Default::default();
        let mut one_by_one = Vec::new();
        for (i, write) in segment.iter().enumerate() {
            let generation = held.get(write_key(write)).copied();
            match (write, generation) {
                (JournalWrite::Prepare(e), _) => new.push(e),
                (JournalWrite::Sent { key, attempts, at }, Some(g)) => {
                    sent.0.push(key.as_str());
                    sent.1.push(g);
                    sent.2.push(i64::from(*attempts));
                    sent.3.push(to_millis(*at));
                }
                (JournalWrite::Accepted { key, job_id, at }, Some(g)) => {
                    accepted.0.push(key.as_str());
                    accepted.1.push(g);
                    accepted.2.push(job_id.as_str());
                    accepted.3.push(to_millis(*at));
                }
                (JournalWrite::Terminal { key, outcome, at }, Some(g)) => {
                    terminal.push(key.as_str(), g, outcome, *at);
                }
                (JournalWrite::Release { key }, Some(g)) => {
                    release.0.push(key.as_str());
                    release.1.push(g);
                }
                // Not held: no fast form (the release of a fenced call is
                // nothing to do).
                (JournalWrite::Release { .. }, None) => {}
                (JournalWrite::Remove { .. }, _) => one_by_one.push(i),
                (_, None) => out[i] = None,
            }
        }
        let mut changed: HashSet<String> = HashSet::new();
        let mut run = |rows: Vec<tokio_postgres::Row>| {
            changed.extend(rows.iter().map(|r| r.get::<_, String>(0)));
        };
        if !new.keys.is_empty() {
            let stmt = tx.prepare_cached(INSERT_MANY).await?;
            run(tx
                .query(
                    &stmt,
                    &[
                        &new.keys,
                        &new.tools,
                        &new.intents,
                        &new.traces,
                        &new.deadlines,
                        &new.states,
                        &new.attempts,
                        &new.jobs,
                        &new.outcomes,
                        &new.created,
                        &new.updated,
                        &me,
                        &self.lease_ms,
                    ],
                )
                .await?);
        }
        if !sent.0.is_empty() {
            let stmt = tx.prepare_cached(SENT_MANY).await?;
            run(tx
                .query(&stmt, &[&me, &sent.0, &sent.1, &sent.2, &sent.3])
                .await?);
        }
        if !accepted.0.is_empty() {
            let stmt = tx.prepare_cached(ACCEPTED_MANY).await?;
            run(tx
                .query(
                    &stmt,
                    &[&me, &accepted.0, &accepted.1, &accepted.2, &accepted.3],
                )
                .await?);
        }
        if !terminal.keys.is_empty() {
            let stmt = tx.prepare_cached(TERMINAL_MANY).await?;
            run(tx
                .query(
                    &stmt,
                    &[
                        &me,
                        &terminal.keys,
                        &terminal.generations,
                        &terminal.outcomes,
                        &terminal.jobs,
                        &terminal.attempts,
                        &terminal.at,
                    ],
                )
                .await?);
        }
        if !release.0.is_empty() {
            let stmt = tx.prepare_cached(RELEASE_MANY).await?;
            run(tx.query(&stmt, &[&me, &release.0, &release.1]).await?);
        }
        let mut answers = Vec::with_capacity(segment.len());
        for (i, write) in segment.iter().enumerate() {
            answers.push(if one_by_one.contains(&i) {
                self.fast_path(tx, write, held).await
            } else {
                Ok(out[i].map(|_| u64::from(changed.contains(write_key(write)))))
            });
        }
        Ok(answers)
    }

    /// The one-statement form of a write, when it has one: a new record
    /// (generation 1, nothing inserted if the key exists), a transition
    /// fenced by the generation held, a removal. `None`: no fast form (a
    /// call not held).
    async fn fast_path(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        write: &JournalWrite,
        held: &HashMap<String, i64>,
    ) -> Result<Option<u64>, tokio_postgres::Error> {
        let me = self.worker.as_str();
        let guarded = |key: &IdempotencyKey| held.get(key.as_str()).copied();
        let n = match write {
            JournalWrite::Prepare(e) => {
                let (state, job_id, outcome) = state_columns(&e.state);
                let stmt = tx.prepare_cached(INSERT).await?;
                tx.execute(
                    &stmt,
                    &[
                        &e.key.as_str(),
                        &e.tool,
                        &e.intent,
                        &e.trace_id,
                        &millis(e.deadline),
                        &state,
                        &i64::from(e.attempts),
                        &job_id,
                        &outcome,
                        &to_millis(e.created_at),
                        &to_millis(e.updated_at),
                        &me,
                        &1i64,
                        &self.lease_ms,
                    ],
                )
                .await?
            }
            JournalWrite::Sent { key, attempts, at } => {
                let Some(generation) = guarded(key) else {
                    return Ok(None);
                };
                let stmt = tx.prepare_cached(SENT).await?;
                tx.execute(
                    &stmt,
                    &[
                        &key.as_str(),
                        &me,
                        &generation,
                        &i64::from(*attempts),
                        &to_millis(*at),
                    ],
                )
                .await?
            }
            JournalWrite::Accepted { key, job_id, at } => {
                let Some(generation) = guarded(key) else {
                    return Ok(None);
                };
                let stmt = tx.prepare_cached(ACCEPTED).await?;
                tx.execute(
                    &stmt,
                    &[&key.as_str(), &me, &generation, job_id, &to_millis(*at)],
                )
                .await?
            }
            JournalWrite::Terminal { key, outcome, at } => {
                let Some(generation) = guarded(key) else {
                    return Ok(None);
                };
                let text = serde_json::to_string(outcome).unwrap_or_else(|_| "null".into());
                let job_id = outcome.job_id().map(str::to_owned);
                let stmt = tx.prepare_cached(TERMINAL).await?;
                tx.execute(
                    &stmt,
                    &[
                        &key.as_str(),
                        &me,
                        &generation,
                        &text,
                        &job_id,
                        &i64::from(outcome.attempts()),
                        &to_millis(*at),
                    ],
                )
                .await?
            }
            JournalWrite::Release { key } => {
                let Some(generation) = guarded(key) else {
                    // Not held: nothing to give up (a fenced call's end).
                    return Ok(Some(0));
                };
                let stmt = tx.prepare_cached(RELEASE).await?;
                tx.execute(&stmt, &[&key.as_str(), &me, &generation])
                    .await?
            }
            JournalWrite::Remove { key } => {
                // Fenced: a live call of another worker (or of an older
                // generation of this one) is never deleted.
                let generation = guarded(key).unwrap_or(-1);
                let stmt = tx.prepare_cached(REMOVE).await?;
                tx.execute(&stmt, &[&key.as_str(), &me, &generation])
                    .await?
            }
        };
        Ok(Some(n))
    }

    /// One write inside the batch's transaction. `held` is the batch's
    /// working copy (published only if the transaction commits).
    async fn apply_one(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        write: &JournalWrite,
        held: &mut HashMap<String, i64>,
        fenced: &mut Vec<IdempotencyKey>,
    ) -> Result<(), tokio_postgres::Error> {
        let me = self.worker.as_str();
        match write {
            JournalWrite::Prepare(e) => {
                let (state, job_id, outcome) = state_columns(&e.state);
                let key = e.key.as_str();
                let existing = tx
                    .query_opt(
                        "SELECT state, owner, generation FROM arcp_calls WHERE key = $1 FOR UPDATE",
                        &[&key],
                    )
                    .await?;
                let generation = match existing {
                    None => 1,
                    Some(row) => {
                        let (old_state, owner, generation): (String, String, i64) =
                            (row.get(0), row.get(1), row.get(2));
                        let mine = owner == me && held.get(key) == Some(&generation);
                        if old_state != "terminal" && !mine {
                            // A live call of another worker (or of an older
                            // generation of this one): never replaced.
                            held.remove(key);
                            fenced.push(e.key.clone());
                            return Ok(());
                        }
                        // Replacing keeps the key's generations increasing.
                        tx.execute("DELETE FROM arcp_calls WHERE key = $1", &[&key])
                            .await?;
                        generation + 1
                    }
                };
                let stmt = tx.prepare_cached(INSERT).await?;
                let inserted = tx
                    .execute(
                        &stmt,
                        &[
                            &key,
                            &e.tool,
                            &e.intent,
                            &e.trace_id,
                            &millis(e.deadline),
                            &state,
                            &i64::from(e.attempts),
                            &job_id,
                            &outcome,
                            &to_millis(e.created_at),
                            &to_millis(e.updated_at),
                            &me,
                            &generation,
                            &self.lease_ms,
                        ],
                    )
                    .await?;
                if inserted == 0 {
                    // Another worker inserted it since the check.
                    held.remove(key);
                    fenced.push(e.key.clone());
                } else if state == "terminal" {
                    held.remove(key);
                } else {
                    held.insert(key.to_owned(), generation);
                }
            }
            JournalWrite::Sent { key, attempts, at } => {
                self.guarded(
                    tx,
                    key,
                    held,
                    fenced,
                    SENT,
                    &[&i64::from(*attempts), &to_millis(*at)],
                )
                .await?;
            }
            JournalWrite::Accepted { key, job_id, at } => {
                self.guarded(tx, key, held, fenced, ACCEPTED, &[job_id, &to_millis(*at)])
                    .await?;
            }
            JournalWrite::Terminal { key, outcome, at } => {
                let text = serde_json::to_string(outcome).unwrap_or_else(|_| "null".into());
                let job_id = outcome.job_id().map(str::to_owned);
                if self
                    .guarded(
                        tx,
                        key,
                        held,
                        fenced,
                        TERMINAL,
                        &[
                            &text,
                            &job_id,
                            &i64::from(outcome.attempts()),
                            &to_millis(*at),
                        ],
                    )
                    .await?
                {
                    held.remove(key.as_str());
                }
            }
            JournalWrite::Release { key } => {
                // Nothing to give up when not held (a fenced call's end).
                if held.contains_key(key.as_str())
                    && self.guarded(tx, key, held, fenced, RELEASE, &[]).await?
                {
                    held.remove(key.as_str());
                }
            }
            JournalWrite::Remove { key } => {
                // The fenced delete removed nothing: refused if the record
                // is there (another worker's live call).
                let exists = tx
                    .query_opt("SELECT 1 FROM arcp_calls WHERE key = $1", &[&key.as_str()])
                    .await?
                    .is_some();
                if exists {
                    fenced.push(key.clone());
                }
                held.remove(key.as_str());
            }
        }
        Ok(())
    }

    /// Runs a transition fenced by this worker's generation of `key`
    /// (`$1` key, `$2` worker, `$3` generation, then `extra`). Whether it
    /// changed the record; a refusal is noted in `fenced`.
    async fn guarded(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        key: &IdempotencyKey,
        held: &mut HashMap<String, i64>,
        fenced: &mut Vec<IdempotencyKey>,
        sql: &str,
        extra: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<bool, tokio_postgres::Error> {
        let me = self.worker.as_str();
        let k = key.as_str();
        if let Some(generation) = held.get(k).copied() {
            let stmt = tx.prepare_cached(sql).await?;
            let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                vec![&k, &me, &generation];
            params.extend_from_slice(extra);
            if tx.execute(&stmt, &params).await? == 1 {
                return Ok(true);
            }
        }
        match self.missed(tx, key, held.get(k).copied()).await? {
            Missed::Gone | Missed::Finished => {}
            Missed::Fenced => fenced.push(key.clone()),
        }
        held.remove(k);
        Ok(false)
    }

    /// Why a guarded update changed nothing.
    async fn missed(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        key: &IdempotencyKey,
        generation: Option<i64>,
    ) -> Result<Missed, tokio_postgres::Error> {
        let row = tx
            .query_opt(
                "SELECT state, owner, generation FROM arcp_calls WHERE key = $1",
                &[&key.as_str()],
            )
            .await?;
        Ok(match row {
            None => Missed::Gone,
            Some(row) => {
                let (state, owner, current): (String, String, i64) =
                    (row.get(0), row.get(1), row.get(2));
                // This worker's own late transition of a call it finished.
                if owner == self.worker
                    && state == "terminal"
                    && generation.is_none_or(|g| g == current)
                {
                    Missed::Finished
                } else {
                    Missed::Fenced
                }
            }
        })
    }

    /// Claims up to `limit` claimable calls (`only`: just this key). A call
    /// is claimable when unfinished and its lease expired, or when it is
    /// owned by this worker's id but not held by this instance (a restart
    /// under the same id). Never one of `skip` (driven here right now).
    fn claim_where(
        &self,
        limit: i64,
        only: Option<&str>,
        skip: &[String],
    ) -> Result<Vec<JournalEntry>, JournalError> {
        let held: Vec<String> = lock(&self.held).keys().cloned().collect();
        let rows = self.block(async {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(|e| self.err(e))?;
            let stmt = tx
                .prepare_cached(&format!(
                    "WITH claimable AS ( \
                       SELECT key FROM arcp_calls \
                       WHERE state <> 'terminal' \
                         AND ($4::text IS NULL OR key = $4) \
                         AND NOT (key = ANY($6)) \
                         AND (lease_until <= clock_timestamp() \
                              OR (owner = $1 AND NOT (key = ANY($2)))) \
                       ORDER BY created_ms, key \
                       LIMIT $3 \
                       FOR UPDATE SKIP LOCKED) \
                     UPDATE arcp_calls c SET owner = $1, generation = c.generation + 1, \
                       writer = $1, writer_generation = c.generation + 1, \
                       lease_until = clock_timestamp() + $5::bigint * interval '1 millisecond' \
                     FROM claimable WHERE c.key = claimable.key \
                     RETURNING {}, c.generation",
                    COLUMNS
                        .split(", ")
                        .map(|c| format!("c.{c}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
                .await
                .map_err(|e| self.err(e))?;
            let rows = tx
                .query(
                    &stmt,
                    &[&self.worker, &held, &limit, &only, &self.lease_ms, &skip],
                )
                .await
                .map_err(|e| self.err(e))?;
            tx.commit().await.map_err(|e| self.err(e))?;
            Ok::<_, JournalError>(rows)
        })?;
        let mut out = Vec::with_capacity(rows.len());
        let mut claimed = Vec::with_capacity(rows.len());
        for row in &rows {
            // Every claimed row is this worker's now (the claim committed),
            // so it is held, renewed and released like the others, even one
            // that does not read back: claiming it again on every recovery
            // would fail the whole batch each time.
            let (Ok(key), Ok(generation)) =
                (row.try_get::<_, String>(0), row.try_get::<_, i64>(11))
            else {
                tracing::warn!("a claimed journal row has no readable key; skipped");
                continue;
            };
            match self.entry(row) {
                Ok(entry) => out.push(entry),
                Err(e) => tracing::warn!(
                    key = %key,
                    error = %e,
                    "a claimed call's record does not read back; it stays unfinished \
                     (`arcp journal show` / `discard` it)"
                ),
            }
            claimed.push((key, generation));
        }
        lock(&self.held).extend(claimed);
        out.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.key.cmp(&b.key)));
        Ok(out)
    }
}

impl Journal for PostgresJournal {
    fn apply(&self, writes: &[JournalWrite]) -> Result<(), JournalError> {
        if writes.is_empty() {
            return Ok(());
        }
        let mut held = lock(&self.held).clone();
        let mut fenced = Vec::new();
        self.block(async {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(|e| self.err(e))?;
            self.apply_all(&tx, writes, &mut held, &mut fenced)
                .await
                .map_err(|e| self.err(e))?;
            tx.commit().await.map_err(|e| self.err(e))
        })?;
        *lock(&self.held) = held;
        if !fenced.is_empty() {
            tracing::warn!(
                journal = %self.location,
                refused = fenced.len(),
                "writes refused: another worker claimed these calls (this worker lost its lease)"
            );
            lock(&self.fenced).extend(fenced);
        }
        Ok(())
    }

    fn get(&self, key: &IdempotencyKey) -> Result<Option<JournalEntry>, JournalError> {
        let key = key.as_str();
        Ok(self
            .select(
                &format!("SELECT {COLUMNS} FROM arcp_calls WHERE key = $1"),
                &[&key],
            )?
            .pop())
    }

    fn get_many(&self, keys: &[IdempotencyKey]) -> Result<Vec<JournalEntry>, JournalError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<&str> = keys.iter().map(IdempotencyKey::as_str).collect();
        self.select(
            &format!("SELECT {COLUMNS} FROM arcp_calls WHERE key = ANY($1)"),
            &[&keys],
        )
    }

    fn unfinished(&self, limit: usize) -> Result<Vec<JournalEntry>, JournalError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.select(
            &format!(
                "SELECT {COLUMNS} FROM arcp_calls WHERE state <> 'terminal' \
                 ORDER BY created_ms, key LIMIT $1"
            ),
            &[&limit],
        )
    }

    fn purge(&self, retention: &Retention, now: SystemTime) -> Result<PurgeReport, JournalError> {
        let now = to_millis(now);
        let cutoff = |ttl: Duration| now.saturating_sub(millis(ttl));
        let (terminal_cutoff, unfinished_cutoff) = (
            cutoff(retention.terminal_ttl),
            cutoff(retention.unfinished_ttl),
        );
        let max = i64::try_from(retention.max_records).unwrap_or(i64::MAX);
        self.block(async {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(|e| self.err(e))?;
            let run = async {
                let mut report = PurgeReport {
                    expired_terminal: tx
                        .execute(
                            "DELETE FROM arcp_calls WHERE state = 'terminal' AND updated_ms < $1",
                            &[&terminal_cutoff],
                        )
                        .await?,
                    // Never a call some live worker still holds: a long job
                    // renews its lease without touching `updated_ms`.
                    expired_unfinished: tx
                        .execute(
                            "DELETE FROM arcp_calls WHERE state <> 'terminal' AND updated_ms < $1 \
                             AND lease_until <= clock_timestamp()",
                            &[&unfinished_cutoff],
                        )
                        .await?,
                    ..PurgeReport::default()
                };
                let count: i64 = tx
                    .query_one("SELECT count(*) FROM arcp_calls", &[])
                    .await?
                    .get(0);
                if count > max {
                    report.evicted = tx
                        .execute(
                            "DELETE FROM arcp_calls WHERE key IN (SELECT key FROM arcp_calls \
                             WHERE state = 'terminal' ORDER BY updated_ms, key LIMIT $1)",
                            &[&(count - max)],
                        )
                        .await?;
                }
                let row = tx
                    .query_one(
                        "SELECT count(*), count(*) FILTER (WHERE state <> 'terminal') \
                         FROM arcp_calls",
                        &[],
                    )
                    .await?;
                report.remaining = u64::try_from(row.get::<_, i64>(0)).unwrap_or(0);
                report.unfinished = u64::try_from(row.get::<_, i64>(1)).unwrap_or(0);
                Ok::<_, tokio_postgres::Error>(report)
            };
            let report = run.await.map_err(|e| self.err(e))?;
            tx.commit().await.map_err(|e| self.err(e))?;
            Ok(report)
        })
    }

    fn location(&self) -> String {
        self.location.clone()
    }

    fn claim(
        &self,
        limit: usize,
        driving: &HashSet<IdempotencyKey>,
    ) -> Result<Vec<JournalEntry>, JournalError> {
        let skip: Vec<String> = driving.iter().map(|k| k.as_str().to_owned()).collect();
        self.claim_where(i64::try_from(limit).unwrap_or(i64::MAX), None, &skip)
    }

    fn acquire(&self, key: &IdempotencyKey) -> Result<bool, JournalError> {
        if lock(&self.held).contains_key(key.as_str()) {
            return Ok(true);
        }
        Ok(!self.claim_where(1, Some(key.as_str()), &[])?.is_empty())
    }

    fn lease_interval(&self) -> Option<Duration> {
        Some(self.renew_interval)
    }

    fn lease_ttl(&self) -> Option<Duration> {
        Some(self.lease_ttl)
    }

    fn renew(&self) -> Result<Vec<IdempotencyKey>, JournalError> {
        let (keys, generations): (Vec<String>, Vec<i64>) = lock(&self.held)
            .iter()
            .map(|(k, g)| (k.clone(), *g))
            .unzip();
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let kept: Vec<String> = self.block(async {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(
                    "UPDATE arcp_calls c \
                     SET lease_until = clock_timestamp() + $4::bigint * interval '1 millisecond' \
                     FROM unnest($2::text[], $3::bigint[]) AS h(key, generation) \
                     WHERE c.key = h.key AND c.generation = h.generation AND c.owner = $1 \
                       AND c.state <> 'terminal' \
                     RETURNING c.key",
                )
                .await
                .map_err(|e| self.err(e))?;
            let rows = client
                .query(&stmt, &[&self.worker, &keys, &generations, &self.lease_ms])
                .await
                .map_err(|e| self.err(e))?;
            Ok::<_, JournalError>(rows.iter().map(|r| r.get::<_, String>(0)).collect())
        })?;
        let kept: std::collections::HashSet<String> = kept.into_iter().collect();
        let mut lost = Vec::new();
        let mut held = lock(&self.held);
        for (key, generation) in keys.iter().zip(&generations) {
            // Only what this renewal saw: a claim made since stays held.
            if !kept.contains(key) && held.get(key) == Some(generation) {
                held.remove(key);
                if let Ok(k) = IdempotencyKey::try_from(key.as_str()) {
                    lost.push(k);
                }
            }
        }
        Ok(lost)
    }

    fn take_fenced(&self) -> Vec<IdempotencyKey> {
        std::mem::take(&mut *lock(&self.fenced))
    }
}

/// Applies every migration newer than the database's schema, under an
/// advisory lock so workers starting together migrate once.
async fn migrate(pool: &Pool, location: &str) -> Result<(), JournalError> {
    let err = |e: tokio_postgres::Error| classify(location, &e);
    let mut client = pool.get().await.map_err(|e| {
        JournalError::new(
            JournalErrorKind::Io,
            location,
            format!("could not connect to the journal database: {e}"),
        )
    })?;
    let tx = client.transaction().await.map_err(err)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(err)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS arcp_journal_schema (
             version     integer     NOT NULL PRIMARY KEY,
             description text        NOT NULL,
             applied_at  timestamptz NOT NULL DEFAULT now()
         )",
    )
    .await
    .map_err(err)?;
    let current: i32 = tx
        .query_one(
            "SELECT coalesce(max(version), 0) FROM arcp_journal_schema",
            &[],
        )
        .await
        .map_err(err)?
        .get(0);
    let latest = PostgresJournal::latest_schema_version();
    if current > latest {
        return Err(JournalError::new(
            JournalErrorKind::Schema,
            location,
            format!(
                "journal schema version {current}; this version of arcp-client knows up to \
                 {latest}"
            ),
        ));
    }
    for (version, description, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
        tx.batch_execute(sql).await.map_err(|e| {
            let mut e = classify(location, &e);
            if e.kind == JournalErrorKind::Io {
                e.kind = JournalErrorKind::Schema;
            }
            e.message = format!("migration {version} ({description}): {}", e.message);
            e
        })?;
        tx.execute(
            "INSERT INTO arcp_journal_schema (version, description) VALUES ($1, $2)",
            &[version, description],
        )
        .await
        .map_err(err)?;
    }
    tx.commit().await.map_err(err)
}

fn journal_timeout(journal: &PostgresJournal) -> Duration {
    // Connecting, plus room for a migration.
    journal.connect_timeout + Duration::from_secs(20)
}

/// The server and database, without credentials, and this worker.
fn describe(config: &tokio_postgres::Config, worker: &str) -> String {
    use tokio_postgres::config::Host;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config
        .get_dbname()
        .or(config.get_user())
        .unwrap_or("postgres");
    format!("postgres {host}:{port}/{db} (worker {worker})")
}

/// `(state, job_id, outcome)` columns of a state.
fn state_columns(state: &JournalState) -> (&'static str, Option<String>, Option<String>) {
    match state {
        JournalState::Prepared => ("prepared", None, None),
        JournalState::Sent => ("sent", None, None),
        JournalState::Accepted { job_id } => ("accepted", Some(job_id.clone()), None),
        JournalState::Terminal(outcome) => (
            "terminal",
            outcome.job_id().map(str::to_owned),
            // An outcome is plain data: it always serializes.
            Some(serde_json::to_string(outcome).unwrap_or_else(|_| "null".into())),
        ),
    }
}

/// The key a write concerns.
fn write_key(write: &JournalWrite) -> &str {
    match write {
        JournalWrite::Prepare(e) => e.key.as_str(),
        JournalWrite::Sent { key, .. }
        | JournalWrite::Accepted { key, .. }
        | JournalWrite::Terminal { key, .. }
        | JournalWrite::Release { key }
        | JournalWrite::Remove { key } => key.as_str(),
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Validates a row of `arcp_calls`; one this code cannot have written is
/// corruption.
fn row_entry(location: &str, r: &tokio_postgres::Row) -> Result<JournalEntry, JournalError> {
    let get = |i: usize| -> Result<String, JournalError> {
        r.try_get::<_, String>(i)
            .map_err(|e| classify(location, &e))
    };
    let get_opt = |i: usize| -> Result<Option<String>, JournalError> {
        r.try_get::<_, Option<String>>(i)
            .map_err(|e| classify(location, &e))
    };
    let get_i64 = |i: usize| -> Result<i64, JournalError> {
        r.try_get::<_, i64>(i).map_err(|e| classify(location, &e))
    };
    let raw_key = get(0)?;
    let corrupt = |what: String| {
        JournalError::new(
            JournalErrorKind::Corrupt,
            location,
            format!("record {raw_key:?}: {what}"),
        )
    };
    let key = IdempotencyKey::try_from(raw_key.as_str())
        .map_err(|e| corrupt(format!("invalid key: {e}")))?;
    let (state, job_id, outcome) = (get(5)?, get_opt(7)?, get_opt(8)?);
    let state = match (state.as_str(), job_id, outcome) {
        ("prepared", _, None) => JournalState::Prepared,
        ("sent", _, None) => JournalState::Sent,
        ("accepted", Some(job_id), None) => JournalState::Accepted { job_id },
        ("terminal", _, Some(text)) => JournalState::Terminal(
            serde_json::from_str::<JournalOutcome>(&text)
                .map_err(|e| corrupt(format!("unreadable outcome: {e}")))?,
        ),
        (other, _, _) => return Err(corrupt(format!("invalid state {other:?}"))),
    };
    Ok(JournalEntry {
        key,
        tool: get(1)?,
        intent: get(2)?,
        trace_id: get(3)?,
        deadline: Duration::from_millis(u64::try_from(get_i64(4)?).unwrap_or(0)),
        state,
        attempts: u32::try_from(get_i64(6)?.max(0)).unwrap_or(u32::MAX),
        created_at: from_millis(get_i64(9)?),
        updated_at: from_millis(get_i64(10)?),
    })
}

/// Maps a PostgreSQL failure to a journal error kind.
fn classify(location: &str, e: &tokio_postgres::Error) -> JournalError {
    use tokio_postgres::error::SqlState;
    let Some(db) = e.as_db_error() else {
        // No answer from the server: the connection failed, closed or timed
        // out. The store may be back soon.
        return JournalError::new(JournalErrorKind::Unavailable, location, e.to_string());
    };
    let code = db.code().code();
    let kind = match code {
        // The server is shutting down, starting up or cancelled the
        // statement (statement_timeout): retry later.
        _ if db.code() == &SqlState::ADMIN_SHUTDOWN
            || db.code() == &SqlState::CRASH_SHUTDOWN
            || db.code() == &SqlState::CANNOT_CONNECT_NOW
            || db.code() == &SqlState::QUERY_CANCELED
            || db.code() == &SqlState::T_R_SERIALIZATION_FAILURE
            || db.code() == &SqlState::T_R_DEADLOCK_DETECTED =>
        {
            JournalErrorKind::Unavailable
        }
        // The guard trigger: a write by a superseded generation.
        "AR002" => JournalErrorKind::Fenced,
        // The guard trigger: a terminal record changed, or a transition
        // backwards. This code never sends one: something else wrote.
        "AR001" | "AR003" => JournalErrorKind::Corrupt,
        _ if db.code() == &SqlState::UNIQUE_VIOLATION
            || db.code() == &SqlState::CHECK_VIOLATION
            || db.code() == &SqlState::FOREIGN_KEY_VIOLATION =>
        {
            JournalErrorKind::Corrupt
        }
        _ if db.code() == &SqlState::UNDEFINED_TABLE
            || db.code() == &SqlState::UNDEFINED_COLUMN
            || db.code() == &SqlState::DUPLICATE_TABLE
            || db.code() == &SqlState::DUPLICATE_FUNCTION =>
        {
            JournalErrorKind::Schema
        }
        _ => JournalErrorKind::Io,
    };
    JournalError::new(kind, location, format!("{} ({code})", db.message()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renew_interval_not_under_the_lease_is_refused_before_connecting() {
        for renew in [Duration::from_secs(30), Duration::from_secs(31)] {
            let options = PostgresOptions {
                renew_interval: renew,
                ..PostgresOptions::default().lease_ttl(Duration::from_secs(30))
            };
            // Port 9 (discard): were it reached, the error would be another.
            let Err(e) = PostgresJournal::connect_blocking("postgres://127.0.0.1:9/none", options)
            else {
                panic!("opened with a renew interval of {renew:?}");
            };
            assert!(e.to_string().contains("renew interval"), "{e}");
        }
        // The builder keeps the two consistent.
        let options = PostgresOptions::default().lease_ttl(Duration::from_millis(300));
        assert!(options.renew_interval < options.lease_ttl);
    }
}
