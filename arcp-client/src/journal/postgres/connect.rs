//! Connecting: the options checked, the pool and its private runtime built,
//! then the schema migrated before the journal is handed out.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};

use super::schema::migrate;
use super::tls::{self, RustlsConnect};
use super::{PostgresJournal, PostgresOptions};
use crate::journal::{JournalError, JournalErrorKind};

impl PostgresJournal {
    /// Connects to `url` (a libpq-style `postgres://user@host/db` or
    /// `host=/run/postgresql dbname=arcp` string), applies the schema
    /// migrations this version needs, and returns the journal for one
    /// client. Fails with [`JournalErrorKind::Io`] when the server cannot
    /// be reached, [`JournalErrorKind::Schema`] when the database holds a
    /// newer schema or foreign tables of the same names.
    pub async fn connect(url: &str, options: PostgresOptions) -> Result<Self, JournalError> {
        let (journal, tls_failure) = Self::build(url, options)?;
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
        .map_err(|e| JournalError::new(JournalErrorKind::Io, &journal.location, e.to_string()))?
        .map_err(|e| with_tls_failure(e, &tls_failure, &journal.location))?;
        Ok(journal)
    }

    /// [`PostgresJournal::connect`] for blocking code (no async runtime
    /// needed).
    pub fn connect_blocking(url: &str, options: PostgresOptions) -> Result<Self, JournalError> {
        let (journal, tls_failure) = Self::build(url, options)?;
        let timeout = journal_timeout(&journal);
        journal
            .run_blocking(async {
                tokio::time::timeout(timeout, migrate(&journal.pool, &journal.location))
                    .await
                    .unwrap_or_else(|_| {
                        Err(JournalError::new(
                            JournalErrorKind::Io,
                            &journal.location,
                            format!("no answer from the server within {timeout:?}"),
                        ))
                    })
            })
            .map_err(|e| with_tls_failure(e, &tls_failure, &journal.location))?;
        Ok(journal)
    }

    /// The journal, not yet migrated, and where its TLS connector keeps
    /// its last handshake failure.
    fn build(url: &str, options: PostgresOptions) -> Result<(Self, TlsFailure), JournalError> {
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
        let invalid = |e: String| {
            JournalError::new(
                JournalErrorKind::Io,
                "postgres",
                format!("invalid PostgreSQL URL: {e}"),
            )
        };
        let (url, tls_settings) = tls::take_settings(url).map_err(invalid)?;
        let mut config =
            tokio_postgres::Config::from_str(&url).map_err(|e| invalid(e.to_string()))?;
        config.ssl_mode(tls_settings.mode.ssl_mode());
        let tls = tls::client_config(&tls_settings)
            .map_err(|e| JournalError::new(JournalErrorKind::Tls, "postgres", e))?;
        let tls = RustlsConnect::new(tls);
        let tls_failure = tls.last_failure.clone();
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
        // Every statement here finds its rows by key (or another index).
        // A statement is planned once per connection and its generic plan
        // kept: planned while the tables were small (a new journal, before
        // the first ANALYZE), it scans the whole table, and keeps doing so
        // as the table grows (measured: 1 ms per batch at a few thousand
        // records, growing with them). Refusing sequential scans where an
        // index serves keeps each plan by key whatever the statistics say.
        if !server_options.contains("enable_seqscan") {
            server_options.push_str(" -c enable_seqscan=off");
        }
        // A query no index serves (a listing's sort) still scans, costed by
        // the setting above past every JIT threshold (before PostgreSQL 18):
        // compiling it would cost a quarter of a second each time, and none
        // of these small lookups gains from JIT.
        if !server_options.contains("jit") {
            server_options.push_str(" -c jit=off");
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
            tls,
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
        let journal = PostgresJournal {
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
        };
        Ok((journal, tls_failure))
    }
}

/// The last TLS handshake failure of a journal's connections.
type TlsFailure = Arc<Mutex<Option<String>>>;

/// A failure to open the journal, named as a TLS failure when a TLS
/// handshake failed (tokio-postgres' own error does not say why).
fn with_tls_failure(error: JournalError, failure: &TlsFailure, location: &str) -> JournalError {
    match crate::sync::lock(failure).take() {
        Some(reason) => JournalError::new(
            JournalErrorKind::Tls,
            location,
            format!("the TLS handshake with the server failed: {reason}"),
        ),
        None => error,
    }
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
