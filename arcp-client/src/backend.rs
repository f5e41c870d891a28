//! How calls reach the runtime: the WebSocket driver (through its command
//! channel) or the HTTP binding (on the caller's task). One interface for
//! the client: invoke, cancel, abandon, close.

use std::sync::{Arc, OnceLock};

use arcp_types::{Dialect, IdempotencyKey};
use tokio::sync::{mpsc, oneshot};

use crate::cache::{Outcome, Settled};
use crate::classify::{give_up, Ending};
use crate::deadline::Deadline;
use crate::error::Error;
#[cfg(feature = "http")]
use crate::http::HttpBackend;
use crate::outcome::CancelOutcome;
use crate::request::PreparedCall;
use crate::request::{CallRequest, CallShared};
use crate::stats::ClientStats;
use crate::ws::Command;

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
    /// Whether the transport joins the callers of one key itself, as soon
    /// as a call is handed to it: the connection task does; the HTTP
    /// binding runs each caller's attempts apart.
    pub(crate) fn joins_callers(&self) -> bool {
        matches!(self, Backend::Ws { .. })
    }

    /// Runs one call to its outcome.
    pub(crate) async fn invoke(&self, mut request: Box<CallRequest>) -> Outcome {
        let shared = request.shared.clone();
        if !shared.hand_over() {
            return Err(cancelled_before_sent(request.key.clone()));
        }
        if request.in_doubt {
            // An earlier process may have sent it: however this caller
            // stops waiting, it cannot claim "did not run".
            shared.mark_sent();
        }
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
                let trace_id = request.trace_id.clone();
                let (reply, rx) = oneshot::channel();
                // Waiting for room in the channel is rare (it holds as many
                // commands as calls may be in flight): that future is boxed,
                // so it takes no room in every call's state.
                let deadline = Deadline::new(request.started, request.deadline);
                // Nothing the command holds may live across an await in this
                // future (it would be sized for a whole request): the rare
                // wait for room is boxed with the command inside it.
                let waiting = match try_send(tx, request, reply) {
                    Ok(()) => None,
                    Err(mpsc::error::TrySendError::Full(command)) => {
                        // Bounded by the call's deadline: the caller may run
                        // no timer of its own (`Client::dispatch`).
                        let send = tokio::time::timeout_at(deadline.at().into(), tx.send(*command));
                        Some(Box::pin(send))
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => return Err(Error::Closed),
                };
                if let Some(waiting) = waiting {
                    match waiting.await {
                        Ok(sent) => sent.map_err(|_| Error::Closed)?,
                        Err(_) => {
                            let ended = shared.ended(shared.abandon());
                            return Err(deadline.exceeded_error(ended.of(&key)));
                        }
                    }
                }
                shared
                    .dispatched
                    .store(true, std::sync::atomic::Ordering::Release);
                // A dropped reply means the connection task is gone. If a
                // request went out, the call may have run: say so.
                let outcome = rx.await.map(Settled::into_outcome).unwrap_or_else(|_| {
                    let ended = shared.ended(shared.abandon());
                    Err(give_up(ended.of(&key), Ending::Closed))
                });
                outcome.map(|mut out| {
                    out.trace_id = trace_id.text();
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

/// Hands a call to the connection task if the channel has room. Not async,
/// and the request is unboxed only here: nothing of it can end up sized
/// into the caller's future.
fn try_send(
    tx: &mpsc::Sender<Command>,
    request: Box<CallRequest>,
    reply: oneshot::Sender<Settled>,
) -> Result<(), mpsc::error::TrySendError<Box<Command>>> {
    tx.try_send(Command::Invoke(*request, reply))
        .map_err(|e| match e {
            mpsc::error::TrySendError::Full(c) => mpsc::error::TrySendError::Full(Box::new(c)),
            mpsc::error::TrySendError::Closed(c) => mpsc::error::TrySendError::Closed(Box::new(c)),
        })
}

/// A call cancelled before it was handed to a transport: nothing was sent
/// for it.
pub(crate) fn cancelled_before_sent(key: IdempotencyKey) -> Error {
    Error::Cancelled {
        key,
        job_id: None,
        attempts: 0,
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use arcp_types::Invoke;

    use super::*;
    use crate::cache::PlainResult;
    use crate::request::{EventsEnd, TraceId};

    fn request(trace_id: &str) -> Box<CallRequest> {
        let shared = Arc::new(CallShared::default());
        Box::new(CallRequest {
            key: IdempotencyKey::new(),
            trace_id: TraceId::new(trace_id),
            invoke: Invoke::new("echo", serde_json::json!({"n": 1})),
            deadline: Duration::from_secs(5),
            started: Instant::now(),
            events_end: EventsEnd(shared.clone()),
            shared,
            recorder: None,
            in_doubt: false,
            prior_job: None,
            key_supplied: false,
            prepared: None,
            claim: None,
        })
    }

    /// A call that finds the command channel full waits for room instead of
    /// failing, is handed over prepared (encoded for the known dialect), and
    /// its result carries the caller's trace id (the task leaves it blank).
    #[tokio::test]
    async fn a_call_waits_for_room_and_gets_its_own_trace_id() {
        const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
        let (tx, mut rx) = mpsc::channel(1);
        let (stats, _) = oneshot::channel();
        tx.try_send(Command::Stats { reply: stats }).unwrap();
        let backend = Backend::Ws {
            tx,
            dialect: Arc::new(OnceLock::from(Dialect::Legacy)),
        };
        let call = tokio::spawn(async move { backend.invoke(request(TRACE)).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!call.is_finished(), "waiting for room, not failed");
        assert!(matches!(rx.recv().await, Some(Command::Stats { .. })));
        let Some(Command::Invoke(request, reply)) = rx.recv().await else {
            panic!("the call's command follows once there is room");
        };
        let prepared = request.prepared.expect("prepared by the caller");
        let encoded = prepared
            .outgoing
            .encoded()
            .expect("encoded on the caller's task");
        assert_eq!(encoded.dialect(), Dialect::Legacy);
        // The value as the connection task hands out a plain result's: text,
        // parsed by the caller.
        let _ = reply.send(Settled::Plain(PlainResult {
            value_text: r#"{"n":1}"#.into(),
            job_id: None,
            key: request.key.clone(),
            replayed: false,
            attempts: 1,
        }));
        let out = call.await.unwrap().unwrap();
        assert_eq!(out.trace_id, TRACE);
        assert_eq!(out.value, serde_json::json!({"n": 1}));
    }

    /// A connection task that is gone: the call is refused as closed, and
    /// nothing claims it may have run.
    #[tokio::test]
    async fn a_call_to_a_closed_channel_is_closed() {
        let (tx, rx) = mpsc::channel(1);
        drop(rx);
        let backend = Backend::Ws {
            tx,
            dialect: Arc::new(OnceLock::new()),
        };
        let err = backend
            .invoke(request("4bf92f3577b34da6a3ce929d0e0e4736"))
            .await;
        assert!(matches!(err, Err(Error::Closed)), "{err:?}");
    }
}
