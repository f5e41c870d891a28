//! One attempt's passage to the wire: a request's body is released to its
//! connection once, and only if the call has not ended first.
//!
//! Whether an attempt may have reached the runtime is decided where the
//! body is handed over, not where the request is queued: hyper asks for a
//! body only while writing its request on a connection, and a runtime
//! cannot run a call it has no body for. So a call that ends (its deadline,
//! a close, its caller gone) while its attempt still waits for a connection
//! sent nothing, and says so. The two sides meet in one atomic word:
//!
//! ```text
//!   connection task: open()  sets RELEASED; refuses if CUT was set first
//!   the call's end:  cut()   sets CUT; says whether RELEASED was set first
//! ```
//!
//! Opening also marks the call sent for the client's own deadline path
//! (`CallShared::mark_sent`), which refuses it once the caller abandoned.

use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

use crate::request::CallShared;

const RELEASED: u8 = 1;
const CUT: u8 = 2;

/// The gate of one attempt (see the module).
#[derive(Debug)]
pub(crate) struct AttemptGate {
    marks: AtomicU8,
    shared: Arc<CallShared>,
}

impl AttemptGate {
    /// A closed gate for a new attempt of the call `shared` describes.
    pub(crate) fn new(shared: Arc<CallShared>) -> Arc<Self> {
        Arc::new(AttemptGate {
            marks: AtomicU8::new(0),
            shared,
        })
    }

    /// The connection asks for the body: whether it may go. (A body the
    /// caller's abandonment withholds still counts as released for `cut`:
    /// that errs towards "may have run".)
    fn open(&self) -> bool {
        self.marks.fetch_or(RELEASED, Ordering::AcqRel) & CUT == 0 && self.shared.mark_sent()
    }

    /// The call ends while this attempt is out: whether its body was
    /// released (the request may have reached the runtime). After this,
    /// it never is.
    pub(crate) fn cut(&self) -> bool {
        self.marks.fetch_or(CUT, Ordering::AcqRel) & RELEASED != 0
    }
}

/// A request body released through an [`AttemptGate`].
#[derive(Debug)]
pub(crate) struct GatedBody {
    bytes: Option<Bytes>,
    gate: Arc<AttemptGate>,
}

impl GatedBody {
    /// `bytes`, released through `gate`.
    pub(crate) fn new(bytes: Bytes, gate: Arc<AttemptGate>) -> Self {
        GatedBody {
            bytes: Some(bytes),
            gate,
        }
    }
}

/// Why a body was withheld.
#[derive(Debug)]
pub(crate) struct Withheld;

impl std::fmt::Display for Withheld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the call ended before its request was sent")
    }
}

impl std::error::Error for Withheld {}

impl Body for GatedBody {
    type Data = Bytes;
    type Error = Withheld;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Withheld>>> {
        let Some(bytes) = self.bytes.take() else {
            return Poll::Ready(None);
        };
        if self.gate.open() {
            Poll::Ready(Some(Ok(Frame::data(bytes))))
        } else {
            Poll::Ready(Some(Err(Withheld)))
        }
    }

    fn is_end_stream(&self) -> bool {
        self.bytes.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.bytes.as_ref().map_or(0, |b| b.len() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_before_the_release_withholds_the_body() {
        let shared = Arc::new(CallShared::default());
        let gate = AttemptGate::new(shared.clone());
        assert!(!gate.cut(), "nothing was released");
        assert!(!gate.open(), "a cut attempt is never released");
        assert!(!shared.abandon(), "the call was never marked sent");
    }

    #[test]
    fn a_release_before_the_cut_is_reported() {
        let shared = Arc::new(CallShared::default());
        let gate = AttemptGate::new(shared.clone());
        assert!(gate.open());
        assert!(gate.cut(), "the request may have reached the runtime");
        assert!(shared.abandon(), "the call is marked sent");
    }

    #[test]
    fn an_abandoned_call_is_not_released() {
        let shared = Arc::new(CallShared::default());
        let gate = AttemptGate::new(shared.clone());
        assert!(!shared.abandon());
        assert!(
            !gate.open(),
            "the client's deadline path said nothing was sent"
        );
    }
}
