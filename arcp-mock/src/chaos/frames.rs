//! The RFC 6455 frame parser of one direction: it follows frame boundaries
//! across reads (without buffering whole frames) and decides, per read,
//! which bytes may be forwarded and whether the connection dies.

use super::report::KillReason;
use super::schedule::{Admit, Conn, Shared};
use super::upgrade::{HttpScan, MAX_HTTP_HEAD};

/// Longest RFC 6455 frame header: 2 + 8 (64-bit length) + 4 (mask key).
pub(super) const MAX_FRAME_HEADER: usize = 14;
/// Which peer a direction reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    /// Client to upstream: starts with the upgrade request.
    Client,
    /// Upstream to client: starts with the upgrade response.
    Server,
}

/// What to do with one buffer read from a direction's source.
#[derive(Debug, Default)]
pub(super) struct Plan {
    /// Header bytes held back from the previous read, approved now; written
    /// before `data[..end]`.
    pub(super) prefix: [u8; MAX_FRAME_HEADER],
    pub(super) prefix_len: usize,
    /// `data[..end]` is approved for forwarding.
    pub(super) end: usize,
    /// Frames completed within the approved bytes.
    pub(super) frames: u64,
    /// Kill the connection after forwarding the approved bytes.
    pub(super) kill: Option<KillReason>,
    /// The connection was killed elsewhere: forward nothing.
    pub(super) dead: bool,
}

#[derive(Debug)]
pub(super) enum Mode {
    Http(HttpScan),
    Frames,
    Raw,
}

/// Tracks frame boundaries of one direction.
#[derive(Debug)]
pub(super) struct DirParser {
    pub(super) mode: Mode,
    pub(super) hdr: [u8; MAX_FRAME_HEADER],
    pub(super) hdr_len: usize,
    pub(super) in_payload: bool,
    pub(super) remaining: u64,
}

pub(super) fn header_len(b1: u8) -> usize {
    let ext = match b1 & 0x7f {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    let mask = if b1 & 0x80 != 0 { 4 } else { 0 };
    2 + ext + mask
}

pub(super) fn payload_len(hdr: &[u8; MAX_FRAME_HEADER]) -> u64 {
    match hdr[1] & 0x7f {
        126 => u64::from(u16::from_be_bytes([hdr[2], hdr[3]])),
        127 => {
            let mut b = [0u8; 8];
            b.copy_from_slice(&hdr[2..10]);
            u64::from_be_bytes(b)
        }
        n => u64::from(n),
    }
}

impl DirParser {
    pub(super) fn new(side: Side) -> Self {
        DirParser {
            mode: Mode::Http(HttpScan::new(side == Side::Server)),
            hdr: [0; MAX_FRAME_HEADER],
            hdr_len: 0,
            in_payload: false,
            remaining: 0,
        }
    }

    /// Bytes of the frame header needed so far (2 until the length byte is
    /// known).
    pub(super) fn hdr_need(&self) -> usize {
        if self.hdr_len < 2 {
            2
        } else {
            header_len(self.hdr[1])
        }
    }

    /// Walk `data`, approving bytes up to the first frame that must not be
    /// forwarded. A trailing partial frame header is held back (in `hdr`)
    /// until the decision on its frame can be made.
    pub(super) fn plan(&mut self, data: &[u8], conn: &Conn, shared: &Shared) -> Plan {
        let mut plan = Plan::default();
        // Header bytes carried over from the previous read (not forwarded yet).
        let mut carried = match self.mode {
            Mode::Frames if !self.in_payload => self.hdr_len,
            _ => 0,
        };
        let mut pos = 0;
        while pos < data.len() {
            match &mut self.mode {
                Mode::Raw => {
                    conn.admit_bytes(data.len() - pos);
                    pos = data.len();
                    plan.end = pos;
                }
                Mode::Http(scan) => {
                    let start = pos;
                    let mut done = false;
                    while pos < data.len() && !done {
                        done = scan.push(data[pos]);
                        pos += 1;
                    }
                    conn.admit_bytes(pos - start);
                    plan.end = pos;
                    if done {
                        self.mode = if scan.response && !scan.switching_protocols() {
                            Mode::Raw
                        } else {
                            Mode::Frames
                        };
                    } else if scan.seen > MAX_HTTP_HEAD {
                        self.mode = Mode::Raw;
                    }
                }
                Mode::Frames if self.in_payload => {
                    let avail = (data.len() - pos) as u64;
                    let take = self.remaining.min(avail) as usize;
                    pos += take;
                    self.remaining -= take as u64;
                    plan.end = pos;
                    if self.remaining == 0 {
                        self.in_payload = false;
                        plan.frames += 1;
                    }
                }
                Mode::Frames => {
                    while pos < data.len() && self.hdr_len < self.hdr_need() {
                        self.hdr[self.hdr_len] = data[pos];
                        self.hdr_len += 1;
                        pos += 1;
                    }
                    if self.hdr_len < self.hdr_need() {
                        // Partial header at the end of the buffer: hold it.
                        break;
                    }
                    let payload = payload_len(&self.hdr);
                    let frame_len = (self.hdr_len as u64).saturating_add(payload);
                    match conn.admit_frame(shared, frame_len) {
                        Admit::Forward => {}
                        Admit::Kill(reason) => {
                            plan.kill = Some(reason);
                            return plan;
                        }
                        Admit::Dead => {
                            plan.dead = true;
                            return plan;
                        }
                    }
                    if carried > 0 {
                        plan.prefix[..carried].copy_from_slice(&self.hdr[..carried]);
                        plan.prefix_len = carried;
                        carried = 0;
                    }
                    self.hdr_len = 0;
                    plan.end = pos;
                    if payload == 0 {
                        plan.frames += 1;
                    } else {
                        self.in_payload = true;
                        self.remaining = payload;
                    }
                }
            }
        }
        plan
    }
}
