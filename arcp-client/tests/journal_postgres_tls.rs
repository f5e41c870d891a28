//! The PostgreSQL journal over TLS, against a throwaway server that refuses
//! TCP connections without it (`hostssl` alone in `pg_hba.conf`), with a
//! self-signed certificate for `localhost` (rcgen): each `sslmode` with
//! libpq's meaning, `sslrootcert`, and a journaled call over TLS.

mod pg_support;

use std::time::Duration;

use arcp_mock::MockRuntime;
use arcp_sdk::{Client, JournalErrorKind, PostgresJournal, PostgresOptions};
use pg_support::OwnServer;
use serde_json::{json, Value};

/// A self-signed certificate for `localhost`: (certificate, key) in PEM.
fn certificate() -> (String, String) {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    (certified.cert.pem(), certified.signing_key.serialize_pem())
}

fn options() -> PostgresOptions {
    PostgresOptions::default().connect_timeout(Duration::from_secs(5))
}

/// A server requiring TLS, with a database `db`, and a directory holding
/// `right.pem` (its certificate) and `wrong.pem` (another one).
async fn server(db: &str) -> Option<(OwnServer, tempfile::TempDir)> {
    let (cert, key) = certificate();
    let server = OwnServer::start_tls(&cert, &key)?;
    server.database_over_socket(db).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("right.pem"), &cert).unwrap();
    std::fs::write(dir.path().join("wrong.pem"), certificate().0).unwrap();
    Some((server, dir))
}

#[tokio::test]
async fn each_sslmode_against_a_server_that_requires_tls() {
    let Some((server, dir)) = server("tls_modes").await else {
        eprintln!("PostgreSQL test skipped (ARCP_TEST_POSTGRES_SKIP=1 and no server)");
        return;
    };
    let port = server.port();
    let root = |name: &str| dir.path().join(name).display().to_string();
    let url =
        |host: &str, params: &str| format!("postgres://postgres@{host}:{port}/tls_modes?{params}");
    let open = |url: String| async move { PostgresJournal::connect(&url, options()).await };

    // Encrypted, the certificate unchecked.
    for params in ["sslmode=require", "sslmode=prefer", "application_name=x"] {
        let opened = open(url("localhost", params)).await;
        assert!(opened.is_ok(), "{params}: {:?}", opened.err());
    }
    // The certificate checked against the right root, its name too.
    let right = format!("sslmode=verify-full&sslrootcert={}", root("right.pem"));
    open(url("localhost", &right)).await.unwrap();
    // The keyword syntax too.
    let keywords = format!(
        "host=localhost port={port} user=postgres dbname=tls_modes sslmode=verify-full \
         sslrootcert='{}'",
        root("right.pem")
    );
    open(keywords).await.unwrap();

    // Another root: refused, and the error says why.
    for mode in ["verify-full", "verify-ca", "require"] {
        let wrong = format!("sslmode={mode}&sslrootcert={}", root("wrong.pem"));
        let err = open(url("localhost", &wrong)).await.unwrap_err();
        assert_eq!(err.kind, JournalErrorKind::Tls, "{mode}: {err}");
        assert!(err.message.contains("TLS"), "{mode}: {err}");
        assert!(
            err.message.to_lowercase().contains("certificate"),
            "{mode}: {err}"
        );
    }
    // The right root, but the certificate does not name 127.0.0.1:
    // verify-ca accepts it, verify-full does not.
    let ca = format!("sslmode=verify-ca&sslrootcert={}", root("right.pem"));
    open(url("127.0.0.1", &ca)).await.unwrap();
    let full = format!("sslmode=verify-full&sslrootcert={}", root("right.pem"));
    let err = open(url("127.0.0.1", &full)).await.unwrap_err();
    assert_eq!(err.kind, JournalErrorKind::Tls, "{err}");
    assert!(err.message.to_lowercase().contains("name"), "{err}");

    // Without TLS the server refuses the connection.
    let err = open(url("localhost", "sslmode=disable")).await.unwrap_err();
    assert_ne!(err.kind, JournalErrorKind::Tls, "{err}");
    // An unreadable root file is named before anything connects.
    let err = open(url(
        "localhost",
        "sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
    ))
    .await
    .unwrap_err();
    assert!(err.message.contains("/nonexistent/ca.pem"), "{err}");
}

/// A call journaled over TLS runs once and is recorded.
#[tokio::test]
async fn a_journaled_call_over_verified_tls_runs_once() {
    let Some((server, dir)) = server("tls_call").await else {
        eprintln!("PostgreSQL test skipped (ARCP_TEST_POSTGRES_SKIP=1 and no server)");
        return;
    };
    let url = format!(
        "postgres://postgres@localhost:{}/tls_call?sslmode=verify-full&sslrootcert={}",
        server.port(),
        dir.path().join("right.pem").display()
    );
    let journal = PostgresJournal::connect(&url, options()).await.unwrap();
    let mock = MockRuntime::builder()
        .tool("echo", |args: Value, _ctx| async move { Ok(args) })
        .start()
        .await
        .unwrap();
    let client = Client::builder(mock.ws_url())
        .journal(journal)
        .connect()
        .await
        .unwrap();
    let out = client.invoke_tool("echo", json!({"n": 1})).await.unwrap();
    assert_eq!(out.value, json!({"n": 1}));
    assert_eq!(mock.executions("echo"), 1);
    client.close().await;
    // The record is in the database, read back over TLS by a second worker:
    // nothing is left to recover, and the key's outcome is there.
    let second = PostgresJournal::connect(&url, options()).await.unwrap();
    let client = Client::builder(mock.ws_url())
        .journal(second)
        .connect()
        .await
        .unwrap();
    assert!(client.recover().await.unwrap().is_empty());
    assert_eq!(mock.executions("echo"), 1);
}
