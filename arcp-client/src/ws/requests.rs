//! The table of outstanding requests: every request on the current
//! connection that can draw an answer (a submit, a subscribe, a cancel),
//! owned by its call and removed with it.
//!
//! Replies are attributed by the request id they name (v1.1 `request_id`,
//! legacy `correlation_id`); an error that names nothing (the Python
//! runtime's `session.error`) goes to the oldest request that can draw one,
//! because runtimes answer in order. The table is cleared with its
//! connection, so nothing is ever attributed across connections.
//!
//! Only when that is unambiguous: a `job.cancel` may draw such an error too
//! (a refused cancel), and a cancel is never answered otherwise in v1.1 (the
//! job's terminal follows it). So an unnamed error that follows a cancel
//! sent before the oldest submit, still pending or of a call that ended
//! meanwhile, is given to nobody: it may be the cancel's, and a refusal
//! misread as a submit's would end a call that may run as "did not run".
//! Each such cancel explains away one error at most. An error no cancel can
//! draw (`DUPLICATE_KEY`) is the oldest submit's all the same.

use std::collections::{BTreeMap, BTreeSet};

use super::ids::{CallId, RequestId};
use crate::fast_map::FastMap;

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
    /// A cancel that already explained away an unnamed error.
    drew: bool,
}

/// Cancels of calls that ended are remembered (by send order) while they
/// may still draw an unnamed error, up to this many.
const MAX_ORPHAN_CANCELS: usize = 64;

/// Outstanding requests by id, and in send order.
#[derive(Debug, Default)]
pub(crate) struct Requests {
    by_id: FastMap<RequestId, Entry>,
    in_order: BTreeMap<u64, RequestId>,
    /// Send order of cancels whose call ended before anything answered them.
    orphan_cancels: BTreeSet<u64>,
    next: u64,
}

impl Requests {
    /// Registers a request just queued for sending.
    pub(crate) fn insert(&mut self, id: RequestId, call: CallId, kind: ReqKind) {
        let order = self.next;
        self.next += 1;
        self.in_order.insert(order, id.clone());
        self.by_id.insert(
            id,
            Entry {
                call,
                kind,
                order,
                drew: false,
            },
        );
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

    /// The oldest request that an unnamed answer other than an error may
    /// answer (an acceptance: a cancel draws none).
    pub(crate) fn oldest_drawing(&self) -> Option<(RequestId, CallId, ReqKind)> {
        self.in_order.values().find_map(|id| {
            let e = self.by_id.get(id)?;
            e.kind
                .draws_unnamed_errors()
                .then(|| (id.clone(), e.call, e.kind))
        })
    }

    /// Removes cancel `id` of a call that ended: it is no longer the call's,
    /// but it may still draw an unnamed error (see the module's doc).
    pub(crate) fn orphan_cancel(&mut self, id: &str) {
        if let Some(entry) = self.by_id.remove(id) {
            self.in_order.remove(&entry.order);
            if !entry.drew {
                self.orphan_cancels.insert(entry.order);
                while self.orphan_cancels.len() > MAX_ORPHAN_CANCELS {
                    self.orphan_cancels.pop_first();
                }
            }
        }
    }

    /// The request an error that names nothing answers: the oldest that
    /// can draw one, unless a cancel sent before it may have drawn it (then
    /// nobody, and that cancel explains no further error). `submit_only`:
    /// the error is one no cancel draws.
    pub(crate) fn unnamed_error_target(
        &mut self,
        submit_only: bool,
    ) -> Option<(RequestId, CallId, ReqKind)> {
        let drawing = self.in_order.values().find_map(|id| {
            let e = self.by_id.get(id)?;
            e.kind
                .draws_unnamed_errors()
                .then(|| (id.clone(), e.call, e.kind, e.order))
        });
        if submit_only {
            return drawing.map(|(id, call, kind, _)| (id, call, kind));
        }
        let before = drawing.as_ref().map_or(u64::MAX, |d| d.3);
        let live_cancel = self
            .in_order
            .range(..before)
            .find(|(_, id)| self.by_id.get(*id).is_some_and(|e| !e.drew))
            .map(|(&order, id)| (order, id.clone()));
        let orphan = self.orphan_cancels.range(..before).next().copied();
        match (live_cancel, orphan) {
            (Some((live, _)), Some(orphan)) if orphan < live => {
                self.orphan_cancels.remove(&orphan);
                None
            }
            (Some((_, id)), _) => {
                if let Some(e) = self.by_id.get_mut(&id) {
                    e.drew = true;
                }
                None
            }
            (None, Some(orphan)) => {
                self.orphan_cancels.remove(&orphan);
                None
            }
            (None, None) => drawing.map(|(id, call, kind, _)| (id, call, kind)),
        }
    }

    /// Forgets every request (the connection is gone).
    pub(crate) fn clear(&mut self) {
        self.by_id.clear();
        self.in_order.clear();
        self.orphan_cancels.clear();
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
    fn unnamed_errors_go_to_the_oldest_submit() {
        let mut r = Requests::default();
        r.insert("s1".into(), 2, ReqKind::Submit);
        r.insert("c".into(), 1, ReqKind::Cancel);
        r.insert("s2".into(), 3, ReqKind::Submit);
        assert_eq!(r.unnamed_error_target(false).map(|x| x.1), Some(2));
        r.remove("s1");
        // The cancel was sent before s2: the error may be its refusal.
        assert!(r.unnamed_error_target(false).is_none());
        // It explains one error at most; the next is s2's.
        assert_eq!(r.unnamed_error_target(false).map(|x| x.1), Some(3));
        // ... and no cancel draws a key conflict.
        r.remove("s2");
        r.insert("c2".into(), 5, ReqKind::Cancel);
        r.insert("s3".into(), 4, ReqKind::Submit);
        assert_eq!(r.unnamed_error_target(true).map(|x| x.1), Some(4));
        r.remove("s3");
        r.remove("c2");
        assert!(
            r.unnamed_error_target(false).is_none(),
            "a cancel draws none"
        );
        assert_eq!(r.len(), 1);
        r.clear();
        assert_eq!(r.len(), 0);
        assert!(r.get("c").is_none());
    }

    #[test]
    fn a_cancel_of_a_finished_call_still_explains_one_error() {
        let mut r = Requests::default();
        r.insert("c".into(), 1, ReqKind::Cancel);
        r.insert("s".into(), 2, ReqKind::Submit);
        // The job ended (its terminal raced the cancel): call 1 is gone.
        r.orphan_cancel("c");
        assert_eq!(r.len(), 1);
        assert!(
            r.unnamed_error_target(false).is_none(),
            "may be the cancel's"
        );
        assert_eq!(r.unnamed_error_target(false).map(|x| x.1), Some(2));
        // A cancel sent after the submit is no rival.
        r.insert("c2".into(), 3, ReqKind::Cancel);
        r.orphan_cancel("c2");
        assert_eq!(r.unnamed_error_target(false).map(|x| x.1), Some(2));
    }
}
