//! What happens to a client's connection ([`ConnectionEvent`]), and a
//! listener's bounded stream of it ([`ConnectionEvents`], `Client::events`).
//!
//! A leaf: imports no other module of the crate.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::broadcast;

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
