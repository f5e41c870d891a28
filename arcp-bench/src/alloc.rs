//! A counting global allocator. Counting is off unless switched on at the
//! very start of the process (the `mem` subcommand), so the throughput runs
//! pay one relaxed load per allocation and nothing else.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};

pub(crate) struct Counting;

static ON: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicI64 = AtomicI64::new(0);
static ALLOCS: AtomicU64 = AtomicU64::new(0);
static ALLOCATED: AtomicU64 = AtomicU64::new(0);

/// Starts counting. Call first thing in `main`: memory allocated before is
/// not counted, and freeing it later makes `live` slightly low.
pub(crate) fn enable() {
    ON.store(true, Relaxed);
}

/// A snapshot of the counters.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Counters {
    /// Bytes currently allocated (since counting started).
    pub live: i64,
    /// Allocation calls (realloc counts as one).
    pub allocs: u64,
    /// Bytes requested by those calls.
    pub allocated: u64,
}

pub(crate) fn counters() -> Counters {
    Counters {
        live: LIVE.load(Relaxed),
        allocs: ALLOCS.load(Relaxed),
        allocated: ALLOCATED.load(Relaxed),
    }
}

#[inline]
fn on_alloc(size: usize) {
    if ON.load(Relaxed) {
        LIVE.fetch_add(size as i64, Relaxed);
        ALLOCS.fetch_add(1, Relaxed);
        ALLOCATED.fetch_add(size as u64, Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the same arguments; the
// counters have no effect on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            on_alloc(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            on_alloc(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) };
        if ON.load(Relaxed) {
            LIVE.fetch_sub(layout.size() as i64, Relaxed);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() && ON.load(Relaxed) {
            LIVE.fetch_add(new_size as i64 - layout.size() as i64, Relaxed);
            ALLOCS.fetch_add(1, Relaxed);
            ALLOCATED.fetch_add(new_size as u64, Relaxed);
        }
        p
    }
}

/// Resident set size of this process, from `/proc/self/status` (bytes).
pub(crate) fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}
