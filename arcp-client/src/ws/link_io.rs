//! What the shell and the core tell each other about the link: the dial
//! the core asks for ([`DialPlan`], from `Core::poll_dial`), how it went
//! ([`Established`], [`DialFailure`], from the connector), and why a live
//! connection ended ([`Loss`], from the transport or the core itself).
//! Plain records: the shell builds them, the core reads them.

use std::time::Duration;

use arcp_types::{Dialect, ResumeRequest, Welcome};

use crate::error::Error;

/// What the driver should dial.
#[derive(Debug, Clone)]
pub(crate) struct DialPlan {
    /// Dialects to try, in order (two in `Auto` before the first session).
    pub(crate) dialects: Vec<Dialect>,
    pub(crate) resume: Option<ResumeRequest>,
    /// The client had a session before (then a host that no longer
    /// resolves is a transient failure).
    pub(crate) had_session: bool,
}

/// A completed handshake.
pub(crate) struct Established {
    pub(crate) dialect: Dialect,
    pub(crate) welcome: Welcome,
    /// A resume was asked for (the welcome says whether it was granted).
    pub(crate) resuming: bool,
    /// The runtime refused a resume on the way (then this is a new session).
    pub(crate) resume_refused: Option<String>,
}

/// A dial that produced no session.
#[derive(Debug)]
pub(crate) struct DialFailure {
    pub(crate) error: Error,
    /// Whether dialing again may work.
    pub(crate) transient: bool,
    /// The runtime's `Retry-After`, a floor for the next dial.
    pub(crate) floor: Option<Duration>,
}

/// Why the connection ended.
#[derive(Debug)]
pub(crate) enum Loss {
    /// The network or the runtime dropped it.
    Network(String),
    /// The runtime closed it because of something we sent (WebSocket close
    /// 1002, 1003, 1007, 1008 or 1009).
    Rejected { code: u16, reason: String },
}
