//! The core's timers: one heap of `(instant, call, generation)` entries for
//! every call, with lazy deletion (in the spirit of quinn-proto's
//! `TimerTable`, for a number of timers that grows with the calls).
//!
//! Invariants, kept by the methods here:
//! - A call has at most one *current* entry: the one whose generation is
//!   its [`TimerSlot`]'s. Re-arming bumps the generation, so the entries it
//!   replaces turn stale without being searched for.
//! - A stale entry (re-armed, fired, or of a call that ended) is dropped
//!   when it reaches the top ([`TimerTable::pop_expired`]), or by
//!   [`TimerTable::compact`] once the heap holds more than twice the live
//!   calls plus [`COMPACT_MIN`] entries: memory stays proportional to the
//!   calls, at amortised O(1) per entry.
//! - A timer only says *when* to look: the core decides what to do by
//!   stepping the call (`Core::step`, idempotent), so a late, early or
//!   duplicate wake-up is harmless.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

use super::ids::CallId;

/// The heap is never compacted below this size.
const COMPACT_MIN: usize = 1024;

/// A call's own record of its timer: the instant it is armed at, and the
/// generation of its current heap entry. Lives in the call.
#[derive(Debug, Default)]
pub(crate) struct TimerSlot {
    at: Option<Instant>,
    generation: u32,
}

impl TimerSlot {
    /// Whether a heap entry of this generation is the call's current one.
    fn is_current(&self, generation: u32) -> bool {
        self.generation == generation
    }

    /// The timer fired: the next schedule arms a fresh entry even for the
    /// same instant.
    pub(super) fn clear(&mut self) {
        self.at = None;
    }
}

/// Every call's timer, in one heap.
#[derive(Debug, Default)]
pub(super) struct TimerTable {
    heap: BinaryHeap<Reverse<(Instant, CallId, u32)>>,
}

impl TimerTable {
    /// Arms call `id`'s timer at `at`, unless it is armed there already;
    /// any earlier entry of the call turns stale.
    pub(super) fn schedule(&mut self, slot: &mut TimerSlot, id: CallId, at: Instant) {
        if slot.at == Some(at) {
            return;
        }
        slot.at = Some(at);
        slot.generation = slot.generation.wrapping_add(1);
        self.heap.push(Reverse((at, id, slot.generation)));
    }

    /// The earliest entry's instant (it may be stale: a wake-up for nothing
    /// costs a turn, never a missed timer).
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Removes every entry due at `now` and returns the calls whose current
    /// entry it was, in deadline order. `slot_of` finds a live call's slot
    /// (`None` for a call that ended). The callers clear those slots
    /// ([`TimerSlot::clear`]) as they serve them.
    pub(super) fn pop_expired<'s>(
        &mut self,
        now: Instant,
        slot_of: impl Fn(CallId) -> Option<&'s TimerSlot>,
    ) -> Vec<CallId> {
        let mut due = Vec::new();
        while let Some(Reverse((at, id, generation))) = self.heap.peek().copied() {
            if at > now {
                break;
            }
            self.heap.pop();
            if slot_of(id).is_some_and(|slot| slot.is_current(generation)) {
                due.push(id);
            }
        }
        due
    }

    /// Drops the stale entries once the heap has grown past twice the
    /// `live_calls` (plus [`COMPACT_MIN`]).
    pub(super) fn compact<'s>(
        &mut self,
        live_calls: usize,
        slot_of: impl Fn(CallId) -> Option<&'s TimerSlot>,
    ) {
        if self.heap.len() > 2 * live_calls + COMPACT_MIN {
            self.heap.retain(|Reverse((_, id, generation))| {
                slot_of(*id).is_some_and(|slot| slot.is_current(*generation))
            });
        }
    }

    /// Entries, current and stale (the tests' view of compaction).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_rearmed_timer_fires_once_at_its_latest_instant() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut table = TimerTable::default();
        let mut slot = TimerSlot::default();
        table.schedule(&mut slot, 7, ms(10));
        table.schedule(&mut slot, 7, ms(10)); // armed there already: no entry
        assert_eq!(table.len(), 1);
        table.schedule(&mut slot, 7, ms(20)); // the first entry turns stale
        assert_eq!(table.next_deadline(), Some(ms(10)));
        assert!(table.pop_expired(ms(15), |_| Some(&slot)).is_empty());
        assert_eq!(table.pop_expired(ms(20), |_| Some(&slot)), vec![7]);
        slot.clear();
        // Fired: the same instant arms a fresh entry.
        table.schedule(&mut slot, 7, ms(20));
        assert_eq!(table.len(), 1);
        // A call that ended leaves only stale entries behind.
        assert!(table.pop_expired(ms(30), |_| None).is_empty());
        assert_eq!(table.len(), 0);
    }

    #[test]
    fn compaction_keeps_only_current_entries() {
        let t0 = Instant::now();
        let mut table = TimerTable::default();
        let mut slot = TimerSlot::default();
        // One past the bound for one live call: 2 * 1 + COMPACT_MIN.
        for n in 0..(COMPACT_MIN as u64 + 3) {
            table.schedule(&mut slot, 1, t0 + Duration::from_millis(n));
        }
        table.compact(1, |_| Some(&slot));
        assert_eq!(table.len(), 1);
    }
}
