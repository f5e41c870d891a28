//! Frames queued for the writer, and how far each has got: queued, handed
//! to the writer, reported written. Each frame has a transmit sequence
//! number, its place in that order.
//!
//! Invariant, kept by the methods here: `flushed <= handed <= queued`.
//! `handed` is what the execution rule reads: a frame handed to the writer
//! may have reached the runtime even if its connection died before the
//! flush was reported; one never handed is proven not to have.
//!
//! The numbers run on across connections (a loss discards the frames not
//! yet handed, not their numbers), so a sequence number never names two
//! frames.

use super::ids::CallId;

/// The frames to write and their sequence numbers.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    frames: Vec<String>,
    /// The sequence number of the last frame queued.
    queued: u64,
    /// Frames up to this one were handed to the writer.
    handed: u64,
    /// Frames up to this one were reported written.
    flushed: u64,
    /// Cancels queued and not yet reported written: (sequence number, call).
    cancel_writes: Vec<(u64, CallId)>,
    /// Bytes of the frames queued and not yet handed to the writer: what
    /// grows while a write is stalled (see `Core::check_outbox`).
    bytes: usize,
}

impl Outbox {
    /// Queues an encoded frame; returns its sequence number.
    pub(super) fn push(&mut self, text: String) -> u64 {
        self.bytes += text.len();
        self.frames.push(text);
        self.queued += 1;
        self.queued
    }

    /// The sequence number of the last frame queued (what a frame that
    /// could not be queued reports: nothing after it was written).
    pub(super) fn last_queued(&self) -> u64 {
        self.queued
    }

    /// Whether frames wait for the writer.
    /// Bytes queued and not yet handed to the writer.
    pub(super) fn queued_bytes(&self) -> usize {
        self.bytes
    }

    pub(super) fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Hands every queued frame to the writer, in order; returns the
    /// sequence number of the last one.
    pub(super) fn hand_to_writer(&mut self, into: &mut Vec<String>) -> u64 {
        into.append(&mut self.frames);
        self.bytes = 0;
        self.handed = self.queued;
        self.queued
    }

    /// Whether the frame with this sequence number was handed to the writer.
    pub(super) fn was_handed(&self, seq: u64) -> bool {
        seq <= self.handed
    }

    /// Remembers that the frame `seq` is call `id`'s cancel, so that its
    /// flush can be reported to the call.
    pub(super) fn track_cancel(&mut self, seq: u64, id: CallId) {
        self.cancel_writes.push((seq, id));
    }

    /// The writer reports frames written up to `upto` (never past what it
    /// was handed); `written` is told each call whose cancel that covers.
    pub(super) fn on_flushed(&mut self, upto: u64, mut written: impl FnMut(CallId)) {
        self.flushed = self.flushed.max(upto.min(self.handed));
        let flushed = self.flushed;
        self.cancel_writes.retain(|&(seq, id)| {
            if seq > flushed {
                return true;
            }
            written(id);
            false
        });
    }

    /// The connection is gone: frames not handed to the writer are dropped
    /// (their calls are re-sent on the next one), and so are the cancels
    /// awaiting their flush.
    pub(super) fn discard_on_loss(&mut self) {
        self.frames.clear();
        self.bytes = 0;
        self.cancel_writes.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_move_from_queued_to_handed_to_flushed_in_order() {
        let mut outbox = Outbox::default();
        assert_eq!(outbox.push("a".into()), 1);
        let cancel = outbox.push("cancel".into());
        assert_eq!(outbox.queued_bytes(), 7);
        outbox.track_cancel(cancel, 9);
        assert!(!outbox.was_handed(1));
        let mut batch = Vec::new();
        assert_eq!(outbox.hand_to_writer(&mut batch), 2);
        assert_eq!(batch, ["a", "cancel"]);
        assert!(outbox.is_empty() && outbox.was_handed(2));
        assert_eq!(outbox.queued_bytes(), 0);
        assert_eq!(outbox.push("b".into()), 3);
        // A report past what was handed counts only what was handed.
        let mut written = Vec::new();
        outbox.on_flushed(5, |id| written.push(id));
        assert_eq!(written, [9]);
        assert!(!outbox.was_handed(3));
        outbox.discard_on_loss();
        assert!(outbox.is_empty());
        assert_eq!(outbox.queued_bytes(), 0);
        // Numbers run on across connections.
        assert_eq!(outbox.push("c".into()), 4);
    }
}
