
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
-- include: calls_updated_guard.sql
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
