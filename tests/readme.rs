//! The READMEs' programs are the code CI compiles and runs: the first
//! program is `examples/first_program.rs` (run by `.ci/readme-commands`
//! against `arcp mock serve`), and the "Testing with arcp-mock" test is the
//! one below, verbatim.

// BEGIN README TEST (arcp-client/README.md and arcp-mock/README.md show this)
use arcp_mock::{Fault, MockRuntime};
use arcp_sdk::Client;
use serde_json::json;

#[tokio::test]
async fn a_lost_answer_still_runs_the_refund_once() -> Result<(), Box<dyn std::error::Error>> {
    let mock = MockRuntime::builder()
        .tool("refund", |args, _ctx| async move {
            Ok(json!({"refunded": args["order"]}))
        })
        .start()
        .await?;
    // The refund runs, then its connection drops before the answer is sent.
    mock.inject(Fault::DropBeforeTerminal);
    // Checked again when `mock` is dropped, like wiremock's `expect`.
    mock.expect_executions("refund", 1);

    let client = Client::builder(mock.ws_url()).connect().await?;
    let out = client.invoke_tool("refund", json!({"order": 4812})).await?;

    // The client reconnected and resumed its session (or asked again with
    // the same key): it got the stored answer, and the refund ran once.
    assert_eq!(out.value, json!({"refunded": 4812}));
    assert_eq!(mock.connections(), 2);
    assert_eq!(mock.executions("refund"), 1);
    client.close().await;
    Ok(())
}
// END README TEST

/// The first ```rust block after `heading` (or in the whole text, when
/// `heading` is empty), without its fences.
fn rust_block<'a>(text: &'a str, heading: &str) -> &'a str {
    let from = text
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading:?} in the README"));
    let rest = &text[from..];
    let open = rest.find("```rust").expect("a ```rust block");
    let body = &rest[open..];
    let body = &body[body.find('\n').expect("a fence line") + 1..];
    &body[..body.find("```").expect("a closing fence")]
}

/// The example's code, without its `//!` header.
fn first_program() -> String {
    include_str!("../examples/first_program.rs")
        .lines()
        .skip_while(|l| l.starts_with("//!") || l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn the_readmes_first_program_is_the_example_ci_runs() {
    let example = first_program();
    for (name, readme) in [
        ("README.md", include_str!("../README.md")),
        (
            "arcp-client/README.md",
            include_str!("../arcp-client/README.md"),
        ),
    ] {
        assert_eq!(rust_block(readme, ""), example, "{name}'s first program");
    }
}

#[test]
fn the_readmes_mock_test_is_the_test_above() {
    let this = include_str!("readme.rs");
    let begin = this.find("// BEGIN README TEST").expect("begin marker");
    let end = this.find("// END README TEST").expect("end marker");
    let test = &this[this[begin..].find('\n').expect("a line") + begin + 1..end];
    for (name, readme, heading) in [
        (
            "arcp-client/README.md",
            include_str!("../arcp-client/README.md"),
            "## Testing with arcp-mock",
        ),
        (
            "arcp-mock/README.md",
            include_str!("../arcp-mock/README.md"),
            "# arcp-mock",
        ),
    ] {
        assert_eq!(rust_block(readme, heading), test, "{name}'s test");
    }
}
