//! What outlives a connection (the session: id, resume token, event
//! sequence, the runtime's profile) and what keeps one honest (liveness:
//! heartbeats, keepalive pings, acks, unanswered requests). Pure state and
//! rules; the core asks, the driver does the I/O.

use std::time::{Duration, Instant};

use arcp_types::{Dialect, ResumeRequest, Welcome};
use serde_json::Value;

use crate::config::Config;
use crate::profile::RuntimeProfile;
use crate::retry::saturating_deadline;

/// The session across connections.
#[derive(Debug, Default)]
pub(crate) struct Session {
    /// The dialect, fixed by the first successful handshake.
    dialect: Option<Dialect>,
    id: Option<String>,
    resume_token: Option<String>,
    /// Highest `event_seq` received in this session.
    last_event_seq: u64,
    /// Incremented on every new (not resumed) session: `event_seq` restarts.
    epoch: u64,
    profile: Option<RuntimeProfile>,
}

impl Session {
    /// The dialect, once a handshake has fixed it.
    pub(crate) fn dialect(&self) -> Option<Dialect> {
        self.dialect
    }

    /// The session's id, while there is one.
    pub(crate) fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// The highest `event_seq` received in this session.
    pub(crate) fn last_event_seq(&self) -> u64 {
        self.last_event_seq
    }

    /// Which session `event_seq` counts in: a new (not resumed) session
    /// restarts it.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The runtime's profile, from the latest welcome.
    pub(crate) fn profile(&self) -> Option<&RuntimeProfile> {
        self.profile.as_ref()
    }

    /// An event numbered `seq` arrived in this session.
    pub(crate) fn saw_event(&mut self, seq: u64) {
        self.last_event_seq = self.last_event_seq.max(seq);
    }

    /// The resume request for the next handshake, when the runtime offers
    /// resume and there is a session to resume.
    pub(crate) fn resume_request(&self) -> Option<ResumeRequest> {
        let profile = self.profile.as_ref()?;
        if profile.dialect != Dialect::V1_1 || !profile.supports_resume {
            return None;
        }
        Some(ResumeRequest::new(
            self.id.clone()?,
            self.resume_token.clone()?,
            self.last_event_seq,
        ))
    }

    /// Installs a welcome; returns whether the previous session was resumed.
    pub(crate) fn install(&mut self, dialect: Dialect, welcome: &Welcome, resuming: bool) -> bool {
        let resumed = resuming && self.id.as_deref() == Some(welcome.session_id.as_str());
        if !resumed {
            self.epoch += 1;
            self.last_event_seq = 0;
        }
        self.dialect = Some(dialect);
        self.id = Some(welcome.session_id.clone());
        self.resume_token = welcome.resume_token.clone();
        self.profile = Some(RuntimeProfile::from_welcome(dialect, welcome));
        resumed
    }

    /// The runtime ended the session: the next connection opens a new one.
    pub(crate) fn forget(&mut self) {
        self.id = None;
        self.resume_token = None;
    }
}

/// What liveness asks of the core at a given instant.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum LivenessAction {
    /// Nothing to do.
    None,
    /// Send a ping now.
    Ping,
    /// The connection is dead, for this reason.
    Dead(&'static str),
}

/// Liveness of the live connection. Invariant (kept by the connection's
/// state, `link_state.rs`): `awaiting_since` is set exactly while requests
/// on the connection are unanswered.
#[derive(Debug)]
pub(crate) struct Liveness {
    /// The heartbeat interval: configured, negotiated, or the keepalive for
    /// runtimes that answer pings.
    heartbeat: Option<Duration>,
    /// The runtime pings us: silence for two intervals is a dead link.
    last_inbound: Instant,
    last_outbound: Instant,
    last_ack: Instant,
    acked_seq: u64,
    /// Since when requests have been outstanding with nothing heard.
    awaiting_since: Option<Instant>,
}

/// How often acks are sent at most.
pub(crate) const ACK_EVERY: Duration = Duration::from_millis(200);

impl Liveness {
    /// Liveness for a connection that just completed its handshake.
    pub(crate) fn new(
        config: &Config,
        profile: &RuntimeProfile,
        welcome: &Welcome,
        now: Instant,
    ) -> Self {
        let negotiated = welcome
            .extra
            .get("heartbeat_interval_ms")
            .and_then(Value::as_u64)
            .map(Duration::from_millis)
            .or(welcome.heartbeat_interval_sec.map(Duration::from_secs))
            .filter(|d| !d.is_zero() && (profile.sends_ping || profile.answers_ping))
            // The runtime's interval is raised to the floor (a 1 ms one
            // would ping without pause and call the link dead at once).
            .map(|d| d.max(config.min_heartbeat_interval));
        let heartbeat = config
            .heartbeat
            .or(negotiated)
            .or(profile.answers_ping.then_some(config.keepalive));
        Liveness {
            heartbeat,
            last_inbound: now,
            last_outbound: now,
            last_ack: now,
            acked_seq: 0,
            awaiting_since: None,
        }
    }

    /// A frame arrived: the runtime is alive.
    pub(crate) fn note_inbound(&mut self, now: Instant) {
        self.last_inbound = now;
    }

    /// Frames were written: the next ping waits a full interval.
    pub(crate) fn note_outbound(&mut self, now: Instant) {
        self.last_outbound = now;
    }

    /// A request was sent: the response timeout runs from the first one
    /// outstanding.
    pub(crate) fn request_sent(&mut self, now: Instant) {
        if self.awaiting_since.is_none() {
            self.awaiting_since = Some(now);
        }
    }

    /// A request was answered: the response timeout restarts for the
    /// others (`outstanding`), or stops.
    pub(crate) fn request_answered(&mut self, now: Instant, outstanding: bool) {
        self.awaiting_since = outstanding.then_some(now);
    }

    /// Whether to ack event `seq` now: it is past the last acked one, and
    /// the last ack is [`ACK_EVERY`] old.
    pub(crate) fn ack_due(&self, seq: u64, now: Instant) -> bool {
        seq > self.acked_seq && now.saturating_duration_since(self.last_ack) >= ACK_EVERY
    }

    /// When event `seq` may be acked, if it is past the last acked one.
    pub(crate) fn next_ack(&self, seq: u64) -> Option<Instant> {
        (seq > self.acked_seq).then(|| self.last_ack + ACK_EVERY)
    }

    /// Event `seq` was acked at `now`.
    pub(crate) fn acked(&mut self, seq: u64, now: Instant) {
        self.acked_seq = seq;
        self.last_ack = now;
    }

    /// When liveness next needs a look.
    pub(crate) fn next_wake(&self, response_timeout: Duration) -> Option<Instant> {
        let mut at: Option<Instant> = None;
        let mut min = |t: Instant| at = Some(at.map_or(t, |a: Instant| a.min(t)));
        if let Some(interval) = self.heartbeat {
            min(saturating_deadline(self.last_outbound, interval));
            min(saturating_deadline(
                self.last_inbound,
                interval.saturating_mul(2),
            ));
        }
        if let Some(since) = self.awaiting_since {
            min(saturating_deadline(
                since.max(self.last_inbound),
                response_timeout,
            ));
        }
        at
    }

    /// Decides, at `now`, whether to ping or to declare the link dead.
    pub(crate) fn check(&mut self, now: Instant, response_timeout: Duration) -> LivenessAction {
        if let Some(since) = self.awaiting_since {
            if now.saturating_duration_since(since.max(self.last_inbound)) >= response_timeout {
                return LivenessAction::Dead(
                    "requests were outstanding and the runtime sent nothing within the response timeout",
                );
            }
        }
        if let Some(interval) = self.heartbeat {
            if now.saturating_duration_since(self.last_inbound) >= interval.saturating_mul(2) {
                return LivenessAction::Dead(
                    "no frame from the runtime for two heartbeat intervals (HEARTBEAT_LOST)",
                );
            }
            if now.saturating_duration_since(self.last_outbound) >= interval {
                // Count the probe as traffic so the next one waits a full interval.
                self.last_outbound = now;
                return LivenessAction::Ping;
            }
        }
        LivenessAction::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn welcome() -> Welcome {
        serde_json::from_value(json!({"session_id": "s", "heartbeat_interval_sec": 1,
            "runtime": {"name": "x", "version": "1"},
            "capabilities": {"features": ["heartbeat"]}}))
        .unwrap()
    }

    #[test]
    fn two_silent_intervals_kill_the_link_and_pings_fill_the_gaps() {
        let config = Config::new("ws://x".into());
        let w = welcome();
        let profile = RuntimeProfile::from_welcome(Dialect::V1_1, &w);
        let t0 = Instant::now();
        let mut live = Liveness::new(&config, &profile, &w, t0);
        let rt = Duration::from_secs(10);
        assert_eq!(live.check(t0, rt), LivenessAction::None);
        assert_eq!(
            live.check(t0 + Duration::from_secs(1), rt),
            LivenessAction::Ping
        );
        assert_eq!(
            live.check(t0 + Duration::from_millis(1500), rt),
            LivenessAction::None
        );
        assert!(matches!(
            live.check(t0 + Duration::from_secs(2), rt),
            LivenessAction::Dead(_)
        ));
    }

    #[test]
    fn outstanding_requests_with_a_silent_runtime_kill_the_link() {
        let mut config = Config::new("ws://x".into());
        config.heartbeat = None;
        let w: Welcome = serde_json::from_value(json!({"session_id": "s"})).unwrap();
        let profile = RuntimeProfile::from_welcome(Dialect::Legacy, &w);
        let t0 = Instant::now();
        let mut live = Liveness::new(&config, &profile, &w, t0);
        let rt = Duration::from_millis(300);
        live.request_sent(t0);
        assert_eq!(live.next_wake(rt), Some(t0 + rt));
        assert_eq!(
            live.check(t0 + Duration::from_millis(299), rt),
            LivenessAction::None
        );
        assert!(matches!(live.check(t0 + rt, rt), LivenessAction::Dead(_)));
    }

    /// A runtime that negotiates a 1 ms heartbeat gets the floor (1 s by
    /// default): no ping every millisecond, no link called dead after 2 ms.
    #[test]
    fn a_tiny_negotiated_heartbeat_is_raised_to_the_floor() {
        let config = Config::new("ws://x".into());
        let w: Welcome = serde_json::from_value(json!({"session_id": "s",
            "heartbeat_interval_sec": 1, "heartbeat_interval_ms": 1,
            "runtime": {"name": "x", "version": "1"},
            "capabilities": {"features": ["heartbeat"]}}))
        .unwrap();
        let profile = RuntimeProfile::from_welcome(Dialect::V1_1, &w);
        let t0 = Instant::now();
        let mut live = Liveness::new(&config, &profile, &w, t0);
        let rt = Duration::from_secs(10);
        let floor = config.min_heartbeat_interval;
        assert_eq!(live.next_wake(rt), Some(t0 + floor));
        assert_eq!(
            live.check(t0 + Duration::from_millis(2), rt),
            LivenessAction::None
        );
        assert_eq!(live.check(t0 + floor, rt), LivenessAction::Ping);
        // The floor is a knob: a lower one lets the runtime's interval through.
        let mut config = config;
        config.min_heartbeat_interval = Duration::from_millis(1);
        let live = Liveness::new(&config, &profile, &w, t0);
        assert_eq!(live.next_wake(rt), Some(t0 + Duration::from_millis(1)));
    }
}
