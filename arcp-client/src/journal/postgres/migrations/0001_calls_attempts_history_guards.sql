
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
