//! [`Walk`]: one pass over JSON already checked (a `RawJson`), without
//! serde, that skips what it does not read instead of parsing it again,
//! and declines (returns `None`) anything it would have to judge rather
//! than skip: an escape where it reads, a number that might not fit, deep
//! nesting, another shape. The readers then ask serde instead.

use crate::json_escape::{first_special, plain_string_at};

/// Nesting the walk follows; deeper payloads go to serde (whose own limit
/// is 128 levels).
const WALK_DEPTH: usize = 64;

/// A walk over JSON known to be valid. Every method returns `None` to
/// decline (see the module docs); the walk is then abandoned.
pub(super) struct Walk<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
    /// Decline strings with escapes and numbers with an exponent or many
    /// digits even where they are skipped (for a reader whose serde
    /// counterpart builds every value, and so can refuse one).
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
            self.at += 4;
            return Some(true);
        }
        Some(false)
    }

    /// Skips one value, returning its text.
    pub(super) fn skip(&mut self, depth: usize) -> Option<&'a str> {
        let first = self.peek()?;
        let start = self.at;
        match first {
            b'"' => {
                self.at += 1;
                loop {
                    let n = first_special(&self.bytes[self.at..])?;
                    self.at += n;
                    if self.bytes[self.at] == b'"' {
                        self.at += 1;
                        break;
                    }
                    // A backslash: it and the byte it escapes.
                    if self.strict {
                        return None;
                    }
                    self.at += 2;
                }
            }
            b'{' | b'[' => {
                if depth >= WALK_DEPTH {
                    return None;
                }
                let close = if first == b'{' { b'}' } else { b']' };
                self.at += 1;
                if self.peek()? == close {
                    self.at += 1;
                } else {
                    loop {
                        if first == b'{' {
                            self.skip(depth + 1)?;
                            self.eat(b':')?;
                        }
                        self.skip(depth + 1)?;
                        match self.peek()? {
                            b',' => self.at += 1,
                            b if b == close => {
                                self.at += 1;
                                break;
                            }
                            _ => return None,
                        }
                    }
                }
            }
            b't' => self.at += 4,
            b'f' => self.at += 5,
            b'n' => self.at += 4,
            _ => {
                let len = self.bytes[start..]
                    .iter()
                    .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                    .unwrap_or(self.bytes.len() - start);
                let number = &self.bytes[start..start + len];
                if len == 0
                    || (self.strict && (len > 40 || number.iter().any(|b| b | 0x20 == b'e')))
                {
                    return None;
                }
                self.at += len;
            }
        }
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
