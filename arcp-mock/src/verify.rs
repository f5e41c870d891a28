//! wiremock-style expectations on execution counts.

use std::fmt;

/// One expectation registered on a running mock.
#[derive(Debug, Clone)]
pub(crate) enum Expectation {
    Tool { tool: String, times: u64 },
    Key { key: String, times: u64 },
    Total { times: u64 },
}

impl Expectation {
    /// `None` when met, else a one-line description of the mismatch.
    pub fn check(&self, actual: u64) -> Option<String> {
        let (what, times) = match self {
            Expectation::Tool { tool, times } => (format!("tool `{tool}`"), *times),
            Expectation::Key { key, times } => (format!("idempotency key `{key}`"), *times),
            Expectation::Total { times } => ("all tools together".to_owned(), *times),
        };
        (actual != times).then(|| {
            format!(
                "{what}: expected {times} execution{}, got {actual}",
                if times == 1 { "" } else { "s" }
            )
        })
    }
}

/// Expectations that a [`MockRuntime`](crate::MockRuntime) found unmet,
/// returned by [`MockRuntime::try_verify`](crate::MockRuntime::try_verify).
/// Its `Display` is the readable report that
/// [`MockRuntime::verify`](crate::MockRuntime::verify) panics with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyError {
    total: usize,
    failures: Vec<String>,
}

impl VerifyError {
    pub(crate) fn new(total: usize, failures: Vec<String>) -> Self {
        VerifyError { total, failures }
    }

    /// One line per unmet expectation, such as
    /// ``tool `echo`: expected 1 execution, got 2``.
    pub fn failures(&self) -> &[String] {
        &self.failures
    }
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "arcp-mock: {} of {} expectation{} not met:",
            self.failures.len(),
            self.total,
            if self.total == 1 { "" } else { "s" }
        )?;
        for failure in &self.failures {
            write!(f, "\n  - {failure}")?;
        }
        Ok(())
    }
}

impl std::error::Error for VerifyError {}
