//! Prints a call's outcome: the JSON contract (`--json`) or human-readable
//! text. Results go to stdout, everything else to stderr, and the bearer
//! token is scrubbed from every message.

use std::io::Write;

use serde::Serialize;
use serde_json::Value;

use arcp_sdk::Execution;

use crate::outcome::{CallOutcome, Failure, KeyOrigin};

/// `{"status":"ok",...}`: field order as documented in the README.
#[derive(Debug, Serialize)]
struct OkJson<'a> {
    status: &'static str,
    result: &'a Value,
    job_id: Option<&'a str>,
    key: &'a str,
    replayed: bool,
    attempts: u32,
}

/// `{"status":"error",...}`: field order as documented in the README.
#[derive(Debug, Serialize)]
struct ErrorJson<'a> {
    status: &'static str,
    code: String,
    message: String,
    key: &'a str,
    job_id: Option<&'a str>,
    attempts: u32,
    ran: &'static str,
}

/// How to print.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Printer<'a> {
    /// `--json`: one JSON object on stdout.
    pub json: bool,
    /// The bearer token, scrubbed from every message.
    pub token: Option<&'a str>,
}

impl Printer<'_> {
    /// Prints the outcome. An error writing stdout (a closed pipe) is
    /// reported on stderr and returned.
    pub(crate) fn print(&self, outcome: &CallOutcome) -> std::io::Result<()> {
        let printed = if self.json {
            self.print_json(outcome)
        } else {
            self.print_human(outcome)
        };
        if let Err(e) = &printed {
            eprintln!("error: cannot write the outcome to stdout: {e}");
        }
        printed
    }

    /// The JSON contract: exactly one line with one object on stdout.
    fn print_json(&self, outcome: &CallOutcome) -> std::io::Result<()> {
        let line = match outcome {
            CallOutcome::Ok(out) => serde_json::to_string(&OkJson {
                status: "ok",
                result: &out.value,
                job_id: out.job_id.as_deref(),
                key: out.key.as_str(),
                replayed: out.replayed,
                attempts: out.attempts,
            }),
            CallOutcome::Failed(f) => serde_json::to_string(&ErrorJson {
                status: "error",
                code: f.code.clone(),
                message: self.redact(&f.message),
                key: &f.key,
                job_id: f.job_id.as_deref(),
                attempts: f.attempts,
                ran: f.ran.as_str(),
            }),
        }
        .map_err(std::io::Error::other)?;
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{line}")?;
        stdout.flush()
    }

    /// The result, pretty-printed, on stdout; a summary or the error on stderr.
    fn print_human(&self, outcome: &CallOutcome) -> std::io::Result<()> {
        match outcome {
            CallOutcome::Ok(out) => {
                let pretty =
                    serde_json::to_string_pretty(&out.value).map_err(std::io::Error::other)?;
                let mut stdout = std::io::stdout().lock();
                writeln!(stdout, "{pretty}")?;
                stdout.flush()?;
                eprintln!(
                    "ok: job {}, key {}, {} attempt{}{}",
                    out.job_id.as_deref().unwrap_or("(unknown)"),
                    out.key,
                    out.attempts,
                    if out.attempts == 1 { "" } else { "s" },
                    if out.replayed {
                        " (replayed: a stored outcome; the tool did not run again)"
                    } else {
                        ""
                    }
                );
                Ok(())
            }
            CallOutcome::Failed(f) => {
                eprintln!("error: {}: {}", f.code, self.redact(&f.message));
                eprintln!(
                    "  key {}, job {}, {} attempt{}",
                    f.key,
                    f.job_id.as_deref().unwrap_or("(none)"),
                    f.attempts,
                    if f.attempts == 1 { "" } else { "s" }
                );
                if let Some(hint) = hint(f) {
                    eprintln!("  {hint}");
                }
                Ok(())
            }
        }
    }

    /// The message with every occurrence of the token replaced.
    pub(crate) fn redact(&self, message: &str) -> String {
        redact(message, self.token)
    }
}

/// `message` with every occurrence of `token` replaced by `<redacted>`.
pub(crate) fn redact(message: &str, token: Option<&str>) -> String {
    match token {
        Some(t) if !t.is_empty() => message.replace(t, "<redacted>"),
        _ => message.to_owned(),
    }
}

/// What to do next, for the outcomes where that is not obvious.
fn hint(f: &Failure) -> Option<String> {
    Some(match f.code.as_str() {
        _ if f.ran == Execution::NotSent => format!(
            "this call ran nothing, but --key {} was yours and an earlier call with it may have \
             run: repeat it with the same --key (never a new one)",
            f.key
        ),
        "OUTCOME_UNAVAILABLE"
        | "DEADLINE_EXCEEDED"
        | "INTERRUPTED"
        | "CONNECT_FAILED"
        | "HANDSHAKE_FAILED"
            if f.ran == Execution::NotRun && f.origin == KeyOrigin::Generated =>
        {
            format!(
                "nothing ran: the call never reached the runtime; repeat it (with --key {} or \
                 without)",
                f.key
            )
        }
        "DUPLICATE_KEY" if f.ran == Execution::MayHaveRun => format!(
            "the runtime (or a gateway before it) reports --key {} bound to another call, but an \
             earlier attempt of this call may have reached it: the tool may have run (at most \
             once). Do not use a new key; ask again later with this one",
            f.key
        ),
        "OUTCOME_UNAVAILABLE" | "DEADLINE_EXCEEDED" | "INTERRUPTED" => format!(
            "the tool may have run (at most once); repeat the call with --key {} to get its \
             outcome without running it again",
            f.key
        ),
        "DUPLICATE_KEY" => "this key is bound to a call with other arguments; nothing ran. \
             Use a new key, or the original arguments"
            .to_owned(),
        "RETRIES_EXHAUSTED" => "the runtime never accepted the call; nothing ran".to_owned(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_scrubbed() {
        assert_eq!(
            redact("bad token s3cret!", Some("s3cret")),
            "bad token <redacted>!"
        );
        assert_eq!(redact("nothing", Some("")), "nothing");
        assert_eq!(redact("nothing", None), "nothing");
    }
}
