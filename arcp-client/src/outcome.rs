//! What a call ends with, and what it reports on the way: the successful
//! output, job events, and the outcome of a cancel request.
//!
//! A leaf: imports no other module of the crate.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use arcp_types::{EventBody, IdempotencyKey, JobEvent};
use serde_json::Value;
use tokio::sync::broadcast;

/// The successful outcome of a call: the tool's result (`T`: a JSON
/// [`Value`] for [`Client::invoke_tool`](crate::Client::invoke_tool), the
/// type asked for in a typed call such as
/// [`Client::invoke_as`](crate::Client::invoke_as)) and how it was obtained.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolOutput<T = Value> {
    /// The tool's result.
    pub value: T,
    /// The job the runtime bound the call to, when it said.
    pub job_id: Option<String>,
    /// The call's idempotency key.
    pub key: IdempotencyKey,
    /// Whether the runtime's answer shows it was a stored outcome (see
    /// [`ToolError::replayed`](crate::ToolError::replayed) for the rule), or
    /// it was answered from the client's outcome cache or journal.
    pub replayed: bool,
    /// How many times the request was sent (1 when nothing went wrong).
    pub attempts: u32,
    /// The W3C trace id shared by every attempt of the call.
    pub trace_id: String,
}

impl<T> ToolOutput<T> {
    /// The same outcome with its result mapped by `f` (key, job id,
    /// attempts, replay flag and trace id unchanged).
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> ToolOutput<U> {
        ToolOutput {
            value: f(self.value),
            job_id: self.job_id,
            key: self.key,
            replayed: self.replayed,
            attempts: self.attempts,
            trace_id: self.trace_id,
        }
    }
}

/// A non-terminal event of a call's job (progress, log, metric, result chunk, ...).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct InvocationEvent {
    /// The session-scoped sequence number, when the runtime sent one.
    pub event_seq: Option<u64>,
    /// The event as received.
    pub event: JobEvent,
}

impl InvocationEvent {
    /// The body typed by kind.
    pub fn typed(&self) -> EventBody {
        self.event.typed()
    }
}

/// What became of a cancel request. Dispatch and acknowledgement are
/// reported separately: a cancel that was sent is not a cancel that happened.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelOutcome {
    /// Nothing was written to a connection (for example the call is not
    /// accepted yet, so there is no job to cancel, or no connection was up
    /// within the cancel timeout).
    NotDispatched {
        /// Why.
        reason: String,
    },
    /// The cancel was written to the connection but the runtime did not
    /// confirm it within the cancel timeout. While the call is live, a
    /// cancel lost with its connection is re-sent on the next one.
    Dispatched,
    /// The runtime confirmed the cancel (or the job ended cancelled).
    Acknowledged,
    /// The runtime refused the cancel.
    Refused {
        /// The runtime's reason.
        reason: String,
    },
    /// The call had already ended; its outcome stands.
    AlreadyFinished,
}

impl CancelOutcome {
    /// Whether a cancel request reached the wire.
    pub fn is_dispatched(&self) -> bool {
        matches!(
            self,
            CancelOutcome::Dispatched | CancelOutcome::Acknowledged | CancelOutcome::Refused { .. }
        )
    }

    /// Whether the runtime confirmed the cancellation.
    pub fn is_acknowledged(&self) -> bool {
        matches!(self, CancelOutcome::Acknowledged)
    }
}

/// A snapshot of what a client holds, from [`Client::stats`](crate::Client::stats):
/// everything here belongs to calls still in flight, or is bounded (the
/// outcome cache), so after all calls ended the first three are zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientStats {
    /// Logical calls the connection holds (queued, sent or accepted).
    pub calls: usize,
    /// Requests on the connection awaiting an answer (submits, cancels,
    /// subscribes).
    pub requests: usize,
    /// Timer entries, live and stale (stale ones are compacted away).
    pub timers: usize,
    /// Terminal outcomes cached by key (bounded by the cache's capacity).
    pub cached_outcomes: usize,
}

/// A change in a client's connection, from [`Client::events`](crate::Client::events).
/// Each carries the wall-clock time it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectionEvent {
    /// A session is established.
    Connected {
        /// When.
        at: std::time::SystemTime,
        /// The runtime's name and version, from its welcome.
        runtime: String,
        /// The runtime's version.
        version: String,
        /// The message set spoken.
        dialect: arcp_types::Dialect,
        /// The session's id.
        session_id: String,
        /// The previous session was resumed (else this one is new).
        resumed: bool,
    },
    /// The connection ended.
    Disconnected {
        /// When.
        at: std::time::SystemTime,
        /// Why, in words.
        reason: String,
    },
    /// The client dials again after this delay (`attempt` counts the
    /// dials since the last session).
    Reconnecting {
        /// When.
        at: std::time::SystemTime,
        /// Dials since the last established session, this one included.
        attempt: u32,
        /// The pause before this dial.
        delay: std::time::Duration,
    },
    /// The runtime refused to resume the session; a new one was opened
    /// (calls accepted on the old one are recovered by key).
    ResumeRefused {
        /// When.
        at: std::time::SystemTime,
        /// The runtime's reason.
        reason: String,
    },
    /// This listener fell behind and missed `missed` events.
    SlowConsumer {
        /// When the listener noticed.
        at: std::time::SystemTime,
        /// Events dropped for this listener.
        missed: u64,
    },
}

/// A listener's stream of [`ConnectionEvent`]s, from
/// [`Client::events`](crate::Client::events). Bounded: a listener that falls
/// behind gets [`ConnectionEvent::SlowConsumer`] instead of the events it
/// missed, and the client never waits for it.
///
/// Read it with [`next`](ConnectionEvents::next), or as a
/// [`Stream`](futures_util::Stream) (for example with
/// `futures_util::StreamExt`); it ends once the client is gone.
pub struct ConnectionEvents {
    state: Listen,
}

type Received = (
    Result<ConnectionEvent, broadcast::error::RecvError>,
    broadcast::Receiver<ConnectionEvent>,
);

/// Where the listener is: between events (holding the receiver), waiting
/// for one (the wait owns the receiver and gives it back), or ended.
enum Listen {
    Idle(broadcast::Receiver<ConnectionEvent>),
    Waiting(Pin<Box<dyn Future<Output = Received> + Send + Sync>>),
    Ended,
}

impl ConnectionEvents {
    pub(crate) fn new(rx: broadcast::Receiver<ConnectionEvent>) -> Self {
        ConnectionEvents {
            state: Listen::Idle(rx),
        }
    }

    /// The next event; `None` once the client is gone.
    pub async fn next(&mut self) -> Option<ConnectionEvent> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }

    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<ConnectionEvent>> {
        use broadcast::error::RecvError;
        loop {
            match std::mem::replace(&mut self.state, Listen::Ended) {
                Listen::Ended => return Poll::Ready(None),
                Listen::Idle(mut rx) => {
                    self.state = Listen::Waiting(Box::pin(async move {
                        let received = rx.recv().await;
                        (received, rx)
                    }));
                }
                Listen::Waiting(mut wait) => {
                    let Poll::Ready((received, rx)) = wait.as_mut().poll(cx) else {
                        self.state = Listen::Waiting(wait);
                        return Poll::Pending;
                    };
                    return Poll::Ready(match received {
                        Ok(event) => {
                            self.state = Listen::Idle(rx);
                            Some(event)
                        }
                        Err(RecvError::Lagged(missed)) => {
                            self.state = Listen::Idle(rx);
                            Some(ConnectionEvent::SlowConsumer {
                                at: std::time::SystemTime::now(),
                                missed,
                            })
                        }
                        Err(RecvError::Closed) => None,
                    });
                }
            }
        }
    }
}

impl futures_util::Stream for ConnectionEvents {
    type Item = ConnectionEvent;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_event(cx)
    }
}

impl std::fmt::Debug for ConnectionEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state {
            Listen::Idle(_) => "idle",
            Listen::Waiting(_) => "waiting",
            Listen::Ended => "ended",
        };
        f.debug_struct("ConnectionEvents")
            .field("state", &state)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use std::time::SystemTime;

    fn reconnecting(attempt: u32) -> ConnectionEvent {
        ConnectionEvent::Reconnecting {
            at: SystemTime::UNIX_EPOCH,
            attempt,
            delay: std::time::Duration::from_millis(10),
        }
    }

    #[tokio::test]
    async fn connection_events_are_a_stream_that_reports_lag_and_ends() {
        let (tx, rx) = broadcast::channel(2);
        let mut events = ConnectionEvents::new(rx);
        tx.send(reconnecting(1)).unwrap();
        assert_eq!(StreamExt::next(&mut events).await, Some(reconnecting(1)));
        // Three more into a buffer of two: the oldest is lost, and said so.
        for attempt in 2..=4 {
            tx.send(reconnecting(attempt)).unwrap();
        }
        match StreamExt::next(&mut events).await {
            Some(ConnectionEvent::SlowConsumer { missed, .. }) => assert_eq!(missed, 1),
            other => panic!("expected a slow-consumer notice, got {other:?}"),
        }
        assert_eq!(events.next().await, Some(reconnecting(3)));
        assert_eq!(StreamExt::next(&mut events).await, Some(reconnecting(4)));
        // A wait in progress survives being polled and dropped half-way.
        let pending = futures_util::FutureExt::now_or_never(StreamExt::next(&mut events));
        assert_eq!(pending, None, "nothing was sent yet");
        tx.send(reconnecting(5)).unwrap();
        assert_eq!(events.next().await, Some(reconnecting(5)));
        drop(tx);
        assert_eq!(StreamExt::next(&mut events).await, None);
        assert_eq!(events.next().await, None);
    }
}
