//! The pieces of error messages that depend on what is known: the last
//! failed attempt's reason, a conflict's execution, the job.

use std::fmt;

use super::Execution;

/// "; the last failed attempt: <reason>" when a reason is known, else
/// nothing: for messages.
pub(super) struct LastErrorSuffix<'a>(pub(super) &'a Option<String>);

impl fmt::Display for LastErrorSuffix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(reason) => write!(f, "; the last failed attempt: {reason}"),
            None => Ok(()),
        }
    }
}

/// What a conflict says of the call when an earlier attempt may have run
/// it: for messages.
pub(super) struct ConflictSuffix(pub(super) Execution);

impl fmt::Display for ConflictSuffix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Execution::MayHaveRun => f.write_str(
                " (an earlier attempt of this call may have reached the runtime: it may have \
                 run, at most once; retry later with the same key)",
            ),
            _ => Ok(()),
        }
    }
}

/// " (job J)" when the job is known, else nothing: for messages.
pub(super) struct JobSuffix<'a>(pub(super) &'a Option<String>);

impl fmt::Display for JobSuffix<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(job) => write!(f, " (job {job})"),
            None => Ok(()),
        }
    }
}
