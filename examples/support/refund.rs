//! The refund tool the examples (and the typed-call tests) call: its
//! arguments and result as an application types them, and a mock runtime
//! whose `refund` answers at once. Each example uses part of it.

use arcp_mock::MockRuntime;
use arcp_sdk::Tool;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The refund tool's arguments.
#[derive(Debug, Serialize)]
pub(crate) struct Refund {
    pub(crate) order: u64,
    pub(crate) cents: u64,
}

/// The refund tool's result.
#[derive(Debug, PartialEq, Deserialize)]
pub(crate) struct Refunded {
    pub(crate) refunded: u64,
    pub(crate) cents: u64,
}

/// The refund tool, typed.
pub(crate) const REFUND: Tool<Refund, Refunded> = Tool::new("refund");

/// What the mock's `refund` answers for `args`: the order and the amount.
pub(crate) fn refunded(args: &Value) -> Value {
    json!({"refunded": args["order"], "cents": args["cents"]})
}

/// A mock runtime on a loopback port whose `refund` answers at once.
pub(crate) async fn refund_runtime() -> MockRuntime {
    MockRuntime::builder()
        .tool("refund", |args, _ctx| async move { Ok(refunded(&args)) })
        .start()
        .await
        .expect("the mock runtime binds a loopback port")
}
