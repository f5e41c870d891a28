//! Prints a call's outcome: the JSON contract (`--json`) or human-readable
//! text. Results go to stdout, everything else to stderr, the client's
//! secrets are scrubbed from every message, and human-mode text has its
//! terminal control characters escaped (a runtime's strings reach the
//! terminal).

use std::io::Write;

use serde::Serialize;
use serde_json::Value;

use arcp_sdk::{escape_control, Execution, Redactor};

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
    /// The token and the URL's secrets, scrubbed from every message.
    pub redactor: &'a Redactor,
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
                writeln!(stdout, "{}", self.human(&pretty))?;
                stdout.flush()?;
                eprintln!(
                    "ok: job {}, key {}, {} attempt{}{}",
                    self.human(out.job_id.as_deref().unwrap_or("(unknown)")),
                    self.human(out.key.as_str()),
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
                eprintln!("error: {}: {}", self.human(&f.code), self.human(&f.message));
                eprintln!(
                    "  key {}, job {}, {} attempt{}",
                    self.human(&f.key),
                    self.human(f.job_id.as_deref().unwrap_or("(none)")),
                    f.attempts,
                    if f.attempts == 1 { "" } else { "s" }
                );
                if let Some(hint) = hint(f) {
                    eprintln!("  {}", self.human(&hint));
                }
                Ok(())
            }
        }
    }

    /// The message with every secret replaced.
    pub(crate) fn redact(&self, message: &str) -> String {
        self.redactor.redact(message).into_owned()
    }

    /// Text for a terminal: redacted, control characters escaped.
    fn human(&self, text: &str) -> String {
        human(self.redactor, text)
    }
}

/// Runtime text fit for a terminal: the client's secrets scrubbed, then
/// control characters escaped (an escape sequence could rewrite the screen).
pub(crate) fn human(redactor: &Redactor, text: &str) -> String {
    escape_control(&redactor.redact(text)).into_owned()
}

/// What to do next, for the outcomes where that is not obvious.
fn hint(f: &Failure) -> Option<String> {
    Some(match f.code.as_str() {
        // Before the general "not sent" hint, which would hide it.
        "DUPLICATE_KEY" if f.ran == Execution::NotSent => format!(
            "the journal records --key {} for a call with other arguments that may have \
             reached the runtime; this call sent nothing, and the key may be bound to it \
             elsewhere. Do not use a new key; repeat this call with this key once the other's \
             outcome is known",
            f.key
        ),
        _ if f.ran == Execution::NotSent && f.origin == KeyOrigin::Journaled => format!(
            "this call ran nothing, but the journal may hold it under key {} (generated for this \
             call), and `arcp journal recover` would send it: repeat it with --key {} (never a \
             new one)",
            f.key, f.key
        ),
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

/// A writer for diagnostics on a terminal: control characters in what is
/// written (a runtime's text inside a log line) are escaped.
pub(crate) struct TerminalSafe<W>(pub W);

impl<W: Write> Write for TerminalSafe<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        self.0.write_all(escape_control(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_text_is_scrubbed_and_escaped() {
        let redactor = Redactor::new(Some("s3cret"), "ws://u:pw-91c@h/arcp");
        assert_eq!(
            human(&redactor, "bad token s3cret\x1b]0;owned\x07 pw-91c"),
            "bad token <redacted>\\u{1b}]0;owned\\u{7} <redacted>"
        );
        assert_eq!(human(&Redactor::default(), "plain\nline"), "plain\nline");
    }

    fn failure(code: &str, ran: Execution, origin: KeyOrigin) -> Failure {
        Failure {
            code: code.into(),
            message: "m".into(),
            key: "k-1".into(),
            job_id: None,
            attempts: 0,
            ran,
            origin,
            exit_code: crate::outcome::exit_status(ran, code),
        }
    }

    #[test]
    fn a_local_key_conflict_gets_its_own_hint() {
        let hint = hint(&failure(
            "DUPLICATE_KEY",
            Execution::NotSent,
            KeyOrigin::Supplied,
        ))
        .unwrap();
        assert!(hint.contains("the journal records --key k-1"), "{hint}");
        assert!(hint.contains("Do not use a new key"), "{hint}");
    }

    #[test]
    fn the_not_sent_hint_says_where_the_key_came_from() {
        let supplied = hint(&failure(
            "CONNECT_FAILED",
            Execution::NotSent,
            KeyOrigin::Supplied,
        ))
        .unwrap();
        assert!(supplied.contains("--key k-1 was yours"), "{supplied}");
        let journaled = hint(&failure(
            "CONNECT_FAILED",
            Execution::NotSent,
            KeyOrigin::Journaled,
        ))
        .unwrap();
        assert!(!journaled.contains("was yours"), "{journaled}");
        assert!(journaled.contains("generated for this call"), "{journaled}");
        assert!(journaled.contains("arcp journal recover"), "{journaled}");
        assert!(journaled.contains("--key k-1"), "{journaled}");
    }

    #[test]
    fn diagnostics_have_their_control_characters_escaped() {
        let mut out = TerminalSafe(Vec::new());
        out.write_all(b"error=\x1b[2J done\n").unwrap();
        assert_eq!(String::from_utf8(out.0).unwrap(), "error=\\u{1b}[2J done\n");
    }
}
