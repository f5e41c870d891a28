//! The table of outstanding requests: every request on the current
//! connection that can draw an answer (a submit, a subscribe, a cancel),
//! owned by its call and removed with it.
//!
//! Replies are attributed by the request id they name (v1.1 `request_id`,
//! legacy `correlation_id`); an error that names nothing (the Python
//! runtime's `session.error`) goes to the oldest request that can draw one,
//! because runtimes answer in order. The table is cleared with its
//! connection, so nothing is ever attributed across connections.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::calls::CallId;
use crate::FastMap;

/// What kind of request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReqKind {
    /// An attempt of the call (`job.submit` / `tool.invoke`).
    Submit,
    /// `job.subscribe` with history, from the recovery ladder.
    Subscribe,
    /// A cancel of the call's job.
    Cancel,
}

impl ReqKind {
    /// Whether an error that names no request may be this request's answer.
    /// A cancel never is: v1.1 answers it with the job's terminal, and the
    /// legacy dialect correlates every reply.
    fn draws_unnamed_errors(self) -> bool {
        !matches!(self, ReqKind::Cancel)
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    call: CallId,
    kind: ReqKind,
    order: u64,
}

/// A request's envelope id, shared by the call that sent it and both
/// indexes here (one allocation per request).
pub(crate) type RequestId = Arc<str>;

/// Outstanding requests by id, and in send order.
#[derive(Debug, Default)]
pub(crate) struct Requests {
    by_id: FastMap<RequestId, Entry>,
    in_order: BTreeMap<u64, RequestId>,
    next: u64,
}

impl Requests {
    /// Registers a request just queued for sending.
    pub(crate) fn insert(&mut self, id: RequestId, call: CallId, kind: ReqKind) {
        let order = self.next;
        self.next += 1;
        self.in_order.insert(order, id.clone());
        self.by_id.insert(id, Entry { call, kind, order });
    }

    /// The call and kind of request `id`, if it is outstanding.
    pub(crate) fn get(&self, id: &str) -> Option<(CallId, ReqKind)> {
        self.by_id.get(id).map(|e| (e.call, e.kind))
    }

    /// Removes request `id` (answered, or its call moved on).
    pub(crate) fn remove(&mut self, id: &str) -> Option<(CallId, ReqKind)> {
        let entry = self.by_id.remove(id)?;
        self.in_order.remove(&entry.order);
        Some((entry.call, entry.kind))
    }

    /// The oldest request that an unnamed error may answer.
    pub(crate) fn oldest_drawing(&self) -> Option<(RequestId, CallId, ReqKind)> {
        self.in_order.values().find_map(|id| {
            let e = self.by_id.get(id)?;
            e.kind
                .draws_unnamed_errors()
                .then(|| (id.clone(), e.call, e.kind))
        })
    }

    /// Forgets every request (the connection is gone).
    pub(crate) fn clear(&mut self) {
        self.by_id.clear();
        self.in_order.clear();
    }

    /// Outstanding requests.
    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unnamed_errors_skip_cancels_and_removed_requests() {
        let mut r = Requests::default();
        r.insert("c".into(), 1, ReqKind::Cancel);
        r.insert("s1".into(), 2, ReqKind::Submit);
        r.insert("s2".into(), 3, ReqKind::Submit);
        assert_eq!(r.oldest_drawing().map(|x| x.1), Some(2));
        r.remove("s1");
        assert_eq!(r.oldest_drawing().map(|x| x.1), Some(3));
        r.remove("s2");
        assert!(
            r.oldest_drawing().is_none(),
            "a cancel draws no unnamed error"
        );
        assert_eq!(r.len(), 1);
        r.clear();
        assert_eq!(r.len(), 0);
        assert!(r.get("c").is_none());
    }
}
