//! The callers awaiting one call ([`Waiter`]): nearly always one, held in
//! place ([`Waiters`]).
//!
//! A call's callers were a `Vec`, so every call allocated a block on the
//! connection task when it started and freed it when it ended, a turn
//! later and dozens of calls at a time: more than the allocator's
//! per-thread cache holds, so most of those frees and allocations took its
//! slow path (measured by `perf` at 64 calls in flight: the allocator's
//! share of the client's CPU went from 11.0 % to 9.7 % without it).
//! The first caller is kept in place; only joined callers take a `Vec`.

use std::sync::Arc;

use tokio::sync::oneshot;

use crate::cache::Settled;
use crate::deadline::Deadline;
use crate::request::{CallShared, EventsEnd};

/// One caller awaiting the call (a repeated call with the same key and
/// intent joins the first one).
pub(crate) struct Waiter {
    pub(crate) reply: oneshot::Sender<Settled>,
    pub(crate) shared: Arc<CallShared>,
    /// This caller's own deadline: the connection task keeps it (the
    /// caller runs no timer of its own), and a joined caller's may come
    /// before the call's, which is its most patient caller's.
    pub(crate) deadline: Deadline,
    /// Dropping it ends this caller's event stream.
    pub(crate) _events_end: EventsEnd,
    /// It joined the call after a request of it was sent: the tool ran (if
    /// it did) for another caller's request, so to this caller the outcome
    /// is a replay.
    pub(crate) joined_sent: bool,
}

impl Waiter {
    /// Whether this caller still wants the outcome.
    pub(crate) fn is_live(&self) -> bool {
        !self.reply.is_closed() && !self.shared.is_abandoned()
    }
}

/// The callers of one call, in the order they came.
///
/// Invariant: `first` is `None` only while `more` is empty.
#[derive(Default)]
pub(crate) struct Waiters {
    first: Option<Waiter>,
    more: Vec<Waiter>,
}

impl Waiters {
    /// The callers of a call that has only `waiter`.
    pub(crate) fn one(waiter: Waiter) -> Self {
        Waiters {
            first: Some(waiter),
            more: Vec::new(),
        }
    }

    /// Adds a caller after the others.
    pub(crate) fn push(&mut self, waiter: Waiter) {
        if self.first.is_none() {
            self.first = Some(waiter);
        } else {
            self.more.push(waiter);
        }
    }

    /// Removes the last caller.
    pub(crate) fn pop(&mut self) -> Option<Waiter> {
        self.more.pop().or_else(|| self.first.take())
    }

    /// Whether no caller is left.
    pub(crate) fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    /// The callers, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Waiter> {
        self.into_iter()
    }

    /// Keeps the callers for which `keep` holds; `keep` sees each caller
    /// once, in order.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&Waiter) -> bool) {
        if self.first.as_ref().is_some_and(|w| !keep(w)) {
            self.first = None;
        }
        self.more.retain(|w| keep(w));
        if self.first.is_none() && !self.more.is_empty() {
            self.first = Some(self.more.remove(0));
        }
    }
}

impl IntoIterator for Waiters {
    type Item = Waiter;
    type IntoIter = std::iter::Chain<std::option::IntoIter<Waiter>, std::vec::IntoIter<Waiter>>;

    fn into_iter(self) -> Self::IntoIter {
        self.first.into_iter().chain(self.more)
    }
}

impl<'a> IntoIterator for &'a Waiters {
    type Item = &'a Waiter;
    type IntoIter = std::iter::Chain<std::option::Iter<'a, Waiter>, std::slice::Iter<'a, Waiter>>;

    fn into_iter(self) -> Self::IntoIter {
        self.first.iter().chain(&self.more)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// A caller told apart by its deadline (`n` seconds).
    fn waiter(n: u64) -> Waiter {
        let shared = Arc::new(CallShared::default());
        Waiter {
            reply: oneshot::channel().0,
            shared: shared.clone(),
            deadline: Deadline::new(Instant::now(), Duration::from_secs(n)),
            _events_end: EventsEnd(shared),
            joined_sent: false,
        }
    }

    fn order(waiters: &Waiters) -> Vec<u64> {
        waiters
            .iter()
            .map(|w| w.deadline.after().as_secs())
            .collect()
    }

    #[test]
    fn callers_keep_their_order_through_every_change() {
        let mut waiters = Waiters::one(waiter(1));
        assert_eq!(order(&waiters), [1]);
        for n in 2..=5 {
            waiters.push(waiter(n));
        }
        assert_eq!(order(&waiters), [1, 2, 3, 4, 5]);
        assert_eq!(
            waiters.iter().next().map(|w| w.deadline.after().as_secs()),
            Some(1)
        );

        // Dropping the first caller moves the next one into its place.
        let mut seen = Vec::new();
        waiters.retain(|w| {
            seen.push(w.deadline.after().as_secs());
            w.deadline.after().as_secs() % 2 == 0
        });
        assert_eq!(seen, [1, 2, 3, 4, 5], "each caller seen once, in order");
        assert!(!waiters.is_empty(), "callers are left");
        assert_eq!(order(&waiters), [2, 4]);
        assert_eq!(
            waiters.iter().next().map(|w| w.deadline.after().as_secs()),
            Some(2)
        );

        assert_eq!(waiters.pop().map(|w| w.deadline.after().as_secs()), Some(4));
        assert_eq!(waiters.pop().map(|w| w.deadline.after().as_secs()), Some(2));
        assert!(waiters.pop().is_none() && waiters.is_empty());

        // Emptied, it takes callers again from the first place.
        waiters.push(waiter(6));
        waiters.push(waiter(7));
        waiters.retain(|_| false);
        assert!(waiters.is_empty() && waiters.iter().next().is_none());

        let mut rebuilt = Waiters::one(waiter(8));
        rebuilt.push(waiter(9));
        rebuilt.push(waiter(10));
        let back: Vec<u64> = rebuilt
            .into_iter()
            .map(|w| w.deadline.after().as_secs())
            .collect();
        assert_eq!(back, [8, 9, 10]);
    }
}
