//! Integration tests of the `arcp` binary: against a child `arcp mock
//! serve`, against an in-process `MockRuntime`, on bad command lines, and
//! through a connection killer against the published runtimes.

mod against_mock_serve;
mod bad_arguments;
mod help;
mod in_process;
mod journal;
mod support;
mod through_killer;
