//! The command line: every command, flag and help text, and the parsers
//! that turn flag values into typed values (so a bad value is reported by
//! name before anything connects).

use std::path::PathBuf;

use arcp_mock::{Dialect, ReplayPolicy};
use arcp_sdk::DialectChoice;
use arcp_types::IdempotencyKey;
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::Value;

/// The exit status of a usage error (a bad flag, value or argument, found
/// by clap or after parsing): sysexits' `EX_USAGE`, apart from the statuses
/// that say how a call ended.
pub(crate) const EXIT_USAGE: u8 = 64;

const TOP_EXAMPLES: &str = "\
Examples:
  # Start a local mock runtime (prints its ws:// URL), then call a tool on it:
  arcp mock serve --port 7777
  arcp invoke echo --url ws://127.0.0.1:7777/arcp --args '{\"hello\": \"world\"}'

  # The same call from a script: one JSON object on stdout, the outcome in the exit status.
  arcp invoke echo --url ws://127.0.0.1:7777/arcp --args '{\"hello\": \"world\"}' --json

Exit status of `arcp invoke`, by outcome (`ran` in --json): 0 ok, 2 tool error (it ran),
3 did not run (duplicate key included), 4 may have run (outcome unknown: repeat with --key),
6 not sent (your --key may have run before: repeat with it), 5 journal locked,
1 anything else. Every command: 64 usage error (a bad flag, value or argument: sysexits EX_USAGE).

Environment: ARCP_URL (the runtime's URL, for --url), ARCP_TOKEN (the bearer token, for --token),
ARCP_JOURNAL (for --journal), ARCP_RUNTIME_KEY_RETENTION (for --runtime-key-retention),
RUST_LOG (diagnostics).";

/// `--runtime-key-retention`'s short help (`-h`).
const RUNTIME_KEY_RETENTION_SHORT: &str = "How long the runtime remembers an idempotency key, in \
seconds (default: 86400, the Python runtime's default)";

/// `--runtime-key-retention`'s help (`arcp invoke`, `arcp journal recover`):
/// the guidance of `ClientBuilder::runtime_key_retention`.
const RUNTIME_KEY_RETENTION_HELP: &str = "\
How long the runtime remembers an idempotency key, in seconds (default: 86400, 24 hours, the \
Python runtime's default). Set it to the shortest retention of the runtimes reached, less the \
longest a send may take to reach them (a proxy or queue that holds it). A call first sent longer \
ago is never sent again: past it the runtime would run the tool afresh, so a retry or `arcp \
journal recover` ends it \"outcome unknown\" instead.";

const INVOKE_EXAMPLES: &str = "\
Examples:
  # Call a tool and print its result (progress and logs go to stderr):
  arcp invoke counter --url ws://127.0.0.1:7777/arcp --args '{\"steps\": 5, \"sleep_ms\": 1000}'

  # Arguments from a file (or `-` for stdin), a token from the environment:
  ARCP_TOKEN=secret arcp invoke refund --url wss://agents.example.com/arcp --args-file refund.json

  # A key of your own makes the call safe to repeat: the tool runs at most once per key,
  # and a repeated call gets the stored outcome back (\"replayed\": true).
  arcp invoke refund --url ws://127.0.0.1:7777/arcp --args '{\"order\": 4812}' \\
      --key refund-4812 --deadline 30 --max-attempts 8 --json

Output with --json (exactly one object on stdout, nothing else):
  {\"status\":\"ok\",\"result\":...,\"job_id\":\"...\"|null,\"key\":\"...\",\"replayed\":false,\"attempts\":1}
  {\"status\":\"error\",\"code\":\"...\",\"message\":\"...\",\"key\":\"...\",\"job_id\":\"...\"|null,\"attempts\":1}

Exit status, by outcome (`ran` in --json):
  0  ok: the tool returned a result
  2  tool error: the tool ran and failed
  3  did not run (proven; a duplicate key included): re-issue the work, even under a new key
  4  may have run, at most once; outcome unknown: repeat with the same --key to learn it
     (also CANCELLED: cancelled before or while the tool ran; repeating answers the same)
  6  not sent: this call ran nothing, but your --key may have run before: repeat with it
     (with --journal and no --key: the journal may hold the call; repeat with its key)
  5  the --journal is locked by a live client
  1  anything else
  64 usage error (a bad flag, value or --args-file; sysexits EX_USAGE), before connecting

The idempotency key is printed on stderr before the call starts (`idempotency key: KEY`),
so a call that is interrupted can be repeated with --key KEY: the tool still runs at most once.";

const MOCK_EXAMPLES: &str = "\
Examples:
  arcp mock serve --port 0                      # any free port; the URL is printed on stdout
  arcp mock serve --dialect legacy              # speak the legacy message set (tool.invoke, ...)
  arcp mock serve --replay-policy accepted-only # replay only job.accepted to retried calls
  arcp mock serve --token secret                # refuse every other bearer token";

const MOCK_SERVE_EXAMPLES: &str = "\
Demo tools:
  echo     returns its arguments
  counter  {\"steps\": N, \"sleep_ms\": MS} (both optional): sleeps MS in all, emits N progress
           events, returns {\"count\": n} where n counts this runtime's executions of counter
  fail     {\"code\": \"PERMISSION_DENIED\", \"message\": \"...\"}: fails with that code
  refund   {\"order\": N, \"cents\": C}: returns {\"refunded\": N, \"cents\": C} (the README's program)

Examples:
  # In one terminal:
  arcp mock serve --port 7777
  # In another:
  arcp invoke counter --url ws://127.0.0.1:7777/arcp --args '{\"steps\": 10, \"sleep_ms\": 2000}'
  arcp invoke fail --url ws://127.0.0.1:7777/arcp --args '{\"code\": \"PERMISSION_DENIED\"}' --json

  # From a script: start it on a free port, read the URL it prints, stop it.
  arcp mock serve --port 0 > url.txt &  MOCK=$!
  until [ -s url.txt ]; do sleep 0.1; done; URL=$(head -n1 url.txt)
  kill $MOCK

It runs until interrupted (Ctrl-C or SIGTERM).";

/// `arcp`: invoke ARCP tools from a terminal or a script.
#[derive(Debug, Parser)]
#[command(
    name = "arcp",
    version,
    about = "Invoke tools on an ARCP agent runtime, replay-safely, from a terminal or a script",
    after_help = TOP_EXAMPLES,
    arg_required_else_help = true
)]
pub(crate) struct Cli {
    /// Client diagnostics on stderr: -v for connection events, -vv for
    /// every protocol step. RUST_LOG overrides it.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Invoke a tool once (retrying safely across failures) and print the outcome.
    #[command(after_help = INVOKE_EXAMPLES)]
    Invoke(InvokeArgs),
    /// A local mock runtime with demo tools, to try everything without a real runtime.
    #[command(subcommand, after_help = MOCK_EXAMPLES, arg_required_else_help = true)]
    Mock(MockCommand),
    /// Look at and act on a client's SQLite invocation journal (after a crash, say).
    #[command(after_help = JOURNAL_EXAMPLES, arg_required_else_help = true)]
    Journal(JournalArgs),
}

const JOURNAL_EXAMPLES: &str = "\
Examples:
  arcp journal --journal calls.db list                  # unfinished and recent calls
  arcp journal --journal calls.db list --unfinished --json
  arcp journal --journal calls.db show refund-4812      # intent, attempts, outcome
  arcp journal --journal calls.db recover --url ws://127.0.0.1:7777/arcp
  arcp journal --journal calls.db discard refund-4812 --yes
  arcp journal --journal calls.db purge --terminal-ttl 3600

list and show open the journal read-only. Every command refuses while a live client
holds the journal (exit status 5); the lock goes when that process ends, even by SIGKILL.
Exit status: 0 done, 5 journal held by a live client, 1 anything else.";

/// `arcp journal` flags.
#[derive(Debug, Args)]
pub(crate) struct JournalArgs {
    /// The journal file (as given to the client's `journal_path`).
    #[arg(
        long,
        short = 'j',
        value_name = "PATH",
        env = "ARCP_JOURNAL",
        global = true
    )]
    pub journal: Option<PathBuf>,

    /// What to do.
    #[command(subcommand)]
    pub command: JournalCommand,
}

/// `arcp journal` commands.
#[derive(Debug, Subcommand)]
pub(crate) enum JournalCommand {
    /// Unfinished and recent calls, most recently changed first: key, tool,
    /// state, age, job id and whether the tool ran.
    List {
        /// Only calls that have not ended (what `recover` would drive).
        #[arg(long)]
        unfinished: bool,
        /// At most this many calls.
        #[arg(long, value_name = "N", default_value_t = 100)]
        limit: usize,
        /// One JSON object per call, one per line.
        #[arg(long)]
        json: bool,
    },
    /// One call: its recorded intent, attempts and outcome.
    Show {
        /// The call's idempotency key.
        #[arg(value_name = "KEY", value_parser = parse_key)]
        key: IdempotencyKey,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Drive every unfinished call to an outcome against the runtime, with
    /// the same keys (each tool still runs at most once), reporting each:
    /// each call once per run (a call whose outcome stays unknown stays
    /// unfinished for the next run).
    Recover {
        /// The runtime's URL (ws://, wss://, http:// or https://).
        #[arg(long, value_name = "URL", value_parser = parse_url, env = "ARCP_URL")]
        url: String,
        /// Bearer token. Never printed. Prefer the ARCP_TOKEN environment variable.
        #[arg(long, value_name = "T", env = "ARCP_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Send the token in clear (ws:// or http://) to a host other than
        /// this machine.
        #[arg(long)]
        allow_insecure_token: bool,
        /// Which ARCP message set to speak.
        #[arg(long, value_enum, value_name = "DIALECT", default_value_t = DialectArg::Auto)]
        dialect: DialectArg,
        #[arg(
            long,
            value_name = "SECS",
            value_parser = parse_secs,
            allow_negative_numbers = true,
            env = "ARCP_RUNTIME_KEY_RETENTION",
            help = RUNTIME_KEY_RETENTION_SHORT,
            long_help = RUNTIME_KEY_RETENTION_HELP
        )]
        runtime_key_retention: Option<f64>,
        /// One JSON object per recovered call, one per line.
        #[arg(long)]
        json: bool,
    },
    /// Stop recovering one call and answering its key from the journal:
    /// its record ends "outcome unknown" (the key's next call is sent
    /// again and may have run), unless it already proves the call did not
    /// run. No record is deleted (`purge` does, by age).
    Discard {
        /// The call's idempotency key.
        #[arg(value_name = "KEY", value_parser = parse_key)]
        key: IdempotencyKey,
        /// Do not ask for confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Apply a retention policy now: delete ended calls older than
    /// --terminal-ttl, unfinished ones untouched for --unfinished-ttl, then
    /// the oldest ended calls beyond --max-records.
    Purge {
        /// Seconds an ended call is kept (default: 86400).
        #[arg(long, value_name = "SECS", value_parser = parse_secs)]
        terminal_ttl: Option<f64>,
        /// Seconds an unfinished call is kept untouched (default: 604800).
        #[arg(long, value_name = "SECS", value_parser = parse_secs)]
        unfinished_ttl: Option<f64>,
        /// Records kept at most (default: 100000; unfinished calls are never evicted).
        #[arg(long, value_name = "N")]
        max_records: Option<usize>,
    },
}

/// `arcp invoke` flags.
#[derive(Debug, Args)]
pub(crate) struct InvokeArgs {
    /// The tool (a v1.1 "agent") to invoke.
    #[arg(value_name = "TOOL")]
    pub tool: String,

    /// The runtime's URL: ws:// or wss://, or http:// or https:// for the
    /// HTTP binding.
    #[arg(long, value_name = "URL", value_parser = parse_url, env = "ARCP_URL")]
    pub url: String,

    /// Bearer token. Never printed. Prefer the ARCP_TOKEN environment variable:
    /// a flag is visible to other users in the process list.
    #[arg(long, value_name = "T", env = "ARCP_TOKEN", hide_env_values = true)]
    pub token: Option<String>,

    /// Send the token in clear (ws:// or http://) to a host other than this
    /// machine. Without it such a call is refused before anything is sent.
    #[arg(long)]
    pub allow_insecure_token: bool,

    /// The tool's arguments as JSON (default: {}).
    #[arg(long, value_name = "JSON", value_parser = parse_json, conflicts_with = "args_file")]
    pub args: Option<Value>,

    /// Read the tool's arguments (JSON) from this file, or from stdin with `-`.
    #[arg(long, value_name = "F")]
    pub args_file: Option<PathBuf>,

    /// The idempotency key (printable ASCII, at most 255 bytes). Default: a
    /// fresh UUIDv7. Reuse a key to repeat a call without running it twice.
    #[arg(long, value_name = "KEY", value_parser = parse_key)]
    pub key: Option<IdempotencyKey>,

    /// Which ARCP message set to speak. `auto` tries v1.1, then legacy.
    #[arg(long, value_enum, value_name = "DIALECT", default_value_t = DialectArg::Auto)]
    pub dialect: DialectArg,

    /// Give up after this many seconds in all (connecting, retries and
    /// waiting included). Default: 300.
    #[arg(long, value_name = "SECS", value_parser = parse_secs, allow_negative_numbers = true)]
    pub deadline: Option<f64>,

    /// How long to keep dialing through transient connection failures
    /// (resets, refused connections, timeouts, HTTP 5xx or 429) before the
    /// first session, in seconds. Default: 30, never past --deadline.
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    pub connect_budget: Option<f64>,

    /// How many times the request may be sent in all (at least 1; default 10).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_attempts: Option<u32>,

    #[arg(
        long,
        value_name = "SECS",
        value_parser = parse_secs,
        allow_negative_numbers = true,
        env = "ARCP_RUNTIME_KEY_RETENTION",
        help = RUNTIME_KEY_RETENTION_SHORT,
        long_help = RUNTIME_KEY_RETENTION_HELP
    )]
    pub runtime_key_retention: Option<f64>,

    /// Record the call in this SQLite journal before it is sent, so that
    /// if this process dies mid-call, `arcp journal recover` finishes it
    /// with the same key (the tool still runs at most once).
    #[arg(long, value_name = "PATH", env = "ARCP_JOURNAL")]
    pub journal: Option<PathBuf>,

    /// Print exactly one JSON object on stdout when the call ends (see below).
    #[arg(long)]
    pub json: bool,
}

/// `arcp --dialect` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DialectArg {
    /// v1.1 first; if the runtime does not understand it, legacy.
    Auto,
    /// ARCP v1.1 (session.hello, job.submit, ...).
    #[value(name = "v1.1")]
    V1_1,
    /// The legacy RFC-0001 set (session.open, tool.invoke, ...).
    Legacy,
}

impl From<DialectArg> for DialectChoice {
    fn from(d: DialectArg) -> Self {
        match d {
            DialectArg::Auto => DialectChoice::Auto,
            DialectArg::V1_1 => DialectChoice::V1_1,
            DialectArg::Legacy => DialectChoice::Legacy,
        }
    }
}

/// `arcp mock` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum MockCommand {
    /// Run a mock runtime on 127.0.0.1 until interrupted; print its ws:// URL on stdout
    /// (its HTTP binding's URL is in the banner on stderr).
    #[command(after_help = MOCK_SERVE_EXAMPLES)]
    Serve(MockServeArgs),
}

/// `arcp mock serve` flags.
#[derive(Debug, Args)]
pub(crate) struct MockServeArgs {
    /// Port on 127.0.0.1 (0: any free port).
    #[arg(long, value_name = "P", default_value_t = 0)]
    pub port: u16,

    /// Which message set to speak.
    #[arg(long, value_enum, value_name = "DIALECT", default_value_t = MockDialectArg::V1_1)]
    pub dialect: MockDialectArg,

    /// What a retried call (same key, same arguments) gets back. Default:
    /// the dialect's reference runtime (v1.1: terminal-replay, legacy:
    /// accepted-only).
    #[arg(long, value_enum, value_name = "POLICY")]
    pub replay_policy: Option<ReplayPolicyArg>,

    /// Accept only this bearer token (default: accept any). Never printed.
    /// Prefer the environment variable: a flag's value is visible to every
    /// local user in the process list.
    #[arg(
        long,
        value_name = "T",
        env = "ARCP_MOCK_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
}

/// `arcp mock serve --dialect` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MockDialectArg {
    /// ARCP v1.1, as the Python 1.1.3 reference runtime speaks it.
    #[value(name = "v1.1")]
    V1_1,
    /// The legacy RFC-0001 set, as the Rust 2.0.0 reference runtime speaks it.
    Legacy,
}

impl From<MockDialectArg> for Dialect {
    fn from(d: MockDialectArg) -> Self {
        match d {
            MockDialectArg::V1_1 => Dialect::V1_1,
            MockDialectArg::Legacy => Dialect::Legacy,
        }
    }
}

/// `arcp mock serve --replay-policy` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReplayPolicyArg {
    /// job.accepted then the stored result or error (Python 1.1.3).
    TerminalReplay,
    /// job.accepted only, never the outcome (Rust 2.0.0, TS, Go, Java).
    AcceptedOnly,
    /// An ack with replay: true (older PHP).
    AckReplay,
    /// The stored result or error only (newer PHP).
    TerminalOnly,
}

impl From<ReplayPolicyArg> for ReplayPolicy {
    fn from(p: ReplayPolicyArg) -> Self {
        match p {
            ReplayPolicyArg::TerminalReplay => ReplayPolicy::TerminalReplay,
            ReplayPolicyArg::AcceptedOnly => ReplayPolicy::AcceptedOnly,
            ReplayPolicyArg::AckReplay => ReplayPolicy::AckReplay,
            ReplayPolicyArg::TerminalOnly => ReplayPolicy::TerminalOnly,
        }
    }
}

/// `--args`: any JSON value.
fn parse_json(s: &str) -> Result<Value, String> {
    serde_json::from_str(s).map_err(|e| format!("not valid JSON: {e}"))
}

/// `--key`: a valid idempotency key.
fn parse_key(s: &str) -> Result<IdempotencyKey, String> {
    IdempotencyKey::try_from(s).map_err(|e| e.to_string())
}

/// `--url`: a ws://, wss://, http:// or https:// URL with a host (http(s)
/// selects the HTTP binding).
fn parse_url(s: &str) -> Result<String, String> {
    let rest = ["ws://", "wss://", "http://", "https://"]
        .iter()
        .find_map(|scheme| s.strip_prefix(scheme))
        .ok_or(
            "expected a ws://, wss://, http:// or https:// URL, such as ws://127.0.0.1:7777/arcp",
        )?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err("the URL has no host".into());
    }
    Ok(s.to_owned())
}

/// `--deadline`: a positive, finite number of seconds.
fn parse_secs(s: &str) -> Result<f64, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| "expected a number of seconds, such as 30 or 2.5".to_owned())?;
    if !(secs.is_finite() && secs > 0.0 && secs <= 1e9) {
        return Err("expected a positive number of seconds".into());
    }
    Ok(secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn urls_need_a_known_scheme_and_a_host() {
        assert!(parse_url("ws://127.0.0.1:1/arcp").is_ok());
        assert!(parse_url("wss://example.com").is_ok());
        assert!(parse_url("http://example.com").is_ok());
        assert!(parse_url("https://example.com/arcp").is_ok());
        assert!(parse_url("ftp://example.com").is_err());
        assert!(parse_url("ws://").is_err());
        assert!(parse_url("ws:///arcp").is_err());
    }

    #[test]
    fn deadlines_are_positive_seconds() {
        assert_eq!(parse_secs("2.5"), Ok(2.5));
        assert!(parse_secs("0").is_err());
        assert!(parse_secs("-1").is_err());
        assert!(parse_secs("inf").is_err());
        assert!(parse_secs("NaN").is_err());
        assert!(parse_secs("soon").is_err());
    }
}
