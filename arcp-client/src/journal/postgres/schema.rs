//! The schema: numbered migrations, applied in order under an advisory lock
//! so workers starting together migrate once.

use deadpool_postgres::Pool;

use super::errors::classify;
use crate::journal::{JournalError, JournalErrorKind};

/// Serializes schema migrations between workers starting at once
/// (`pg_advisory_xact_lock`): "ARCP" in ASCII.
pub(super) const MIGRATION_LOCK: i64 = 0x4152_4350;

/// The schema, as numbered migrations applied in order, each in the same
/// transaction as its row in `arcp_journal_schema`. Each is a file of
/// `migrations/`, embedded at build time, whose `-- include: NAME` lines are
/// replaced by the fragment of that name (`FRAGMENTS`) before it runs.
/// Never edit a published migration, nor a fragment one includes: add the
/// next migration (the SQL each version executes is pinned by its digest,
/// in the tests below).
///
/// 1. The records, one active attempt per call, the history of every state
///    change, and the triggers that make the invariants the database's (not
///    only this code's).
/// 2. The same invariants, checked and recorded once per statement instead
///    of once per row. A batch changes many records in one statement;
///    per-row triggers (a guard, then history and attempts rows inserted one
///    at a time, each checked against its call by a foreign key) cost more
///    database CPU than the records themselves. Here each statement's guard
///    is one query over its transition tables, history and attempts are
///    written set-wise, and "history and attempts only of a recorded call"
///    holds by construction for the rows these triggers write (checked
///    set-wise for any other insert), with deletes cascading by trigger.
/// 3. The same records, in fewer queries. A trigger's query costs its
///    executor's start-up whatever the rows, and one call at a time is two
///    statements (its record inserted, the previous call's ended) whose
///    triggers ran five queries between them. An insert now opens attempts
///    and writes history in one statement (a data-modifying `WITH`), and an
///    update that claims nothing ends attempts and writes history in one; a
///    claim (rare: a recovery) keeps the ordered statements of version 2,
///    which supersede the active attempt before opening the next.
pub(super) const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "calls, attempts, history, guards",
        include_str!("migrations/0001_calls_attempts_history_guards.sql"),
    ),
    (
        2,
        "guards, attempts and history per statement",
        include_str!("migrations/0002_per_statement.sql"),
    ),
    (
        3,
        "attempts and history in one statement",
        include_str!("migrations/0003_fewer_queries.sql"),
    ),
];

/// SQL shared by migrations, by name. `calls_updated_guard.sql`: the
/// declarations and refusals of the statement-level update trigger
/// (`arcp_calls_updated`), the same in versions 2 and 3, which differ only
/// in how they record what changed.
const FRAGMENTS: &[(&str, &str)] = &[(
    "calls_updated_guard.sql",
    include_str!("migrations/calls_updated_guard.sql"),
)];

/// How a migration names a fragment: a line of its own.
const INCLUDE: &str = "-- include: ";

/// The SQL a migration executes: its text with each include line replaced
/// by the fragment it names. `Err` names an include with no such fragment.
fn expand(sql: &str) -> Result<String, String> {
    let mut out = String::with_capacity(sql.len() * 2);
    for line in sql.split_inclusive('\n') {
        match line.strip_prefix(INCLUDE) {
            Some(name) => {
                let name = name.trim_end();
                let (_, fragment) = FRAGMENTS
                    .iter()
                    .find(|(n, _)| *n == name)
                    .ok_or_else(|| format!("it includes {name}, which is no known fragment"))?;
                out.push_str(fragment);
            }
            None => out.push_str(line),
        }
    }
    Ok(out)
}

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
        let sql = expand(sql).map_err(|why| {
            JournalError::new(
                JournalErrorKind::Schema,
                location,
                format!("migration {version} ({description}): {why}"),
            )
        })?;
        tx.batch_execute(&sql).await.map_err(|e| {
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

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::*;

    /// The SHA-256 of the SQL each released version executes. A database
    /// records only the version it reached, so a migration that executed
    /// other SQL would leave databases of one version with different
    /// schemas.
    const RELEASED: &[(i32, &str)] = &[
        (
            1,
            "a5c0e9467cb9e4b196f4213066f0ecb66da1b445c6166583f001445a1cc2e6e5",
        ),
        (
            2,
            "b5304e5ced349daaf7f3c59d60481e87dbfadbe8ce96700ab3e35d7d133bf7aa",
        ),
        (
            3,
            "8a8e1af9b9361c928e4c1952e72d5faf0595e81914a9eccb15e5fb907350f59a",
        ),
    ];

    fn sha256(text: &str) -> String {
        Sha256::digest(text.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    #[test]
    fn released_migrations_execute_the_sql_they_always_did() {
        for &(version, digest) in RELEASED {
            let (_, _, sql) = MIGRATIONS
                .iter()
                .find(|m| m.0 == version)
                .expect("a released version stays");
            let executed = expand(sql).unwrap();
            assert!(!executed.contains(INCLUDE), "version {version}");
            assert_eq!(sha256(&executed), digest, "version {version} changed");
        }
    }

    #[test]
    fn versions_are_numbered_in_order_from_one() {
        for (i, (version, _, _)) in MIGRATIONS.iter().enumerate() {
            assert_eq!(usize::try_from(*version).unwrap(), i + 1);
        }
    }

    #[test]
    fn the_shared_guard_is_written_once_and_run_by_two_versions() {
        let guard = FRAGMENTS[0].1;
        assert!(guard.contains("AS rekeyed"));
        for (version, _, sql) in MIGRATIONS {
            assert!(
                !sql.contains("AS rekeyed"),
                "version {version} copies the guard"
            );
        }
        let including = MIGRATIONS
            .iter()
            .filter(|(_, _, sql)| expand(sql).unwrap().contains(guard))
            .count();
        assert_eq!(including, 2);
    }

    #[test]
    fn an_include_of_no_known_fragment_is_refused_by_name() {
        let err = expand("SELECT 1;\n-- include: nowhere.sql\n").unwrap_err();
        assert!(err.contains("nowhere.sql"), "{err}");
        assert_eq!(expand("SELECT 1;\n").unwrap(), "SELECT 1;\n");
    }
}
