//! Submits of calls whose callers gave up before the runtime accepted
//! them. The call is forgotten at once, but its acceptance may still come:
//! it names the job the key is bound to, which the outcome cache's binding
//! of the key then keeps. Without it, the runtime's unmarked replay of that
//! job to a later call of the key on the same session (the Python runtime
//! 1.1.3 answers with the stored acceptance) would read as a fresh run.

use std::collections::VecDeque;

use arcp_types::IdempotencyKey;

use super::ids::RequestId;

/// Given-up submits remembered at most: the oldest go first (a runtime
/// that never answers one leaves it here until then).
const MAX_GIVEN_UP: usize = 256;

/// The submits of given-up calls, by request id, with each call's key and
/// intent fingerprint.
#[derive(Debug, Default)]
pub(crate) struct GivenUpSubmits {
    entries: VecDeque<(RequestId, IdempotencyKey, u64)>,
}

impl GivenUpSubmits {
    /// Remembers submit `request` of a call under `key` with this intent.
    pub(crate) fn insert(&mut self, request: RequestId, key: IdempotencyKey, fingerprint: u64) {
        if self.entries.len() == MAX_GIVEN_UP {
            self.entries.pop_front();
        }
        self.entries.push_back((request, key, fingerprint));
    }

    /// The key and intent of given-up submit `request`, once.
    pub(crate) fn take(&mut self, request: &str) -> Option<(IdempotencyKey, u64)> {
        let at = self.entries.iter().position(|(r, ..)| &**r == request)?;
        self.entries.remove(at).map(|(_, key, fp)| (key, fp))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_given_up_submit_is_told_once_and_the_oldest_go_first() {
        let mut given_up = GivenUpSubmits::default();
        let keys: Vec<_> = (0..=MAX_GIVEN_UP).map(|_| IdempotencyKey::new()).collect();
        for (i, key) in keys.iter().enumerate() {
            given_up.insert(Arc::from(format!("msg_{i}")), key.clone(), i as u64);
        }
        assert_eq!(given_up.take("msg_0"), None, "the oldest went first");
        assert_eq!(given_up.take("msg_1"), Some((keys[1].clone(), 1)));
        assert_eq!(given_up.take("msg_1"), None, "told once");
        let last = format!("msg_{MAX_GIVEN_UP}");
        assert_eq!(
            given_up.take(&last),
            Some((keys[MAX_GIVEN_UP].clone(), MAX_GIVEN_UP as u64))
        );
    }
}
