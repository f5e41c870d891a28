//! Claims about callers that share a key, against the published runtimes
//! (each once found false, as a minimal schedule): a repeat of a call its
//! caller gave up on, a caller joining a call in flight, a cancel of a call
//! still waiting for its in-flight slot. Ground truth:
//! the peer's own count of `counter` executions (`peek`).

mod support;

use std::time::Duration;

use support::peers::{Peer, PeerKind};

/// Python 1.1.3: a caller gives up on its call at once (the submit is on
/// its way); the job runs and ends. The same client calls the key again,
/// same intent: the runtime answers on the same session with the stored
/// acceptance and result of that earlier job, unmarked. The tool ran
/// before the call was issued: a replay.
#[tokio::test]
async fn python_same_session_replay_of_a_given_up_call_reads_as_a_replay() {
    let peer = Peer::start(PeerKind::Python);
    let client = peer.client(&peer.url).connect().await.unwrap();
    let mut fresh = Vec::new();
    for round in 0..5u64 {
        let args = peer.counter_args(200, 0, &format!("abandoned-{round}"));
        let first = client.invoke_tool("counter", args.clone()).send();
        let key = first.key().cloned().unwrap();
        assert!(tokio::time::timeout(Duration::ZERO, first).await.is_err());
        tokio::time::sleep(Duration::from_millis(500)).await;
        let ran_before = peer.executions().await;
        if ran_before != round + 1 {
            continue; // the abandoned submit never left: nothing to replay
        }
        let again = client
            .invoke_tool("counter", args)
            .idempotency_key(key)
            .send()
            .await
            .unwrap();
        assert_eq!(peer.executions().await, round + 1, "ran once");
        if !again.replayed {
            fresh.push(format!("round {round}: {again:?}"));
        }
    }
    assert!(
        fresh.is_empty(),
        "replayed: false for a job that ran before the call was issued:\n{}",
        fresh.join("\n")
    );
}

/// Both runtimes: a second caller of the same key and intent, issued while
/// the first caller's job runs (the tool already ran), is answered with
/// that job's outcome: a replay to it, a fresh run to the first caller.
async fn a_joiner_of_a_running_call_is_told_it_is_a_replay(kind: PeerKind) {
    let peer = Peer::start(kind);
    let client = peer.client(&peer.url).connect().await.unwrap();
    let key = arcp_sdk::IdempotencyKey::new();
    let args = peer.counter_args(600, 0, "join");
    let first = client
        .invoke_tool("counter", args.clone())
        .idempotency_key(key.clone())
        .send();
    let handle = first.handle();
    let first = tokio::spawn(first);
    handle.accepted().await.expect("accepted");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        peer.executions().await,
        1,
        "the tool ran before the second call"
    );
    let second = client
        .invoke_tool("counter", args)
        .idempotency_key(key)
        .send()
        .await
        .unwrap();
    let first = first.await.unwrap().unwrap();
    assert_eq!(peer.executions().await, 1);
    assert!(!first.replayed);
    assert!(
        second.replayed,
        "the second caller sent nothing that ran the tool, yet: {second:?}"
    );
}

#[tokio::test]
async fn a_joiner_of_a_running_call_is_told_it_is_a_replay_python() {
    a_joiner_of_a_running_call_is_told_it_is_a_replay(PeerKind::Python).await
}

#[tokio::test]
async fn a_joiner_of_a_running_call_is_told_it_is_a_replay_rust() {
    a_joiner_of_a_running_call_is_told_it_is_a_replay(PeerKind::Rust).await
}

/// Both runtimes: a call waiting for a `max_in_flight` slot, being awaited,
/// is cancelled: it is never sent, so the tool never runs.
async fn a_call_cancelled_while_waiting_for_a_slot_never_runs(kind: PeerKind) {
    let peer = Peer::start(kind);
    let client = peer
        .client(&peer.url)
        .max_in_flight(1)
        .connect()
        .await
        .unwrap();
    let blocker = tokio::spawn(
        client
            .invoke_tool("counter", peer.counter_args(800, 0, "blocker"))
            .deadline(Duration::from_secs(10))
            .send(),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let queued = client
        .invoke_tool("counter", peer.counter_args(100, 0, "queued"))
        .deadline(Duration::from_secs(10))
        .send();
    let handle = queued.handle();
    let queued = tokio::spawn(queued);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let cancel = handle.cancel().await;
    let outcome = queued.await.unwrap();
    blocker.await.unwrap().unwrap();
    assert_eq!(
        peer.executions().await,
        1,
        "cancelled while waiting for a slot ({cancel:?}), yet it ran: {outcome:?}"
    );
}

#[tokio::test]
async fn a_call_cancelled_while_waiting_for_a_slot_never_runs_python() {
    a_call_cancelled_while_waiting_for_a_slot_never_runs(PeerKind::Python).await
}

#[tokio::test]
async fn a_call_cancelled_while_waiting_for_a_slot_never_runs_rust() {
    a_call_cancelled_while_waiting_for_a_slot_never_runs(PeerKind::Rust).await
}
