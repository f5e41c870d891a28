//! Rules about a call's intent shared by every transport: what identifies
//! it, and how runtimes say a key belongs to another intent.

use std::hash::{Hash, Hasher};

use arcp_types::{ErrorCode, ErrorReply, Invoke};

/// Identifies an intent (tool, arguments and every option, as sent), for the
/// outcome cache and for joining a repeated call.
pub(crate) fn fingerprint(invoke: &Invoke) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(invoke)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

/// `DUPLICATE_KEY` anywhere, and the legacy runtime's spelling of the same
/// conflict: `FAILED_PRECONDITION` "already bound to a different command intent".
pub(crate) fn is_duplicate_key(e: &ErrorReply) -> bool {
    e.code == ErrorCode::DuplicateKey
        || (e.code == ErrorCode::FailedPrecondition
            && (e.message.contains("different command intent")
                || e.message.contains("already bound")))
}

/// What a terminal result frame says about the call.
pub(crate) enum ResultReading {
    /// The call's value.
    Value(serde_json::Value),
    /// A v1.1 `job.result` with a non-success `final_status`.
    Failed { code: ErrorCode, message: String },
}

/// Reads a terminal result: an inline value, else the value reassembled from
/// `result_chunk` events (v1.1 §8.4), else the reference (`result_ref`,
/// `result_id`) for the caller to fetch; a non-success `final_status`
/// (`error`, `timed_out`) is a failure.
pub(crate) fn read_result(
    result: arcp_types::JobResult,
    assembled: Option<serde_json::Value>,
) -> ResultReading {
    use serde_json::Value;
    let status = result.extra.get("final_status").and_then(Value::as_str);
    if let Some(status @ ("error" | "timed_out")) = status {
        let text = |field: &str| result.extra.get(field).and_then(Value::as_str);
        let code = text("code")
            .map(ErrorCode::parse)
            .unwrap_or(if status == "timed_out" {
                ErrorCode::Timeout
            } else {
                ErrorCode::UnknownError
            });
        let message = text("message").unwrap_or(status).to_owned();
        return ResultReading::Failed { code, message };
    }
    ResultReading::Value(match result.result {
        Some(v) => v,
        None => match assembled {
            Some(v) => v,
            None if result.extra.contains_key("result_ref")
                || result.extra.contains_key("result_id") =>
            {
                Value::Object(result.extra)
            }
            None => Value::Null,
        },
    })
}
