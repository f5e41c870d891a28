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

/// Each new connection goes to the next address of `route` (the last one
/// from then on).
async fn routed(route: Vec<SocketAddr>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let n = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let to = route[n.min(route.len() - 1)];
            tokio::spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    address
}

/// The call's first attempt starts its job on instance X and the
/// connection drops; the reconnect reaches instance Y, which refuses the
/// resume; a new session re-sends to X, which answers with the job's
/// stored result, a frame of the first session. The job is the call's own
/// fresh execution: no replay, however its answer arrives.
#[tokio::test]
async fn the_calls_own_job_answered_after_another_instance_is_not_a_replay() {
    let start = || {
        mock(Dialect::V1_1)
            .preset(arcp_mock::Preset::Python113)
            .subscribe(false)
            .start()
    };
    let x = start().await.unwrap();
    let y = start().await.unwrap();
    let relay = routed(vec![x.address(), y.address(), x.address()]).await;
    let client = client(&format!("ws://{relay}/arcp"), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    x.inject(Fault::DropAfterAccepted);
    let out = client
        .invoke_tool("refund", json!({"order": 9, "ms": 100}))
        .deadline(Duration::from_secs(10))
        .send()
        .await
        .unwrap();
    assert_eq!(x.executions("refund"), 1);
    assert_eq!(y.executions("refund"), 0);
    assert_eq!(x.jobs().len(), 1);
    assert!(!out.replayed, "{out:?}");
}
