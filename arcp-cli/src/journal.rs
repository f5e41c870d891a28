//! `arcp journal`: an operator's view of a client's SQLite invocation
//! journal, and the few actions that make sense after a crash. `list` and
//! `show` open it read-only; every command refuses while a live client
//! holds it (the client keeps the file locked for as long as it runs).

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, SystemTime};

use arcp_sdk::{
    Client, Error, Journal, JournalEntry, JournalError, JournalErrorKind, JournalOutcome,
    JournalState, Retention, SqliteJournal, ToolOutput,
};
use arcp_types::IdempotencyKey;
use futures_util::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};

use crate::cli::{JournalArgs, JournalCommand};
use crate::outcome::{EXIT_JOURNAL_LOCKED, EXIT_OK, EXIT_OTHER};
use arcp_sdk::Redactor;

use crate::output::human;

/// Runs one `arcp journal` command; returns the exit status.
pub(crate) async fn run(args: JournalArgs) -> u8 {
    let Some(path) = args.journal.clone() else {
        eprintln!("error: which journal? Give --journal PATH (or set ARCP_JOURNAL)");
        return crate::cli::EXIT_USAGE;
    };
    let result = match args.command {
        JournalCommand::List {
            unfinished,
            limit,
            json,
        } => list(&path, unfinished, limit, json),
        JournalCommand::Show { key, json } => show(&path, &key, json),
        JournalCommand::Recover {
            url,
            token,
            allow_insecure_token,
            dialect,
            runtime_key_retention,
            json,
        } => {
            let server = Server {
                url: &url,
                token: token.as_deref(),
                allow_insecure_token,
                runtime_key_retention: runtime_key_retention.map(Duration::from_secs_f64),
            };
            recover(&path, server, dialect.into(), json).await
        }
        JournalCommand::Discard { key, yes } => discard(&path, &key, yes),
        JournalCommand::Purge {
            terminal_ttl,
            unfinished_ttl,
            max_records,
        } => purge(&path, terminal_ttl, unfinished_ttl, max_records),
    };
    match result {
        Ok(()) => EXIT_OK,
        Err(Failure::Journal(e)) => {
            eprintln!("error: {e}");
            if e.kind == JournalErrorKind::Locked {
                eprintln!(
                    "hint: a running client holds this journal; stop it first (its lock goes \
                     with its process)"
                );
                EXIT_JOURNAL_LOCKED
            } else {
                EXIT_OTHER
            }
        }
        Err(Failure::Other(message)) => {
            eprintln!("error: {message}");
            EXIT_OTHER
        }
    }
}

/// Why a command failed.
enum Failure {
    Journal(JournalError),
    Other(String),
}

impl From<JournalError> for Failure {
    fn from(e: JournalError) -> Self {
        Failure::Journal(e)
    }
}

fn list(path: &Path, unfinished: bool, limit: usize, json: bool) -> Result<(), Failure> {
    let journal = SqliteJournal::open_read_only(path)?;
    let entries = if unfinished {
        journal.unfinished(limit)?
    } else {
        journal.list(limit)?
    };
    let mut out = std::io::stdout().lock();
    if json {
        for entry in &entries {
            let _ = writeln!(out, "{}", summary(entry));
        }
        return Ok(());
    }
    if entries.is_empty() {
        let _ = writeln!(
            out,
            "no {}calls in {}",
            if unfinished { "unfinished " } else { "" },
            path.display()
        );
        return Ok(());
    }
    let _ = writeln!(
        out,
        "{:<38} {:<16} {:<9} {:>8}  {:<28} RAN?",
        "KEY", "TOOL", "STATE", "AGE", "JOB"
    );
    for entry in &entries {
        let (_, ran) = outcome_class(entry);
        let _ = writeln!(
            out,
            "{:<38} {:<16} {:<9} {:>8}  {:<28} {}",
            entry.key.as_str(),
            entry.tool,
            state_name(entry),
            age(entry.updated_at),
            job_id(entry).unwrap_or("-"),
            ran
        );
    }
    Ok(())
}

fn show(path: &Path, key: &IdempotencyKey, json: bool) -> Result<(), Failure> {
    let journal = SqliteJournal::open_read_only(path)?;
    let Some(entry) = journal.get(key)? else {
        return Err(Failure::Other(format!(
            "no call with key {key} in {}",
            path.display()
        )));
    };
    let intent: Value = serde_json::from_str(&entry.intent).unwrap_or(Value::Null);
    let mut detail = summary(&entry);
    detail["intent"] = intent;
    detail["trace_id"] = json!(entry.trace_id);
    detail["deadline_secs"] = json!(entry.deadline.as_secs_f64());
    detail["created_at"] = json!(unix_secs(entry.created_at));
    if let JournalState::Terminal(outcome) = &entry.state {
        detail["recorded_outcome"] = serde_json::to_value(outcome).unwrap_or(Value::Null);
    }
    let text = if json {
        detail.to_string()
    } else {
        serde_json::to_string_pretty(&detail).unwrap_or_default()
    };
    println!("{text}");
    Ok(())
}

/// Where `recover` sends the calls, with which credential, and how long
/// that runtime remembers keys (the client's default when `None`).
struct Server<'a> {
    url: &'a str,
    token: Option<&'a str>,
    allow_insecure_token: bool,
    runtime_key_retention: Option<Duration>,
}

/// At most this many unfinished calls are read before a recovery, to
/// report those it ends without sending them.
const UNSENT_SCAN: usize = 4096;

/// The keys of the unfinished calls (the oldest [`UNSENT_SCAN`]), read
/// before the client takes the journal: a recovery ends some without
/// sending them (past the runtime's key retention, or not recoverable) and
/// hands out only the rest, yet each is reported. None for a journal that
/// does not exist yet (connecting creates it).
fn unfinished_keys(path: &Path) -> Result<Vec<IdempotencyKey>, Failure> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let journal = SqliteJournal::open_read_only(path)?;
    Ok(journal
        .unfinished(UNSENT_SCAN)?
        .into_iter()
        .map(|entry| entry.key)
        .collect())
}

async fn recover(
    path: &Path,
    server: Server<'_>,
    dialect: arcp_sdk::DialectChoice,
    json: bool,
) -> Result<(), Failure> {
    let Server {
        url,
        token,
        allow_insecure_token,
        runtime_key_retention,
    } = server;
    // The URL's credentials and the token are never printed.
    let redactor = Redactor::new(token, url);
    let unfinished = unfinished_keys(path)?;
    let mut builder = Client::builder(url)
        .dialect(dialect)
        .journal_path(path)
        .allow_insecure_token(allow_insecure_token);
    if let Some(token) = token {
        builder = builder.bearer_token(token);
    }
    if let Some(retention) = runtime_key_retention {
        builder = builder.runtime_key_retention(retention);
    }
    let client = builder.connect().await.map_err(|e| match e {
        Error::Journal(e) => Failure::Journal(e),
        e => Failure::Other(human(&redactor, &format!("cannot connect to {url}: {e}"))),
    })?;
    let bar = if json || !std::io::stderr().is_terminal() {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(0).with_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} calls recovered {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        )
    };
    let report = Report {
        json,
        redactor: &redactor,
        bar: &bar,
    };
    // One recovery pass, batch after batch (a claim hands out at most 256),
    // each call once: one whose outcome stays unknown stays unfinished.
    let mut pass = client.recovery_pass();
    loop {
        let calls = pass.next_batch().await.map_err(|e| match e {
            Error::Journal(e) => Failure::Journal(e),
            e => Failure::Other(human(&redactor, &e.to_string())),
        })?;
        if calls.is_empty() {
            break;
        }
        bar.inc_length(calls.len() as u64);
        let mut reports = futures_util::stream::iter(calls)
            .map(|call| async move {
                let key = call.key().cloned();
                (key, call.await)
            })
            .buffer_unordered(64);
        while let Some((key, result)) = reports.next().await {
            bar.inc(1);
            let key = key.map(|k| k.as_str().to_owned()).unwrap_or_default();
            report.call(&key, &result);
        }
    }
    let handed_out = pass.handed_out();
    let recovered = handed_out.len();
    // Ended by the recovery itself, without a send (past the runtime's key
    // retention, say): reported too, from their records, once the calls
    // handed out are done (a journal that fails here fails them no more).
    let mut ended_unsent = 0;
    let mut looked_up = Ok(());
    for key in unfinished.iter().filter(|key| !handed_out.contains(*key)) {
        match client.lookup(key).await {
            Ok(entry) => {
                if let Some(outcome) = entry.and_then(|entry| entry.outcome()) {
                    report.call(key.as_str(), &outcome);
                    ended_unsent += 1;
                }
            }
            Err(e) => {
                looked_up = Err(match e {
                    Error::Journal(e) => Failure::Journal(e),
                    e => Failure::Other(human(&redactor, &e.to_string())),
                });
                break;
            }
        }
    }
    bar.finish_and_clear();
    if recovered == 0 && ended_unsent == 0 && looked_up.is_ok() && !json {
        eprintln!("nothing to recover in {}", path.display());
    }
    client.close().await;
    looked_up
}

/// How `recover` reports each call: a JSON line, or a line of text.
struct Report<'a> {
    json: bool,
    redactor: &'a Redactor,
    bar: &'a ProgressBar,
}

impl Report<'_> {
    /// Prints how the call of `key` ended.
    fn call(&self, key: &str, result: &Result<ToolOutput, Error>) {
        let Report {
            json,
            redactor,
            bar,
        } = *self;
        let line = match result {
            Ok(out) => json!({
                "key": key, "status": "ok", "ran": "ran", "job_id": out.job_id,
                "replayed": out.replayed, "result": out.value,
            }),
            Err(e) => json!({
                "key": key, "status": "error", "code": e.code_name(),
                "ran": e.execution().as_str(), "job_id": e.job_id(),
                "message": redactor.redact(&e.to_string()),
            }),
        };
        if json {
            println!("{line}");
        } else {
            let key = human(redactor, key);
            bar.suspend(|| match result {
                Ok(out) => println!(
                    "{key}: ok{} (job {})",
                    if out.replayed { ", replayed" } else { "" },
                    human(redactor, out.job_id.as_deref().unwrap_or("-"))
                ),
                Err(e) => println!(
                    "{key}: {} ({}): {}",
                    human(redactor, &e.code_name()),
                    e.execution(),
                    human(redactor, &e.to_string())
                ),
            });
        }
    }
}

fn discard(path: &Path, key: &IdempotencyKey, yes: bool) -> Result<(), Failure> {
    let journal = SqliteJournal::open(path)?;
    let Some(entry) = journal.get(key)? else {
        return Err(Failure::Other(format!(
            "no call with key {key} in {}",
            path.display()
        )));
    };
    if !yes {
        if !std::io::stdin().is_terminal() {
            return Err(Failure::Other(
                "discarding needs a confirmation: answer on a terminal, or pass --yes".into(),
            ));
        }
        let (_, ran) = outcome_class(&entry);
        eprint!(
            "Discard {key} ({} {}, tool ran: {ran})? It is then neither recovered nor answered \
             from the journal. [y/N] ",
            entry.tool,
            entry.state.name()
        );
        let mut answer = String::new();
        let _ = std::io::stdin().lock().read_line(&mut answer);
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            return Err(Failure::Other("not discarded".into()));
        }
    }
    // The same rule as `Client::discard`: no record is deleted (the
    // journal keeps what it proved of the key); a record that does not
    // prove the call did not run ends "outcome unknown".
    match entry.discard_write(SystemTime::now()) {
        Some(write) => {
            journal.apply(&[write])?;
            println!("discarded {key} (ended outcome unknown: the tool may have run)");
        }
        None => println!("discarded {key} (already final, neither recovered nor answered)"),
    }
    Ok(())
}

fn purge(
    path: &Path,
    terminal_ttl: Option<f64>,
    unfinished_ttl: Option<f64>,
    max_records: Option<usize>,
) -> Result<(), Failure> {
    let journal = SqliteJournal::open(path)?;
    let mut retention = Retention::default();
    if let Some(secs) = terminal_ttl {
        retention = retention.terminal_ttl(Duration::from_secs_f64(secs));
    }
    if let Some(secs) = unfinished_ttl {
        retention = retention.unfinished_ttl(Duration::from_secs_f64(secs));
    }
    if let Some(n) = max_records {
        retention = retention.max_records(n);
    }
    let report = journal.purge(&retention, SystemTime::now())?;
    println!(
        "purged {} ended and {} unfinished calls past their age, {} beyond the cap; {} remain \
         ({} unfinished)",
        report.expired_terminal,
        report.expired_unfinished,
        report.evicted,
        report.remaining,
        report.unfinished
    );
    Ok(())
}

/// One line of `list --json` (and the head of `show`).
fn summary(entry: &JournalEntry) -> Value {
    let (outcome, ran) = outcome_class(entry);
    json!({
        "key": entry.key.as_str(),
        "tool": entry.tool,
        "state": entry.state.name(),
        "age_secs": SystemTime::now()
            .duration_since(entry.updated_at)
            .unwrap_or_default()
            .as_secs(),
        "updated_at": unix_secs(entry.updated_at),
        "job_id": job_id(entry),
        "attempts": entry.attempts,
        "outcome": outcome,
        "ran": ran,
        "first_prepared_at": unix_secs(entry.created_at),
        "reason": unknown_reason(entry),
        "redacted": entry.is_redacted(),
    })
}

/// The state's name; a call that ended with its outcome unknown (never
/// re-sent past the runtime's key retention, or a runtime that keeps no
/// outcomes) says so.
fn state_name(entry: &JournalEntry) -> &'static str {
    match unknown_reason(entry) {
        Some(_) => "unknown",
        None => entry.state.name(),
    }
}

/// Why the call's outcome is unknown, when it ended so.
fn unknown_reason(entry: &JournalEntry) -> Option<&str> {
    match &entry.state {
        JournalState::Terminal(JournalOutcome::OutcomeUnknown { reason, .. }) => Some(reason),
        _ => None,
    }
}

/// The recorded outcome's name and whether the tool ran (`ran`,
/// `not_run`, `may_have_run`); an unfinished call may have run.
fn outcome_class(entry: &JournalEntry) -> (Option<String>, &'static str) {
    match entry.outcome() {
        Some(Ok(_)) => (Some("ok".into()), "ran"),
        Some(Err(e)) => (Some(e.code_name()), e.execution().as_str()),
        // Unfinished: a request may have gone out (sends are recorded
        // after the fact), so the tool may have run.
        None => (None, "may_have_run"),
    }
}

fn job_id(entry: &JournalEntry) -> Option<&str> {
    match &entry.state {
        JournalState::Accepted { job_id } => Some(job_id),
        JournalState::Terminal(outcome) => outcome.job_id(),
        _ => None,
    }
}

fn age(at: SystemTime) -> String {
    let secs = SystemTime::now()
        .duration_since(at)
        .unwrap_or_default()
        .as_secs();
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

fn unix_secs(at: SystemTime) -> f64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}
