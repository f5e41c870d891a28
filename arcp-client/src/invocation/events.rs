//! A call's event stream, as its caller reads it: each event frees the
//! bytes it held in the call's bounded buffer.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::mpsc;

use crate::outcome::InvocationEvent;
use crate::request::EventBytes;

/// The event stream of one call. See [`Invocation::events`](crate::Invocation::events).
#[derive(Debug)]
pub struct Events {
    pub(super) rx: Option<mpsc::Receiver<InvocationEvent>>,
    /// The bytes buffered, which a received event frees.
    pub(super) held: Option<EventBytes>,
}

impl Events {
    /// The next event, or `None` once the call has ended.
    pub async fn next(&mut self) -> Option<InvocationEvent> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }

    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<InvocationEvent>> {
        let Some(rx) = &mut self.rx else {
            return Poll::Ready(None);
        };
        let polled = rx.poll_recv(cx);
        if let (Poll::Ready(Some(event)), Some(held)) = (&polled, &self.held) {
            held.received(event);
        }
        polled
    }
}

impl futures_util::Stream for Events {
    type Item = InvocationEvent;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.poll_event(cx)
    }
}
