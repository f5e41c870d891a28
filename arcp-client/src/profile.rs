//! What differs between runtimes, declared in one table.
//!
//! After the handshake the client knows which runtime answered (name and
//! version in the welcome) and what was negotiated. Every behaviour the
//! recovery ladder depends on is read from a [`RuntimeProfile`]; no runtime
//! name appears anywhere else in the client.

use arcp_types::{Dialect, Welcome};

/// What the client learned about a runtime in the handshake
/// ([`Client::runtime`](crate::Client::runtime)): its name and version, the
/// dialect of the session, and whether it replays stored outcomes and
/// resumes sessions. The rest of what the client adapts to (liveness
/// probes, acknowledgements, socket options) stays inside the client.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuntimeProfile {
    /// Runtime name from the welcome (`runtime.name`, legacy `runtime.kind`).
    pub(crate) name: String,
    /// Runtime version from the welcome.
    pub(crate) version: String,
    /// The dialect the session speaks.
    pub(crate) dialect: Dialect,
    /// A same-key resubmit after completion gets the stored terminal back
    /// (not only `job.accepted`).
    pub(crate) replays_terminal: bool,
    /// Error frames name the request they answer (otherwise the client
    /// attributes them to the oldest request awaiting an answer).
    pub(crate) echoes_request_id_on_errors: bool,
    /// Sessions can be resumed after a transport drop.
    pub(crate) supports_resume: bool,
    /// `job.subscribe` with history is safe and useful.
    pub(crate) supports_subscribe: bool,
    /// The runtime answers `session.ping`, so the client may probe liveness.
    pub(crate) answers_ping: bool,
    /// The runtime sends `session.ping` itself (the client must answer).
    pub(crate) sends_ping: bool,
    /// The runtime accepts `session.ack`.
    pub(crate) accepts_ack: bool,
    /// A `job.accepted` that echoes the idempotency key on its envelope is a
    /// replay of an earlier acceptance (fresh ones do not echo it).
    pub(crate) key_echo_marks_replay: bool,
    /// The runtime may write a reply in pieces without TCP_NODELAY, so the
    /// client sees that each piece read is acknowledged soon (`ws/ack.rs`;
    /// else each piece waits out a 40 ms delayed ACK). Assumed for unknown
    /// runtimes; a syscall and an ACK packet per wake-up are saved for
    /// runtimes known to set TCP_NODELAY.
    pub(crate) writes_in_pieces: bool,
}

impl RuntimeProfile {
    /// The runtime's name (`runtime.name` of the welcome, legacy
    /// `runtime.kind`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The runtime's version, from the welcome.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The dialect the session speaks.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Whether a same-key resubmit after completion gets the stored
    /// outcome back; when not, a call whose connection died after
    /// acceptance may end [`Error::OutcomeUnavailable`](crate::Error::OutcomeUnavailable).
    pub fn replays_terminal(&self) -> bool {
        self.replays_terminal
    }

    /// Whether a session survives a transport drop (resumed on reconnect).
    pub fn supports_resume(&self) -> bool {
        self.supports_resume
    }

    /// The profile for the runtime that sent `welcome` on a `dialect` session.
    ///
    /// Known runtimes get their observed behaviour (`docs/compatibility.md` in this package);
    /// unknown ones get conservative defaults derived only from what they
    /// negotiated.
    pub(crate) fn from_welcome(dialect: Dialect, welcome: &Welcome) -> Self {
        let features = welcome.features();
        let has = |f: &str| features.iter().any(|x| x == f);
        let mut profile = RuntimeProfile {
            name: welcome.runtime.name.clone(),
            version: welcome.runtime.version.clone(),
            dialect,
            // Unknown runtimes: assume nothing beyond what they negotiated.
            replays_terminal: false,
            echoes_request_id_on_errors: dialect == Dialect::Legacy,
            supports_resume: dialect == Dialect::V1_1 && welcome.resume_token.is_some(),
            supports_subscribe: dialect == Dialect::V1_1 && has("subscribe"),
            answers_ping: dialect == Dialect::V1_1 && has("heartbeat"),
            sends_ping: welcome.heartbeat_interval_sec.is_some(),
            accepts_ack: dialect == Dialect::V1_1 && has("ack"),
            key_echo_marks_replay: false,
            writes_in_pieces: true,
        };
        for known in KNOWN {
            if (known.matches)(&profile.name, &profile.version, dialect) {
                (known.adjust)(&mut profile);
                break;
            }
        }
        profile
    }
}

/// One row of the capability table.
struct Known {
    matches: fn(&str, &str, Dialect) -> bool,
    adjust: fn(&mut RuntimeProfile),
}

/// Observed behaviour of published runtimes (wire captures in the repository's `arcp-types/tests/fixtures/`).
const KNOWN: &[Known] = &[
    // Rust `arcp-runtime` 2.x (legacy dialect): replays only `job.accepted`,
    // no resume (drops TCP on `session.resume`), advertises
    // `subscriptions: false` (and a subscribe from a second session starts an
    // echo storm), answers `session.ping`, correlates every reply.
    Known {
        matches: |name, version, dialect| {
            dialect == Dialect::Legacy && name == "arcp-rs" && version.starts_with("2.")
        },
        adjust: |p| {
            p.replays_terminal = false;
            p.supports_resume = false;
            p.supports_subscribe = false;
            p.answers_ping = true;
            p.echoes_request_id_on_errors = true;
            p.key_echo_marks_replay = true;
        },
    },
    // Python `agentruntimecontrolprotocol` 1.1.x (v1.1 dialect): replays the
    // stored terminal after completion, `session.error` carries no request id,
    // resume rotates the token but does not re-attach live jobs.
    Known {
        matches: |name, version, dialect| {
            dialect == Dialect::V1_1
                && name.starts_with("arcp-python")
                && version.starts_with("1.1")
        },
        adjust: |p| {
            p.replays_terminal = true;
            p.echoes_request_id_on_errors = false;
            // asyncio sets TCP_NODELAY on every TCP transport.
            p.writes_in_pieces = false;
        },
    },
    // arcp-mock, the SDK's own test runtime: replay behaviour follows its
    // configured policy, so only what it negotiated is assumed; like the
    // runtime each dialect imitates, it answers pings and (legacy) echoes the
    // key on a replayed accept.
    Known {
        matches: |name, _, _| name == "arcp-mock",
        adjust: |p| {
            p.answers_ping = true;
            p.key_echo_marks_replay = p.dialect == Dialect::Legacy;
            p.writes_in_pieces = false;
        },
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn welcome(v: serde_json::Value) -> Welcome {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn rust_2_0_0_profile() {
        let w = welcome(
            json!({"session_id": "s", "runtime": {"name": "arcp-rs", "version": "2.0.0"},
            "capabilities": {"streaming": true, "durable_jobs": true, "subscriptions": false}}),
        );
        let p = RuntimeProfile::from_welcome(Dialect::Legacy, &w);
        assert!(!p.replays_terminal && !p.supports_resume && !p.supports_subscribe);
        assert!(p.answers_ping && p.echoes_request_id_on_errors && p.key_echo_marks_replay);
        assert!(
            p.writes_in_pieces,
            "arcp-rs 2.0.0 writes without TCP_NODELAY"
        );
    }

    #[test]
    fn python_1_1_3_profile() {
        let w = welcome(
            json!({"session_id": "s", "resume_token": "rtk", "heartbeat_interval_sec": 2,
            "runtime": {"name": "arcp-python-peer", "version": "1.1.3"},
            "capabilities": {"features": ["heartbeat", "ack", "subscribe"]}}),
        );
        let p = RuntimeProfile::from_welcome(Dialect::V1_1, &w);
        assert!(p.replays_terminal && p.supports_resume && p.supports_subscribe && p.sends_ping);
        assert!(!p.echoes_request_id_on_errors && !p.writes_in_pieces);
    }

    #[test]
    fn unknown_runtimes_get_conservative_defaults() {
        let w = welcome(
            json!({"session_id": "s", "runtime": {"name": "x", "version": "9"},
            "capabilities": {"subscriptions": true}}),
        );
        let p = RuntimeProfile::from_welcome(Dialect::Legacy, &w);
        assert!(
            !p.replays_terminal && !p.supports_resume && !p.supports_subscribe && !p.answers_ping
        );
    }
}
