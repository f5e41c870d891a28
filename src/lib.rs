//! # arcp-workspace-tests
//!
//! The workspace's own package (not published): it owns the integration,
//! chaos, checker and interop tests in `tests/` and the benchmarks in
//! `benches/`, which use the SDK's crates directly (`arcp_types`,
//! `arcp_sdk`, `arcp_mock`). It exports nothing.

#![forbid(unsafe_code)]

// The root README's code compiles (its first program also runs in CI, as
// `examples/first_program.rs`, against `arcp mock serve`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
