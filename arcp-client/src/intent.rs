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
