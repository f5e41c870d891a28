//! The link's state ([`Link`]) and what the core knows of the live
//! connection ([`Up`]): its generation, dialect, the runtime's profile,
//! liveness, and the send window. What happens to the link on a handshake,
//! a failed dial, a flush or a loss is `core/link_events.rs`.
//!
//! ```text
//!  Down { next_dial } ──poll_dial──▶ Dialing ──on_established──▶ Up ──on_lost / dead──▶ Down
//!        ▲                              │
//!        └──── on_dial_failed (backoff) ┘        any state ──close──▶ Closed
//! ```

use std::collections::VecDeque;
use std::time::Instant;

use arcp_types::Dialect;

use super::ids::CallId;
use super::session::Liveness;
use crate::profile::RuntimeProfile;

/// Unanswered requests allowed right after a connection loss.
pub(super) const WINDOW_AFTER_LOSS: usize = 4;

/// Where the link stands. Each state carries its own data.
pub(super) enum Link {
    /// No connection; dial (when there is work) not before the instant.
    Down { next_dial: Instant },
    /// The driver is dialing.
    Dialing,
    /// A session is established on a live connection.
    Up(Box<Up>),
    /// The client closed.
    Closed,
}

impl Link {
    /// Marks the time of any inbound frame on the live link.
    pub(super) fn note_inbound(&mut self, now: Instant) {
        if let Link::Up(up) = self {
            up.live.note_inbound(now);
        }
    }
}

/// The live connection.
///
/// Invariants, kept by the methods here:
/// - `unanswered <= window <= max_in_flight`: a submit is sent only with
///   room in the window ([`has_room`](Self::has_room)), and the window
///   grows by one per answer (slow start), up to `max_in_flight`;
/// - liveness awaits an answer exactly while `unanswered > 0`;
/// - a call waits for room at most once in `waiting`, oldest first.
pub(super) struct Up {
    generation: u64,
    dialect: Dialect,
    profile: RuntimeProfile,
    live: Liveness,
    /// The connection carried something after its handshake (the reconnect
    /// backoff restarts only then, and only if it lived long enough).
    useful: bool,
    /// Submits answered on it (what pays for an immediate reconnect).
    answered: u64,
    /// When its handshake completed.
    established: Instant,
    /// Submits on this connection not yet answered, and how many may be:
    /// after a loss the window restarts small and grows by one per answer
    /// (slow start), so a reconnect does not flood a flaky link.
    unanswered: usize,
    window: usize,
    /// Calls waiting for room in the window, oldest first.
    waiting: VecDeque<CallId>,
}

impl Up {
    /// A connection just established, with a send window of `window`.
    pub(super) fn new(
        generation: u64,
        dialect: Dialect,
        profile: RuntimeProfile,
        live: Liveness,
        window: usize,
        established: Instant,
    ) -> Self {
        Up {
            generation,
            dialect,
            profile,
            live,
            useful: false,
            answered: 0,
            established,
            unanswered: 0,
            window,
            waiting: VecDeque::new(),
        }
    }

    /// Which connection this is (one more per established session).
    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    /// The message set spoken on it.
    pub(super) fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// What the runtime on the other end does.
    pub(super) fn profile(&self) -> &RuntimeProfile {
        &self.profile
    }

    /// Heartbeats, pings, acks and the response timeout.
    pub(super) fn live(&self) -> &Liveness {
        &self.live
    }

    /// Liveness, to update.
    pub(super) fn live_mut(&mut self) -> &mut Liveness {
        &mut self.live
    }

    /// Whether the connection carried something after its handshake.
    pub(super) fn was_useful(&self) -> bool {
        self.useful
    }

    /// How long the connection has been up at `now`.
    pub(super) fn lived(&self, now: Instant) -> std::time::Duration {
        now.saturating_duration_since(self.established)
    }

    /// Whether another submit may be sent now.
    pub(super) fn has_room(&self) -> bool {
        self.unanswered < self.window
    }

    /// At most one submit is unanswered (a request-level close then
    /// answers that one alone).
    pub(super) fn at_most_one_unanswered(&self) -> bool {
        self.unanswered <= 1
    }

    /// Call `id` waits for room in the window (once).
    pub(super) fn wait_for_room(&mut self, id: CallId) {
        if !self.waiting.contains(&id) {
            self.waiting.push_back(id);
        }
    }

    /// The oldest call waiting, taken if there is room for it.
    pub(super) fn next_with_room(&mut self) -> Option<CallId> {
        if !self.has_room() {
            return None;
        }
        self.waiting.pop_front()
    }

    /// Whether calls wait for room.
    pub(super) fn has_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Call `id` no longer waits (it ended).
    pub(super) fn forget_waiting(&mut self, id: CallId) {
        self.waiting.retain(|&q| q != id);
    }

    /// A submit was written to the connection.
    pub(super) fn on_submit_sent(&mut self, now: Instant) {
        self.unanswered += 1;
        self.live.request_sent(now);
    }

    /// A submit was answered: its slot is free, the window grows by one
    /// (up to `max_in_flight`), and the connection has proved useful.
    pub(super) fn on_answered(&mut self, now: Instant, max_in_flight: usize) {
        self.unanswered = self.unanswered.saturating_sub(1);
        self.live.request_answered(now, self.unanswered > 0);
        self.window = (self.window + 1).min(max_in_flight);
        self.useful = true;
        self.answered += 1;
    }

    /// Submits answered on this connection.
    pub(super) fn answered(&self) -> u64 {
        self.answered
    }
}
