//! wiremock-style expectations on execution counts: what is counted
//! ([`Expectation::tool`], [`Expectation::key`], [`Expectation::total`]),
//! how many times ([`Times`]: exact or a range), and an optional name that
//! the failure report leads with.
//!
//! A leaf: it imports no other module of the crate.

use std::fmt;
use std::ops::{Range, RangeFrom, RangeFull, RangeInclusive, RangeTo, RangeToInclusive};

/// What an [`Expectation`] counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Counted {
    /// Executions of one tool.
    Tool(String),
    /// Executions with one idempotency key (any principal).
    Key(String),
    /// Executions of all tools together.
    Total,
}

/// How many executions an [`Expectation`] accepts: an exact number or a
/// range, as in wiremock's `expect`.
///
/// Built from a `u64` or any range of `u64`: `1`, `1..=2`, `..3`, `2..`,
/// `0..5`, `..=4`, `..`. An empty range (`3..3`, `2..=1`) can never be met.
///
/// ```
/// use arcp_mock::Times;
///
/// assert!(Times::from(1).contains(1));
/// assert!(Times::from(1..=2).contains(2));
/// assert!(!Times::from(..3).contains(3));
/// assert!(Times::from(2..).contains(1_000));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Times {
    min: u64,
    /// Inclusive; `None`: no upper bound.
    max: Option<u64>,
}

impl Times {
    /// Whether `n` executions meet it.
    pub fn contains(&self, n: u64) -> bool {
        n >= self.min && self.max.is_none_or(|max| n <= max)
    }
}

impl From<u64> for Times {
    fn from(n: u64) -> Self {
        Times {
            min: n,
            max: Some(n),
        }
    }
}

impl From<RangeInclusive<u64>> for Times {
    fn from(r: RangeInclusive<u64>) -> Self {
        Times {
            min: *r.start(),
            max: Some(*r.end()),
        }
    }
}

impl From<Range<u64>> for Times {
    fn from(r: Range<u64>) -> Self {
        match r.end.checked_sub(1) {
            Some(max) => Times {
                min: r.start,
                max: Some(max),
            },
            // `n..0`: nothing is below 0.
            None => Times {
                min: 1,
                max: Some(0),
            },
        }
    }
}

impl From<RangeFrom<u64>> for Times {
    fn from(r: RangeFrom<u64>) -> Self {
        Times {
            min: r.start,
            max: None,
        }
    }
}

impl From<RangeTo<u64>> for Times {
    fn from(r: RangeTo<u64>) -> Self {
        Times::from(0..r.end)
    }
}

impl From<RangeToInclusive<u64>> for Times {
    fn from(r: RangeToInclusive<u64>) -> Self {
        Times {
            min: 0,
            max: Some(r.end),
        }
    }
}

impl From<RangeFull> for Times {
    fn from(_: RangeFull) -> Self {
        Times { min: 0, max: None }
    }
}

impl fmt::Display for Times {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = |n: u64| if n == 1 { "" } else { "s" };
        match (self.min, self.max) {
            (min, Some(max)) if min > max => {
                write!(f, "{min}..={max} executions (an empty range, never met)")
            }
            (min, Some(max)) if min == max => write!(f, "{min} execution{}", plural(min)),
            (0, Some(max)) => write!(f, "at most {max} execution{}", plural(max)),
            (min, Some(max)) => write!(f, "between {min} and {max} executions"),
            (min, None) => write!(f, "at least {min} execution{}", plural(min)),
        }
    }
}

/// An expectation on how many times something ran, registered with
/// [`MockRuntime::expect`](crate::MockRuntime::expect) (verified by
/// [`MockRuntime::verify`](crate::MockRuntime::verify) and when the mock is
/// dropped) or [`MockRuntime::expect_scoped`](crate::MockRuntime::expect_scoped)
/// (verified when its guard is dropped, counting only what ran while the
/// guard lived).
///
/// ```
/// use arcp_mock::Expectation;
///
/// let refund = Expectation::tool("refund").times(1).named("the refund runs once");
/// let retries = Expectation::key("refund-4812").times(..=1);
/// let nothing_else = Expectation::total().times(1..=2);
/// # let _ = (refund, retries, nothing_else);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "an expectation does nothing until registered with `MockRuntime::expect`"]
pub struct Expectation {
    counted: Counted,
    times: Times,
    name: Option<String>,
}

impl Expectation {
    /// Counts executions of `tool`. Expects at least one until
    /// [`times`](Self::times) says otherwise.
    pub fn tool(tool: impl Into<String>) -> Self {
        Self::of(Counted::Tool(tool.into()))
    }

    /// Counts executions whose submission carried idempotency key `key` (any
    /// principal). Expects at least one until [`times`](Self::times) says
    /// otherwise.
    pub fn key(key: impl Into<String>) -> Self {
        Self::of(Counted::Key(key.into()))
    }

    /// Counts executions of all tools together. Expects at least one until
    /// [`times`](Self::times) says otherwise.
    pub fn total() -> Self {
        Self::of(Counted::Total)
    }

    fn of(counted: Counted) -> Self {
        Expectation {
            counted,
            times: Times::from(1..),
            name: None,
        }
    }

    /// How many executions meet it: a number (`1`) or a range (`1..=2`,
    /// `..3`, `2..`).
    pub fn times(mut self, times: impl Into<Times>) -> Self {
        self.times = times.into();
        self
    }

    /// A name for the failure report, such as `"the refund runs once"`.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The name given with [`named`](Self::named).
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    pub(crate) fn counted(&self) -> &Counted {
        &self.counted
    }

    /// `None` when `actual` executions meet it, else a one-line description
    /// of the mismatch, led by the name when there is one.
    pub(crate) fn check(&self, actual: u64) -> Option<String> {
        if self.times.contains(actual) {
            return None;
        }
        let what = match &self.counted {
            Counted::Tool(tool) => format!("tool `{tool}`"),
            Counted::Key(key) => format!("idempotency key `{key}`"),
            Counted::Total => "all tools together".to_owned(),
        };
        let what = match &self.name {
            Some(name) => format!("`{name}` ({what})"),
            None => what,
        };
        Some(format!("{what}: expected {}, got {actual}", self.times))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_cover_every_range_form() {
        assert!(Times::from(2).contains(2) && !Times::from(2).contains(3));
        assert!(Times::from(1..=2).contains(1) && !Times::from(1..=2).contains(0));
        assert!(Times::from(..3).contains(0) && !Times::from(..3).contains(3));
        assert!(Times::from(..=3).contains(3) && !Times::from(..=3).contains(4));
        assert!(Times::from(2..).contains(u64::MAX) && !Times::from(2..).contains(1));
        assert!(Times::from(1..3).contains(2) && !Times::from(1..3).contains(3));
        assert!(Times::from(..).contains(0));
        for n in 0..5 {
            assert!(!Times::from(0..0).contains(n));
            assert!(!Times::from(RangeInclusive::new(3, 2)).contains(n));
        }
    }

    #[test]
    fn mismatches_name_the_expectation_and_the_range() {
        let e = Expectation::tool("refund").times(1..=2).named("refund");
        assert_eq!(e.check(1), None);
        assert_eq!(
            e.check(3).as_deref(),
            Some("`refund` (tool `refund`): expected between 1 and 2 executions, got 3")
        );
        let e = Expectation::key("k").times(..3);
        assert_eq!(
            e.check(3).as_deref(),
            Some("idempotency key `k`: expected at most 2 executions, got 3")
        );
        assert_eq!(
            Expectation::total().check(0).as_deref(),
            Some("all tools together: expected at least 1 execution, got 0")
        );
        assert_eq!(
            Expectation::tool("echo").times(1).check(2).as_deref(),
            Some("tool `echo`: expected 1 execution, got 2")
        );
    }
}
