//! The hash map of the per-call tables (calls, keys, jobs, requests, the
//! outcome cache, the keys in flight): a leaf, so the tables need not
//! import the crate root.

/// The per-call tables' hash map: hashed with foldhash, seeded per map,
/// several times faster than SipHash on these short keys.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
