//! The writer's upkeep between batches: lease renewals (fencing the calls
//! whose lease this client lost), purges by the retention, and room made
//! under the record cap.

use std::time::{Instant, SystemTime};

use tracing::{debug, warn};

use super::queue::Shared;
use super::state::Writer;
use crate::journal::{Journal, JournalError, PurgeReport, Retention};

impl Writer {
    /// Renews this client's leases; fences the calls it lost.
    pub(super) fn renew(&mut self) {
        if let Some(journal) = self.journal.take() {
            self.renew_on(journal.as_ref());
            self.journal = Some(journal);
        }
    }

    /// [`renew`](Self::renew) on `journal` (taken out of `self` while a
    /// batch is processed).
    pub(super) fn renew_on(&self, journal: &dyn Journal) {
        let started = Instant::now();
        match journal.renew() {
            Ok(lost) => {
                extend_lease(&self.shared, journal, started);
                self.shared.fence(lost);
            }
            Err(e) => warn!(
                error = %e,
                "journal lease renewal failed; retrying (the leases lapse if it keeps failing, \
                 and this worker's calls then go to another worker)"
            ),
        }
    }

    /// Whether this client's leases lapsed without a renewal.
    pub(super) fn lease_lapsed(&self) -> bool {
        self.shared
            .lease
            .borrow()
            .is_some_and(|at| Instant::now() >= at)
    }

    /// Applies the retention policy; logs what it deleted.
    pub(super) fn purge(&mut self) -> Result<PurgeReport, JournalError> {
        let Some(journal) = self.journal.as_deref() else {
            return Err(self.shared.closed_error());
        };
        let report = journal.purge(&self.retention, SystemTime::now())?;
        self.records = report.remaining;
        log_purge(&self.shared.location, &report);
        Ok(report)
    }

    /// Full: evict terminal records down to 90 % of the cap (at least one
    /// below it).
    pub(super) fn make_room(&mut self, journal: &dyn Journal) {
        let max = self.retention.max_records;
        let target = Retention {
            max_records: max - (max / 10).max(1),
            ..self.retention.clone()
        };
        match journal.purge(&target, SystemTime::now()) {
            Ok(report) => {
                self.records = report.remaining;
                log_purge(&self.shared.location, &report);
            }
            Err(e) => warn!(error = %e, "journal purge failed"),
        }
    }
}

/// A renewal that began at `started` succeeded: the leases it renewed last
/// until `started + lease_ttl` at the earliest (the database stamped them
/// later, by its own clock, which runs at the rate this one does). Drivers
/// stop a tenth of the lease before that, unless a later renewal succeeds.
pub(super) fn extend_lease(shared: &Shared, journal: &dyn Journal, started: Instant) {
    if let Some(ttl) = journal.lease_ttl() {
        shared
            .lease
            .send_replace(Some(crate::retry::saturating_deadline(
                started,
                ttl - ttl / 10,
            )));
    }
}

pub(super) fn log_purge(location: &str, report: &PurgeReport) {
    if report.expired_unfinished > 0 {
        warn!(
            journal = %location,
            count = report.expired_unfinished,
            "deleted unfinished calls older than the retention's unfinished_ttl (never recovered)"
        );
    }
    if report.expired_terminal + report.evicted > 0 {
        debug!(
            journal = %location,
            expired = report.expired_terminal,
            evicted = report.evicted,
            remaining = report.remaining,
            "journal purged"
        );
    }
}
