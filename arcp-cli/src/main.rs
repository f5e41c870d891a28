//! `arcp`: invoke ARCP tools from a terminal or a script, and run a local
//! mock runtime to try them on.
//!
//! `main` only parses the command line and dispatches; each module does one
//! job: [`cli`] (flags and help), [`invoke`] (the call), [`progress`] (events
//! on stderr), [`outcome`] (what a call ended with, exit statuses),
//! [`output`] (the JSON contract and human output), [`mock_serve`] (the mock
//! runtime and its demo tools), [`journal`] (an operator's view of the
//! invocation journal).

#![forbid(unsafe_code)]

mod cli;
mod invoke;
mod journal;
mod mock_serve;
mod outcome;
mod output;
mod progress;
mod signals;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command, MockCommand, EXIT_USAGE};
use crate::outcome::{KeyOrigin, EXIT_OTHER};
use crate::output::Printer;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // clap exits 2 on usage errors; 2 means "tool error" here, so
            // they exit EX_USAGE. --help and --version print on stdout: 0.
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    let logging = init_tracing(cli.verbose);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_OTHER);
        }
    };
    let code = runtime.block_on(dispatch(cli.command, logging));
    // Do not wait for background tasks (a connection being torn down).
    runtime.shutdown_background();
    ExitCode::from(code)
}

/// Runs one command and returns the exit status. `logging`: diagnostics
/// are on (they go to stderr too).
async fn dispatch(command: Command, logging: bool) -> u8 {
    match command {
        Command::Invoke(args) => {
            let arguments = match invoke::arguments(&args) {
                Ok(arguments) => arguments,
                Err(invoke::UsageError(message)) => {
                    eprintln!("error: {message}");
                    return EXIT_USAGE;
                }
            };
            // The key is chosen and shown before anything is sent, so a user
            // who interrupts the call can still repeat it with that key.
            // A key the CLI picks is still a generated one: nothing of an
            // earlier call can have run under it. With a journal it is not:
            // the call's record outlives this process, and a recovery may
            // send it, so its key is then treated as the user's (the hints
            // still say the user gave none).
            let (key, origin) = match &args.key {
                Some(key) => (key.clone(), KeyOrigin::Supplied),
                None if args.journal.is_some() => {
                    (arcp_types::IdempotencyKey::new(), KeyOrigin::Journaled)
                }
                None => (arcp_types::IdempotencyKey::new(), KeyOrigin::Generated),
            };
            // A closed stderr must not stop the call.
            let _ = writeln!(std::io::stderr(), "idempotency key: {key}");
            let outcome = invoke::run(&args, key, origin, arguments, logging).await;
            let redactor = arcp_sdk::Redactor::new(args.token.as_deref(), &args.url);
            let printer = Printer {
                json: args.json,
                redactor: &redactor,
            };
            match printer.print(&outcome) {
                Ok(()) => outcome.exit_code(),
                Err(_) => EXIT_OTHER,
            }
        }
        Command::Journal(args) => journal::run(args).await,
        Command::Mock(MockCommand::Serve(args)) => match mock_serve::run(&args).await {
            Ok(()) => 0,
            Err(message) => {
                eprintln!("error: {message}");
                EXIT_OTHER
            }
        },
    }
}

/// Client diagnostics on stderr: off by default, `-v` info, `-vv` debug;
/// `RUST_LOG` wins when set. The client never logs the token. Returns
/// whether any diagnostics may be printed.
fn init_tracing(verbose: u8) -> bool {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "off",
        1 => "arcp_sdk=info,arcp_mock=info",
        _ => "arcp_sdk=debug,arcp_mock=debug",
    };
    let (filter, logging) = match EnvFilter::try_from_default_env() {
        Ok(filter) => (filter, true),
        Err(_) => (EnvFilter::new(default), verbose > 0),
    };
    // Logs carry runtime text: control characters escaped, so no colours.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| output::TerminalSafe(std::io::stderr()))
        .with_ansi(false)
        .with_target(false)
        .try_init();
    logging
}
