//! [`ExpectationGuard`]: a scoped expectation, checked when it is dropped.

use std::sync::Arc;

use crate::engine::Engine;
use crate::verify::VerifyError;

/// A scoped expectation, from
/// [`MockRuntime::expect_scoped`](crate::MockRuntime::expect_scoped): it
/// counts executions from its creation, and dropping it checks it (panicking
/// with a report that names it when it is unmet, unless the thread is
/// already panicking) and unregisters it, as wiremock's `MockGuard`.
#[must_use = "dropping the guard checks the expectation at once"]
pub struct ExpectationGuard {
    engine: Arc<Engine>,
    id: u64,
    name: Option<String>,
}

impl std::fmt::Debug for ExpectationGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExpectationGuard")
            .field("name", &self.name)
            .field("executions", &self.executions())
            .finish()
    }
}

impl ExpectationGuard {
    pub(crate) fn new(engine: Arc<Engine>, id: u64, name: Option<String>) -> Self {
        ExpectationGuard { engine, id, name }
    }

    /// Executions counted since the guard was made (0 after a
    /// [`reset`](crate::MockRuntime::reset), which removes the expectation).
    pub fn executions(&self) -> u64 {
        self.engine.counted_by(self.id)
    }

    /// Checks the expectation now, keeping it registered.
    ///
    /// # Errors
    ///
    /// A [`VerifyError`] naming the expectation, expected vs actual.
    pub fn try_verify(&self) -> Result<(), VerifyError> {
        self.engine.verify_one(self.id, false)
    }
}

impl Drop for ExpectationGuard {
    fn drop(&mut self) {
        let outcome = self.engine.verify_one(self.id, true);
        if let Err(e) = outcome {
            if !std::thread::panicking() {
                panic!("{e}");
            }
        }
    }
}
