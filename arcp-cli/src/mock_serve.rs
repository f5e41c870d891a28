//! `arcp mock serve`: an arcp-mock runtime with demo tools, on loopback,
//! until SIGINT or SIGTERM.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arcp_mock::{Dialect, MockRuntime, MockRuntimeBuilder, ReplayPolicy, ToolContext, ToolFailure};
use serde_json::{json, Value};

use crate::cli::MockServeArgs;

/// The principal a `--token` maps to.
const PRINCIPAL: &str = "arcp-cli";
/// Bounds on the counter tool's arguments, so a typo cannot wedge the mock.
const MAX_STEPS: u64 = 100_000;
const MAX_SLEEP_MS: u64 = 3_600_000;

/// Starts the mock, prints its URL on stdout (one flushed line), and serves
/// until interrupted. Returns an error message when it cannot start.
pub(crate) async fn run(args: &MockServeArgs) -> Result<(), String> {
    let dialect = Dialect::from(args.dialect);
    let mut builder = with_demo_tools(MockRuntime::builder().dialect(dialect)).port(args.port);
    if let Some(policy) = args.replay_policy {
        builder = builder.replay_policy(ReplayPolicy::from(policy));
    }
    if let Some(token) = &args.token {
        builder = builder.token(token.clone(), PRINCIPAL);
    }
    let shutdown =
        crate::signals::shutdown().map_err(|e| format!("cannot listen for signals: {e}"))?;
    let mock = builder
        .start()
        .await
        .map_err(|e| format!("cannot listen on 127.0.0.1:{}: {e}", args.port))?;

    {
        let mut stdout = std::io::stdout().lock();
        // A closed stdout must not stop the server; the URL is on stderr too.
        let _ = writeln!(stdout, "{}", mock.ws_url()).and_then(|()| stdout.flush());
    }
    let policy = args
        .replay_policy
        .map(ReplayPolicy::from)
        .unwrap_or_else(|| ReplayPolicy::default_for(dialect));
    eprintln!(
        "arcp mock: serving {dialect} on {}, and the HTTP binding on {} (replay policy {}, {}); \
         tools: echo, counter, fail, refund. Ctrl-C to stop.",
        mock.ws_url(),
        mock.http_url(),
        policy_name(policy),
        if args.token.is_some() {
            "one bearer token accepted"
        } else {
            "any bearer token accepted"
        }
    );

    shutdown.await;
    eprintln!(
        "arcp mock: stopping after {} execution(s)",
        mock.total_executions()
    );
    drop(mock);
    Ok(())
}

/// The `--replay-policy` spelling of a policy.
fn policy_name(policy: ReplayPolicy) -> &'static str {
    match policy {
        ReplayPolicy::TerminalReplay => "terminal-replay",
        ReplayPolicy::AcceptedOnly => "accepted-only",
        ReplayPolicy::AckReplay => "ack-replay",
        ReplayPolicy::TerminalOnly => "terminal-only",
        _ => "other",
    }
}

/// Registers the demo tools: `echo`, `counter`, `fail` and `refund`.
pub(crate) fn with_demo_tools(builder: MockRuntimeBuilder) -> MockRuntimeBuilder {
    let count = Arc::new(AtomicU64::new(0));
    builder
        .tool("echo", |args, _ctx| async move { Ok(args) })
        .tool("counter", move |args, ctx| {
            let count = Arc::clone(&count);
            async move { counter(&count, args, ctx).await }
        })
        .tool("fail", |args, _ctx| async move { Err(fail(&args)) })
        .tool("refund", |args, _ctx| async move { refund(&args) })
}

/// `refund {order, cents}`: the README's first program calls it; answers
/// `{"refunded": order, "cents": cents}` (`cents` defaults to 0).
fn refund(args: &Value) -> Result<Value, ToolFailure> {
    let order = args.get("order").and_then(Value::as_u64).ok_or_else(|| {
        ToolFailure::new("INVALID_ARGUMENT", "order must be a non-negative integer")
    })?;
    let cents = uint_arg(args, "cents", u64::MAX)?;
    Ok(json!({ "refunded": order, "cents": cents }))
}

/// `counter {steps, sleep_ms}`: sleeps `sleep_ms` in all, emitting `steps`
/// progress events along the way, and returns how many times it has run.
async fn counter(count: &AtomicU64, args: Value, ctx: ToolContext) -> Result<Value, ToolFailure> {
    let steps = uint_arg(&args, "steps", MAX_STEPS)?;
    let sleep_ms = uint_arg(&args, "sleep_ms", MAX_SLEEP_MS)?;
    let n = count.fetch_add(1, Ordering::SeqCst) + 1;
    ctx.log("info", format!("counter: execution {n}")).await;
    let total = Duration::from_millis(sleep_ms);
    if steps == 0 {
        ctx.sleep(total).await;
    } else {
        // `steps` fits in u32: MAX_STEPS does.
        let step = total / steps as u32;
        for i in 1..=steps {
            ctx.sleep(step).await;
            ctx.progress(i, steps).await;
        }
    }
    Ok(json!({ "count": n }))
}

/// `fail {code, message}`: the failure to report.
fn fail(args: &Value) -> ToolFailure {
    let code = args
        .get("code")
        .and_then(Value::as_str)
        .unwrap_or("FAILED_PRECONDITION");
    let message = args
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("the fail tool failed, as asked");
    ToolFailure::new(code, message)
}

/// An optional non-negative integer argument, at most `max` (default 0).
fn uint_arg(args: &Value, name: &str, max: u64) -> Result<u64, ToolFailure> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(0),
        Some(v) => v.as_u64().filter(|n| *n <= max).ok_or_else(|| {
            ToolFailure::new(
                "INVALID_ARGUMENT",
                format!("{name} must be an integer from 0 to {max}, not {v}"),
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fail_reports_the_code_and_message_asked_for() {
        let f = fail(&json!({"code": "PERMISSION_DENIED", "message": "nope"}));
        assert_eq!(f.code().as_str(), "PERMISSION_DENIED");
        assert_eq!(f.message(), "nope");
        assert_eq!(fail(&json!({})).code().as_str(), "FAILED_PRECONDITION");
    }

    #[test]
    fn refund_answers_the_order_and_refuses_a_missing_one() {
        let out = refund(&json!({"order": 4812, "cents": 500})).ok();
        assert_eq!(out, Some(json!({"refunded": 4812, "cents": 500})));
        let out = refund(&json!({"order": 7})).ok();
        assert_eq!(out, Some(json!({"refunded": 7, "cents": 0})));
        for bad in [json!({}), json!({"order": "7"}), json!({"order": -1})] {
            let err = refund(&bad).err();
            assert_eq!(
                err.as_ref().map(|f| f.code().as_str()),
                Some("INVALID_ARGUMENT"),
                "{bad}"
            );
        }
    }

    #[test]
    fn counter_arguments_are_checked() {
        assert_eq!(uint_arg(&json!({}), "steps", 10).ok(), Some(0));
        assert_eq!(uint_arg(&json!({"steps": 3}), "steps", 10).ok(), Some(3));
        assert!(uint_arg(&json!({"steps": 11}), "steps", 10).is_err());
        assert!(uint_arg(&json!({"steps": -1}), "steps", 10).is_err());
        assert!(uint_arg(&json!({"steps": "3"}), "steps", 10).is_err());
    }
}
