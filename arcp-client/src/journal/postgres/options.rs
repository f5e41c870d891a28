//! A worker's options: its id, its lease and how often it is renewed, the
//! pool, and the bounds on connecting and on each round trip.

use std::time::Duration;

/// Options of [`PostgresJournal::connect`](crate::PostgresJournal::connect).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
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
    /// [`JournalErrorKind::Unavailable`](crate::JournalErrorKind::Unavailable) and the pool's idle connections
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
    pub(super) fn round_trip(&self) -> Duration {
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
