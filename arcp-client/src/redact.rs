//! The one redaction path: every secret the client was given, removed
//! from any text a runtime, a server or a URL puts into an error, a log, an
//! event, a journal record or the CLI's output.
//!
//! A leaf: imports no other module of the crate.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};

/// What a secret is replaced with.
const MASK: &str = "<redacted>";

/// A query value shorter than this is not treated as a secret on its own
/// (`?v=1` would otherwise mask every `1`); the query is still never shown
/// whole (see [`shown_url`]).
const MIN_QUERY_SECRET: usize = 8;

/// Removes the client's secrets from text: the bearer token, a URL's
/// credentials (`user:password@`) and its query values (`?access_token=`),
/// each as written and percent-decoded.
///
/// Applied to whole text, before any truncation, so a secret cut in two
/// never leaks its first part. The client redacts every error message, log
/// line and event a runtime can put a string into; the `arcp` command line
/// uses the same redactor for its output.
///
/// ```
/// let r = arcp_sdk::Redactor::new(Some("s3cret-token"), "wss://h/arcp?access_token=q-secret-42");
/// assert_eq!(r.redact("bad token s3cret-token"), "bad token <redacted>");
/// assert_eq!(r.redact("q-secret-42 was refused"), "<redacted> was refused");
/// ```
#[derive(Clone, Default)]
pub struct Redactor {
    /// Longest first, so a secret inside another is not masked half way.
    secrets: Vec<String>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

impl Redactor {
    /// A redactor for a client that sends `token` to the runtime at `url`.
    pub fn new(token: Option<&str>, url: &str) -> Self {
        let mut r = Redactor::default();
        if let Some(token) = token {
            r.add(token);
        }
        r.add_url(url);
        r
    }

    /// Also removes `secret` (ignored when empty).
    pub fn with_secret(mut self, secret: impl Into<String>) -> Self {
        self.add(&secret.into());
        self
    }

    fn add(&mut self, secret: &str) {
        if secret.is_empty() {
            return;
        }
        // As written, and as it reads inside a JSON string.
        let mut forms = vec![secret.to_owned()];
        if let Ok(quoted) = serde_json::to_string(secret) {
            forms.push(quoted[1..quoted.len() - 1].to_owned());
        }
        for form in forms {
            if !self.secrets.contains(&form) {
                self.secrets.push(form);
            }
        }
        self.secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }

    /// A URL's user info (the password, or a user alone, which is then the
    /// credential) and its query values.
    fn add_url(&mut self, url: &str) {
        let Some((_, rest)) = url.split_once("://") else {
            return;
        };
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        if let Some((user_info, _)) = rest[..authority_end].rsplit_once('@') {
            match user_info.split_once(':') {
                Some((_, password)) => self.add_encoded(password),
                None => self.add_encoded(user_info),
            }
        }
        if let Some((_, query)) = rest.split_once('?') {
            let query = query.split('#').next().unwrap_or("");
            for pair in query.split('&') {
                let value = pair.split_once('=').map_or(pair, |(_, v)| v);
                if value.len() >= MIN_QUERY_SECRET {
                    self.add_encoded(value);
                }
            }
        }
    }

    fn add_encoded(&mut self, text: &str) {
        self.add(text);
        let decoded = percent_decoded(text);
        if decoded != text {
            self.add(&decoded);
        }
    }

    /// `text` with every secret replaced by `<redacted>`.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = Cow::Owned(out.replace(secret.as_str(), MASK));
            }
        }
        out
    }

    /// [`redact`](Self::redact) of an owned string, without a copy when it
    /// holds no secret.
    pub fn redact_owned(&self, text: String) -> String {
        match self.redact(&text) {
            Cow::Borrowed(_) => text,
            Cow::Owned(clean) => clean,
        }
    }

    /// Every string inside a JSON value (keys too) redacted in place.
    pub fn redact_json(&self, value: &mut serde_json::Value) {
        use serde_json::Value;
        match value {
            Value::String(s) => *s = self.redact_owned(std::mem::take(s)),
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_json(v)),
            Value::Object(map) => {
                let leaks = map.keys().any(|k| matches!(self.redact(k), Cow::Owned(_)));
                if leaks {
                    *map = std::mem::take(map)
                        .into_iter()
                        .map(|(k, v)| (self.redact_owned(k), v))
                        .collect();
                }
                map.values_mut().for_each(|v| self.redact_json(v));
            }
            _ => {}
        }
    }
}

/// How many of a token provider's most recent tokens a client keeps to
/// redact: the current one and those before it that a runtime may still
/// quote (a call's error, a close reason of an older connection).
const PROVIDED_TOKENS_KEPT: usize = 4;

/// The tokens a client's token provider handed out, most recent last, at
/// most [`PROVIDED_TOKENS_KEPT`] of them; shared by the client's tasks (the
/// connector notes each token, every redactor reads them).
#[derive(Clone, Default)]
pub(crate) struct ProvidedTokens(Arc<Mutex<VecDeque<String>>>);

impl fmt::Debug for ProvidedTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ProvidedTokens")
            .field(&self.held().len())
            .finish()
    }
}

impl ProvidedTokens {
    /// The provider handed out `token`.
    pub(crate) fn note(&self, token: &str) {
        if token.is_empty() {
            return;
        }
        let mut held = self.held();
        if held.back().is_some_and(|newest| newest == token) {
            return;
        }
        held.retain(|t| t != token);
        held.push_back(token.to_owned());
        while held.len() > PROVIDED_TOKENS_KEPT {
            held.pop_front();
        }
    }

    /// `redactor`, also removing every token kept here.
    pub(crate) fn added_to(&self, mut redactor: Redactor) -> Redactor {
        for token in self.held().iter() {
            redactor.add(token);
        }
        redactor
    }

    fn held(&self) -> std::sync::MutexGuard<'_, VecDeque<String>> {
        // A panic while holding it leaves a list that is still valid.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `url` fit for messages, `Debug` and records: without the user info a
/// URL may carry (`scheme://user:password@host/...`) and with its query
/// replaced (`?access_token=...` is a credential too).
pub(crate) fn shown_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let rest = match rest[..authority_end].rfind('@') {
        Some(at) => &rest[at + 1..],
        None => rest,
    };
    match rest.find(['?', '#']) {
        Some(cut) if rest[cut..].starts_with('?') => {
            format!("{scheme}://{}?{MASK}", &rest[..cut])
        }
        Some(cut) => format!("{scheme}://{}", &rest[..cut]),
        None => format!("{scheme}://{rest}"),
    }
}

/// `%XX` escapes decoded; invalid UTF-8 replaced.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&hi), Some(&lo)) if hex(hi).is_some() && hex(lo).is_some() => {
                out.push((hex(hi).unwrap_or(0) * 16 + hex(lo).unwrap_or(0)) as u8);
                i += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            (byte, _, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Terminal control characters (escape sequences, carriage returns, C1
/// controls) written as `\u{..}`, so runtime text printed to a terminal
/// cannot move the cursor, rewrite earlier lines or set the title. Newlines
/// and tabs are kept.
pub fn escape_control(text: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_and_url_secrets_are_masked() {
        let r = Redactor::new(
            Some("tok-123"),
            "wss://bob:pa%24%24word@h:1/arcp?access_token=query-secret&v=1#frag",
        );
        assert_eq!(r.redact("a tok-123 b"), "a <redacted> b");
        assert_eq!(r.redact("pw pa$$word"), "pw <redacted>");
        assert_eq!(r.redact("pw pa%24%24word"), "pw <redacted>");
        assert_eq!(r.redact("q query-secret"), "q <redacted>");
        // Short query values are not secrets on their own.
        assert_eq!(r.redact("v=1"), "v=1");
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
        let user_only = Redactor::new(None, "https://ghp_usertoken@h/arcp");
        assert_eq!(user_only.redact("ghp_usertoken!"), "<redacted>!");
        assert_eq!(Redactor::new(Some(""), "ws://h").redact("x"), "x");
    }

    #[test]
    fn a_secret_inside_another_is_masked_whole() {
        let r = Redactor::default()
            .with_secret("abc")
            .with_secret("xxabcxx");
        assert_eq!(r.redact("xxabcxx abc"), "<redacted> <redacted>");
    }

    #[test]
    fn a_secret_escaped_in_json_is_masked() {
        let r = Redactor::default().with_secret("a\"b\\c");
        assert_eq!(r.redact(r#"{"t":"a\"b\\c"}"#), r#"{"t":"<redacted>"}"#);
    }

    #[test]
    fn json_values_are_redacted_throughout() {
        let r = Redactor::default().with_secret("s3cret");
        let mut v = serde_json::json!({"s3cret": ["x s3cret", {"n": 1, "k": "s3cret"}]});
        r.redact_json(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"<redacted>": ["x <redacted>", {"n": 1, "k": "<redacted>"}]})
        );
    }

    #[test]
    fn a_shown_url_has_no_credentials_and_no_query() {
        assert_eq!(
            shown_url("wss://u:p@h:1/arcp?x=1"),
            "wss://h:1/arcp?<redacted>"
        );
        assert_eq!(shown_url("http://u@h/a@b"), "http://h/a@b");
        assert_eq!(shown_url("ws://h/arcp#f"), "ws://h/arcp");
        assert_eq!(shown_url("ws://h/arcp"), "ws://h/arcp");
        assert_eq!(shown_url("not a url"), "not a url");
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(
            escape_control("a\x1b[2Jb\rc\u{9b}d"),
            "a\\u{1b}[2Jb\\u{d}c\\u{9b}d"
        );
        assert_eq!(escape_control("line\n\tnext"), "line\n\tnext");
    }

    #[test]
    fn the_providers_recent_tokens_are_masked_and_bounded() {
        let provided = ProvidedTokens::default();
        for n in 0..6 {
            provided.note(&format!("provided-{n}-abcdef"));
        }
        provided.note("provided-5-abcdef");
        provided.note("");
        let r = provided.added_to(Redactor::new(Some("fixed-token"), "ws://h/arcp"));
        let text =
            "provided-0-abcdef provided-1-abcdef provided-2-abcdef provided-5-abcdef fixed-token";
        assert_eq!(
            r.redact(text),
            "provided-0-abcdef provided-1-abcdef <redacted> <redacted> <redacted>"
        );
        assert_eq!(provided.held().len(), PROVIDED_TOKENS_KEPT);
        // A clone shares the list: the connector's notes reach every redactor.
        let shared = provided.clone();
        shared.note("provided-6-abcdef");
        let r = provided.added_to(Redactor::default());
        assert_eq!(r.redact("provided-6-abcdef"), "<redacted>");
    }
}
