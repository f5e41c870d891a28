//! The underlying cause of a connect or handshake error: part of the error
//! leaf.

use std::error::Error as StdError;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// What failed underneath an [`Error::Connect`](crate::Error::Connect) or
/// [`Error::Handshake`](crate::Error::Handshake): the I/O, TLS, WebSocket or
/// HTTP client error, or the timer that ran out.
///
/// It is what [`std::error::Error::source`] returns for those errors (the
/// cause itself, so `downcast_ref::<std::io::Error>()` or
/// `downcast_ref::<rustls::Error>()` works on it), and it derefs to the
/// cause. Cheap to clone, so that [`Error`](crate::Error) stays `Clone`.
#[derive(Clone)]
pub struct ErrorSource(Arc<dyn StdError + Send + Sync + 'static>);

// Deliberately not `std::error::Error` itself: `source()` then hands out
// the cause, not a wrapper around it that a downcast would not see through.
impl ErrorSource {
    /// Wraps `cause`.
    pub fn new(cause: impl StdError + Send + Sync + 'static) -> Self {
        ErrorSource(Arc::new(cause))
    }
}

impl Deref for ErrorSource {
    type Target = dyn StdError + Send + Sync + 'static;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl fmt::Debug for ErrorSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for ErrorSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}
