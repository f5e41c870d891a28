//! [`Walk`]: one pass over a payload's text without serde, that reads the
//! fields a reader wants and skips the rest, checking as it goes that the
//! text is JSON of the plain kind (strings without escapes, nesting up to
//! 64 levels) and that the object is all of it. It declines (returns
//! `None`) anything else, valid or not: an escape, a number that might not
//! fit, deep nesting, another shape, text after the object. The readers
//! then ask serde, which reads the same text or reports why it cannot.
//!
//! So the walk needs no checked text: it checks what it walks, and a
//! payload it reads is known to be JSON without another pass
//! ([`Dialect::decode_with`](crate::Dialect::decode_with)).

use crate::json_escape::plain_string_at;
use crate::scan::{plain_value_end, Numbers};

/// A walk over a payload's text. Every method returns `None` to decline
/// (see the module docs); the walk is then abandoned.
pub(super) struct Walk<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
    /// Decline numbers with an exponent or many digits even where they are
    /// skipped (for a reader whose serde counterpart builds every value,
    /// and so can refuse one).
    strict: bool,
}

impl<'a> Walk<'a> {
    pub(super) fn new(text: &'a str, strict: bool) -> Self {
        Walk {
            text,
            bytes: text.as_bytes(),
            at: 0,
            strict,
        }
    }

    pub(super) fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    pub(super) fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.bytes.get(self.at).copied()
    }

    pub(super) fn eat(&mut self, want: u8) -> Option<()> {
        (self.peek()? == want).then(|| self.at += 1)
    }

    /// A string without escapes, borrowed.
    pub(super) fn plain_string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let (string, next) = plain_string_at(self.text, self.at)?;
        self.at = next;
        Some(string)
    }

    /// `null` (`Some(true)`) or not (`Some(false)`, nothing consumed).
    pub(super) fn null(&mut self) -> Option<bool> {
        if self.peek()? == b'n' {
            self.bytes[self.at..].starts_with(b"null").then_some(())?;
            self.at += 4;
            return Some(true);
        }
        Some(false)
    }

    /// Skips one value, checking it is JSON of the plain kind
    /// ([`plain_value_end`]: no escapes, bounded nesting), returning its
    /// text. `depth` is the nesting of the value's container.
    pub(super) fn skip(&mut self, depth: usize) -> Option<&'a str> {
        self.ws();
        let start = self.at;
        let numbers = if self.strict {
            Numbers::Small
        } else {
            Numbers::Any
        };
        self.at = plain_value_end(self.text, start, depth + 1, numbers)?;
        self.text.get(start..self.at)
    }

    /// The members of an object, each handed to `member` with its name,
    /// which must consume the value; then the end of the text.
    pub(super) fn object(
        &mut self,
        mut member: impl FnMut(&'a str, &mut Self) -> Option<()>,
    ) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.at += 1;
        } else {
            loop {
                let name = self.plain_string()?;
                self.eat(b':')?;
                member(name, self)?;
                match self.peek()? {
                    b',' => self.at += 1,
                    b'}' => {
                        self.at += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        self.ws();
        (self.at == self.bytes.len()).then_some(())
    }
}
