//! Every envelope captured from the two published runtimes decodes with its
//! dialect's codec and re-encodes to the same JSON, up to the normalisations
//! documented in `arcp_types::Dialect`'s module docs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use arcp_types::{Dialect, Message};
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("arcp-types/tests/fixtures")
}

/// Yields the raw envelopes of one capture file. Python captures log
/// `{"dir": "send"|"recv", "raw": "<json text>"}`; Rust captures log
/// `{"dir": ">>"|"<<", "env": {..}}`. A capture cut off mid-line (the `.head`
/// file) has a truncated last line, which is skipped.
fn envelopes(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = Vec::new();
    for line in text.lines() {
        let Ok(record) = serde_json::from_str::<Value>(line) else {
            assert!(
                path.to_string_lossy().contains(".head."),
                "unparseable line in {}",
                path.display()
            );
            continue;
        };
        if let Some(env) = record.get("env") {
            out.push(env.clone());
        } else if let Some(raw) = record.get("raw").and_then(Value::as_str) {
            if matches!(record["dir"].as_str(), Some("send" | "recv")) {
                out.push(serde_json::from_str(raw).unwrap());
            }
        }
    }
    out
}

/// Drops `null` members recursively: a null optional field and an absent one
/// mean the same on the wire (documented normalisation).
fn strip_nulls(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip_nulls).collect()),
        other => other.clone(),
    }
}

/// Alias spellings re-encode under their main name (documented normalisation).
fn canonical_type(dialect: Dialect, kind: &str) -> &str {
    match (dialect, kind) {
        (Dialect::V1_1, "session.bye") => "session.close",
        _ => kind,
    }
}

fn check_dir(dialect: Dialect, files: Vec<PathBuf>) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for path in files {
        for original in envelopes(&path) {
            let text = original.to_string();
            let frame = dialect
                .decode(&text)
                .unwrap_or_else(|e| panic!("{}: {e}\n{text}", path.display()));
            let kind = original["type"].as_str().unwrap().to_owned();
            let known = !matches!(frame.message, Message::Unknown(_));
            *counts
                .entry(format!(
                    "{kind}{}",
                    if known { "" } else { " (unknown type)" }
                ))
                .or_insert(0) += 1;
            let mut expected = strip_nulls(&original);
            let canonical = canonical_type(dialect, &kind).to_owned();
            expected["type"] = Value::String(canonical);
            let reencoded = serde_json::to_value(dialect.to_envelope(&frame)).unwrap();
            assert_eq!(
                strip_nulls(&reencoded),
                expected,
                "{}: {kind} did not round-trip",
                path.display()
            );
        }
    }
    counts
}

fn files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "jsonl")
                && p.file_name().unwrap().to_string_lossy().starts_with(prefix)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn python_1_1_3_captures_round_trip_through_the_v1_1_codec() {
    let counts = check_dir(Dialect::V1_1, files(&fixtures(), "python-runtime"));
    println!("v1.1 message types round-tripped: {counts:#?}");
    for kind in [
        "session.hello",
        "session.welcome",
        "session.error",
        "job.submit",
        "job.accepted",
        "job.event",
        "job.result",
        "job.error",
        "job.cancel",
        "session.ack",
        "session.ping",
        "session.pong",
    ] {
        assert!(
            counts.contains_key(kind),
            "fixtures lack {kind}: {counts:?}"
        );
    }
    // The one `tool.invoke` in the Python capture is a probe the v1.1 runtime
    // rejects; the v1.1 codec keeps it verbatim as an unknown type.
    assert_eq!(counts.get("tool.invoke (unknown type)"), Some(&1));
}

#[test]
fn rust_2_0_0_captures_round_trip_through_the_legacy_codec() {
    let counts = check_dir(
        Dialect::Legacy,
        files(&fixtures().join("rust-runtime-2.0.0"), "s"),
    );
    println!("legacy message types round-tripped: {counts:#?}");
    for kind in [
        "session.open",
        "session.accepted",
        "session.rejected",
        "tool.invoke",
        "job.accepted",
        "job.started",
        "job.completed",
        "job.failed",
        "job.cancelled",
        "metric",
        "nack",
    ] {
        assert!(
            counts.contains_key(kind),
            "fixtures lack {kind}: {counts:?}"
        );
    }
    // Probes the runtime itself rejects by dropping TCP are kept verbatim.
    assert!(counts.contains_key("session.resume (unknown type)"));
}

#[test]
fn decoded_fixture_messages_carry_what_the_client_needs() {
    // A Python replay after completion: job.accepted with the original job
    // and the new request id in the payload.
    let accepted = r#"{"arcp":"1.1","id":"01M81BSXFEEEEX2RH3TM0Y71HB","type":"job.accepted","session_id":"sess_01M81BSXF9AQK7S7MXTS796KV9","job_id":"job_01M81BSXFEEEEX2RH3TM0Y71HA","payload":{"job_id":"job_01M81BSXFEEEEX2RH3TM0Y71HA","agent":"counter","accepted_at":"2026-11-22T10:11:07.886564Z","lease":{},"request_id":"01M81BSXSAJ2EBKDMWHH3AGT81"}}"#;
    let frame = Dialect::V1_1.decode(accepted).unwrap();
    assert_eq!(frame.request_id(), Some("01M81BSXSAJ2EBKDMWHH3AGT81"));
    assert_eq!(frame.job_id(), Some("job_01M81BSXFEEEEX2RH3TM0Y71HA"));

    // The Rust runtime's conflict signal: job.failed, no job id, correlation set.
    let failed = r#"{"arcp":"1.1","id":"msg_01M81CC7RZR3MQ8RJ45FPHWVG8","timestamp":"2026-11-22T10:21:08.255642585Z","session_id":"sess_01M81CC69XMTZVJBD9D740YBZ4","correlation_id":"msg_A63551D75EAE4AF6B2F04A63B08D0E70","idempotency_key":"key-echo-1","event_seq":2,"type":"job.failed","payload":{"code":"FAILED_PRECONDITION","retryable":false,"message":"idempotency key key-echo-1 already bound to a different command intent"}}"#;
    let frame = Dialect::Legacy.decode(failed).unwrap();
    assert_eq!(
        frame.request_id(),
        Some("msg_A63551D75EAE4AF6B2F04A63B08D0E70")
    );
    assert_eq!(frame.job_id(), None);
    match frame.message {
        Message::Error(e) => assert_eq!(e.code.as_str(), "FAILED_PRECONDITION"),
        other => panic!("expected an error, got {other:?}"),
    }
}
