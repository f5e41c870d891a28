//! How calls reach the runtime: the WebSocket driver (through its command
//! channel) or the HTTP binding (on the caller's task). One interface for
//! the client: invoke, cancel, abandon, close.

use std::sync::{Arc, OnceLock};

use arcp_types::{Dialect, IdempotencyKey};
use tokio::sync::{mpsc, oneshot};

use crate::cache::Outcome;
use crate::error::Error;
#[cfg(feature = "http")]
use crate::http::HttpBackend;
use crate::outcome::{CancelOutcome, ClientStats};
use crate::request::{CallRequest, CallShared};
use crate::ws::{Command, PreparedCall};

/// A client's transport.
pub(crate) enum Backend {
    /// The WebSocket driver, over a bounded command channel; callers
    /// encode their requests for `dialect` once it is known.
    Ws {
        tx: mpsc::Sender<Command>,
        dialect: Arc<OnceLock<Dialect>>,
    },
    /// The HTTP binding: calls run on the caller's task.
    #[cfg(feature = "http")]
    Http(Arc<HttpBackend>),
}

impl Backend {
    /// Runs one call to its outcome.
    pub(crate) async fn invoke(&self, mut request: Box<CallRequest>) -> Outcome {
        let shared = request.shared.clone();
        match self {
            #[cfg(feature = "http")]
            Backend::Http(http) => {
                shared
                    .dispatched
                    .store(true, std::sync::atomic::Ordering::Release);
                // Boxed: the HTTP attempt loop is large, and inlining it
                // would size every call's future for it.
                Box::pin(http.invoke(*request)).await
            }
            Backend::Ws { tx, dialect } => {
                let key = request.key.clone();
                // The connection task serves every call: what needs no
                // connection is done here, on the caller's task.
                request.seal();
                request.prepared = Some(PreparedCall::new(&mut request, dialect.get().copied()));
                // A result carries the trace id of the caller that awaits it,
                // whether its own attempts, a joined call or the cache
                // answered: the connection task leaves it to be set here.
                let trace_id = std::mem::take(&mut request.trace_id);
                let (reply, rx) = oneshot::channel();
                tx.send(Command::Invoke(request, reply))
                    .await
                    .map_err(|_| Error::Closed)?;
                shared
                    .dispatched
                    .store(true, std::sync::atomic::Ordering::Release);
                // A dropped reply means the connection task is gone. If a
                // request went out, the call may have run: say so.
                let outcome = rx.await.unwrap_or_else(|_| {
                    Err(if shared.abandon() {
                        Error::Interrupted {
                            key,
                            job_id: shared.job_id(),
                            attempts: shared.attempts(),
                        }
                    } else {
                        Error::Closed
                    })
                });
                outcome.map(|mut out| {
                    out.trace_id = trace_id;
                    out
                })
            }
        }
    }

    /// Asks the runtime to cancel the job of the call with `key`.
    pub(crate) async fn cancel(
        &self,
        key: IdempotencyKey,
        shared: Arc<CallShared>,
    ) -> CancelOutcome {
        let closed = || CancelOutcome::NotDispatched {
            reason: "the client is closed".into(),
        };
        match self {
            #[cfg(feature = "http")]
            Backend::Http(_) => CancelOutcome::NotDispatched {
                reason: "the HTTP binding has no cancel message; nothing was sent \
                         (drop the call to stop waiting; the runtime finishes the job)"
                    .into(),
            },
            Backend::Ws { tx, .. } => {
                let (reply, rx) = oneshot::channel();
                if tx
                    .send(Command::Cancel { key, shared, reply })
                    .await
                    .is_err()
                {
                    return closed();
                }
                rx.await.unwrap_or_else(|_| closed())
            }
        }
    }

    /// Tells the transport that the caller behind `shared` gave up, so it
    /// forgets the call when nobody else waits on it. Never blocks: if the
    /// channel is full, the call is forgotten at its own deadline instead.
    pub(crate) fn abandon(&self, key: IdempotencyKey, shared: Arc<CallShared>) {
        match self {
            Backend::Ws { tx, .. } => {
                let _ = tx.try_send(Command::Abandon { key, shared });
            }
            // Calls run on the caller's task: nothing to forget.
            #[cfg(feature = "http")]
            Backend::Http(_) => {}
        }
    }

    /// What the transport holds; the HTTP binding holds nothing between
    /// calls.
    pub(crate) async fn stats(&self) -> ClientStats {
        match self {
            #[cfg(feature = "http")]
            Backend::Http(_) => ClientStats::default(),
            Backend::Ws { tx, .. } => {
                let (reply, rx) = oneshot::channel();
                if tx.send(Command::Stats { reply }).await.is_err() {
                    return ClientStats::default();
                }
                rx.await.unwrap_or_default()
            }
        }
    }

    /// Closes the session; calls in flight end.
    pub(crate) async fn close(&self) {
        match self {
            #[cfg(feature = "http")]
            Backend::Http(http) => http.close(),
            Backend::Ws { tx, .. } => {
                let (reply, rx) = oneshot::channel();
                if tx.send(Command::Close { reply }).await.is_ok() {
                    let _ = rx.await;
                }
            }
        }
    }
}
