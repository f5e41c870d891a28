//! Poison-tolerant locking for the crate's `std::sync` mutexes.
//!
//! Every critical section in this crate only moves values in or out of
//! plain collections and slots, so a lock poisoned by a panic elsewhere
//! still guards consistent data; and the client must not panic because
//! another thread did.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Locks `m`, taking the guard even when the mutex is poisoned.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits on `cv` for at most `timeout`, taking the guard back even when the
/// mutex is poisoned.
pub(crate) fn wait_timeout<'a, T>(
    cv: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
) -> MutexGuard<'a, T> {
    cv.wait_timeout(guard, timeout)
        .map(|(g, _)| g)
        .unwrap_or_else(|e| e.into_inner().0)
}
