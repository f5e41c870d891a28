//! [`MockRuntime`]: the running mock, its two listeners, and what a test
//! asks it (counts, ground truth, expectations, faults).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use arcp_types::{Dialect, Envelope};
use tokio::net::TcpListener;
use tokio::task::AbortHandle;

use std::future::Future;

use serde_json::Value;

use crate::config::Config;
use crate::engine::Engine;
use crate::expect::Expectation;
use crate::fault::{Fault, FaultScope, Faults, UnscopableFault};
use crate::guard::ExpectationGuard;
use crate::tool::{erase, ToolContext, ToolFailure, Tools};
use crate::verify::{ConnRecord, JobRecord, VerifyError};

/// An in-process ARCP runtime on a loopback WebSocket, for tests.
///
/// Start one with [`MockRuntime::builder`], point the code under test at
/// [`ws_url`](Self::ws_url), then assert on what happened: execution counts,
/// the frames the client sent, expectations. Dropping it shuts everything
/// down (listener, connections, running tools) and checks the expectations.
///
/// A complete round trip, with a raw WebSocket client and the `arcp-types`
/// codec standing in for the client under test: the first attempt loses its
/// connection right after `job.accepted`; the retry (same key, same payload,
/// fresh envelope id) gets the stored result replayed, and the tool ran once.
///
/// ```
/// use std::time::Duration;
///
/// use arcp_mock::{Fault, MockRuntime};
/// use arcp_types::{Auth, Dialect, Frame, Invoke, Message, Open, PeerInfo};
/// use futures_util::{SinkExt, StreamExt};
/// use serde_json::json;
/// use tokio_tungstenite::tungstenite::Message as Ws;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mock = MockRuntime::builder()
///     .dialect(Dialect::V1_1)
///     .tool("refund", |args, _ctx| async move { Ok(json!({"refunded": args["order"]})) })
///     .start()
///     .await?;
/// mock.expect_executions("refund", 1);
/// mock.inject(Fault::DropAfterAccepted);
///
/// let submit = Frame::new(Message::Invoke(
///     Invoke::new("refund", json!({"order": 4812})).with_idempotency_key("refund-4812"),
/// ));
/// let hello = Frame::new(Message::Open(Open::new(PeerInfo::default(), Auth::none())));
/// let mut outcome = None;
/// while outcome.is_none() {
///     let (mut ws, _) = tokio_tungstenite::connect_async(mock.ws_url()).await?;
///     ws.send(Ws::text(Dialect::V1_1.encode(&hello))).await?;
///     let mut attempt = submit.clone();
///     attempt.envelope.id = arcp_types::new_message_id();
///     ws.send(Ws::text(Dialect::V1_1.encode(&attempt))).await?;
///     // Read until the result, the drop, or a short timeout (a replay of a
///     // job still running is `job.accepted` only: then try again).
///     let _ = tokio::time::timeout(Duration::from_millis(500), async {
///         while let Some(Ok(Ws::Text(text))) = ws.next().await {
///             if let Ok(Message::Result(r)) = Dialect::V1_1.decode(&text).map(|f| f.message) {
///                 outcome = r.result;
///                 return;
///             }
///         }
///     })
///     .await;
/// }
/// assert_eq!(outcome, Some(json!({"refunded": 4812})));
/// assert_eq!(mock.connections(), 2);
/// mock.verify(); // sent twice, executed once
/// # Ok(())
/// # }
/// ```
pub struct MockRuntime {
    engine: Arc<Engine>,
    addr: SocketAddr,
    accept: AbortHandle,
    http_addr: SocketAddr,
    http_accept: AbortHandle,
}

impl std::fmt::Debug for MockRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockRuntime")
            .field("addr", &self.addr)
            .field("dialect", &self.engine.cfg().dialect)
            .field("replay_policy", &self.engine.cfg().replay)
            .field("conflict_signal", &self.engine.cfg().conflict)
            .finish_non_exhaustive()
    }
}

impl MockRuntime {
    /// Binds both listeners and starts serving.
    pub(crate) async fn bind(
        addr: SocketAddr,
        config: Config,
        tools: Tools,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        // The HTTP binding listens on a second ephemeral port of the same host.
        let http_listener = TcpListener::bind(SocketAddr::new(addr.ip(), 0)).await?;
        let http_addr = http_listener.local_addr()?;
        let engine = Arc::new(Engine::new(config, tools));
        let accept = tokio::spawn(crate::ws::accept_loop(Arc::clone(&engine), listener));
        let http = tokio::spawn(crate::http::accept_loop(Arc::clone(&engine), http_listener));
        Ok(MockRuntime {
            engine,
            addr,
            accept: accept.abort_handle(),
            http_addr,
            http_accept: http.abort_handle(),
        })
    }

    /// `ws://127.0.0.1:PORT/arcp`. (Any path is served.)
    pub fn ws_url(&self) -> String {
        format!("ws://{}/arcp", self.addr)
    }

    /// The bound address.
    pub fn address(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT/arcp`: the same runtime over the HTTP binding
    /// (`docs/http-binding.md` in this package), on a second port. One `job.submit` per
    /// `POST`; 409 while the key's job runs, the stored terminal with
    /// `Arcp-Replayed: true` once it finished, 422 for the key with another
    /// intent. Tools, keys, execution counts, faults and [`received`](Self::received)
    /// are shared with the WebSocket side. (Any path is served.)
    pub fn http_url(&self) -> String {
        format!("http://{}/arcp", self.http_addr)
    }

    /// The HTTP binding's bound address.
    pub fn http_address(&self) -> SocketAddr {
        self.http_addr
    }

    /// Submits the HTTP binding has handled: each attempt of a call that got
    /// past HTTP parsing is one (malformed HTTP is not counted, nor are HTTP
    /// requests in [`connections`](Self::connections)).
    pub fn http_requests(&self) -> u64 {
        self.engine.http_requests()
    }

    /// The dialect spoken.
    pub fn dialect(&self) -> Dialect {
        self.engine.cfg().dialect
    }

    /// How many times `tool` has been executed (idempotent replays do not
    /// execute).
    pub fn executions(&self, tool: &str) -> u64 {
        self.engine.executions(tool)
    }

    /// How many executions had idempotency key `key` (any principal).
    pub fn executions_for_key(&self, key: &str) -> u64 {
        self.engine.executions_for_key(key)
    }

    /// Executions of all tools together.
    pub fn total_executions(&self) -> u64 {
        self.engine.total_executions()
    }

    /// Expects `tool` to have run exactly `times` times, checked by
    /// [`verify`](Self::verify) and on drop. Short for
    /// `expect(Expectation::tool(tool).times(times))`.
    pub fn expect_executions(&self, tool: &str, times: u64) {
        self.expect(Expectation::tool(tool).times(times));
    }

    /// Expects exactly `times` executions with idempotency key `key`.
    pub fn expect_executions_for_key(&self, key: &str, times: u64) {
        self.expect(Expectation::key(key).times(times));
    }

    /// Expects exactly `times` executions of all tools together.
    pub fn expect_total_executions(&self, times: u64) {
        self.expect(Expectation::total().times(times));
    }

    /// Registers an [`Expectation`], counting every execution since the
    /// runtime started (or since the last [`reset`](Self::reset)), checked
    /// by [`verify`](Self::verify) and when the mock is dropped. The report
    /// names it when it was [`named`](Expectation::named).
    ///
    /// ```
    /// # use arcp_mock::{Expectation, MockRuntime};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// let mock = MockRuntime::builder()
    ///     .tool("refund", |args, _ctx| async move { Ok(args) })
    ///     .start()
    ///     .await?;
    /// mock.expect(Expectation::tool("refund").times(..=1).named("a refund runs at most once"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn expect(&self, expectation: Expectation) {
        self.engine.expect(expectation, false);
    }

    /// Registers an [`Expectation`] that counts only executions from now
    /// until the returned guard is dropped; dropping the guard checks it
    /// (and panics with its report when it is unmet, unless the thread is
    /// already panicking) and unregisters it. Until then it is also
    /// checked by [`verify`](Self::verify) and when the mock is dropped. As
    /// wiremock's `mount_as_scoped`.
    ///
    /// ```
    /// # use arcp_mock::{Expectation, MockRuntime};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// let mock = MockRuntime::builder()
    ///     .tool("refund", |args, _ctx| async move { Ok(args) })
    ///     .start()
    ///     .await?;
    /// {
    ///     let guard = mock.expect_scoped(Expectation::tool("refund").times(0).named("phase one"));
    ///     // ... phase one of the test: no refund ...
    ///     assert_eq!(guard.executions(), 0);
    /// } // checked here
    /// # Ok(())
    /// # }
    /// ```
    pub fn expect_scoped(&self, expectation: Expectation) -> ExpectationGuard {
        let name = expectation.name().map(str::to_owned);
        let id = self.engine.expect(expectation, true);
        ExpectationGuard::new(Arc::clone(&self.engine), id, name)
    }

    /// Registers a tool on the running runtime (or replaces the one of that
    /// name): submits from now on find it. Jobs already running keep the
    /// closure they started with. The v1.1 welcome of later sessions lists
    /// it among the agents.
    pub fn add_tool<F, Fut>(&self, name: impl Into<String>, tool: F)
    where
        F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolFailure>> + Send + 'static,
    {
        self.engine.add_tool(name.into(), erase(tool));
    }

    /// Starts the test over on the same runtime, as wiremock's
    /// `MockServer::reset`: the execution counts ([`executions`](Self::executions)
    /// and friends) go back to zero, every expectation (scoped ones
    /// included: their guards then check nothing) and every fault is
    /// removed, a black hole ends, and [`received`](Self::received) is
    /// emptied.
    ///
    /// The runtime's own state stays: tools, sessions, connections, jobs
    /// (with their per-job counts in [`jobs`](Self::jobs)), the
    /// [`connection_log`](Self::connection_log), and the idempotency keys
    /// already bound, so a retry of a call made before the reset is still
    /// answered as a replay and does not run again.
    pub fn reset(&self) {
        self.engine.reset();
    }

    /// Checks the expectations.
    ///
    /// # Errors
    ///
    /// A [`VerifyError`] listing every unmet expectation, expected vs actual.
    pub fn try_verify(&self) -> Result<(), VerifyError> {
        self.engine.verify()
    }

    /// Checks the expectations.
    ///
    /// # Panics
    ///
    /// With a readable list of every unmet expectation, expected vs actual.
    pub fn verify(&self) {
        if let Err(e) = self.try_verify() {
            panic!("{e}");
        }
    }

    /// Queues a one-shot fault (FIFO). [`Fault::BlackHole`] and
    /// [`Fault::Recover`] take effect at once.
    pub fn inject(&self, fault: Fault) {
        match fault {
            Fault::BlackHole => self.engine.set_blackhole(true),
            Fault::Recover => self.engine.set_blackhole(false),
            fault => self.engine.push_fault(fault, None, false),
        }
    }

    /// Applies a fault to every matching event until
    /// [`clear_faults`](Self::clear_faults).
    pub fn inject_always(&self, fault: Fault) {
        match fault {
            Fault::BlackHole => self.engine.set_blackhole(true),
            Fault::Recover => self.engine.set_blackhole(false),
            fault => self.engine.push_fault(fault, None, true),
        }
    }

    /// Queues a one-shot fault that only calls in `scope` trigger: the
    /// next call of that tool (or with that key) consumes it, other calls
    /// pass untouched. Scoped and unscoped one-shot faults share one FIFO.
    ///
    /// ```
    /// # use arcp_mock::{Fault, FaultScope, MockRuntime};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let mock = MockRuntime::builder()
    ///     .tool("refund", |args, _ctx| async move { Ok(args) })
    ///     .tool("lookup", |args, _ctx| async move { Ok(args) })
    ///     .start()
    ///     .await?;
    /// // Lookups go through; the first refund loses its answer.
    /// mock.inject_for(FaultScope::tool("refund"), Fault::DropBeforeTerminal)?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`UnscopableFault`] for a fault that concerns a connection or every
    /// frame rather than one call (`DropAfterFrames`, `DropDuringHandshake`,
    /// `DelayReplies`, `BlackHole`, `Recover`, `RefuseUpgrade`); nothing is
    /// injected.
    pub fn inject_for(&self, scope: FaultScope, fault: Fault) -> Result<(), UnscopableFault> {
        Faults::scopable(&fault, &scope)?;
        self.engine.push_fault(fault, Some(scope), false);
        Ok(())
    }

    /// Applies a fault to every call in `scope` until
    /// [`clear_faults`](Self::clear_faults).
    ///
    /// # Errors
    ///
    /// As [`inject_for`](Self::inject_for).
    pub fn inject_always_for(
        &self,
        scope: FaultScope,
        fault: Fault,
    ) -> Result<(), UnscopableFault> {
        Faults::scopable(&fault, &scope)?;
        self.engine.push_fault(fault, Some(scope), true);
        Ok(())
    }

    /// Removes every queued and standing fault and ends a black hole.
    pub fn clear_faults(&self) {
        self.engine.clear_faults();
        self.engine.set_blackhole(false);
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.engine.counts().0
    }

    /// Connections currently open.
    pub fn live_connections(&self) -> u64 {
        self.engine.counts().1
    }

    /// Drops every open connection now, abruptly (no close frame). Sessions
    /// and jobs survive.
    pub fn kill_connections(&self) {
        self.engine.kill_all();
    }

    /// Every envelope clients sent, oldest first (the last 10 000).
    pub fn received(&self) -> Vec<Envelope> {
        self.engine.received()
    }

    /// Ground truth about every job, oldest first: its key, tool,
    /// arguments and principal, how many times its tool really ran, its
    /// status, and whether its terminal was ever delivered. Queryable during
    /// and after a run. Finished jobs are kept up to the last 10 000.
    ///
    /// To check that a key bound to another intent never ran that intent,
    /// look up the key's job here: its `arguments` are the first
    /// submission's.
    pub fn jobs(&self) -> Vec<JobRecord> {
        self.engine.jobs()
    }

    /// Executions per idempotency key (any principal), for every key seen
    /// (up to 100 000 distinct keys).
    pub fn executions_by_key(&self) -> HashMap<String, u64> {
        self.engine.executions_by_key()
    }

    /// What each connection received and sent, in accept order: WebSocket
    /// connections and HTTP binding requests. Bounded: the last 10 000
    /// envelopes per connection and direction, the last 1 024 connections,
    /// and 200 000 envelopes in all (the oldest connections are forgotten
    /// first).
    pub fn connection_log(&self) -> Vec<ConnRecord> {
        self.engine.connection_log()
    }
}

impl Drop for MockRuntime {
    fn drop(&mut self) {
        self.accept.abort();
        self.http_accept.abort();
        self.engine.shutdown();
        if !std::thread::panicking() {
            if let Err(e) = self.try_verify() {
                panic!("{e}");
            }
        }
    }
}
