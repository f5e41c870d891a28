
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
-- include: calls_updated_guard.sql
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
