//! `Jobs`: the job table (running and finished jobs, their stored
//! terminals, event history and subscribers), the execution counters, and
//! the task that runs a tool.

use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use arcp_types::{Frame, Message};
use futures_util::FutureExt;
use serde_json::Value;
use tokio::task::AbortHandle;

use crate::tool::{ToolContext, ToolFailure, ToolFn};
use crate::verify::{JobRecord, JobStatus};

/// Finished jobs (and their idempotency bindings) kept for replay.
const MAX_FINISHED_JOBS: usize = 10_000;
/// Jobs running at once; more submits are refused with `RESOURCE_EXHAUSTED`.
pub(crate) const MAX_RUNNING_JOBS: usize = 1024;
/// Distinct idempotency keys counted by `executions_for_key`.
const MAX_KEY_COUNTERS: usize = 100_000;
/// Duplicates waiting for a running job's terminal (`TerminalOnly`).
const MAX_WAITERS: usize = 64;
/// Subscribers per job.
const MAX_SUBSCRIBERS: usize = 64;

/// How a tool execution ended.
pub(crate) enum Outcome {
    Done(Result<Value, ToolFailure>),
    Panicked,
    Cancelled,
}

/// What the engine does for a running tool task.
pub(crate) trait JobHost: Send + Sync {
    /// The tool closure is being called.
    fn ran(&self, job_id: &str);
    /// The tool ended.
    fn finish(&self, job_id: &str, outcome: Outcome);
}

pub(crate) enum JobState {
    Running { abort: Option<AbortHandle> },
    Done { terminal: Box<Frame> },
}

pub(crate) struct Job {
    pub id: String,
    pub tool: String,
    pub session: String,
    pub origin_conn: u64,
    pub principal: String,
    pub request_id: String,
    pub key: Option<String>,
    pub arguments: Value,
    /// The original `job.accepted`, re-sent verbatim by v1.1 replays.
    pub accepted: Frame,
    pub state: JobState,
    /// Duplicates waiting for the terminal: (connection, request id, key).
    pub waiters: Vec<(u64, String, String)>,
    /// Streamed-result id and next chunk number.
    pub chunks: Option<(String, u64)>,
    executions: u64,
    terminal_delivered: bool,
    /// The job's events as first sent, oldest first, for `job.subscribe`.
    pub history: VecDeque<Frame>,
    /// Subscribed connections and their sessions.
    pub subscribers: Vec<(u64, String)>,
}

impl Job {
    /// A running job.
    #[allow(clippy::too_many_arguments)] // one field each; built in one place
    pub(super) fn new(
        id: String,
        tool: String,
        session: String,
        origin_conn: u64,
        principal: String,
        request_id: String,
        key: Option<String>,
        arguments: Value,
        accepted: Frame,
    ) -> Self {
        Job {
            id,
            tool,
            session,
            origin_conn,
            principal,
            request_id,
            key,
            arguments,
            accepted,
            state: JobState::Running { abort: None },
            waiters: Vec::new(),
            chunks: None,
            executions: 0,
            terminal_delivered: false,
            history: VecDeque::new(),
            subscribers: Vec::new(),
        }
    }

    pub(super) fn is_running(&self) -> bool {
        matches!(self.state, JobState::Running { .. })
    }

    /// The stored terminal, once finished.
    pub(super) fn terminal(&self) -> Option<Frame> {
        match &self.state {
            JobState::Done { terminal } => Some((**terminal).clone()),
            JobState::Running { .. } => None,
        }
    }

    /// The status as `session.jobs` and `job.subscribed` name it.
    pub(super) fn status_name(&self) -> &'static str {
        match self.status() {
            JobStatus::Running => "running",
            JobStatus::Completed => "success",
            JobStatus::Cancelled => "cancelled",
            _ => "error",
        }
    }

    fn status(&self) -> JobStatus {
        match &self.state {
            JobState::Running { .. } => JobStatus::Running,
            JobState::Done { terminal } => match terminal.message {
                Message::Result(_) => JobStatus::Completed,
                Message::Cancelled(_) => JobStatus::Cancelled,
                _ => JobStatus::Failed,
            },
        }
    }

    /// Keeps a sent event for `job.subscribe` history.
    pub(super) fn remember(&mut self, event: Frame, capacity: usize) {
        self.history.push_back(event);
        while self.history.len() > capacity {
            self.history.pop_front();
        }
    }

    /// Adds a subscriber (live connections only; bounded).
    pub(super) fn subscribe(&mut self, conn: u64, session: String, live: impl Fn(u64) -> bool) {
        self.subscribers.retain(|(c, _)| live(*c));
        if self.subscribers.len() < MAX_SUBSCRIBERS
            && !self.subscribers.iter().any(|(c, _)| *c == conn)
        {
            self.subscribers.push((conn, session));
        }
    }

    /// Adds a duplicate waiting for the terminal (bounded).
    pub(super) fn wait(&mut self, conn: u64, request_id: &str, key: &str) {
        if self.waiters.len() < MAX_WAITERS {
            self.waiters
                .push((conn, request_id.to_owned(), key.to_owned()));
        }
    }
}

/// The job table and the execution counters.
#[derive(Default)]
pub(crate) struct Jobs {
    map: HashMap<String, Job>,
    finished: VecDeque<String>,
    running: usize,
    exec_tool: HashMap<String, u64>,
    exec_key: HashMap<String, u64>,
    exec_total: u64,
}

impl Jobs {
    pub(super) fn get(&self, id: &str) -> Option<&Job> {
        self.map.get(id)
    }

    pub(super) fn get_mut(&mut self, id: &str) -> Option<&mut Job> {
        self.map.get_mut(id)
    }

    pub(super) fn contains(&self, id: &str) -> bool {
        self.map.contains_key(id)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Job> {
        self.map.values()
    }

    pub(super) fn at_capacity(&self) -> bool {
        self.running >= MAX_RUNNING_JOBS
    }

    /// Adds a running job and counts one execution of its tool and key.
    pub(super) fn start(&mut self, job: Job) {
        if let Some(key) = &job.key {
            if self.exec_key.len() < MAX_KEY_COUNTERS || self.exec_key.contains_key(key) {
                *self.exec_key.entry(key.clone()).or_default() += 1;
            }
        }
        *self.exec_tool.entry(job.tool.clone()).or_default() += 1;
        self.exec_total += 1;
        self.running += 1;
        self.map.insert(job.id.clone(), job);
    }

    pub(super) fn set_abort(&mut self, id: &str, abort: AbortHandle) {
        if let Some(job) = self.map.get_mut(id).filter(|j| j.is_running()) {
            job.state = JobState::Running { abort: Some(abort) };
        }
    }

    /// Records a finished job's terminal; returns the duplicates that were
    /// waiting for it. Aborts the task of a cancelled job.
    pub(super) fn complete(&mut self, id: &str, terminal: Frame) -> Vec<(u64, String, String)> {
        let Some(job) = self.map.get_mut(id) else {
            return Vec::new();
        };
        if let JobState::Running { abort: Some(abort) } = &job.state {
            if matches!(terminal.message, Message::Cancelled(_)) {
                abort.abort();
            }
        }
        job.state = JobState::Done {
            terminal: Box::new(terminal),
        };
        self.running = self.running.saturating_sub(1);
        self.finished.push_back(id.to_owned());
        std::mem::take(&mut job.waiters)
    }

    /// Forgets the oldest finished jobs beyond the bound; returns them
    /// (their bindings go too).
    pub(super) fn evict(&mut self) -> Vec<Job> {
        let mut gone = Vec::new();
        while self.finished.len() > MAX_FINISHED_JOBS {
            let Some(id) = self.finished.pop_front() else {
                break;
            };
            gone.extend(self.map.remove(&id));
        }
        gone
    }

    pub(super) fn ran(&mut self, id: &str) {
        if let Some(job) = self.map.get_mut(id) {
            job.executions += 1;
        }
    }

    /// Notes that a job's terminal reached a client.
    pub(super) fn delivered(&mut self, id: &str) {
        if let Some(job) = self.map.get_mut(id).filter(|j| !j.is_running()) {
            job.terminal_delivered = true;
        }
    }

    pub(super) fn executions(&self, tool: &str) -> u64 {
        self.exec_tool.get(tool).copied().unwrap_or(0)
    }

    pub(super) fn executions_for_key(&self, key: &str) -> u64 {
        self.exec_key.get(key).copied().unwrap_or(0)
    }

    pub(super) fn executions_by_key(&self) -> HashMap<String, u64> {
        self.exec_key.clone()
    }

    pub(super) fn total_executions(&self) -> u64 {
        self.exec_total
    }

    /// Zeroes the execution counters (per tool, per key, in all). The jobs
    /// and their own counts stay: they are the runtime's history.
    pub(super) fn reset_counts(&mut self) {
        self.exec_tool.clear();
        self.exec_key.clear();
        self.exec_total = 0;
    }

    pub(super) fn abort_handles(&self) -> Vec<AbortHandle> {
        self.map
            .values()
            .filter_map(|j| match &j.state {
                JobState::Running { abort } => abort.clone(),
                JobState::Done { .. } => None,
            })
            .collect()
    }

    /// Ground truth, oldest first (job ids are ULIDs).
    pub(super) fn records(&self) -> Vec<JobRecord> {
        let mut jobs: Vec<JobRecord> = self
            .map
            .values()
            .map(|j| JobRecord {
                job_id: j.id.clone(),
                idempotency_key: j.key.clone(),
                tool: j.tool.clone(),
                arguments: j.arguments.clone(),
                principal: j.principal.clone(),
                executions: j.executions,
                status: j.status(),
                terminal_delivered: j.terminal_delivered,
            })
            .collect();
        jobs.sort_by(|a, b| a.job_id.cmp(&b.job_id));
        jobs
    }
}

/// Runs `tool` for `job_id` on a task, after `queued` (a job waiting for
/// a worker: aborted meanwhile, it never ran): counts the call, catches
/// panics, reports the outcome.
pub(crate) fn spawn_tool(
    host: Arc<dyn JobHost>,
    job_id: String,
    tool: ToolFn,
    args: Value,
    ctx: ToolContext,
    queued: Option<Duration>,
) -> AbortHandle {
    let task = tokio::spawn(async move {
        if let Some(wait) = queued {
            tokio::time::sleep(wait).await;
        }
        host.ran(&job_id);
        let outcome = match std::panic::catch_unwind(AssertUnwindSafe(|| tool(args, ctx))) {
            Ok(future) => match AssertUnwindSafe(future).catch_unwind().await {
                Ok(result) => Outcome::Done(result),
                Err(_) => Outcome::Panicked,
            },
            Err(_) => Outcome::Panicked,
        };
        host.finish(&job_id, outcome);
    });
    task.abort_handle()
}
