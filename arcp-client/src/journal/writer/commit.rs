//! A batch's commit, in three steps: merge its transitions (withholding what
//! another caller still drives); record the new calls with the transitions
//! in one transaction, without reading first; decide every other prepare
//! against its record and write what it needs.

use std::collections::{HashMap, HashSet};
use std::time::SystemTime;

use arcp_types::IdempotencyKey;
use tracing::warn;

use super::expiry::{ended_unknown, past_key_retention};
use super::queue::{pending_writes, Pending, PrepareReply, Prepared, Prior};
use super::state::Writer;
use crate::journal::memory::transition;
use crate::journal::{
    Journal, JournalEntry, JournalError, JournalErrorKind, JournalOutcome, JournalState,
    JournalWrite,
};
use crate::sync::lock;

/// A batch's commit: per prepare (in order) its decision and whether that
/// decision holds only if the last transaction (`result`) committed; its result and the transitions' (they may
/// commit apart); the writes the store refused (fenced).
pub(super) struct Committed {
    pub(super) decisions: Vec<(Result<Prepared, JournalError>, bool)>,
    pub(super) result: Result<(), JournalError>,
    pub(super) transitions: Result<(), JournalError>,
    pub(super) refused: HashSet<IdempotencyKey>,
    /// Keys whose terminal, if a "did not run", is not durable: withheld
    /// (another caller drives the key) or its record's fate unknown.
    pub(super) doubtful: HashSet<IdempotencyKey>,
}

/// A batch's decisions and writes, as its steps leave them.
pub(super) struct Step {
    /// Per prepare (in order): its decision, and whether that decision
    /// holds only if step 3's transaction commits.
    pub(super) decisions: Vec<Option<(Result<Prepared, JournalError>, bool)>>,
    /// The transitions' writes not committed yet.
    pub(super) transition_writes: Vec<JournalWrite>,
    /// The transitions' result, once they committed apart from step 3.
    pub(super) transitions_apart: Option<Result<(), JournalError>>,
}

/// Step 1's result: the transitions' writes, and what they settle.
pub(super) struct Merged {
    pub(super) writes: Vec<JournalWrite>,
    /// Keys whose terminal, if a "did not run", is not durable.
    pub(super) doubtful: HashSet<IdempotencyKey>,
    /// Keys no longer unsure because their call ends in this batch: unsure
    /// again if the batch does not commit.
    pub(super) ended_unsure: Vec<IdempotencyKey>,
}

/// Why step 2 committed nothing.
pub(super) enum Failed {
    /// The store did not answer: retry the batch.
    Unavailable(JournalError),
    /// The store refused the transaction.
    Refused(JournalError),
}

impl Writer {
    /// Decides every prepare of the batch and commits it with the batch's
    /// transitions, in named steps:
    ///
    /// 1. [`merge_transitions`](Self::merge_transitions): the writes of the
    ///    queued transitions, less those another caller's call still needs;
    /// 2. [`record_new_calls`](Self::record_new_calls): the prepares of keys
    ///    new to this batch are recorded with the transitions in one
    ///    transaction, without reading first (a key that turns out to have a
    ///    record is left to step 3);
    /// 3. [`decide_the_rest`](Self::decide_the_rest): every other prepare is
    ///    decided against its record as the batch leaves it, and the records
    ///    to write are committed (with the transitions, if step 2 had nothing
    ///    to record).
    ///
    /// `Err`: the store was unavailable; the batch is to be retried whole
    /// (what of it committed is safe to write again).
    pub(super) fn commit(
        &mut self,
        journal: &dyn Journal,
        prepares: &[(JournalEntry, PrepareReply)],
        transitions: &HashMap<IdempotencyKey, Pending>,
    ) -> Result<Committed, JournalError> {
        // Keys whose record an earlier commit may have landed (its answer
        // was lost): whatever error this batch meets, their callers cannot
        // be told "did not run", since a recovery may find and send it.
        let unsure_before: HashSet<IdempotencyKey> = prepares
            .iter()
            .filter(|(e, _)| self.unsure.contains(&e.key))
            .map(|(e, _)| e.key.clone())
            .collect();
        let Merged {
            writes: transition_writes,
            doubtful,
            ended_unsure,
        } = self.merge_transitions(prepares, transitions);
        let mut step = Step {
            decisions: (0..prepares.len()).map(|_| None).collect(),
            transition_writes,
            transitions_apart: None,
        };
        // A batch the store did not take is retried whole: the doubt its
        // terminals ended must hold for the retry too (the prepare's commit
        // may still land).
        let retry = |writer: &mut Self, e: JournalError| {
            writer.unsure.extend(ended_unsure.iter().cloned());
            Err(e)
        };
        if let Err(failed) = self.record_new_calls(journal, prepares, transitions, &mut step) {
            return match failed {
                Failed::Unavailable(e) => retry(self, e),
                // Nothing of the batch committed: every prepare fails with
                // the store's error, and so do the transitions.
                Failed::Refused(e) => Ok(Committed {
                    decisions: prepares
                        .iter()
                        .map(|(entry, _)| {
                            let failed = self.failed_prepare(&entry.key, &e, &unsure_before);
                            (Err(failed), false)
                        })
                        .collect(),
                    transitions: Err(e.clone()),
                    result: Err(e),
                    refused: journal.take_fenced().into_iter().collect(),
                    doubtful,
                }),
            };
        }
        let result = match self.decide_the_rest(journal, prepares, transitions, &mut step) {
            Ok(result) => result,
            Err(e) => return retry(self, e),
        };
        let decisions = step
            .decisions
            .into_iter()
            .zip(prepares)
            .map(|(d, (entry, _))| {
                let (decision, wrote) = d.expect("every prepare decided");
                let failed = match (&decision, &result) {
                    (Err(e), _) => Some(e),
                    (Ok(_), Err(e)) if wrote => Some(e),
                    _ => None,
                };
                match failed {
                    Some(e) if unsure_before.contains(&entry.key) => (
                        Err(self.failed_prepare(&entry.key, e, &unsure_before)),
                        false,
                    ),
                    _ => (decision, wrote),
                }
            })
            .collect();
        Ok(Committed {
            decisions,
            transitions: step.transitions_apart.unwrap_or_else(|| result.clone()),
            result,
            // Writes the store refused: the calls belong to another worker.
            refused: journal.take_fenced().into_iter().collect(),
            doubtful,
        })
    }

    /// The error a prepare's caller gets when its batch failed with `e`. A
    /// key an earlier commit may have recorded (that commit's answer was
    /// lost) gets [`JournalErrorKind::Unavailable`], which says the call
    /// may have run: the record may be there for a recovery to send, so a
    /// refusal of the retry proves nothing about it.
    pub(super) fn failed_prepare(
        &self,
        key: &IdempotencyKey,
        e: &JournalError,
        unsure_before: &HashSet<IdempotencyKey>,
    ) -> JournalError {
        let settled = matches!(
            e.kind,
            JournalErrorKind::Unavailable | JournalErrorKind::Fenced
        );
        if settled || !unsure_before.contains(key) {
            return e.clone();
        }
        JournalError::new(
            JournalErrorKind::Unavailable,
            &self.shared.location,
            format!(
                "call {key}: an earlier commit of its record may have landed (its answer was \
                 lost), and the retry failed ({}): a recovery may send it",
                e.message
            ),
        )
    }

    /// Step 1: the writes of the batch's transitions. A key another caller
    /// here still drives keeps its record: one caller's "did not run" or
    /// release must not end or give away the call the other drives. Also
    /// the keys whose "did not run" terminal cannot be taken as durable.
    pub(super) fn merge_transitions(
        &mut self,
        prepares: &[(JournalEntry, PrepareReply)],
        transitions: &HashMap<IdempotencyKey, Pending>,
    ) -> Merged {
        // A call prepared again in this batch is being driven again: its
        // queued release (from an earlier attempt) must not give it away.
        let preparing: HashSet<&IdempotencyKey> = prepares.iter().map(|(e, _)| &e.key).collect();
        let mut writes: Vec<JournalWrite> = Vec::new();
        let mut doubtful: HashSet<IdempotencyKey> = HashSet::new();
        let mut ended_unsure: Vec<IdempotencyKey> = Vec::new();
        let driving = lock(&self.shared.driving);
        for (key, p) in transitions {
            let driven = driving.contains_key(key);
            for w in pending_writes(key, p) {
                match &w {
                    JournalWrite::Release { .. } => {
                        if self.unsure.remove(key) {
                            ended_unsure.push(key.clone());
                        }
                        if preparing.contains(key) || driven {
                            continue;
                        }
                    }
                    JournalWrite::Terminal { outcome, .. } => {
                        let unsure = self.unsure.remove(key);
                        if unsure {
                            ended_unsure.push(key.clone());
                        }
                        if !outcome.answers_repeat() {
                            if driven {
                                doubtful.insert(key.clone());
                                continue;
                            }
                            if unsure || self.late_writes.may_reopen(key) {
                                doubtful.insert(key.clone());
                            }
                        }
                    }
                    _ => {}
                }
                writes.push(w);
            }
        }
        Merged {
            writes,
            doubtful,
            ended_unsure,
        }
    }

    /// Step 2: records the prepares of keys that appear once in the batch
    /// and have no transition in it, with the batch's transitions, in one
    /// transaction and without a read: a new call's record, the common
    /// case, costs no more than the write. A key that has a record is left
    /// undecided for step 3. Skipped when the records would not fit under
    /// [`Retention::max_records`](crate::journal::Retention) (step 3 makes
    /// room or refuses).
    pub(super) fn record_new_calls(
        &mut self,
        journal: &dyn Journal,
        prepares: &[(JournalEntry, PrepareReply)],
        transitions: &HashMap<IdempotencyKey, Pending>,
        step: &mut Step,
    ) -> Result<(), Failed> {
        let mut seen: HashMap<&IdempotencyKey, usize> = HashMap::new();
        for (entry, _) in prepares {
            *seen.entry(&entry.key).or_default() += 1;
        }
        let new: Vec<usize> = (0..prepares.len())
            .filter(|&i| {
                let key = &prepares[i].0.key;
                seen[key] == 1 && !transitions.contains_key(key)
            })
            .collect();
        let room = (self.retention.max_records as u64).saturating_sub(self.records);
        if new.is_empty() || new.len() as u64 > room {
            return Ok(());
        }
        let entries: Vec<JournalEntry> = new.iter().map(|&i| prepares[i].0.clone()).collect();
        match journal.apply_and_insert_new(&step.transition_writes, &entries) {
            Ok(inserted) => {
                step.transition_writes.clear();
                step.transitions_apart = Some(Ok(()));
                for (&i, inserted) in new.iter().zip(inserted) {
                    if inserted {
                        self.records += 1;
                        let prior = self.prior_of_new(&prepares[i].0);
                        self.landed(&prepares[i].0.key);
                        // Committed here: the decision does not wait on
                        // step 3's transaction.
                        step.decisions[i] = Some((Ok(Prepared::Proceed(prior)), false));
                    }
                }
                Ok(())
            }
            Err(e) => {
                // Their commit may still land (its answer may be what was
                // lost), and the transitions with it.
                for &i in &new {
                    self.may_land(&prepares[i].0);
                }
                if e.kind == JournalErrorKind::Unavailable {
                    self.late_writes.note(&step.transition_writes);
                }
                if e.kind == JournalErrorKind::Unavailable {
                    Err(Failed::Unavailable(e))
                } else {
                    warn!(
                        error = %e,
                        "journal commit failed: calls being prepared fail; sent/accepted/terminal \
                         records of this batch are lost (those calls stay unfinished and a \
                         recovery re-drives them under their keys)"
                    );
                    Err(Failed::Refused(e))
                }
            }
        }
    }

    /// Step 3: decides each prepare step 2 left undecided against its
    /// record as it will be after the batch's transitions, and commits the
    /// records to write (and the transitions, if step 2 did not). Returns
    /// that transaction's result; `Err` when the store was unavailable (the
    /// batch is retried whole).
    pub(super) fn decide_the_rest(
        &mut self,
        journal: &dyn Journal,
        prepares: &[(JournalEntry, PrepareReply)],
        transitions: &HashMap<IdempotencyKey, Pending>,
        step: &mut Step,
    ) -> Result<Result<(), JournalError>, JournalError> {
        let unavailable = |e: &JournalError| e.kind == JournalErrorKind::Unavailable;
        let rest: Vec<usize> = (0..prepares.len())
            .filter(|&i| step.decisions[i].is_none())
            .collect();
        if rest.is_empty() && step.transition_writes.is_empty() {
            return Ok(Ok(()));
        }
        // The stored records of every key left, in one read.
        let fetched: HashMap<IdempotencyKey, JournalEntry> = {
            let mut keys: Vec<IdempotencyKey> =
                rest.iter().map(|&i| prepares[i].0.key.clone()).collect();
            keys.sort_unstable();
            keys.dedup();
            if keys.is_empty() {
                HashMap::new()
            } else {
                match journal.get_many(&keys) {
                    Ok(found) => found.into_iter().map(|e| (e.key.clone(), e)).collect(),
                    Err(e) if unavailable(&e) => return Err(e),
                    Err(e) => {
                        // Every prepare left fails with the store's error;
                        // the transitions still commit.
                        for &i in &rest {
                            step.decisions[i] = Some((Err(e.clone()), false));
                        }
                        let writes = std::mem::take(&mut step.transition_writes);
                        let result = journal.apply(&writes);
                        if result.as_ref().is_err_and(unavailable) {
                            self.late_writes.note(&writes);
                        }
                        return Ok(result);
                    }
                }
            }
        };
        // Records read after step 2 committed the transitions already show
        // them.
        let pending_on_read = step.transitions_apart.is_none();
        // Each key's record as this batch leaves it, decision by decision.
        let mut view: HashMap<IdempotencyKey, Option<JournalEntry>> = HashMap::new();
        // Keys whose record in `view` is this batch's write: a decision made
        // against it stands only if that write commits.
        let mut pending: HashSet<IdempotencyKey> = HashSet::new();
        let mut inserts: Vec<JournalWrite> = Vec::new();
        let mut created = 0u64;
        let mut purged_for_room = false;
        for &i in &rest {
            let entry = &prepares[i].0;
            let current = match view.get(&entry.key) {
                Some(current) => current.clone(),
                None => {
                    let mut current = fetched.get(&entry.key).cloned();
                    if let (true, Some(e), Some(p)) = (
                        pending_on_read,
                        current.as_mut(),
                        transitions.get(&entry.key),
                    ) {
                        for w in pending_writes(&entry.key, p) {
                            transition(e, &w);
                        }
                    }
                    current
                }
            };
            let (decision, written) = match self.decide(journal, entry, current.as_ref()) {
                Ok(decided) => decided,
                Err(e) if unavailable(&e) => return Err(e),
                Err(e) => {
                    step.decisions[i] = Some((Err(e), false));
                    continue;
                }
            };
            if written.is_some() && current.is_none() {
                let max = self.retention.max_records as u64;
                if self.records + created >= max && !purged_for_room {
                    purged_for_room = true;
                    // Terminal outcomes still queued make their records
                    // evictable: commit them first.
                    if !step.transition_writes.is_empty() {
                        match journal.apply(&step.transition_writes) {
                            Ok(()) => {
                                step.transition_writes.clear();
                                step.transitions_apart = Some(Ok(()));
                            }
                            Err(e) => {
                                if unavailable(&e) {
                                    self.late_writes.note(&step.transition_writes);
                                }
                                warn!(error = %e, "journal commit failed");
                            }
                        }
                    }
                    self.make_room(journal);
                }
                if self.records + created >= max {
                    let err = JournalError::new(
                        JournalErrorKind::Full,
                        &self.shared.location,
                        format!(
                            "{} records and at most {max} allowed, all unfinished or too recent \
                             to evict: recover() or discard() unfinished calls, or raise \
                             Retention::max_records",
                            self.records + created
                        ),
                    );
                    step.decisions[i] = Some((Err(err), false));
                    continue;
                }
                created += 1;
            }
            match written {
                Some(record) => {
                    view.insert(entry.key.clone(), Some(record.clone()));
                    pending.insert(entry.key.clone());
                    inserts.push(JournalWrite::Prepare(record));
                    step.decisions[i] = Some((Ok(decision), true));
                }
                None => {
                    view.insert(entry.key.clone(), current);
                    // Decided against an earlier prepare's record of this
                    // batch: if the batch fails, that record is not there
                    // (sent without it, the call would leave its key with no
                    // record, for a recovery to miss).
                    let depends = pending.contains(&entry.key);
                    step.decisions[i] = Some((Ok(decision), depends));
                }
            }
        }
        // One transaction: transitions first (a replacing prepare wins).
        let transition_count = step.transition_writes.len();
        let mut writes = std::mem::take(&mut step.transition_writes);
        writes.extend(inserts);
        let result = if writes.is_empty() {
            Ok(())
        } else {
            journal.apply(&writes)
        };
        match &result {
            // Nothing of this transaction committed: retry the batch whole.
            // What committed apart (step 2, or the transitions before making
            // room) is safe to write again: a transition of a record already
            // past it changes nothing, and a call's own prepared record is
            // decided as its own.
            Err(e) if unavailable(e) => {
                // Any of it may still land, each write over whatever its
                // key's record is by then; its prepares are unsure until
                // the retry commits them.
                self.late_writes.note(&writes);
                for w in &writes[transition_count..] {
                    if let JournalWrite::Prepare(record) = w {
                        self.may_land(record);
                    }
                }
                return Err(e.clone());
            }
            Ok(()) => self.records += created,
            Err(e) => warn!(
                error = %e,
                transitions = transition_count,
                "journal commit failed: calls being prepared fail; sent/accepted/terminal \
                 records of this batch are lost (those calls stay unfinished and a recovery \
                 re-drives them under their keys)"
            ),
        }
        // A prepare whose commit failed may still land (its answer may be
        // what was lost); one that committed is certain.
        for &i in &rest {
            let Some((decision, wrote)) = &step.decisions[i] else {
                continue;
            };
            if *wrote || matches!(decision, Ok(Prepared::Proceed(_))) {
                let key = &prepares[i].0.key;
                match &result {
                    Ok(()) => self.landed(key),
                    Err(_) => self.may_land(&prepares[i].0),
                };
            }
        }
        Ok(result)
    }

    /// What to do with one prepare given the key's record: the decision,
    /// and the record to write, if any.
    pub(super) fn decide(
        &self,
        journal: &dyn Journal,
        entry: &JournalEntry,
        current: Option<&JournalEntry>,
    ) -> Result<(Prepared, Option<JournalEntry>), JournalError> {
        let Some(existing) = current else {
            return Ok((
                Prepared::Proceed(self.prior_of_new(entry)),
                Some(entry.clone()),
            ));
        };
        // A record of another intent binds the key, unless its call did not
        // run (it never reached the runtime, or the runtime refused it):
        // then the runtime decides this call (it may have bound the key to
        // this intent through another client).
        let unbound = matches!(&existing.state, JournalState::Terminal(o) if o.proves_not_run());
        if !unbound && !crate::request::same_intent(&existing.intent, &entry.intent) {
            return Ok((Prepared::Conflict(existing.clone()), None));
        }
        // Possibly sent longer ago than the runtime remembers keys: never
        // sent again, the answer is "outcome unknown". An unfinished record
        // is left as it is (the next recovery ends it, under the store's
        // ownership rules).
        let now = SystemTime::now();
        let resent = matches!(
            existing.state,
            JournalState::Terminal(JournalOutcome::OutcomeUnknown { .. })
        ) || !existing.state.is_terminal();
        if resent && past_key_retention(existing, self.runtime_key_retention, now) {
            let ended = ended_unknown(existing, self.runtime_key_retention, now);
            return Ok((Prepared::Answer(ended), None));
        }
        Ok(match &existing.state {
            JournalState::Terminal(o) if o.answers_repeat() => {
                (Prepared::Answer(existing.clone()), None)
            }
            // Ended with its outcome unknown: it may have run. A new attempt,
            // in doubt from the start, whose record keeps what was known
            // (sent, and the job).
            JournalState::Terminal(JournalOutcome::OutcomeUnknown { job_id, .. }) => {
                let mut record = entry.clone();
                // Its age still counts from the first prepare.
                record.created_at = existing.created_at;
                record.state = match job_id {
                    Some(job_id) => JournalState::Accepted {
                        job_id: job_id.clone(),
                    },
                    None => JournalState::Sent,
                };
                (Prepared::Proceed(Prior::of(existing, entry)), Some(record))
            }
            // Ended without being the key's outcome (refused as a duplicate,
            // never accepted, invalid): not run, a new attempt. A late write
            // of the key may have put that record over the record of a call
            // that came after (and may have run): in doubt.
            JournalState::Terminal(_) => {
                let prior = Prior {
                    in_doubt: self.late_writes.may_overwrite(&entry.key),
                    ..Prior::default()
                };
                (Prepared::Proceed(prior), Some(entry.clone()))
            }
            // Unfinished with this intent: the same call again (a recovery,
            // the caller re-issuing it, or this very prepare retried after
            // an unavailable store), if no other worker owns it.
            _ => {
                if journal.acquire(&entry.key)? {
                    (Prepared::Proceed(Prior::of(existing, entry)), None)
                } else {
                    return Err(JournalError::new(
                        JournalErrorKind::Fenced,
                        &self.shared.location,
                        format!(
                            "call {}: another live worker owns it; it finishes the call",
                            entry.key
                        ),
                    ));
                }
            }
        })
    }
}

#[cfg(test)]
#[path = "commit_tests.rs"]
mod tests;
