//! The connection task polls for a lone call's reply instead of sleeping
//! only within its window (`Tuning::spin_limit`): never while a
//! call waits on a slow tool, never while the client is idle. Measured as
//! this process's CPU time (one test per binary, so no other test's work
//! is counted).

use std::time::Duration;

use arcp_mock::MockRuntime;
use arcp_sdk::{tuning::Tuning, Client};
use serde_json::json;

/// CPU time this process has used.
fn process_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_for_a_reply_never_outlives_its_window() {
    let mock = MockRuntime::builder()
        .tool("echo", |args, _| async move { Ok(args) })
        .tool("slow", |_, _| async move {
            tokio::time::sleep(Duration::from_millis(400)).await;
            Ok(json!("done"))
        })
        .start()
        .await
        .unwrap();
    // A limit far above any round trip here (unoptimized builds take
    // hundreds of microseconds), so lone calls do poll: the window, not
    // the limit, must end it.
    let client = Client::builder(mock.ws_url())
        .tuning(Tuning::new().spin_limit(Duration::from_millis(50)))
        .connect()
        .await
        .unwrap();
    for n in 0..50 {
        let out = client.invoke_tool("echo", json!({ "n": n })).await.unwrap();
        assert_eq!(out.value, json!({ "n": n }));
    }

    // A lone call on a slow tool: the window (twice the recent calls'
    // time) passes long before the reply; then the driver sleeps.
    let before = process_cpu();
    let out = client.invoke_tool("slow", json!({})).await.unwrap();
    let during = process_cpu() - before;
    assert_eq!(out.value, json!("done"));
    assert!(
        during < Duration::from_millis(150),
        "{during:?} of CPU while one call waited 400 ms"
    );

    // Idle: nothing polls.
    let before = process_cpu();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle = process_cpu() - before;
    assert!(
        idle < Duration::from_millis(60),
        "{idle:?} of CPU while idle for 300 ms"
    );
    assert_eq!(mock.executions("slow"), 1);
}
