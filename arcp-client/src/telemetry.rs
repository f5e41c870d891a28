//! Metrics through the [`metrics`](https://docs.rs/metrics) facade, with the
//! `metrics` feature. No exporter is chosen here: an application installs
//! one (Prometheus, StatsD, ...) and every client in the process reports to
//! it. Without the feature every function below is empty and inlined away,
//! so the hot path pays nothing.
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `arcp_client_calls_started_total` | counter | | calls handed to `invoke` |
//! | `arcp_client_calls_ended_total` | counter | `outcome`, `execution` | calls that ended, by outcome (`ok`, `tool_error`, `duplicate_key`, `outcome_unavailable`, ...) and by whether the tool ran (`ran`, `not_run`, `may_have_run`) |
//! | `arcp_client_calls_in_flight` | gauge | | calls started and not ended |
//! | `arcp_client_call_duration_seconds` | histogram | | from `invoke` to the outcome |
//! | `arcp_client_call_attempts` | histogram | | sends of the request per ended call |
//! | `arcp_client_replays_total` | counter | `kind` | outcomes or acceptances that were replays: `terminal` (a stored terminal from the runtime), `accepted` (a stored acceptance without its terminal), `cache` (this client's outcome cache), `journal` (the journal's record) |
//! | `arcp_client_duplicate_keys_total` | counter | | calls refused because their key is bound to another intent |
//! | `arcp_client_sessions_total` | counter | `resumed` | sessions established (`true`: an earlier session resumed) |
//! | `arcp_client_reconnects_total` | counter | | dials after a lost connection |
//! | `arcp_client_resumes_refused_total` | counter | | resumes the runtime refused |
//! | `arcp_client_bytes_sent_total`, `arcp_client_bytes_received_total` | counter | | WebSocket payload bytes |

use std::time::Instant;

use crate::error::Error;

/// Where a call's outcome came from, when not from a live execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answered {
    /// From the runtime (fresh, or a replay it marked).
    Runtime,
    /// From this client's outcome cache.
    Cache,
    /// From the journal's record of an earlier process.
    Journal,
}

impl Answered {
    pub(crate) fn from_u8(v: u8) -> Answered {
        match v {
            1 => Answered::Cache,
            2 => Answered::Journal,
            _ => Answered::Runtime,
        }
    }

    pub(crate) fn as_u8(self) -> u8 {
        match self {
            Answered::Runtime => 0,
            Answered::Cache => 1,
            Answered::Journal => 2,
        }
    }
}

/// A stable, low-cardinality label for an outcome: tool error codes are
/// the runtime's and unbounded, so they all count as `tool_error`.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) fn outcome_label(outcome: &Result<bool, &Error>) -> &'static str {
    match outcome {
        Ok(_) => "ok",
        Err(e) => match e {
            Error::Tool(_) => "tool_error",
            Error::DuplicateKey { .. } => "duplicate_key",
            Error::OutcomeUnavailable { .. } => "outcome_unavailable",
            Error::RetriesExhausted { .. } => "retries_exhausted",
            Error::DeadlineExceeded { .. } => "deadline_exceeded",
            Error::Cancelled { .. } => "cancelled",
            Error::Interrupted { .. } => "interrupted",
            Error::RequestRejected { .. } => "request_rejected",
            Error::Unauthenticated { .. } => "unauthenticated",
            Error::Connect { .. } => "connect_failed",
            Error::Handshake { .. } => "handshake_failed",
            Error::InvalidCall { .. } => "invalid_call",
            Error::Closed => "client_closed",
            Error::Journal(_) => "journal_error",
            Error::Http { .. } => "http_error",
            _ => "other",
        },
    }
}

/// Whether an ended call was a replay, and of which kind.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) fn replay_label(replayed: bool, answered: Answered) -> Option<&'static str> {
    match answered {
        Answered::Cache => Some("cache"),
        Answered::Journal => Some("journal"),
        Answered::Runtime if replayed => Some("terminal"),
        Answered::Runtime => None,
    }
}

#[cfg(feature = "metrics")]
mod imp {
    use super::*;
    use crate::error::Execution;
    use metrics::{counter, gauge, histogram};

    pub(crate) fn call_started() {
        counter!("arcp_client_calls_started_total").increment(1);
        gauge!("arcp_client_calls_in_flight").increment(1.0);
    }

    pub(crate) fn call_ended(
        outcome: Result<bool, &Error>,
        started: Instant,
        attempts: u32,
        answered: Answered,
    ) {
        let elapsed = started.elapsed();
        gauge!("arcp_client_calls_in_flight").decrement(1.0);
        let execution = match &outcome {
            Ok(_) => Execution::Ran,
            Err(e) => e.execution(),
        };
        counter!(
            "arcp_client_calls_ended_total",
            "outcome" => outcome_label(&outcome),
            "execution" => execution.as_str(),
        )
        .increment(1);
        histogram!("arcp_client_call_duration_seconds").record(elapsed.as_secs_f64());
        histogram!("arcp_client_call_attempts").record(f64::from(attempts));
        let replayed = match &outcome {
            Ok(replayed) => *replayed,
            Err(Error::Tool(e)) => e.replayed,
            Err(_) => false,
        };
        if let Some(kind) = replay_label(replayed, answered) {
            counter!("arcp_client_replays_total", "kind" => kind).increment(1);
        }
        if matches!(outcome, Err(Error::DuplicateKey { .. })) {
            counter!("arcp_client_duplicate_keys_total").increment(1);
        }
    }

    pub(crate) fn accepted_replay() {
        counter!("arcp_client_replays_total", "kind" => "accepted").increment(1);
    }

    pub(crate) fn session(resumed: bool) {
        counter!(
            "arcp_client_sessions_total",
            "resumed" => if resumed { "true" } else { "false" },
        )
        .increment(1);
    }

    pub(crate) fn reconnecting() {
        counter!("arcp_client_reconnects_total").increment(1);
    }

    pub(crate) fn resume_refused() {
        counter!("arcp_client_resumes_refused_total").increment(1);
    }

    pub(crate) fn bytes_sent(n: usize) {
        counter!("arcp_client_bytes_sent_total").increment(n as u64);
    }

    pub(crate) fn bytes_received(n: usize) {
        counter!("arcp_client_bytes_received_total").increment(n as u64);
    }
}

#[cfg(not(feature = "metrics"))]
mod imp {
    use super::*;

    #[inline(always)]
    pub(crate) fn call_started() {}
    #[inline(always)]
    pub(crate) fn call_ended(
        _outcome: Result<bool, &Error>,
        // The start, not the duration: without metrics the clock is not read.
        _started: Instant,
        _attempts: u32,
        _answered: Answered,
    ) {
    }
    #[inline(always)]
    pub(crate) fn accepted_replay() {}
    #[inline(always)]
    pub(crate) fn session(_resumed: bool) {}
    #[inline(always)]
    pub(crate) fn reconnecting() {}
    #[inline(always)]
    pub(crate) fn resume_refused() {}
    #[inline(always)]
    pub(crate) fn bytes_sent(_n: usize) {}
    #[inline(always)]
    pub(crate) fn bytes_received(_n: usize) {}
}

pub(crate) use imp::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_kinds_name_where_the_outcome_came_from() {
        assert_eq!(replay_label(false, Answered::Runtime), None);
        assert_eq!(replay_label(true, Answered::Runtime), Some("terminal"));
        assert_eq!(replay_label(true, Answered::Cache), Some("cache"));
        assert_eq!(replay_label(false, Answered::Journal), Some("journal"));
        for a in [Answered::Runtime, Answered::Cache, Answered::Journal] {
            assert_eq!(Answered::from_u8(a.as_u8()), a);
        }
    }

    #[test]
    fn outcome_labels_are_bounded_whatever_the_tool_code() {
        assert_eq!(outcome_label(&Ok(true)), "ok");
        assert_eq!(outcome_label(&Err(&Error::Closed)), "client_closed");
        assert_eq!(
            outcome_label(&Err(&Error::invalid_call("x".into()))),
            "invalid_call"
        );
    }
}
