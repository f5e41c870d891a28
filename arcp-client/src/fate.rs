//! The callers of one key in flight at once in a client. Each drives its
//! call on its own (over HTTP each sends its own requests; with a journal a
//! caller waits for its record before the transport joins it to the others),
//! so from the moment two overlap, neither can prove the other did not run
//! the tool: none of them may claim "did not run" ([`crate::classify::shared_fate`]).
//!
//! A leaf: imports no other module of the crate.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::sync::lock;

use arcp_types::IdempotencyKey;

use crate::fast_map::FastMap;

/// The fate the callers of a key in flight at once share.
#[derive(Debug, Default)]
pub(crate) struct KeyFate {
    callers: AtomicUsize,
    shared: AtomicBool,
}

impl KeyFate {
    /// Whether another caller of the key was in flight at any time while
    /// this one was.
    pub(crate) fn is_shared(&self) -> bool {
        self.shared.load(Ordering::Relaxed)
    }
}

/// The keys with callers in flight.
#[derive(Debug, Default)]
pub(crate) struct LiveKeys(Mutex<FastMap<IdempotencyKey, Arc<KeyFate>>>);

impl LiveKeys {
    /// Counts a caller of `key` in: the fate it shares with the key's
    /// callers in flight.
    pub(crate) fn join(&self, key: &IdempotencyKey) -> Arc<KeyFate> {
        let mut live = lock(&self.0);
        let fate = live.entry(key.clone()).or_default().clone();
        if fate.callers.fetch_add(1, Ordering::Relaxed) > 0 {
            fate.shared.store(true, Ordering::Relaxed);
        }
        fate
    }

    /// Counts a caller of `key` out. Returns whether another caller of the
    /// key was in flight at any time while this one was, up to this moment:
    /// read under the lock that joins callers, so a caller that joins later
    /// starts a fate of its own.
    pub(crate) fn leave(&self, key: &IdempotencyKey, fate: &Arc<KeyFate>) -> bool {
        let mut live = lock(&self.0);
        let last = fate.callers.fetch_sub(1, Ordering::Relaxed) == 1;
        if last && live.get(key).is_some_and(|f| Arc::ptr_eq(f, fate)) {
            live.remove(key);
        }
        fate.is_shared()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_callers_share_their_fate_and_later_ones_do_not() {
        let live = LiveKeys::default();
        let key = IdempotencyKey::new();
        let a = live.join(&key);
        assert!(!a.is_shared());
        let b = live.join(&key);
        assert!(a.is_shared() && b.is_shared());
        assert!(live.leave(&key, &a));
        assert!(live.leave(&key, &b));
        // The key left; a caller after that starts a fate of its own.
        let c = live.join(&key);
        assert!(!c.is_shared());
        assert!(!live.leave(&key, &c));
        assert!(live.0.lock().unwrap().is_empty());
    }
}
