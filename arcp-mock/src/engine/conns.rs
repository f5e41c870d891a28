//! `Conns`: the connection registry (outbound queues, liveness, which
//! session and principal each connection speaks for) and the bounded
//! connection log behind [`crate::MockRuntime::connection_log`].

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arcp_types::{Envelope, Frame};
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;

use crate::verify::ConnRecord;

/// Outbound frames queued per connection before it counts as a slow consumer
/// and is dropped.
pub(crate) const OUTBOUND_CAPACITY: usize = 4096;
/// Envelopes kept per connection and direction in the connection log.
const MAX_LOG_PER_CONN: usize = 10_000;
/// Connections kept in the connection log (oldest forgotten first).
const MAX_LOGGED_CONNS: usize = 1024;
/// Envelopes kept in the whole connection log (oldest connections forgotten
/// first).
const MAX_LOGGED_TOTAL: usize = 200_000;

/// What a connection task is asked to do.
pub(crate) enum Out {
    /// Encode and send a frame.
    Frame(Box<Frame>),
    /// Encode and send a stray frame (never counted as a delivery).
    Stray(Box<Frame>),
    /// Send a close frame with this code and end the connection.
    Close(u16),
    /// End the connection abruptly: no close frame.
    Kill,
}

/// Per-connection state shared with its task.
pub(crate) struct Link {
    /// When the client last sent anything.
    last_inbound: Mutex<Instant>,
    /// The negotiated heartbeat interval, set on welcome.
    pub heartbeat: watch::Sender<Option<Duration>>,
}

impl Link {
    pub(crate) fn new() -> Self {
        Link {
            last_inbound: Mutex::new(Instant::now()),
            heartbeat: watch::Sender::new(None),
        }
    }

    pub(crate) fn touch(&self) {
        *self.last_inbound.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    pub(crate) fn last_inbound(&self) -> Instant {
        *self.last_inbound.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One connection: a WebSocket, or one request of the HTTP binding.
pub(crate) struct Conn {
    tx: mpsc::Sender<Out>,
    abort: Option<AbortHandle>,
    pub link: Arc<Link>,
    pub session: Option<String>,
    pub principal: Option<String>,
    /// False once a drop or close is queued: nothing more is sent.
    live: bool,
    pub frames_sent: u64,
}

/// Every open connection, and the log of every connection.
#[derive(Default)]
pub(crate) struct Conns {
    map: HashMap<u64, Conn>,
    next: u64,
    /// WebSocket connections accepted (HTTP requests are not counted).
    accepted: u64,
    log: ConnLog,
}

impl Conns {
    /// A fresh connection id, logged from now on.
    pub(super) fn allocate(&mut self, http: bool) -> u64 {
        self.next += 1;
        if !http {
            self.accepted += 1;
        }
        self.log.open(self.next, http);
        self.next
    }

    /// Registers connection `id` with its outbound queue.
    pub(super) fn insert(&mut self, id: u64, tx: mpsc::Sender<Out>, link: Arc<Link>) {
        let conn = Conn {
            tx,
            abort: None,
            link,
            session: None,
            principal: None,
            live: true,
            frames_sent: 0,
        };
        self.map.insert(id, conn);
    }

    pub(super) fn remove(&mut self, id: u64) -> Option<Conn> {
        self.map.remove(&id)
    }

    pub(super) fn get(&self, id: u64) -> Option<&Conn> {
        self.map.get(&id)
    }

    pub(super) fn get_mut(&mut self, id: u64) -> Option<&mut Conn> {
        self.map.get_mut(&id)
    }

    pub(super) fn set_abort(&mut self, id: u64, abort: AbortHandle) {
        if let Some(c) = self.map.get_mut(&id) {
            c.abort = Some(abort);
        }
    }

    pub(super) fn is_live(&self, id: u64) -> bool {
        self.map.get(&id).is_some_and(|c| c.live)
    }

    pub(super) fn session(&self, id: u64) -> Option<String> {
        self.map.get(&id).and_then(|c| c.session.clone())
    }

    pub(super) fn principal(&self, id: u64) -> String {
        self.map
            .get(&id)
            .and_then(|c| c.principal.clone())
            .unwrap_or_default()
    }

    /// (accepted so far, open now).
    pub(super) fn counts(&self) -> (u64, u64) {
        let live = self.map.values().filter(|c| c.live).count() as u64;
        (self.accepted, live)
    }

    pub(super) fn ids(&self) -> Vec<u64> {
        self.map.keys().copied().collect()
    }

    /// Enqueues a frame on a live connection. `Err(())` means the queue is
    /// full: a slow consumer, to be dropped.
    pub(super) fn send(&self, id: u64, out: Out) -> Result<bool, ()> {
        let Some(c) = self.map.get(&id).filter(|c| c.live) else {
            return Ok(false);
        };
        match c.tx.try_send(out) {
            Ok(()) => Ok(true),
            Err(mpsc::error::TrySendError::Full(_)) => Err(()),
            Err(mpsc::error::TrySendError::Closed(_)) => Ok(false),
        }
    }

    /// Marks a connection dead and queues its end (`Out::Close` or
    /// `Out::Kill`) after the frames already queued; aborts it when the
    /// queue is full.
    pub(super) fn end(&mut self, id: u64, out: Out) {
        if let Some(c) = self.map.get_mut(&id).filter(|c| c.live) {
            c.live = false;
            if c.tx.try_send(out).is_err() {
                if let Some(abort) = &c.abort {
                    abort.abort();
                }
            }
        }
    }

    /// Marks a connection dead; returns its task's abort handle, for the
    /// caller to abort (outside the lock when the task, dropped in place,
    /// would unregister itself).
    pub(super) fn abort(&mut self, id: u64) -> Option<AbortHandle> {
        let c = self.map.get_mut(&id)?;
        c.live = false;
        c.abort.clone()
    }

    pub(super) fn abort_handles(&self) -> Vec<AbortHandle> {
        self.map.values().filter_map(|c| c.abort.clone()).collect()
    }

    pub(super) fn log_received(&mut self, id: u64, envelope: Envelope) {
        self.log.push(id, envelope, false);
    }

    pub(super) fn log_sent(&mut self, id: u64, envelope: Envelope) {
        self.log.push(id, envelope, true);
    }

    pub(super) fn log(&self) -> Vec<ConnRecord> {
        self.log.snapshot()
    }
}

/// The connection log: bounded per connection, in connections, and in total.
#[derive(Default)]
struct ConnLog {
    records: VecDeque<LogEntry>,
    total: usize,
}

struct LogEntry {
    id: u64,
    http: bool,
    received: VecDeque<Envelope>,
    sent: VecDeque<Envelope>,
}

impl ConnLog {
    fn open(&mut self, id: u64, http: bool) {
        self.records.push_back(LogEntry {
            id,
            http,
            received: VecDeque::new(),
            sent: VecDeque::new(),
        });
        self.trim();
    }

    fn push(&mut self, id: u64, envelope: Envelope, sent: bool) {
        // Ids are allocated in increasing order: the records are sorted.
        let Ok(i) = self.records.binary_search_by_key(&id, |r| r.id) else {
            return;
        };
        let entry = &mut self.records[i];
        let list = if sent {
            &mut entry.sent
        } else {
            &mut entry.received
        };
        list.push_back(envelope);
        self.total += 1;
        if list.len() > MAX_LOG_PER_CONN {
            list.pop_front();
            self.total -= 1;
        }
        self.trim();
    }

    fn trim(&mut self) {
        while self.records.len() > MAX_LOGGED_CONNS
            || (self.total > MAX_LOGGED_TOTAL && self.records.len() > 1)
        {
            if let Some(old) = self.records.pop_front() {
                self.total -= old.received.len() + old.sent.len();
            }
        }
    }

    fn snapshot(&self) -> Vec<ConnRecord> {
        self.records
            .iter()
            .map(|r| ConnRecord {
                id: r.id,
                http: r.http,
                received: r.received.iter().cloned().collect(),
                sent: r.sent.iter().cloned().collect(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_is_bounded_per_connection_and_in_connections() {
        let mut log = ConnLog::default();
        log.open(1, false);
        for _ in 0..MAX_LOG_PER_CONN + 5 {
            log.push(1, Envelope::new("x"), true);
        }
        assert_eq!(log.records[0].sent.len(), MAX_LOG_PER_CONN);
        assert_eq!(log.total, MAX_LOG_PER_CONN);
        for id in 2..=(MAX_LOGGED_CONNS as u64 + 1) {
            log.open(id, true);
        }
        assert_eq!(log.records.len(), MAX_LOGGED_CONNS);
        assert_eq!(log.records[0].id, 2);
        assert_eq!(log.total, 0);
        // Unknown (forgotten) connections are ignored.
        log.push(1, Envelope::new("x"), false);
        assert_eq!(log.total, 0);
    }
}
