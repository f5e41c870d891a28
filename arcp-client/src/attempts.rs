//! A call's attempts record, one shape for both transports: how many
//! requests went out, the job the key is bound to, what the attempts
//! exposed to the runtime, whether its answers show a stored outcome, the
//! last reason an attempt failed, the retry budget, and which events were
//! delivered. Pure: no I/O, no clock of its own (`now` is passed in).
//!
//! Each step a transport sees is one method, and returns what the journal
//! must record of it ([`Record`]), so no transport decides that by itself:
//!
//! ```text
//!              sent ──▶ Record::Sent { attempts }   (counted; starts the key's send limit)
//!   fresh ───────────▶ out ──answered──▶ settled: this attempt ran nothing
//!     │                 │  ──withdrawn─▶ as if never sent (not counted; the body never left)
//!     │                 │  ──lost──────▶ in doubt: the attempt may have run
//!     │                 └──bound(job)──▶ bound ──▶ Record::Accepted { job } (once per job)
//!     └─ started in doubt (an earlier call or process may have sent the key) / bound (journal)
//!
//!   retried(reason, next): the last error, and the budget's decision
//!   event(epoch, seq): new or seen (per (epoch, seq), in order)
//!   ended(key, out): the call as the give-up rule (classify.rs) reads it
//! ```
//!
//! Whether an attempt is *out* (sent and unanswered) is the transport's to
//! say: the WebSocket call's phase, the HTTP call's request in flight. The
//! record keeps what is settled; [`Attempts::exposure_with`] adds the
//! attempt that is out. The rule it feeds:
//!
//! | steps | exposure | a call ending now, without the runtime's terminal |
//! |---|---|---|
//! | none | nothing | did not run |
//! | sent (out) | in doubt | may have run |
//! | sent, answered (a refusal) | nothing | did not run |
//! | sent, withdrawn | nothing, 0 attempts | did not run |
//! | sent, lost | in doubt | may have run |
//! | sent, bound | bound | may have run |
//! | started in doubt, nothing sent | in doubt | may have run |

use std::sync::Arc;
use std::time::{Duration, Instant};

use arcp_types::IdempotencyKey;

use crate::classify::{Ended, Exposure};
use crate::config::RetryPolicy;
use crate::request::CallRecorder;
use crate::retry::{Decision, RetryBudget};

/// What the journal must record of a step.
#[must_use = "a step's record goes to the call's journal recorder"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Record {
    /// Nothing to record.
    Nothing,
    /// Attempt number `attempts` is being sent.
    Sent { attempts: u32 },
    /// The runtime bound the key to this job.
    Accepted { job: Arc<str> },
}

impl Record {
    /// Hands the record to the call's recorder, when it has one.
    pub(crate) fn write(self, key: &IdempotencyKey, recorder: Option<&dyn CallRecorder>) {
        let Some(recorder) = recorder else { return };
        match self {
            Record::Nothing => {}
            Record::Sent { attempts } => recorder.sent(key, attempts),
            Record::Accepted { job } => recorder.accepted(key, &job),
        }
    }
}

/// How long the next attempt after a failure waits.
#[derive(Debug, Clone, Copy)]
pub(crate) enum NextAttempt {
    /// The backoff's next delay, at least `floor` (the runtime's
    /// `Retry-After`).
    Backoff { floor: Option<Duration> },
    /// This long, not drawn from the backoff (the recovery ladder's pause
    /// while the job runs).
    // The HTTP binding's alone.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    After(Duration),
}

/// What binding the key to a job changed.
#[derive(Debug)]
pub(crate) struct Bound {
    /// The job, shared with the call's waiters and indexes.
    pub(crate) job: Arc<str>,
    /// The job this one replaces (an attempt after a lost one may be bound
    /// to another job): its index entry goes.
    pub(crate) replaced: Option<Arc<str>>,
    pub(crate) record: Record,
}

/// One call's attempts record (module docs).
#[derive(Debug, Default)]
pub(crate) struct Attempts {
    /// Requests sent (an attempt withdrawn before it left is not counted).
    count: u32,
    /// The job the key is bound to, once the runtime said.
    job: Option<Arc<str>>,
    /// What the settled attempts exposed (not the one out).
    exposure: Exposure,
    /// The runtime's answers show a stored outcome.
    replayed: bool,
    /// The bound job was accepted as a fresh execution on one of this
    /// call's attempts: its terminal is this call's own, however it
    /// arrives (on the live stream, a resumed session's, or as the answer
    /// to a later re-send), never a replay.
    own_job: bool,
    /// The last reason an attempt failed; boxed text, absent until one does.
    last_error: Option<Box<str>>,
    /// When retrying stops, and the backoff's place (`retry/budget.rs`).
    budget: RetryBudget,
    /// Highest (epoch, event_seq) delivered, for de-duplication.
    last_event: Option<(u64, u64)>,
    /// Events the caller did not take in time.
    dropped_events: u64,
}

impl Attempts {
    /// A record for a call whose key an earlier call or process may have
    /// sent (`in_doubt`), and whose send limit is `send_limit` (the
    /// journal's prepare plus the runtime's key retention), when known.
    pub(crate) fn new(in_doubt: bool, send_limit: Option<(Instant, Duration)>) -> Self {
        let mut budget = RetryBudget::default();
        if let Some((until, retention)) = send_limit {
            budget.no_send_after(until, retention);
        }
        Attempts {
            exposure: Exposure {
                bound: false,
                in_doubt,
            },
            budget,
            ..Attempts::default()
        }
    }

    /// An attempt is being sent at `now`: counted, and the first one
    /// starts the runtime's memory of the key (`retention` long).
    pub(crate) fn sent(&mut self, retention: Duration, now: Instant) -> Record {
        self.count += 1;
        self.budget.sent(retention, now);
        Record::Sent {
            attempts: self.count,
        }
    }

    /// The attempt counted by the last [`sent`](Self::sent) never left
    /// (its body was never handed over): it is not counted.
    // The HTTP binding's alone (its gate knows; a WebSocket frame queued
    // is as good as sent).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn withdrawn(&mut self) {
        self.count = self.count.saturating_sub(1);
    }

    /// An attempt was lost without an answer: it may have run.
    pub(crate) fn lost(&mut self) {
        self.exposure.in_doubt = true;
    }

    /// Another call or process may have sent the key: it may have run
    /// (the WebSocket call knows at its start: [`Attempts::new`]).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn in_doubt(&mut self) {
        self.exposure.in_doubt = true;
    }

    /// The runtime said the key is bound to a job without naming it (an
    /// HTTP 409: a request with the key is in progress).
    // The HTTP binding's alone.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn key_bound(&mut self) {
        self.exposure.bound = true;
    }

    /// The runtime bound the key to `job_id`. A job new to this record is
    /// recorded; the same job again is not.
    pub(crate) fn bound(&mut self, job_id: &str) -> Bound {
        self.exposure.bound = true;
        match &self.job {
            Some(known) if **known == *job_id => Bound {
                job: known.clone(),
                replaced: None,
                record: Record::Nothing,
            },
            _ => {
                let job: Arc<str> = Arc::from(job_id);
                let replaced = self.job.replace(job.clone());
                // The job it replaces may have run (another instance, a
                // runtime that forgot the key): whatever this one's fate,
                // the call may have run.
                if replaced.is_some() {
                    self.exposure.in_doubt = true;
                }
                self.own_job = false;
                Bound {
                    record: Record::Accepted { job: job.clone() },
                    job,
                    replaced,
                }
            }
        }
    }

    /// The runtime's answers show a stored outcome (or, `false`, a fresh
    /// one).
    pub(crate) fn set_replayed(&mut self, replayed: bool) {
        self.replayed = replayed;
    }

    /// The bound job was just accepted as a fresh execution of this call.
    pub(crate) fn accepted_fresh(&mut self) {
        self.own_job = true;
    }

    /// Whether the bound job is this call's own fresh execution.
    pub(crate) fn own_job(&self) -> bool {
        self.own_job
    }

    /// An attempt failed for `reason`; the next one waits as `next` says:
    /// the budget's decision (`retry/budget.rs`).
    pub(crate) fn retried(
        &mut self,
        policy: &RetryPolicy,
        next: NextAttempt,
        reason: String,
        deadline_at: Instant,
        now: Instant,
    ) -> Decision {
        self.failed(reason);
        let sent = self.count;
        match next {
            NextAttempt::Backoff { floor } => {
                self.budget
                    .after_failure(policy, sent, floor, deadline_at, now)
            }
            NextAttempt::After(wait) => {
                self.budget.after_wait(policy, sent, wait, deadline_at, now)
            }
        }
    }

    /// Keeps `reason` as the last error, for the call's final report.
    pub(crate) fn failed(&mut self, reason: String) {
        self.last_error = Some(reason.into_boxed_str());
    }

    /// Whether the event at (`epoch`, `seq`) is new: later than every one
    /// delivered. A new one is remembered.
    pub(crate) fn event(&mut self, epoch: u64, seq: u64) -> bool {
        if self.last_event.is_some_and(|last| last >= (epoch, seq)) {
            return false;
        }
        self.last_event = Some((epoch, seq));
        true
    }

    /// Events the caller did not take in time.
    pub(crate) fn events_dropped(&mut self, n: u64) {
        self.dropped_events += n;
    }

    /// Requests sent.
    pub(crate) fn count(&self) -> u32 {
        self.count
    }

    /// The job the key is bound to.
    pub(crate) fn job(&self) -> Option<&Arc<str>> {
        self.job.as_ref()
    }

    /// What the settled attempts exposed (not counting one out).
    pub(crate) fn exposure(&self) -> Exposure {
        self.exposure
    }

    /// The exposure if the call ended now, `out`: an attempt is sent and
    /// unanswered (it may reach the runtime).
    pub(crate) fn exposure_with(&self, out: bool) -> Exposure {
        let mut exposure = self.exposure;
        exposure.in_doubt |= out;
        exposure
    }

    /// Whether the runtime's answers show a stored outcome.
    pub(crate) fn replayed(&self) -> bool {
        self.replayed
    }

    /// The last reason an attempt failed.
    pub(crate) fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// Events the caller did not take in time.
    pub(crate) fn dropped_events(&self) -> u64 {
        self.dropped_events
    }

    /// The retry budget.
    pub(crate) fn budget(&self) -> &RetryBudget {
        &self.budget
    }

    /// The retry budget, to start its clock or set a send limit.
    pub(crate) fn budget_mut(&mut self) -> &mut RetryBudget {
        &mut self.budget
    }

    /// The call as an ending names it, `out` as in
    /// [`exposure_with`](Self::exposure_with): what the give-up rule reads.
    pub(crate) fn ended<'a>(&'a self, key: &'a IdempotencyKey, out: bool) -> Ended<'a> {
        Ended {
            key,
            job_id: self.job.as_deref(),
            exposure: self.exposure_with(out),
            attempts: self.count,
            last_error: self.last_error(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::classify::{give_up, Ending};
    use crate::error::{Error, Execution};
    use crate::retry::Exhausted;

    /// A step of a call, as a transport reports it.
    #[derive(Debug, Clone, Copy)]
    enum Step {
        Sent,
        Answered,
        Withdrawn,
        Lost,
        Bound(&'static str),
        InDoubt,
    }

    /// Runs `steps` on a fresh record; returns it, whether an attempt is
    /// out at the end, and what each step asked the journal to record.
    fn run(steps: &[Step]) -> (Attempts, bool, Vec<Record>) {
        let (mut attempts, mut out, mut records) = (Attempts::default(), false, Vec::new());
        let now = Instant::now();
        for step in steps {
            let record = match *step {
                Step::Sent => {
                    out = true;
                    attempts.sent(Duration::from_secs(60), now)
                }
                Step::Answered => {
                    out = false;
                    Record::Nothing
                }
                Step::Withdrawn => {
                    out = false;
                    attempts.withdrawn();
                    Record::Nothing
                }
                Step::Lost => {
                    out = false;
                    attempts.lost();
                    Record::Nothing
                }
                Step::Bound(job) => {
                    out = false;
                    attempts.bound(job).record
                }
                Step::InDoubt => {
                    attempts.in_doubt();
                    Record::Nothing
                }
            };
            records.push(record);
        }
        (attempts, out, records)
    }

    /// The table in the module docs, row by row: steps, then the exposure
    /// and the execution class of a call ending now, and its attempts.
    #[test]
    fn the_exposure_table() {
        use Step::*;
        let rows: &[(&[Step], bool, bool, Execution, u32)] = &[
            (&[], false, false, Execution::NotRun, 0),
            (&[Sent], false, true, Execution::MayHaveRun, 1),
            (&[Sent, Answered], false, false, Execution::NotRun, 1),
            (&[Sent, Withdrawn], false, false, Execution::NotRun, 0),
            (&[Sent, Lost], false, true, Execution::MayHaveRun, 1),
            (&[Sent, Bound("j1")], true, false, Execution::MayHaveRun, 1),
            (&[InDoubt], false, true, Execution::MayHaveRun, 0),
            (
                &[Sent, Lost, Sent, Answered],
                false,
                true,
                Execution::MayHaveRun,
                2,
            ),
            (
                &[Sent, Answered, Sent, Withdrawn],
                false,
                false,
                Execution::NotRun,
                1,
            ),
        ];
        for (steps, bound, in_doubt, execution, count) in rows {
            let (attempts, out, _) = run(steps);
            let exposure = attempts.exposure_with(out);
            assert_eq!(
                (exposure.bound, exposure.in_doubt, exposure.unresolved()),
                (*bound, *in_doubt, *execution),
                "{steps:?}"
            );
            assert_eq!(attempts.count(), *count, "{steps:?}");
            // The give-up rule reads the same facts.
            let key = IdempotencyKey::new();
            let e = give_up(attempts.ended(&key, out), Ending::Deadline(Duration::ZERO));
            assert_eq!(e.execution(), *execution, "{steps:?}: {e}");
        }
    }

    /// Each step asks the journal for what it must record: each send, and
    /// each job the key is bound to, once.
    #[test]
    fn each_step_names_its_journal_record() {
        use Step::*;
        let (attempts, _, records) =
            run(&[Sent, Bound("j1"), Bound("j1"), Lost, Sent, Bound("j2")]);
        assert_eq!(
            records,
            [
                Record::Sent { attempts: 1 },
                Record::Accepted { job: "j1".into() },
                Record::Nothing,
                Record::Nothing,
                Record::Sent { attempts: 2 },
                Record::Accepted { job: "j2".into() },
            ]
        );
        assert_eq!(attempts.job().map(|j| &**j), Some("j2"));
    }

    /// Binding to another job hands back the one replaced, for the index.
    #[test]
    fn a_new_job_replaces_the_old_one() {
        let mut attempts = Attempts::default();
        let first = attempts.bound("j1");
        assert!(first.replaced.is_none());
        let again = attempts.bound("j1");
        assert!(
            Arc::ptr_eq(&first.job, &again.job),
            "the same job is shared"
        );
        let second = attempts.bound("j2");
        assert_eq!(second.replaced.as_deref(), Some("j1"));
        assert_eq!(&*second.job, "j2");
    }

    /// The records reach the recorder as its two calls.
    #[test]
    fn records_reach_the_recorder() {
        #[derive(Default)]
        struct Log(Mutex<Vec<String>>);
        impl CallRecorder for Log {
            fn sent(&self, _: &IdempotencyKey, attempts: u32) {
                self.0.lock().unwrap().push(format!("sent {attempts}"));
            }
            fn accepted(&self, _: &IdempotencyKey, job_id: &str) {
                self.0.lock().unwrap().push(format!("accepted {job_id}"));
            }
        }
        let (log, key) = (Log::default(), IdempotencyKey::new());
        Record::Sent { attempts: 3 }.write(&key, Some(&log));
        Record::Accepted { job: "j".into() }.write(&key, Some(&log));
        Record::Nothing.write(&key, Some(&log));
        Record::Sent { attempts: 4 }.write(&key, None);
        assert_eq!(*log.0.lock().unwrap(), ["sent 3", "accepted j"]);
    }

    /// The budget rule through the record: the attempts it counted are the
    /// ones the budget judges, the reason is kept for the report, and a
    /// give-up names the limit.
    #[test]
    fn the_budget_counts_the_records_sends() {
        let policy = RetryPolicy::exponential()
            .initial_delay(Duration::from_millis(1))
            .max_delay(Duration::from_millis(1))
            .max_attempts(2)
            .max_elapsed(Duration::from_secs(60));
        let now = Instant::now();
        let far = now + Duration::from_secs(3600);
        let mut attempts = Attempts::default();
        let _ = attempts.sent(Duration::from_secs(600), now);
        let floor = Some(Duration::from_millis(5));
        let backoff = NextAttempt::Backoff { floor };
        assert_eq!(
            attempts.retried(&policy, backoff, "reset".into(), far, now),
            Decision::RetryAt(now + Duration::from_millis(5))
        );
        assert_eq!(attempts.last_error(), Some("reset"));
        let _ = attempts.sent(Duration::from_secs(600), now);
        assert_eq!(
            attempts.retried(&policy, backoff, "reset again".into(), far, now),
            Decision::GiveUp(Exhausted::Attempts { max: 2 })
        );
        // The send limit came from the first send, not the second.
        assert_eq!(
            attempts.budget().send_limit(),
            Some(now + Duration::from_secs(600))
        );
        // A wait past the deadline gives up at once.
        let deadline = now + Duration::from_secs(1);
        let mut waiting = Attempts::default();
        let wait = Duration::from_secs(2);
        assert_eq!(
            waiting.retried(
                &policy,
                NextAttempt::After(wait),
                "running".into(),
                deadline,
                now
            ),
            Decision::GiveUp(Exhausted::Deadline { wait })
        );
        // A journal's earlier send limit holds from the start.
        let limited = Attempts::new(true, Some((now, Duration::from_secs(1))));
        assert!(limited.budget().may_send_at(now).is_err());
        assert_eq!(limited.exposure().unresolved(), Execution::MayHaveRun);
        let e = give_up(
            limited.ended(&IdempotencyKey::new(), false),
            Ending::BudgetSpent {
                reason: "spent".into(),
                permanent: false,
            },
        );
        assert!(matches!(e, Error::OutcomeUnavailable { .. }), "{e:?}");
    }

    /// Events are new only past every one delivered, per (epoch, seq).
    #[test]
    fn events_are_deduplicated_in_order() {
        let mut attempts = Attempts::default();
        assert!(attempts.event(0, 1));
        assert!(!attempts.event(0, 1));
        assert!(attempts.event(0, 3));
        assert!(!attempts.event(0, 2));
        // A new epoch (a new session) starts its sequence again.
        assert!(attempts.event(1, 1));
        assert!(!attempts.event(0, 9));
        attempts.events_dropped(2);
        assert_eq!(attempts.dropped_events(), 2);
    }

    /// A job this call's attempt started fresh stays its own until the key
    /// is bound to another job; a replayed acceptance never makes one.
    #[test]
    fn a_freshly_accepted_job_is_the_calls_own_until_another_is_bound() {
        let mut attempts = Attempts::default();
        assert!(!attempts.own_job());
        let _ = attempts.bound("job_1");
        attempts.set_replayed(false);
        attempts.accepted_fresh();
        assert!(attempts.own_job());
        // The same job again (a later attempt's answer) keeps it.
        let _ = attempts.bound("job_1");
        assert!(attempts.own_job());
        // Another job: whatever it is, it is not the one this call started.
        let _ = attempts.bound("job_2");
        assert!(!attempts.own_job());
    }
}
