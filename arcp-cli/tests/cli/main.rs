//! Integration tests of the `arcp` binary: against a child `arcp mock
//! serve`, against an in-process `MockRuntime`, and on bad command lines.

mod against_mock_serve;
mod bad_arguments;
mod help;
mod in_process;
mod support;
