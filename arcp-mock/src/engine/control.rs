//! Session-level requests both dialects answer the same way: ping, the job
//! inventory, and the checks of a cancel.

use arcp_types::{now_rfc3339, Envelope, Message, Ping, Pong};
use serde_json::{json, Value};

use super::flavor::object;
use super::state::State;

impl State {
    /// `session.ping`: a pong with the nonce (legacy: correlated).
    pub(super) fn on_ping(&mut self, conn: u64, envelope: &Envelope, ping: Ping) {
        let pong = Message::Pong(Pong::new(ping.nonce).with_received_at(now_rfc3339()));
        let mut frame = self.reply(conn, pong);
        self.flavor.correlate(&mut frame, &envelope.id);
        self.send(conn, frame);
    }

    /// A runtime `session.ping` on a connection (heartbeats).
    pub(super) fn ping(&mut self, conn: u64) {
        let ping =
            Message::Ping(Ping::new(ulid::Ulid::new().to_string()).with_sent_at(now_rfc3339()));
        let frame = self.reply(conn, ping);
        self.send(conn, frame);
    }

    /// `session.list_jobs`: the jobs of the connection's session.
    pub(super) fn on_list_jobs(&mut self, conn: u64, envelope: &Envelope) {
        let sid = self.conns.session(conn).unwrap_or_default();
        let mut jobs: Vec<(&String, Value)> = self
            .jobs
            .values()
            .filter(|j| j.session == sid)
            .map(|j| {
                let entry = json!({"job_id": j.id, "agent": j.tool, "status": j.status_name()});
                (&j.id, entry)
            })
            .collect();
        jobs.sort_by(|a, b| a.0.cmp(b.0));
        let body = json!({
            "request_id": envelope.id,
            "jobs": jobs.into_iter().map(|(_, v)| v).collect::<Vec<_>>(),
            "next_cursor": null,
        });
        let mut frame = self.reply(conn, Message::Jobs(object(body)));
        self.flavor.correlate(&mut frame, &envelope.id);
        self.send(conn, frame);
    }

    /// Why `conn` may not cancel `job_id`, if it may not.
    pub(super) fn cancel_refusal(&self, conn: u64, job_id: &str) -> Option<&'static str> {
        let principal = self.conns.principal(conn);
        match self.jobs.get(job_id) {
            None => Some("no such in-flight job"),
            Some(job) if job.principal != principal => {
                Some("permission denied: not authorized to cancel this job")
            }
            Some(job) if !job.is_running() => Some("job is no longer in-flight"),
            Some(_) => None,
        }
    }
}
