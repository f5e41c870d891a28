//! The statements: the one-row forms of each write, fenced by the writer's
//! generation, and their set-wise forms over arrays.

/// A new record under `$13` (generation), owned by `$12`; nothing when the
/// key exists.
pub(super) const INSERT: &str =
    "INSERT INTO arcp_calls (key, tool, intent, trace_id, deadline_ms, state, \
     attempts, job_id, outcome, created_ms, updated_ms, owner, generation, lease_until, writer, \
     writer_generation) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, \
     CASE WHEN $6 = 'terminal' THEN NULL \
          ELSE clock_timestamp() + $14::bigint * interval '1 millisecond' END, $12, $13) \
     ON CONFLICT (key) DO NOTHING";

/// A key's record, locked for a prepare that may replace it: what the
/// prepare needs to know whose it is (`this_prepare_landed` in `writes.rs`).
pub(super) const RECORD_FOR_UPDATE: &str =
    "SELECT state, owner, generation, trace_id, created_ms FROM arcp_calls WHERE key = $1 \
     FOR UPDATE";

/// The transitions, each fenced: `$1` key, `$2` worker, `$3` generation.
/// Each names its writer (`writer`, `writer_generation`): the history row
/// records it, and the guard trigger refuses it unless it is the current
/// owner and generation, even if a `WHERE` clause were wrong.
pub(super) const SENT: &str = "UPDATE arcp_calls SET writer = $2, writer_generation = $3, \
     attempts = GREATEST(attempts, $4), \
     state = CASE state WHEN 'prepared' THEN 'sent' ELSE state END, updated_ms = $5 \
     WHERE key = $1 AND owner = $2 AND generation = $3 AND state <> 'terminal'";
pub(super) const ACCEPTED: &str = "UPDATE arcp_calls SET writer = $2, writer_generation = $3, \
     state = 'accepted', job_id = $4, updated_ms = $5 \
     WHERE key = $1 AND owner = $2 AND generation = $3 AND state <> 'terminal'";
pub(super) const TERMINAL: &str = "UPDATE arcp_calls SET writer = $2, writer_generation = $3, \
     state = 'terminal', outcome = $4, \
     job_id = coalesce($5, job_id), attempts = GREATEST(attempts, $6), updated_ms = $7, \
     lease_until = NULL \
     WHERE key = $1 AND owner = $2 AND generation = $3 AND state <> 'terminal'";
pub(super) const RELEASE: &str = "UPDATE arcp_calls SET writer = $2, writer_generation = $3, \
     lease_until = clock_timestamp() \
     WHERE key = $1 AND owner = $2 AND generation = $3 AND state <> 'terminal'";

/// A removal, fenced: a terminal record, one this worker holds (`$2` at
/// generation `$3`), or one whose lease lapsed.
pub(super) const REMOVE: &str = "DELETE FROM arcp_calls WHERE key = $1 AND (state = 'terminal' \
     OR (owner = $2 AND generation = $3) OR lease_until <= clock_timestamp())";

/// The set-wise forms of `INSERT` and the transitions, over arrays (one
/// element per write; `unnest` pairs them up), each returning the keys it
/// changed; the same fencing as the one-row forms.
///
/// The transitions find their rows by key (`key = ANY($2)`: one probe of the
/// primary key each). Their fencing test is wrapped in `IS TRUE`, which no
/// index serves: otherwise the planner, which cannot know how many elements
/// the arrays hold, prefers the partial index of this owner's unfinished
/// calls, and scans it whole, with an entry for every call it ever held
/// until a vacuum removes the finished ones.
pub(super) const INSERT_MANY: &str =
    "INSERT INTO arcp_calls (key, tool, intent, trace_id, deadline_ms, \
     state, attempts, job_id, outcome, created_ms, updated_ms, owner, generation, lease_until, \
     writer, writer_generation) \
     SELECT k, t, i, tr, d, s, a, j, o, c, u, $12, 1, \
       CASE WHEN s = 'terminal' THEN NULL \
            ELSE clock_timestamp() + $13::bigint * interval '1 millisecond' END, $12, 1 \
     FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[], \
                 $7::bigint[], $8::text[], $9::text[], $10::bigint[], $11::bigint[]) \
          AS x(k, t, i, tr, d, s, a, j, o, c, u) \
     ON CONFLICT (key) DO NOTHING RETURNING key";
pub(super) const SENT_MANY: &str = "UPDATE arcp_calls c SET writer = $1, writer_generation = x.g, \
     attempts = GREATEST(c.attempts, x.a), \
     state = CASE c.state WHEN 'prepared' THEN 'sent' ELSE c.state END, updated_ms = x.u \
     FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::bigint[]) AS x(k, g, a, u) \
     WHERE c.key = ANY($2::text[]) AND c.key = x.k AND c.generation = x.g \
       AND (c.owner = $1 AND c.state <> 'terminal') IS TRUE \
     RETURNING c.key";
pub(super) const ACCEPTED_MANY: &str =
    "UPDATE arcp_calls c SET writer = $1, writer_generation = x.g, \
     state = 'accepted', job_id = x.j, updated_ms = x.u \
     FROM unnest($2::text[], $3::bigint[], $4::text[], $5::bigint[]) AS x(k, g, j, u) \
     WHERE c.key = ANY($2::text[]) AND c.key = x.k AND c.generation = x.g \
       AND (c.owner = $1 AND c.state <> 'terminal') IS TRUE \
     RETURNING c.key";
pub(super) const TERMINAL_MANY: &str =
    "UPDATE arcp_calls c SET writer = $1, writer_generation = x.g, \
     state = 'terminal', outcome = x.o, job_id = coalesce(x.j, c.job_id), \
     attempts = GREATEST(c.attempts, x.a), updated_ms = x.u, lease_until = NULL \
     FROM unnest($2::text[], $3::bigint[], $4::text[], $5::text[], $6::bigint[], $7::bigint[]) \
          AS x(k, g, o, j, a, u) \
     WHERE c.key = ANY($2::text[]) AND c.key = x.k AND c.generation = x.g \
       AND (c.owner = $1 AND c.state <> 'terminal') IS TRUE \
     RETURNING c.key";
pub(super) const RELEASE_MANY: &str =
    "UPDATE arcp_calls c SET writer = $1, writer_generation = x.g, \
     lease_until = clock_timestamp() \
     FROM unnest($2::text[], $3::bigint[]) AS x(k, g) \
     WHERE c.key = ANY($2::text[]) AND c.key = x.k AND c.generation = x.g \
       AND (c.owner = $1 AND c.state <> 'terminal') IS TRUE \
     RETURNING c.key";

pub(super) const COLUMNS: &str =
    "key, tool, intent, trace_id, deadline_ms, state, attempts, job_id, \
                       outcome, created_ms, updated_ms";
