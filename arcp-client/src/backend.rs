//! How calls reach the runtime: the WebSocket driver (through its command
//! channel) or the HTTP binding (on the caller's task). One interface for
//! the client: invoke, cancel, abandon, close.

use std::sync::Arc;

use arcp_types::IdempotencyKey;
use tokio::sync::{mpsc, oneshot};

use crate::cache::Outcome;
use crate::error::Error;
#[cfg(feature = "http")]
use crate::http::HttpBackend;
use crate::outcome::{CancelOutcome, ClientStats};
use crate::request::{CallRequest, CallShared};
use crate::ws::Command;

/// A client's transport.
pub(crate) enum Backend {
    /// The WebSocket driver, over a bounded command channel.
    Ws { tx: mpsc::Sender<Command> },
    /// The HTTP binding: calls run on the caller's task.
    #[cfg(feature = "http")]
    Http(Arc<HttpBackend>),
}

impl Backend {
    /// Runs one call to its outcome.
    pub(crate) async fn invoke(&self, request: Box<CallRequest>) -> Outcome {
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
            Backend::Ws { tx } => {
                let key = request.key.clone();
                let (reply, rx) = oneshot::channel();
                tx.send(Command::Invoke(request, reply))
                    .await
                    .map_err(|_| Error::Closed)?;
                shared
                    .dispatched
                    .store(true, std::sync::atomic::Ordering::Release);
                // No reply means the connection task is gone. If a request
                // went out, the call may have run: say so.
                answer(tx, rx).await.unwrap_or_else(|| {
                    Err(if shared.abandon() {
                        Error::Interrupted {
                            key,
                            job_id: shared.job_id(),
                            attempts: shared.attempts(),
                        }
                    } else {
                        Error::Closed
                    })
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
            Backend::Ws { tx } => {
                let (reply, rx) = oneshot::channel();
                if tx
                    .send(Command::Cancel { key, shared, reply })
                    .await
                    .is_err()
                {
                    return closed();
                }
                answer(tx, rx).await.unwrap_or_else(closed)
            }
        }
    }

    /// Tells the transport that the caller behind `shared` gave up, so it
    /// forgets the call when nobody else waits on it. Never blocks: if the
    /// channel is full, the call is forgotten at its own deadline instead.
    pub(crate) fn abandon(&self, key: IdempotencyKey, shared: Arc<CallShared>) {
        match self {
            Backend::Ws { tx } => {
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
            Backend::Ws { tx } => {
                let (reply, rx) = oneshot::channel();
                if tx.send(Command::Stats { reply }).await.is_err() {
                    return ClientStats::default();
                }
                answer(tx, rx).await.unwrap_or_default()
            }
        }
    }

    /// Closes the session; calls in flight end.
    pub(crate) async fn close(&self) {
        match self {
            #[cfg(feature = "http")]
            Backend::Http(http) => http.close(),
            Backend::Ws { tx } => {
                let (reply, rx) = oneshot::channel();
                if tx.send(Command::Close { reply }).await.is_ok() {
                    answer(tx, rx).await;
                }
            }
        }
    }
}

/// The connection task's reply to a command, or `None` once the task is
/// gone. Waiting on the reply alone is not enough: a command sent in the
/// instant the task ends is never read, and its reply sender then stays in
/// the channel for as long as any sender lives, this one included.
async fn answer<T>(tx: &mpsc::Sender<Command>, reply: oneshot::Receiver<T>) -> Option<T> {
    tokio::select! {
        // A reply sent just before the task ended wins over the close.
        biased;
        answer = reply => answer.ok(),
        () = tx.closed() => None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The race behind a refused `connect()` that hung: the task stops
    /// reading (here: closes its end while still holding it) with a command
    /// queued and unanswered. Every request-reply command returns.
    #[tokio::test]
    async fn no_command_waits_for_a_task_that_ended() {
        let (tx, mut rx) = mpsc::channel(8);
        let backend = Arc::new(Backend::Ws { tx });
        let asking = {
            let backend = backend.clone();
            tokio::spawn(async move {
                let stats = backend.stats().await;
                backend.close().await;
                stats
            })
        };
        // The stats request is queued; the task ends without reading it.
        while rx.is_empty() {
            tokio::task::yield_now().await;
        }
        rx.close();
        let stats = tokio::time::timeout(Duration::from_secs(2), asking)
            .await
            .expect("a command waited for a task that had ended")
            .unwrap();
        assert_eq!(stats.calls, 0);
        drop(rx);
    }
}
