//! `Bindings`: which job each (principal, idempotency key) is bound to, and
//! the intent fingerprint it was bound with.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::Value;

/// What identifies "the same intent" for an idempotency key.
#[derive(Debug, Clone)]
pub(crate) enum Fingerprint {
    /// Python: the whole `job.submit` payload, compared as Python compares
    /// dicts (key order ignored, `1 == 1.0`).
    Payload(Value),
    /// Rust: tool name + `serde_json::to_string(arguments)` with sorted keys
    /// (`1` and `1.0` differ).
    Text(String),
}

impl Fingerprint {
    fn matches(&self, other: &Fingerprint) -> bool {
        match (self, other) {
            (Fingerprint::Payload(a), Fingerprint::Payload(b)) => python_eq(a, b),
            (Fingerprint::Text(a), Fingerprint::Text(b)) => a == b,
            _ => false,
        }
    }
}

/// What a key is bound to, for one submit.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Not bound.
    Fresh,
    /// Bound to this job with the same intent.
    Same(String),
    /// Bound to this job with another intent.
    Other(String),
}

struct Binding {
    fingerprint: Fingerprint,
    job_id: String,
    bound_at: Instant,
}

/// Idempotency bindings, scoped by (principal, key).
#[derive(Default)]
pub(crate) struct Bindings {
    map: HashMap<(String, String), Binding>,
}

impl Bindings {
    /// What `key` of `principal` is bound to, compared with `fingerprint`;
    /// a binding older than `retention` is forgotten.
    pub(super) fn lookup(
        &self,
        principal: &str,
        key: &str,
        fingerprint: &Fingerprint,
        retention: Option<Duration>,
    ) -> Lookup {
        let scope = (principal.to_owned(), key.to_owned());
        match self.map.get(&scope) {
            None => Lookup::Fresh,
            Some(b) if retention.is_some_and(|r| b.bound_at.elapsed() >= r) => Lookup::Fresh,
            Some(b) if b.fingerprint.matches(fingerprint) => Lookup::Same(b.job_id.clone()),
            Some(b) => Lookup::Other(b.job_id.clone()),
        }
    }

    /// Drops the binding of `key` of `principal`.
    pub(super) fn unbind(&mut self, principal: &str, key: &str) {
        self.map.remove(&(principal.to_owned(), key.to_owned()));
    }

    pub(super) fn bind(
        &mut self,
        principal: &str,
        key: &str,
        fingerprint: Fingerprint,
        job_id: &str,
    ) {
        let binding = Binding {
            fingerprint,
            job_id: job_id.to_owned(),
            bound_at: Instant::now(),
        };
        self.map
            .insert((principal.to_owned(), key.to_owned()), binding);
    }

    /// Drops the binding of a forgotten job.
    pub(super) fn forget(&mut self, principal: &str, key: &str, job_id: &str) {
        let scope = (principal.to_owned(), key.to_owned());
        if self.map.get(&scope).is_some_and(|b| b.job_id == job_id) {
            self.map.remove(&scope);
        }
    }
}

/// Python's `==` on decoded JSON: key order never matters and numbers compare
/// by value, so `1 == 1.0`.
fn python_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let int = |n: &serde_json::Number| {
                n.as_i64()
                    .map(i128::from)
                    .or_else(|| n.as_u64().map(i128::from))
            };
            match (int(x), int(y)) {
                (Some(p), Some(q)) => p == q,
                _ => x.as_f64() == y.as_f64(),
            }
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| python_eq(v, w)))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| python_eq(v, w))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn python_equality_ignores_order_and_number_spelling() {
        assert!(python_eq(
            &json!({"a": 1, "b": [1, 2.0]}),
            &json!({"b": [1.0, 2], "a": 1.0})
        ));
        assert!(!python_eq(&json!({"a": 1}), &json!({"a": 1, "b": null})));
        assert!(!python_eq(&json!({"a": {}}), &json!({})));
        assert!(!python_eq(&json!([1, 2]), &json!([2, 1])));
    }

    #[test]
    fn lookups_are_scoped_by_principal_and_compare_intents() {
        let mut bindings = Bindings::default();
        let fp = |s: &str| Fingerprint::Text(s.to_owned());
        bindings.bind("alice", "k", fp("a"), "job_1");
        assert_eq!(
            bindings.lookup("alice", "k", &fp("a"), None),
            Lookup::Same("job_1".into())
        );
        assert_eq!(
            bindings.lookup("alice", "k", &fp("b"), None),
            Lookup::Other("job_1".into())
        );
        assert_eq!(bindings.lookup("bob", "k", &fp("a"), None), Lookup::Fresh);
        bindings.forget("alice", "k", "job_2");
        assert_eq!(
            bindings.lookup("alice", "k", &fp("a"), None),
            Lookup::Same("job_1".into())
        );
        bindings.forget("alice", "k", "job_1");
        assert_eq!(bindings.lookup("alice", "k", &fp("a"), None), Lookup::Fresh);
        bindings.bind("alice", "k", fp("a"), "job_3");
        bindings.unbind("alice", "k");
        assert_eq!(bindings.lookup("alice", "k", &fp("a"), None), Lookup::Fresh);
    }

    #[test]
    fn a_binding_older_than_the_retention_is_forgotten() {
        let mut bindings = Bindings::default();
        let fp = Fingerprint::Text("a".into());
        bindings.bind("alice", "k", fp.clone(), "job_1");
        let kept = bindings.lookup("alice", "k", &fp, Some(Duration::from_secs(60)));
        assert_eq!(kept, Lookup::Same("job_1".into()));
        std::thread::sleep(Duration::from_millis(5));
        let gone = bindings.lookup("alice", "k", &fp, Some(Duration::from_millis(1)));
        assert_eq!(gone, Lookup::Fresh);
    }
}
