//! A batch's commit: merge its transitions (withholding what another caller
//! still drives), decide each prepare against its record, and write both in
//! one transaction.

use std::collections::{HashMap, HashSet};

use arcp_types::IdempotencyKey;
use tracing::warn;

use super::batch::Writer;
use super::lock;
use super::queue::{pending_writes, Pending, PrepareReply, Prepared, Prior};
use crate::journal::memory::transition;
use crate::journal::{
    Journal, JournalEntry, JournalError, JournalErrorKind, JournalOutcome, JournalState,
    JournalWrite,
};

/// A batch's commit: per prepare (in order) its decision and whether it
/// wrote a record; the transaction's result and the transitions' (they may
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

impl Writer {
    /// Decides every prepare of the batch against its record as it will be
    /// after the batch's transitions, and commits the transitions and the
    /// new records in one transaction. `Err`: the store was unavailable
    /// before anything of the batch committed; the batch is to be retried
    /// whole.
    pub(super) fn commit(
        &mut self,
        journal: &dyn Journal,
        prepares: &[(JournalEntry, PrepareReply)],
        transitions: &HashMap<IdempotencyKey, Pending>,
    ) -> Result<Committed, JournalError> {
        let unavailable = |e: &JournalError| e.kind == JournalErrorKind::Unavailable;
        // A call prepared again in this batch is being driven again: its
        // queued release (from an earlier attempt) must not give it away.
        let preparing: HashSet<&IdempotencyKey> = prepares.iter().map(|(e, _)| &e.key).collect();
        let mut transition_writes: Vec<JournalWrite> = Vec::new();
        // Terminals whose "did not run" cannot be taken as durable.
        let mut doubtful: HashSet<IdempotencyKey> = HashSet::new();
        {
            // A key another caller here still drives keeps its record: one
            // caller's "did not run" or release must not end or give away
            // the call the other drives.
            let driving = lock(&self.shared.driving);
            for (key, p) in transitions {
                let driven = driving.contains_key(key);
                for w in pending_writes(key, p) {
                    match &w {
                        JournalWrite::Release { .. } => {
                            self.unsure.remove(key);
                            if preparing.contains(key) || driven {
                                continue;
                            }
                        }
                        JournalWrite::Terminal { outcome, .. } => {
                            let unsure = self.unsure.remove(key);
                            if !outcome.answers_repeat() {
                                if driven {
                                    doubtful.insert(key.clone());
                                    continue;
                                }
                                if unsure {
                                    doubtful.insert(key.clone());
                                }
                            }
                        }
                        _ => {}
                    }
                    transition_writes.push(w);
                }
            }
        }
        // The stored records of every key prepared in this batch, in one read.
        let fetched: HashMap<IdempotencyKey, JournalEntry> = {
            let mut keys: Vec<IdempotencyKey> =
                prepares.iter().map(|(e, _)| e.key.clone()).collect();
            keys.sort_unstable();
            keys.dedup();
            if keys.is_empty() {
                HashMap::new()
            } else {
                match journal.get_many(&keys) {
                    Ok(found) => found.into_iter().map(|e| (e.key.clone(), e)).collect(),
                    Err(e) if unavailable(&e) => return Err(e),
                    Err(e) => {
                        // Every prepare fails with the store's error; the
                        // transitions still commit.
                        let result = journal.apply(&transition_writes);
                        return Ok(Committed {
                            decisions: prepares.iter().map(|_| (Err(e.clone()), false)).collect(),
                            transitions: result.clone(),
                            result,
                            refused: journal.take_fenced().into_iter().collect(),
                            doubtful,
                        });
                    }
                }
            }
        };
        // Each key's record as this batch leaves it, decision by decision.
        let mut view: HashMap<IdempotencyKey, Option<JournalEntry>> = HashMap::new();
        let mut decisions = Vec::with_capacity(prepares.len());
        let mut inserts: Vec<JournalWrite> = Vec::new();
        let mut created = 0u64;
        let mut purged_for_room = false;
        let mut transitions_apart: Option<Result<(), JournalError>> = None;
        for (entry, _) in prepares {
            let current = match view.get(&entry.key) {
                Some(current) => current.clone(),
                None => {
                    let mut current = fetched.get(&entry.key).cloned();
                    if let (Some(e), Some(p)) = (current.as_mut(), transitions.get(&entry.key)) {
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
                    decisions.push((Err(e), false));
                    continue;
                }
            };
            if written.is_some() && current.is_none() {
                let max = self.retention.max_records as u64;
                if self.records + created >= max && !purged_for_room {
                    purged_for_room = true;
                    // Terminal outcomes still queued make their records
                    // evictable: commit them first.
                    if !transition_writes.is_empty() {
                        match journal.apply(&transition_writes) {
                            Ok(()) => {
                                transition_writes.clear();
                                transitions_apart = Some(Ok(()));
                            }
                            Err(e) => warn!(error = %e, "journal commit failed"),
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
                    decisions.push((Err(err), false));
                    continue;
                }
                created += 1;
            }
            match written {
                Some(record) => {
                    view.insert(entry.key.clone(), Some(record.clone()));
                    inserts.push(JournalWrite::Prepare(record));
                    decisions.push((Ok(decision), true));
                }
                None => {
                    view.insert(entry.key.clone(), current);
                    decisions.push((Ok(decision), false));
                }
            }
        }
        // One transaction: transitions first (a replacing prepare wins).
        let transition_count = transition_writes.len();
        let mut writes = transition_writes;
        writes.extend(inserts);
        let result = journal.apply(&writes);
        match &result {
            // Nothing of the transaction committed: retry it whole, except
            // transitions that committed apart.
            Err(e) if unavailable(e) && transitions_apart.is_none() => return Err(e.clone()),
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
        for ((entry, _), (decision, wrote)) in prepares.iter().zip(&decisions) {
            if *wrote || matches!(decision, Ok(Prepared::Proceed(_))) {
                match &result {
                    Ok(()) => self.unsure.remove(&entry.key),
                    Err(_) => self.unsure.insert(entry.key.clone()),
                };
            }
        }
        Ok(Committed {
            decisions,
            transitions: transitions_apart.unwrap_or_else(|| result.clone()),
            result,
            // Writes the store refused: the calls belong to another worker.
            refused: journal.take_fenced().into_iter().collect(),
            doubtful,
        })
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
            return Ok((Prepared::Proceed(Prior::default()), Some(entry.clone())));
        };
        if existing.intent != entry.intent {
            return Ok((Prepared::Conflict(existing.clone()), None));
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
                record.state = match job_id {
                    Some(job_id) => JournalState::Accepted {
                        job_id: job_id.clone(),
                    },
                    None => JournalState::Sent,
                };
                (Prepared::Proceed(Prior::of(existing, entry)), Some(record))
            }
            // Ended without being the key's outcome (refused as a duplicate,
            // never accepted, invalid): proven not run, a new attempt.
            JournalState::Terminal(_) => (Prepared::Proceed(Prior::default()), Some(entry.clone())),
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
