//! [`ArtifactRef`]: what a runtime says about content it stores outside the
//! message stream (where it is, its size, its sha256, its media type),
//! read from either dialect's spelling, and the sha256 it promises.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::http::display_uri;

/// A reference to content stored outside the message stream: the body of a
/// v1.1 `artifact_ref` job event (`{uri, content_type, byte_size?,
/// sha256?}`), a `result_ref`, or a legacy `artifact.ref` (`{uri,
/// media_type, size, sha256}`). Both spellings are read; unknown fields are
/// ignored.
///
/// ```
/// use arcp_sdk::ArtifactRef;
/// use serde_json::json;
///
/// let output = json!({"result_ref": {
///     "uri": "https://store.example/a/1",
///     "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
///     "byte_size": 4,
///     "content_type": "text/plain"
/// }});
/// let r = ArtifactRef::from_value(&output).expect("a reference");
/// assert_eq!(r.size, Some(4));
/// assert_eq!(r.media_type.as_deref(), Some("text/plain"));
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub struct ArtifactRef {
    /// Where the content is (`http://` or `https://` to be fetchable).
    #[serde(alias = "url")]
    pub uri: String,
    /// The SHA-256 of the content, hex (an optional `sha256:` prefix is
    /// accepted). When present, fetched bytes must match it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The size in bytes (also read from `byte_size`). When present, fetched
    /// bytes must have exactly this length.
    #[serde(
        default,
        alias = "byte_size",
        alias = "size_bytes",
        skip_serializing_if = "Option::is_none"
    )]
    pub size: Option<u64>,
    /// The media type (also read from `content_type`), sent as `Accept`.
    #[serde(
        default,
        alias = "content_type",
        alias = "mime_type",
        skip_serializing_if = "Option::is_none"
    )]
    pub media_type: Option<String>,
}

impl fmt::Debug for ArtifactRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArtifactRef")
            .field("uri", &display_uri(&self.uri))
            .field("sha256", &self.sha256)
            .field("size", &self.size)
            .field("media_type", &self.media_type)
            .finish()
    }
}

impl ArtifactRef {
    /// A reference with only a URI (nothing to verify but the size limit).
    pub fn new(uri: impl Into<String>) -> Self {
        ArtifactRef {
            uri: uri.into(),
            sha256: None,
            size: None,
            media_type: None,
        }
    }

    /// Requires the content to have this SHA-256 (hex).
    pub fn with_sha256(mut self, hex: impl Into<String>) -> Self {
        self.sha256 = Some(hex.into());
        self
    }

    /// Requires the content to be exactly this many bytes.
    pub fn with_size(mut self, bytes: u64) -> Self {
        self.size = Some(bytes);
        self
    }

    /// Sets the expected media type.
    pub fn with_media_type(mut self, media_type: impl Into<String>) -> Self {
        self.media_type = Some(media_type.into());
        self
    }

    /// Reads a reference out of a JSON value: its `result_ref` or
    /// `artifact_ref` field (for example [`crate::ToolOutput::value`] of a
    /// result delivered by reference), else the value itself (an
    /// `artifact_ref` event body). `None` when there is no object with a
    /// string `uri`.
    pub fn from_value(value: &Value) -> Option<ArtifactRef> {
        ["result_ref", "artifact_ref"]
            .iter()
            .filter_map(|field| value.get(field))
            .chain(std::iter::once(value))
            .find_map(|v| ArtifactRef::deserialize(v).ok())
    }
}

/// 64 hex digits, optionally prefixed `sha256:`.
pub(super) fn parse_sha256(text: &str) -> Option<[u8; 32]> {
    let text = text.trim();
    let hex = text
        .get(..7)
        .filter(|p| p.eq_ignore_ascii_case("sha256:"))
        .map_or(text, |_| &text[7..]);
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
        let digit = |b: u8| (b as char).to_digit(16);
        out[i] = u8::try_from(digit(pair[0])? * 16 + digit(pair[1])?).ok()?;
    }
    Some(out)
}

/// Lower-case hex of a digest.
pub(super) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sha256_parses_with_or_without_prefix() {
        let h = "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08";
        let parsed = parse_sha256(h).unwrap();
        assert_eq!(hex(&parsed), h.to_ascii_lowercase());
        assert_eq!(parse_sha256(&format!("sha256:{h}")), Some(parsed));
        assert_eq!(parse_sha256("abc"), None);
        assert_eq!(parse_sha256(&"zz".repeat(32)), None);
        assert_eq!(parse_sha256(&"é".repeat(32)), None);
    }

    #[test]
    fn references_read_both_spellings() {
        let v11 = json!({"kind": "ignored", "uri": "https://a/b", "byte_size": 3, "content_type": "text/plain"});
        let r = ArtifactRef::from_value(&v11).unwrap();
        assert_eq!(
            r,
            ArtifactRef::new("https://a/b")
                .with_size(3)
                .with_media_type("text/plain")
        );
        let legacy = json!({"artifact_ref": {"artifact_id": "art_1", "uri": "https://a/c", "size": 4, "media_type": "x/y", "sha256": "00"}});
        let r = ArtifactRef::from_value(&legacy).unwrap();
        assert_eq!(r.uri, "https://a/c");
        assert_eq!(r.sha256.as_deref(), Some("00"));
        assert!(ArtifactRef::from_value(&json!({"result": 1})).is_none());
        assert!(ArtifactRef::from_value(&json!({"uri": 5})).is_none());
    }

    #[test]
    fn debug_hides_presigned_queries() {
        let r = ArtifactRef::new("https://s/a?sig=secret");
        assert!(!format!("{r:?}").contains("secret"));
    }
}
