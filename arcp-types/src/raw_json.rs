//! [`RawJson`]: the text of one JSON value, borrowed from a frame and
//! known to be valid, for readers that look into a payload before (or
//! instead of) parsing it.

use serde_json::value::RawValue;

/// The text of one JSON value, borrowed from a received frame and known to
/// be valid JSON: checked once as the frame was read, so whoever takes it
/// can parse it (`serde_json::from_str(raw.get())`) or hand it on as it
/// is without checking it again.
///
/// Made by [`Dialect::decode_header`](crate::Dialect::decode_header) (a
/// frame's payload) and [`Dialect::plain_result_value`](crate::Dialect::plain_result_value)
/// (a result's value), or from serde's own [`RawValue`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawJson<'a>(&'a str);

impl<'a> RawJson<'a> {
    /// Text the crate checked to be one whole JSON value (a scan that
    /// validates, or a complete value inside checked JSON).
    pub(crate) fn checked(text: &'a str) -> Self {
        RawJson(text)
    }

    /// Text not checked yet, for a reader that checks every byte of what
    /// it reads before anything it read leaves the crate
    /// ([`Dialect::decode_with`](crate::Dialect::decode_with)): never
    /// handed out as it is.
    pub(crate) fn unchecked(text: &'a str) -> Self {
        RawJson(text)
    }

    /// The JSON text, exactly as received.
    pub fn get(self) -> &'a str {
        self.0
    }
}

impl<'a> From<&'a RawValue> for RawJson<'a> {
    fn from(raw: &'a RawValue) -> Self {
        RawJson(raw.get())
    }
}
