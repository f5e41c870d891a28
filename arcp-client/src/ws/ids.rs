//! The ids the core keys its tables by: a call's and a request's. Apart
//! from both tables, so that each can name the other's key.

use std::sync::Arc;

/// A call's id inside one connection core.
pub(crate) type CallId = u64;

/// A request's envelope id, shared by the call that sent it and both
/// indexes of the request table (one allocation per request).
pub(crate) type RequestId = Arc<str>;
