//! Integration tests of the `arcp` binary: against a child `arcp mock
//! serve`, against an in-process `MockRuntime`, and on bad command lines.
//! (`through_killer.rs`, against the published runtimes, is a test binary
//! of its own.)

mod against_mock_serve;
mod bad_arguments;
mod environment;
mod help;
mod in_process;
mod journal;
mod key_retention;
mod recover_batches;
mod support;
