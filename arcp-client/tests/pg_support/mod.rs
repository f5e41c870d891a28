//! A PostgreSQL server for the tests: a throwaway cluster of this test
//! process (its own temporary data directory, listening only on a Unix
//! socket in it, stopped and deleted when the process exits), or the server
//! `ARCP_TEST_POSTGRES_URL` names. Each test gets a database of its own.
//!
//! - `ARCP_TEST_POSTGRES_URL`: an existing server (`postgres://user@host/db`
//!   or `host=... user=... dbname=...`); its user needs `CREATEDB`.
//! - `ARCP_TEST_PG_BIN`: the directory of `initdb` and `pg_ctl` (default:
//!   `pg_config --bindir`, the newest `/usr/lib/postgresql/*/bin`, `PATH`).
//! - `ARCP_TEST_POSTGRES_SKIP=1`: skip (pass) the PostgreSQL tests when no
//!   server can be had. Without it a missing PostgreSQL fails the tests.
//!
//! Run as root (CI), the cluster runs as the `postgres` user the
//! distribution's package creates (`initdb` refuses root).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

/// The admin connection string of the test server, or `None` when the
/// tests are to be skipped (`ARCP_TEST_POSTGRES_SKIP=1` and no server).
pub(crate) fn admin_url() -> Option<String> {
    static SERVER: OnceLock<Option<String>> = OnceLock::new();
    SERVER.get_or_init(start).clone()
}

/// A fresh, empty database on the test server; its connection string.
/// `None`: skip the test (see [`admin_url`]).
pub(crate) async fn database() -> Option<String> {
    let admin = admin_url()?;
    static N: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "arcp_test_{}_{}_{:06x}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        rand_suffix()
    );
    create_database(&admin, &name).await;
    Some(with_dbname(&admin, &name))
}

/// Creates database `name` through the connection string `admin`.
async fn create_database(admin: &str, name: &str) {
    let (client, conn) = tokio_postgres::connect(admin, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect to the test PostgreSQL server ({admin}): {e}"));
    let task = tokio::spawn(conn);
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
    drop(client);
    let _ = task.await;
}

/// Prints why a test is skipped and says whether to skip it.
#[macro_export]
macro_rules! postgres_or_skip {
    () => {
        match pg_support::database().await {
            Some(url) => url,
            None => {
                eprintln!("PostgreSQL test skipped (ARCP_TEST_POSTGRES_SKIP=1 and no server)");
                return;
            }
        }
    };
}

fn rand_suffix() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    t & 0x00ff_ffff
}

/// `url` with its database replaced by `db` (both syntaxes).
pub(crate) fn with_dbname(url: &str, db: &str) -> String {
    for scheme in ["postgres://", "postgresql://"] {
        if let Some(rest) = url.strip_prefix(scheme) {
            let (main, query) = match rest.find('?') {
                Some(i) => (&rest[..i], &rest[i..]),
                None => (rest, ""),
            };
            let authority = main.split('/').next().unwrap_or("");
            return format!("{scheme}{authority}/{db}{query}");
        }
    }
    format!("{url} dbname={db}")
}

fn skip_allowed() -> bool {
    std::env::var("ARCP_TEST_POSTGRES_SKIP").is_ok_and(|v| v == "1")
}

fn start() -> Option<String> {
    if let Ok(url) = std::env::var("ARCP_TEST_POSTGRES_URL") {
        if !url.trim().is_empty() {
            return Some(url);
        }
    }
    let Some(bin) = find_bin() else {
        if skip_allowed() {
            return None;
        }
        panic!(
            "PostgreSQL is needed for these tests and was not found: install it (Debian: \
             `apt-get install postgresql`), set ARCP_TEST_PG_BIN to the directory of initdb and \
             pg_ctl, or point ARCP_TEST_POSTGRES_URL at a server. To skip them locally, set \
             ARCP_TEST_POSTGRES_SKIP=1."
        );
    };
    Some(Cluster::start(&bin))
}

fn find_bin() -> Option<PathBuf> {
    let has = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Some(dir) = std::env::var_os("ARCP_TEST_PG_BIN").map(PathBuf::from) {
        return has(&dir).then_some(dir);
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && has(&dir) {
            return Some(dir);
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let dir = e.path().join("bin");
            has(&dir).then_some((v, dir))
        })
        .collect();
    versions.sort();
    if let Some((_, dir)) = versions.pop() {
        return Some(dir);
    }
    std::env::var_os("PATH").and_then(|paths| std::env::split_paths(&paths).find(|d| has(d)))
}

/// A temporary directory for a cluster, owned by the user the server runs
/// as (`postgres` when this runs as root: `initdb` refuses root), and
/// whether that is the case.
fn cluster_dir(prefix: &str) -> (PathBuf, bool) {
    let root = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("a temporary directory for the cluster")
        .keep();
    // SAFETY: geteuid has no preconditions.
    let as_postgres = unsafe { libc::geteuid() } == 0;
    if as_postgres {
        let ok = Command::new("chown")
            .args(["-R", "postgres:"])
            .arg(&root)
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "chown {} to the `postgres` user failed: running as root, the test cluster runs \
             as `postgres` (created by the distribution's postgresql package)",
            root.display()
        );
    }
    (root, as_postgres)
}

/// `program`, run as the server's user.
fn as_server_user(program: &Path, as_postgres: bool) -> Command {
    if as_postgres {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// Stops the cluster in `root/data` at once (`-m immediate`).
fn stop_now(pg_ctl: &Path, root: &Path, as_postgres: bool) {
    let _ = as_server_user(pg_ctl, as_postgres)
        .arg("-D")
        .arg(root.join("data"))
        .args(["-m", "immediate", "-w", "stop"])
        .output();
}

/// The running throwaway cluster, stopped and removed at process exit.
struct Cluster {
    dir: PathBuf,
    pg_ctl: PathBuf,
    as_postgres: bool,
}

static CLUSTER: Mutex<Option<Cluster>> = Mutex::new(None);

extern "C" fn stop_cluster_at_exit() {
    let cluster = CLUSTER.lock().ok().and_then(|mut c| c.take());
    if let Some(c) = cluster {
        c.stop();
    }
}

impl Cluster {
    fn start(bin: &Path) -> String {
        let (root, as_postgres) = cluster_dir("arcp-pg-");
        let cluster = Cluster {
            dir: root.clone(),
            pg_ctl: bin.join("pg_ctl"),
            as_postgres,
        };
        let data = root.join("data");
        let run = |program: &Path, args: &[&str]| {
            let out = as_server_user(program, as_postgres)
                .args(args)
                .output()
                .unwrap_or_else(|e| {
                    panic!("run {}: {e}", program.display());
                });
            if !out.status.success() {
                let log = std::fs::read_to_string(root.join("log")).unwrap_or_default();
                panic!(
                    "{} {args:?} failed: {}\n{}\n{}\nserver log:\n{log}",
                    program.display(),
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        };
        let data_s = data.to_string_lossy().into_owned();
        run(
            &bin.join("initdb"),
            &[
                "-D",
                &data_s,
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
        );
        let socket = root.to_string_lossy().into_owned();
        let log = root.join("log").to_string_lossy().into_owned();
        let opts = format!(
            "-k {socket} -c listen_addresses='' -c fsync=off -c synchronous_commit=off \
             -c full_page_writes=off -c max_connections=200"
        );
        run(
            &cluster.pg_ctl,
            &[
                "-D", &data_s, "-l", &log, "-o", &opts, "-w", "-t", "60", "start",
            ],
        );
        *CLUSTER.lock().unwrap_or_else(|e| e.into_inner()) = Some(cluster);
        // SAFETY: registers a plain function with no captured state.
        unsafe {
            libc::atexit(stop_cluster_at_exit);
        }
        format!("host={socket} user=postgres dbname=postgres")
    }

    fn stop(self) {
        stop_now(&self.pg_ctl, &self.dir, self.as_postgres);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A PostgreSQL server of one test alone, on a loopback TCP port, that the
/// test may stop and start again (database faults): its own cluster in a
/// temporary directory, removed when dropped. `None`: skip (no server
/// binaries and `ARCP_TEST_POSTGRES_SKIP=1`); an existing server
/// (`ARCP_TEST_POSTGRES_URL`) cannot be restarted, so these tests need the
/// binaries.
pub(crate) struct OwnServer {
    root: PathBuf,
    pg_ctl: PathBuf,
    port: u16,
    as_postgres: bool,
}

impl OwnServer {
    /// Creates and starts the server; `durable`: keep PostgreSQL's default
    /// durability (`fsync`, `synchronous_commit`), for measurements.
    pub(crate) fn start(durable: bool) -> Option<OwnServer> {
        Self::start_with(durable, None)
    }

    /// A server whose TCP connections must use TLS (`hostssl` alone in
    /// `pg_hba.conf`), with this certificate and key (PEM); its Unix
    /// socket, without TLS, serves [`database_over_socket`](Self::database_over_socket).
    pub(crate) fn start_tls(cert_pem: &str, key_pem: &str) -> Option<OwnServer> {
        Self::start_with(false, Some((cert_pem, key_pem)))
    }

    fn start_with(durable: bool, tls: Option<(&str, &str)>) -> Option<OwnServer> {
        let Some(bin) = find_bin() else {
            if skip_allowed() {
                return None;
            }
            panic!(
                "PostgreSQL server binaries are needed for the database-fault tests (Debian: \
                 `apt-get install postgresql`, or set ARCP_TEST_PG_BIN); to skip them locally, \
                 set ARCP_TEST_POSTGRES_SKIP=1"
            );
        };
        let (root, as_postgres) = cluster_dir("arcp-pg-own-");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free loopback port");
        let server = OwnServer {
            root,
            pg_ctl: bin.join("pg_ctl"),
            port,
            as_postgres,
        };
        let data = server.data();
        server.run(
            &bin.join("initdb"),
            &[
                "-D",
                &data,
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
        );
        let durability = if durable {
            ""
        } else {
            "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
        };
        let conf = format!(
            "listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{}'\n\
             max_connections = 100\n{durability}",
            server.root.display(),
        );
        let conf_path = server.root.join("data").join("postgresql.auto.conf");
        std::fs::write(&conf_path, conf).expect("write postgresql.auto.conf");
        if let Some((cert, key)) = tls {
            server.require_tls(cert, key);
        }
        server.start_again();
        Some(server)
    }

    /// TLS on, with `cert` and `key`; TCP connections without it refused.
    fn require_tls(&self, cert: &str, key: &str) {
        use std::io::Write as _;
        use std::os::unix::fs::PermissionsExt as _;
        let data = self.root.join("data");
        let write = |name: &str, text: &str| {
            let path = data.join(name);
            std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {name}: {e}"));
            // The server refuses a key others can read.
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .expect("chmod 600");
            if self.as_postgres {
                let ok = Command::new("chown")
                    .arg("postgres:")
                    .arg(&path)
                    .status()
                    .is_ok_and(|s| s.success());
                assert!(ok, "chown {name} to postgres");
            }
        };
        write("server.crt", cert);
        write("server.key", key);
        write(
            "pg_hba.conf",
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
        );
        let mut conf = std::fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.auto.conf"))
            .expect("open postgresql.auto.conf");
        conf.write_all(b"ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n")
            .expect("append the TLS settings");
    }

    /// Creates database `db` through the Unix socket (no TLS there).
    pub(crate) async fn database_over_socket(&self, db: &str) {
        let admin = format!(
            "host={} port={} user=postgres dbname=postgres",
            self.root.display(),
            self.port
        );
        create_database(&admin, db).await;
    }

    /// The server's TCP port.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    fn data(&self) -> String {
        self.root.join("data").to_string_lossy().into_owned()
    }

    fn run(&self, program: &Path, args: &[&str]) {
        let out = as_server_user(program, self.as_postgres)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", program.display()));
        if !out.status.success() {
            let log = std::fs::read_to_string(self.root.join("log")).unwrap_or_default();
            panic!(
                "{} {args:?} failed: {}\n{}\n{}\nserver log:\n{log}",
                program.display(),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// The server's loopback address.
    pub(crate) fn address(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// A connection string for `db` on this server through `address`.
    pub(crate) fn url_via(&self, address: std::net::SocketAddr, db: &str) -> String {
        format!(
            "host={} port={} user=postgres dbname={db}",
            address.ip(),
            address.port()
        )
    }

    /// Creates database `db`; its connection string (direct).
    pub(crate) async fn database(&self, db: &str) -> String {
        let admin = self.url_via(self.address(), "postgres");
        let (client, conn) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("connect to the test server ({admin}): {e}"));
        let task = tokio::spawn(conn);
        client
            .batch_execute(&format!("CREATE DATABASE {db}"))
            .await
            .unwrap_or_else(|e| panic!("CREATE DATABASE {db}: {e}"));
        drop(client);
        let _ = task.await;
        self.url_via(self.address(), db)
    }

    /// Stops the server at once (`-m immediate`: no checkpoint, as a crash).
    pub(crate) fn stop_immediate(&self) {
        let log = self.root.join("log").to_string_lossy().into_owned();
        self.run(
            &self.pg_ctl,
            &[
                "-D",
                &self.data(),
                "-l",
                &log,
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
        );
    }

    /// Starts the (stopped) server again.
    pub(crate) fn start_again(&self) {
        let log = self.root.join("log").to_string_lossy().into_owned();
        self.run(
            &self.pg_ctl,
            &["-D", &self.data(), "-l", &log, "-w", "-t", "60", "start"],
        );
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        stop_now(&self.pg_ctl, &self.root, self.as_postgres);
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
