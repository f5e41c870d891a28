//! The schema: numbered migrations, applied in order under an advisory lock
//! so workers starting together migrate once.

use deadpool_postgres::Pool;

use super::errors::classify;
use crate::journal::{JournalError, JournalErrorKind};

/// Serializes schema migrations between workers starting at once
/// (`pg_advisory_xact_lock`): "ARCP" in ASCII.
pub(super) const MIGRATION_LOCK: i64 = 0x4152_4350;

/// The schema, as numbered migrations applied in order, each in the same
/// transaction as its row in `arcp_journal_schema`. Never edit a published
/// migration: add the next one.
pub(super) const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "calls, attempts, history, guards", MIGRATION_1),
    (2, "guards, attempts and history per statement", MIGRATION_2),
    (3, "attempts and history in one statement", MIGRATION_3),
];

/// Version 1: the records, one active attempt per call, the history of
/// every state change, and the triggers that make the invariants the
/// database's (not only this code's).
pub(super) const MIGRATION_1: &str = r#"
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

/// Version 2: the same invariants, checked and recorded once per statement
/// instead of once per row. A batch changes many records in one statement;
/// per-row triggers (a guard, then history and attempts rows inserted one
/// at a time, each checked against its call by a foreign key) cost more
/// database CPU than the records themselves. Here each statement's guard
/// is one query over its transition tables, history and attempts are
/// written set-wise, and "history and attempts only of a recorded call"
/// holds by construction for the rows these triggers write (checked
/// set-wise for any other insert), with deletes cascading by trigger.
pub(super) const MIGRATION_2: &str = r#"
DROP TRIGGER arcp_calls_guard ON arcp_calls;
DROP TRIGGER arcp_calls_record ON arcp_calls;
DROP FUNCTION arcp_calls_guard();
DROP FUNCTION arcp_calls_record();
ALTER TABLE arcp_attempts DROP CONSTRAINT arcp_attempts_key_fkey;
ALTER TABLE arcp_history DROP CONSTRAINT arcp_history_key_fkey;

-- A new record opens its first attempt (unless it is terminal already) and
-- writes its first history row.

CREATE FUNCTION arcp_calls_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO arcp_attempts (key, generation, worker)
        SELECT key, generation, owner FROM new_rows WHERE state <> 'terminal';
    INSERT INTO arcp_history (key, generation, worker, event, state, attempts)
        SELECT key, writer_generation, writer,
               CASE WHEN state = 'terminal' THEN 'terminal' ELSE 'prepared' END, state, attempts
        FROM new_rows;
    RETURN NULL;
END
$$;
CREATE TRIGGER arcp_calls_inserted AFTER INSERT ON arcp_calls
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION arcp_calls_inserted();

-- Refuses a statement that breaks an invariant for any of its rows (the
-- first such row is named, with the error code of version 1's guard), then
-- records what changed: a claim supersedes the active attempt and opens the
-- next, a terminal ends it, and every change of state, attempts, job or
-- owner writes a history row. Renewals and releases write nothing. One
-- query over the transition tables says which of these the statement
-- needs; the others are not run (each costs a query, and most statements
-- need two of them).
CREATE FUNCTION arcp_calls_updated() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    needs record;
    bad record;
BEGIN
    SELECT count(*) <> (SELECT count(*) FROM new_rows) AS rekeyed,
           coalesce(bool_or(
               o.state = 'terminal'
               OR n.tool <> o.tool OR n.intent <> o.intent OR n.trace_id <> o.trace_id
               OR n.created_ms <> o.created_ms
               OR n.generation < o.generation OR n.generation > o.generation + 1
               OR (n.generation = o.generation AND n.owner <> o.owner)
               OR n.writer <> n.owner OR n.writer_generation <> n.generation
               OR (o.state = 'sent' AND n.state = 'prepared')
               OR (o.state = 'accepted' AND n.state IN ('prepared', 'sent'))
               OR n.attempts < o.attempts), false) AS refused,
           coalesce(bool_or(n.generation <> o.generation), false) AS claimed,
           coalesce(bool_or(n.state = 'terminal'), false) AS ended,
           coalesce(bool_or(n.generation <> o.generation OR n.state <> o.state
                            OR n.attempts <> o.attempts
                            OR n.job_id IS DISTINCT FROM o.job_id), false) AS changed
      INTO needs
      FROM new_rows n JOIN old_rows o ON o.key = n.key;
    IF needs.rekeyed THEN
        SELECT o.key INTO bad FROM old_rows o
            WHERE NOT EXISTS (SELECT 1 FROM new_rows n WHERE n.key = o.key) LIMIT 1;
        RAISE EXCEPTION 'call %: key, tool, intent and trace id never change', bad.key
            USING ERRCODE = 'AR003';
    END IF;
    IF needs.refused THEN
        SELECT
            CASE
              WHEN o.state = 'terminal' THEN 'AR001'
              WHEN n.tool <> o.tool OR n.intent <> o.intent OR n.trace_id <> o.trace_id
                   OR n.created_ms <> o.created_ms THEN 'AR003'
              WHEN n.generation < o.generation OR n.generation > o.generation + 1
                   OR (n.generation = o.generation AND n.owner <> o.owner)
                   OR n.writer <> n.owner OR n.writer_generation <> n.generation THEN 'AR002'
              ELSE 'AR003' END AS code,
            CASE
              WHEN o.state = 'terminal' THEN format('call %s: a terminal record is final', o.key)
              WHEN n.tool <> o.tool OR n.intent <> o.intent OR n.trace_id <> o.trace_id
                   OR n.created_ms <> o.created_ms
                THEN format('call %s: key, tool, intent and trace id never change', o.key)
              WHEN n.generation < o.generation OR n.generation > o.generation + 1
                   OR (n.generation = o.generation AND n.owner <> o.owner)
                THEN format('call %s: ownership moves only to the next generation (%s of %s -> %s of %s)',
                            o.key, o.generation, o.owner, n.generation, n.owner)
              WHEN n.writer <> n.owner OR n.writer_generation <> n.generation
                THEN format('call %s: write by %s under generation %s refused (fenced): the call is at generation %s of %s',
                            o.key, n.writer, n.writer_generation, n.generation, n.owner)
              ELSE format('call %s: state %s -> %s (attempts %s -> %s) moves backwards',
                          o.key, o.state, n.state, o.attempts, n.attempts) END AS msg
          INTO bad
          FROM old_rows o JOIN new_rows n ON n.key = o.key
          WHERE o.state = 'terminal'
             OR n.tool <> o.tool OR n.intent <> o.intent OR n.trace_id <> o.trace_id
             OR n.created_ms <> o.created_ms
             OR n.generation < o.generation OR n.generation > o.generation + 1
             OR (n.generation = o.generation AND n.owner <> o.owner)
             OR n.writer <> n.owner OR n.writer_generation <> n.generation
             OR (o.state = 'sent' AND n.state = 'prepared')
             OR (o.state = 'accepted' AND n.state IN ('prepared', 'sent'))
             OR n.attempts < o.attempts
          LIMIT 1;
        RAISE EXCEPTION USING ERRCODE = bad.code, MESSAGE = bad.msg;
    END IF;
    IF needs.claimed THEN
        UPDATE arcp_attempts SET ended_at = clock_timestamp(), ended_by = 'superseded'
            WHERE key = ANY (ARRAY(SELECT n.key FROM new_rows n JOIN old_rows o ON o.key = n.key
                                   WHERE n.generation <> o.generation))
              AND ended_at IS NULL;
        INSERT INTO arcp_attempts (key, generation, worker)
            SELECT n.key, n.generation, n.owner
            FROM new_rows n JOIN old_rows o ON o.key = n.key
            WHERE n.generation <> o.generation;
    END IF;
    IF needs.ended THEN
        UPDATE arcp_attempts SET ended_at = clock_timestamp(), ended_by = 'terminal'
            WHERE key = ANY (ARRAY(SELECT key FROM new_rows WHERE state = 'terminal'))
              AND ended_at IS NULL;
    END IF;
    IF needs.changed THEN
        INSERT INTO arcp_history (key, generation, worker, event, state, attempts)
            SELECT n.key, n.writer_generation, n.writer,
                   CASE WHEN n.generation <> o.generation THEN 'claimed' ELSE n.state END,
                   n.state, n.attempts
            FROM new_rows n JOIN old_rows o ON o.key = n.key
            WHERE n.generation <> o.generation OR n.state <> o.state OR n.attempts <> o.attempts
                  OR n.job_id IS DISTINCT FROM o.job_id;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER arcp_calls_updated AFTER UPDATE ON arcp_calls
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION arcp_calls_updated();

-- The cascade of the foreign keys dropped above.
--
-- Rows of attempts and history are found by key (`= ANY` of the statement's
-- keys: one index probe each): a join with a transition table, whose size
-- the planner cannot know, may scan a whole index instead, and the index of
-- active attempts holds an entry for every attempt ever opened until a
-- vacuum removes the ended ones.
CREATE FUNCTION arcp_calls_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM arcp_attempts WHERE key = ANY (ARRAY(SELECT key FROM old_rows));
    DELETE FROM arcp_history WHERE key = ANY (ARRAY(SELECT key FROM old_rows));
    RETURN NULL;
END
$$;
CREATE TRIGGER arcp_calls_deleted AFTER DELETE ON arcp_calls
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION arcp_calls_deleted();

-- History and attempts only of a recorded call, for inserts from outside
-- these triggers (theirs copy the key of the row being written).
CREATE FUNCTION arcp_of_a_call() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    orphan text;
BEGIN
    SELECT n.key INTO orphan FROM new_rows n
        WHERE NOT EXISTS (SELECT 1 FROM arcp_calls c WHERE c.key = n.key) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'call %: no such record in arcp_calls', orphan
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER arcp_history_of_a_call AFTER INSERT ON arcp_history
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT WHEN (pg_trigger_depth() = 0) EXECUTE FUNCTION arcp_of_a_call();
CREATE TRIGGER arcp_attempts_of_a_call AFTER INSERT ON arcp_attempts
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT WHEN (pg_trigger_depth() = 0) EXECUTE FUNCTION arcp_of_a_call();
"#;

/// Version 3: the same records, in fewer queries. A trigger's query costs
/// its executor's start-up whatever the rows, and one call at a time is two
/// statements (its record inserted, the previous call's ended) whose
/// triggers ran five queries between them. An insert now opens attempts and
/// writes history in one statement (a data-modifying `WITH`), and an update
/// that claims nothing ends attempts and writes history in one; a claim
/// (rare: a recovery) keeps the ordered statements of version 2, which
/// supersede the active attempt before opening the next.
pub(super) const MIGRATION_3: &str = r#"
CREATE OR REPLACE FUNCTION arcp_calls_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH opened AS (
        INSERT INTO arcp_attempts (key, generation, worker)
            SELECT key, generation, owner FROM new_rows WHERE state <> 'terminal'
    )
    INSERT INTO arcp_history (key, generation, worker, event, state, attempts)
        SELECT key, writer_generation, writer,
               CASE WHEN state = 'terminal' THEN 'terminal' ELSE 'prepared' END, state, attempts
        FROM new_rows;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION arcp_calls_updated() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    needs record;
    bad record;
BEGIN
    SELECT count(*) <> (SELECT count(*) FROM new_rows) AS rekeyed,
           coalesce(bool_or(
               o.state = 'terminal'
               OR n.tool <> o.tool OR n.intent <> o.intent OR n.trace_id <> o.trace_id
               OR n.created_ms <> o.created_ms
               OR n.generation < o.generation OR n.generation > o.generation + 1
               OR (n.generation = o.generation AND n.owner <> o.owner)
               OR n.writer <> n.owner OR n.writer_generation <> n.generation
               OR (o.state = 'sent' AND n.state = 'prepared')
               OR (o.state = 'accepted' AND n.state IN ('prepared', 'sent'))
               OR n.attempts < o.attempts), false) AS refused,
           coalesce(bool_or(n.generation <> o.generation), false) AS claimed,
           coalesce(bool_or(n.state = 'terminal'), false) AS ended,
           coalesce(bool_or(n.generation <> o.generation OR n.state <> o.state
                            OR n.attempts <> o.attempts
                            OR n.job_id IS DISTINCT FROM o.job_id), false) AS changed
      INTO needs
      FROM new_rows n JOIN old_rows o ON o.key = n.key;
    IF needs.rekeyed THEN
        SELECT o.key INTO bad FROM old_rows o
            WHERE NOT EXISTS (SELECT 1 FROM new_rows n WHERE n.key = o.key) LIMIT 1;
        RAISE EXCEPTION 'call %: key, tool, intent and trace id never change', bad.key
            USING ERRCODE = 'AR003';
    END IF;
    IF needs.refused THEN
        SELECT
            CASE
              WHEN o.state = 'terminal' THEN 'AR001'
              WHEN n.tool <> o.tool OR n.intent <> o.intent OR n.trace_id <> o.trace_id
                   OR n.created_ms <> o.created_ms THEN 'AR003'
              WHEN n.generation < o.generation OR n.generation > o.generation + 1
                   OR (n.generation = o.generation AND n.owner <> o.owner)
                   OR n.writer <> n.owner OR n.writer_generation <> n.generation THEN 'AR002'
              ELSE 'AR003' END AS code,
            CASE
              WHEN o.state = 'terminal' THEN format('call %s: a terminal record is final', o.key)
              WHEN n.tool <> o.tool OR n.intent <> o.intent OR n.trace_id <> o.trace_id
                   OR n.created_ms <> o.created_ms
                THEN format('call %s: key, tool, intent and trace id never change', o.key)
              WHEN n.generation < o.generation OR n.generation > o.generation + 1
                   OR (n.generation = o.generation AND n.owner <> o.owner)
                THEN format('call %s: ownership moves only to the next generation (%s of %s -> %s of %s)',
                            o.key, o.generation, o.owner, n.generation, n.owner)
              WHEN n.writer <> n.owner OR n.writer_generation <> n.generation
                THEN format('call %s: write by %s under generation %s refused (fenced): the call is at generation %s of %s',
                            o.key, n.writer, n.writer_generation, n.generation, n.owner)
              ELSE format('call %s: state %s -> %s (attempts %s -> %s) moves backwards',
                          o.key, o.state, n.state, o.attempts, n.attempts) END AS msg
          INTO bad
          FROM old_rows o JOIN new_rows n ON n.key = o.key
          WHERE o.state = 'terminal'
             OR n.tool <> o.tool OR n.intent <> o.intent OR n.trace_id <> o.trace_id
             OR n.created_ms <> o.created_ms
             OR n.generation < o.generation OR n.generation > o.generation + 1
             OR (n.generation = o.generation AND n.owner <> o.owner)
             OR n.writer <> n.owner OR n.writer_generation <> n.generation
             OR (o.state = 'sent' AND n.state = 'prepared')
             OR (o.state = 'accepted' AND n.state IN ('prepared', 'sent'))
             OR n.attempts < o.attempts
          LIMIT 1;
        RAISE EXCEPTION USING ERRCODE = bad.code, MESSAGE = bad.msg;
    END IF;
    IF needs.claimed THEN
        -- In order: the active attempt is superseded before the next opens
        -- (one active attempt per call, a unique index).
        UPDATE arcp_attempts SET ended_at = clock_timestamp(), ended_by = 'superseded'
            WHERE key = ANY (ARRAY(SELECT n.key FROM new_rows n JOIN old_rows o ON o.key = n.key
                                   WHERE n.generation <> o.generation))
              AND ended_at IS NULL;
        INSERT INTO arcp_attempts (key, generation, worker)
            SELECT n.key, n.generation, n.owner
            FROM new_rows n JOIN old_rows o ON o.key = n.key
            WHERE n.generation <> o.generation;
        IF needs.ended THEN
            UPDATE arcp_attempts SET ended_at = clock_timestamp(), ended_by = 'terminal'
                WHERE key = ANY (ARRAY(SELECT key FROM new_rows WHERE state = 'terminal'))
                  AND ended_at IS NULL;
        END IF;
        INSERT INTO arcp_history (key, generation, worker, event, state, attempts)
            SELECT n.key, n.writer_generation, n.writer,
                   CASE WHEN n.generation <> o.generation THEN 'claimed' ELSE n.state END,
                   n.state, n.attempts
            FROM new_rows n JOIN old_rows o ON o.key = n.key
            WHERE n.generation <> o.generation OR n.state <> o.state OR n.attempts <> o.attempts
                  OR n.job_id IS DISTINCT FROM o.job_id;
    ELSIF needs.changed THEN
        -- No claim: every row keeps its generation, and ending attempts and
        -- writing history touch different tables (one statement).
        WITH ended AS (
            UPDATE arcp_attempts SET ended_at = clock_timestamp(), ended_by = 'terminal'
                WHERE needs.ended
                  AND key = ANY (ARRAY(SELECT key FROM new_rows WHERE state = 'terminal'))
                  AND ended_at IS NULL
        )
        INSERT INTO arcp_history (key, generation, worker, event, state, attempts)
            SELECT n.key, n.writer_generation, n.writer, n.state, n.state, n.attempts
            FROM new_rows n JOIN old_rows o ON o.key = n.key
            WHERE n.state <> o.state OR n.attempts <> o.attempts
                  OR n.job_id IS DISTINCT FROM o.job_id;
    END IF;
    RETURN NULL;
END
$$;
"#;

/// Applies every migration newer than the database's schema, under an
/// advisory lock so workers starting together migrate once.
pub(super) async fn migrate(pool: &Pool, location: &str) -> Result<(), JournalError> {
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
        .try_get(0)
        .map_err(err)?;
    let latest = super::PostgresJournal::latest_schema_version();
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
