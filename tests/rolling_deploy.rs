//! A call's first attempt runs on one instance of a runtime; its re-send
//! reaches another instance (a rolling deploy: a key store of its own)
//! that does not have the tool and refuses it with the legacy "tool not
//! registered" after accepting it. The refusal is that instance's, not the
//! key's: the tool ran on the first, so the call may have run. Ground
//! truth: the first instance's executions.

mod support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arcp_mock::{Dialect, Fault, MockRuntime};
use arcp_sdk::Execution;
use serde_json::{json, Value};
use support::mock::{client, mock};
use tokio::net::{TcpListener, TcpStream};

/// A TCP relay sending each new connection to the upstream of the moment.
async fn switchable(first: SocketAddr) -> (SocketAddr, Arc<Mutex<SocketAddr>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let upstream = Arc::new(Mutex::new(first));
    let current = upstream.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let to = *current.lock().unwrap();
            tokio::spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (address, upstream)
}

async fn refused_by_the_next_instance(journal: Option<std::path::PathBuf>) {
    let old = mock(Dialect::Legacy).start().await.unwrap();
    let new = MockRuntime::builder()
        .dialect(Dialect::Legacy)
        .tool("echo", |args: Value, _ctx| async move { Ok(args) })
        .start()
        .await
        .unwrap();
    let (relay, upstream) = switchable(old.address()).await;
    let mut builder = client(&format!("ws://{relay}/arcp"), Dialect::Legacy);
    if let Some(path) = &journal {
        builder = builder.journal_path(path);
    }
    let client = builder.connect().await.unwrap();
    // The next connection reaches the new instance.
    *upstream.lock().unwrap() = new.address();
    old.inject(Fault::DropAfterAccepted);
    let call = client
        .invoke_tool("refund", json!({"order": 8, "ms": 50}))
        .deadline(Duration::from_secs(8))
        .send();
    let key = call.key().cloned().unwrap();
    let e = call.await.unwrap_err();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(old.executions("refund"), 1);
    assert_eq!(e.execution(), Execution::MayHaveRun, "{e:?}");
    if journal.is_some() {
        let entry = client.lookup(&key).await.unwrap().expect("a record");
        if let Some(Err(recorded)) = entry.outcome() {
            assert_ne!(recorded.execution(), Execution::NotRun, "{recorded:?}");
        }
    }
}

#[tokio::test]
async fn an_unknown_tool_refusal_from_another_instance_may_have_run() {
    refused_by_the_next_instance(None).await;
}

#[tokio::test]
async fn an_unknown_tool_refusal_from_another_instance_keeps_the_record_in_doubt() {
    let dir = tempfile::tempdir().unwrap();
    refused_by_the_next_instance(Some(dir.path().join("j.db"))).await;
}
