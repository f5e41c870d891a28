//! The runtimes the scenario suite runs against: the two published reference
//! runtimes and arcp-mock in each replay policy, behind one interface.

use std::time::Duration;

use arcp_mock::{Dialect, MockRuntime, ReplayPolicy};
use arcp_sdk::{Client, ClientBuilder, DialectChoice, RetryPolicy};
use serde_json::{json, Value};

use super::peers::{Peer, PeerKind};

/// Which runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TargetKind {
    /// Python `agentruntimecontrolprotocol` 1.1.3.
    Python,
    /// Rust `arcp-runtime` 2.0.0.
    Rust,
    /// arcp-mock with this replay policy (v1.1 for terminal replay, the
    /// legacy dialect for the others, as the runtime families they imitate).
    Mock(ReplayPolicy),
}

/// A started runtime; stopped on drop.
pub(crate) struct Target {
    pub kind: TargetKind,
    pub url: String,
    peer: Option<Peer>,
    mock: Option<MockRuntime>,
}

impl Target {
    pub(crate) async fn start(kind: TargetKind) -> Target {
        match kind {
            TargetKind::Python | TargetKind::Rust => {
                let peer = Peer::start(if kind == TargetKind::Python {
                    PeerKind::Python
                } else {
                    PeerKind::Rust
                });
                Target {
                    kind,
                    url: peer.url.clone(),
                    peer: Some(peer),
                    mock: None,
                }
            }
            TargetKind::Mock(policy) => {
                let dialect = if policy == ReplayPolicy::TerminalReplay {
                    Dialect::V1_1
                } else {
                    Dialect::Legacy
                };
                let mock = MockRuntime::builder()
                    .dialect(dialect)
                    .replay_policy(policy)
                    .token("test-token", "alice")
                    .tool("echo", |args, _| async move { Ok(args) })
                    .tool("counter", |args: Value, ctx| async move {
                        let ms = args["sleep_ms"].as_u64().unwrap_or(0);
                        let events = args["events"].as_u64().unwrap_or(0);
                        ctx.progress(0, events + 1).await;
                        for i in 1..=events + 1 {
                            ctx.sleep(Duration::from_millis(ms / (events + 1))).await;
                            ctx.progress(i, events + 1).await;
                        }
                        Ok(json!({"count": 1, "input": args}))
                    })
                    .start()
                    .await
                    .unwrap();
                Target {
                    kind,
                    url: mock.ws_url(),
                    peer: None,
                    mock: Some(mock),
                }
            }
        }
    }

    fn peer(&self) -> Option<&Peer> {
        self.peer.as_ref()
    }

    /// Whether a lost outcome can be recovered from this runtime (it replays
    /// the stored terminal for a re-sent key, or resumes the session).
    pub(crate) fn recovers_lost_outcome(&self) -> bool {
        matches!(
            self.kind,
            TargetKind::Python
                | TargetKind::Mock(ReplayPolicy::TerminalReplay | ReplayPolicy::TerminalOnly)
        )
    }

    pub(crate) fn dialect(&self) -> DialectChoice {
        match self.kind {
            TargetKind::Python | TargetKind::Mock(ReplayPolicy::TerminalReplay) => {
                DialectChoice::V1_1
            }
            _ => DialectChoice::Legacy,
        }
    }

    /// Arguments of the `counter` tool: runs `ms` milliseconds with `events`
    /// events along the way; `tag` makes intents distinct.
    pub(crate) fn counter_args(&self, ms: u64, events: u64, tag: &str) -> Value {
        match self.peer() {
            Some(peer) => peer.counter_args(ms, events, tag),
            None => json!({"sleep_ms": ms, "events": events, "tag": tag}),
        }
    }

    /// A client builder for `url` (the runtime's, or a proxy's in front of it).
    pub(crate) fn client(&self, url: &str) -> ClientBuilder {
        match self.peer() {
            Some(peer) => peer.client(url),
            None => Client::builder(url)
                .bearer_token("test-token")
                .dialect(self.dialect())
                .handshake_timeout(Duration::from_secs(2))
                .retry(
                    RetryPolicy::exponential()
                        .initial_delay(Duration::from_millis(50))
                        .max_delay(Duration::from_millis(400))
                        .max_attempts(8)
                        .max_elapsed(Duration::from_secs(8))
                        .outcome_poll(Duration::from_millis(300)),
                ),
        }
    }

    /// How many times `counter` has executed.
    pub(crate) async fn executions(&self) -> u64 {
        match (&self.peer, &self.mock) {
            (Some(peer), _) => peer.executions().await,
            (_, Some(mock)) => mock.executions("counter"),
            _ => unreachable!("a target is a peer or a mock"),
        }
    }

    /// The value `count` the n-th execution of `counter` returns, when it
    /// numbers executions (the published peers do; the mock's is always 1).
    pub(crate) fn numbers_executions(&self) -> bool {
        self.peer.is_some()
    }
}
