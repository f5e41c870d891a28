//! `Sessions`: v1.1 sessions with their resume state (rotating tokens, the
//! bounded replay buffer, detach times) and legacy sessions, which live and
//! die with their connection.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use arcp_types::{ErrorCode, Frame, ResumeRequest};

/// Sessions kept; beyond this the longest-detached one is forgotten.
const MAX_SESSIONS: usize = 1024;

pub(crate) struct Session {
    pub principal: String,
    pub token: String,
    pub conn: Option<u64>,
    next_seq: u64,
    /// Sequenced envelopes for resume (v1.1), oldest first.
    buffer: VecDeque<Frame>,
    /// Highest sequence evicted for lack of room (not trimmed by an ack).
    evicted_upto: u64,
    detached_at: Option<Instant>,
}

/// Every session, by id.
#[derive(Default)]
pub(crate) struct Sessions {
    map: HashMap<String, Session>,
}

pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

impl Sessions {
    /// Opens a session for `principal`, attached to `conn` when given.
    pub(super) fn open(&mut self, id: String, principal: String, conn: Option<u64>) {
        if self.map.len() >= MAX_SESSIONS {
            let oldest = self
                .map
                .iter()
                .filter_map(|(id, s)| s.detached_at.map(|t| (t, id.clone())))
                .min();
            if let Some((_, id)) = oldest {
                self.map.remove(&id);
            }
        }
        let session = Session {
            principal,
            token: String::new(),
            conn,
            next_seq: 1,
            buffer: VecDeque::new(),
            evicted_upto: 0,
            detached_at: None,
        };
        self.map.insert(id, session);
    }

    pub(super) fn get(&self, id: &str) -> Option<&Session> {
        self.map.get(id)
    }

    pub(super) fn remove(&mut self, id: &str) {
        self.map.remove(id);
    }

    /// The connection a session is attached to.
    pub(super) fn conn(&self, id: &str) -> Option<u64> {
        self.map.get(id).and_then(|s| s.conn)
    }

    /// The next `event_seq` of a session.
    pub(super) fn next_seq(&mut self, id: &str) -> Option<u64> {
        let s = self.map.get_mut(id)?;
        let seq = s.next_seq;
        s.next_seq += 1;
        Some(seq)
    }

    /// Keeps a sequenced envelope for resume, evicting beyond `capacity`.
    pub(super) fn buffer(&mut self, id: &str, frame: Frame, capacity: usize) {
        if let Some(s) = self.map.get_mut(id) {
            s.buffer.push_back(frame);
            while s.buffer.len() > capacity {
                if let Some(old) = s.buffer.pop_front() {
                    s.evicted_upto = s.evicted_upto.max(old.envelope.event_seq.unwrap_or(0));
                }
            }
        }
    }

    /// `session.ack`: forgets what the client has processed.
    pub(super) fn ack(&mut self, id: &str, last_processed: u64) {
        if let Some(s) = self.map.get_mut(id) {
            s.buffer
                .retain(|f| f.envelope.event_seq.is_some_and(|seq| seq > last_processed));
        }
    }

    /// Unbinds `conn` from session `id`: it now waits for a resume.
    pub(super) fn detach(&mut self, id: &str, conn: u64) {
        if let Some(s) = self.map.get_mut(id) {
            if s.conn == Some(conn) {
                s.conn = None;
                s.detached_at = Some(Instant::now());
            }
        }
    }

    /// Binds `conn` to session `id` with a new resume token; returns the
    /// connection it replaces and the buffered envelopes after
    /// `replay_after`.
    pub(super) fn attach(
        &mut self,
        id: &str,
        conn: u64,
        token: String,
        replay_after: Option<u64>,
    ) -> Option<(Option<u64>, Vec<Frame>)> {
        let s = self.map.get_mut(id)?;
        let previous = s.conn.filter(|&c| c != conn);
        s.token = token;
        s.conn = Some(conn);
        s.detached_at = None;
        let replay = match replay_after {
            Some(last) => s
                .buffer
                .iter()
                .filter(|f| f.envelope.event_seq.is_some_and(|seq| seq > last))
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        Some((previous, replay))
    }

    /// Whether `principal` may resume as `resume` asks, as Python 1.1.3
    /// decides (a wrong token forgets the session, capture F3).
    pub(super) fn check_resume(
        &mut self,
        principal: &str,
        resume: &ResumeRequest,
        window: Duration,
    ) -> Result<(), (ErrorCode, String)> {
        let sid = &resume.session_id;
        let denied = ErrorCode::PermissionDenied;
        let Some(session) = self.map.get(sid) else {
            return Err((
                denied,
                format!("no resumable session for session_id='{sid}'"),
            ));
        };
        if session.principal != principal {
            return Err((
                denied,
                "resume principal does not match the original session".into(),
            ));
        }
        if session.token != resume.resume_token {
            self.map.remove(sid);
            return Err((denied, "resume_token does not match".into()));
        }
        if session.detached_at.is_some_and(|t| t.elapsed() > window) {
            self.map.remove(sid);
            return Err((
                ErrorCode::ResumeWindowExpired,
                format!(
                    "session '{sid}' was detached longer than the {}s resume window",
                    ceil_secs(window)
                ),
            ));
        }
        if resume.last_event_seq < session.evicted_upto {
            return Err((
                ErrorCode::ResumeWindowExpired,
                format!(
                    "cannot resume from event_seq {}: events up to {} are no longer buffered",
                    resume.last_event_seq, session.evicted_upto
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arcp_types::{Message, Object};

    fn event(seq: u64) -> Frame {
        let mut frame = Frame::new(Message::Closed(Object::new()));
        frame.envelope.event_seq = Some(seq);
        frame
    }

    #[test]
    fn ceil_secs_rounds_up() {
        assert_eq!(ceil_secs(Duration::from_millis(200)), 1);
        assert_eq!(ceil_secs(Duration::from_secs(2)), 2);
        assert_eq!(ceil_secs(Duration::from_millis(2001)), 3);
    }

    #[test]
    fn eviction_expires_resume_but_acks_do_not() {
        let mut sessions = Sessions::default();
        sessions.open("s".into(), "p".into(), Some(1));
        for _ in 0..4 {
            let seq = sessions.next_seq("s").unwrap();
            sessions.buffer("s", event(seq), 2);
        }
        let resume = |last| ResumeRequest::new("s", "", last);
        let window = Duration::from_secs(60);
        assert!(sessions.check_resume("p", &resume(1), window).is_err());
        assert!(sessions.check_resume("p", &resume(2), window).is_ok());
        sessions.ack("s", 4);
        assert!(sessions.check_resume("p", &resume(4), window).is_ok());
        let (_, replay) = sessions.attach("s", 2, "t".into(), Some(2)).unwrap();
        assert!(replay.is_empty());
    }
}
