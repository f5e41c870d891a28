//! The HTTP upgrade: finds where the head ends, without buffering it, and
//! whether the response switched protocols.

/// An HTTP head longer than this is not an upgrade: the direction falls back
/// to raw forwarding.
pub(super) const MAX_HTTP_HEAD: usize = 64 * 1024;
/// Finds the end (`\r\n\r\n`) of an HTTP head without buffering it.
#[derive(Debug)]
pub(super) struct HttpScan {
    pub(super) response: bool,
    /// How much of `\r\n\r\n` has just been seen.
    pub(super) matched: u8,
    pub(super) seen: usize,
    pub(super) status: [u8; 12],
    pub(super) status_len: usize,
}

impl HttpScan {
    pub(super) fn new(response: bool) -> Self {
        HttpScan {
            response,
            matched: 0,
            seen: 0,
            status: [0; 12],
            status_len: 0,
        }
    }

    /// Feed one byte; true at the end of the head.
    pub(super) fn push(&mut self, b: u8) -> bool {
        if let Some(slot) = self.status.get_mut(self.status_len) {
            *slot = b;
            self.status_len += 1;
        }
        self.seen += 1;
        self.matched = match (b, self.matched) {
            (b'\r', 2) => 3,
            (b'\r', _) => 1,
            (b'\n', 1) => 2,
            (b'\n', 3) => 4,
            _ => 0,
        };
        self.matched == 4
    }

    /// `HTTP/x.y 101`: the upgrade was accepted.
    pub(super) fn switching_protocols(&self) -> bool {
        self.status_len == self.status.len()
            && self.status.starts_with(b"HTTP/")
            && &self.status[9..12] == b"101"
    }
}
