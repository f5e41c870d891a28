//! `arcp invoke`: connect, make one replay-safe call, render its events, and
//! hand back the outcome.

use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use arcp_sdk::{Client, RetryPolicy};
use arcp_types::IdempotencyKey;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::cli::InvokeArgs;
use crate::outcome::{CallOutcome, Failure, KeyOrigin};
use crate::progress::EventRenderer;

/// The client's own default per-call deadline, used when `--deadline` is absent.
const DEFAULT_DEADLINE: Duration = Duration::from_secs(300);
/// The client's default handshake timeout, lowered to the deadline when shorter.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The client's default connect timeout (per connection, either transport),
/// lowered to the deadline when shorter.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `connect` rides out transient failures unless told otherwise.
const DEFAULT_CONNECT_BUDGET: Duration = Duration::from_secs(30);
/// How long to let the event renderer drain after the call ended.
const EVENTS_DRAIN: Duration = Duration::from_millis(500);
/// How long a graceful session close may take before the process exits anyway.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// A problem with the command line found after parsing (exit status 64,
/// `EX_USAGE`).
#[derive(Debug)]
pub(crate) struct UsageError(pub String);

/// The tool's arguments: `--args`, `--args-file` (`-` for stdin), or `{}`.
pub(crate) fn arguments(args: &InvokeArgs) -> Result<Value, UsageError> {
    if let Some(value) = &args.args {
        return Ok(value.clone());
    }
    let Some(path) = &args.args_file else {
        return Ok(Value::Object(Default::default()));
    };
    let (text, name) = read_args_file(path)?;
    serde_json::from_str(&text)
        .map_err(|e| UsageError(format!("--args-file {name} is not valid JSON: {e}")))
}

fn read_args_file(path: &Path) -> Result<(String, String), UsageError> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| UsageError(format!("cannot read --args-file - (stdin): {e}")))?;
        return Ok((text, "- (stdin)".into()));
    }
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("cannot read --args-file {name}: {e}")))?;
    Ok((text, name))
}

/// Connects, invokes the tool once under `key` (the client retries with it
/// across failures; `origin` says whether the user gave it) and returns how
/// it ended. Events are rendered on stderr
/// meanwhile (without a progress bar when `logging`: diagnostics share stderr).
pub(crate) async fn run(
    args: &InvokeArgs,
    key: IdempotencyKey,
    origin: KeyOrigin,
    arguments: Value,
    logging: bool,
) -> CallOutcome {
    let started = Instant::now();
    let deadline = args
        .deadline
        .map(Duration::from_secs_f64)
        .unwrap_or(DEFAULT_DEADLINE);

    // A person waits on the CLI: cap each backoff at 2 s, so a flaky link
    // that recovers is used within a couple of seconds.
    let mut retry = RetryPolicy::exponential().max_delay(Duration::from_secs(2));
    if let Some(n) = args.max_attempts {
        retry = retry.max_attempts(n);
    }
    let mut builder = Client::builder(args.url.clone())
        .dialect(arcp_sdk::DialectChoice::from(args.dialect))
        .retry(retry)
        .handshake_timeout(HANDSHAKE_TIMEOUT.min(deadline))
        .connect_timeout(CONNECT_TIMEOUT.min(deadline))
        .connect_budget(
            args.connect_budget
                .map(Duration::from_secs_f64)
                .unwrap_or(DEFAULT_CONNECT_BUDGET)
                .min(deadline),
        )
        .client_info("arcp-cli", env!("CARGO_PKG_VERSION"))
        .allow_insecure_token(args.allow_insecure_token);
    if let Some(token) = &args.token {
        builder = builder.bearer_token(token.clone());
    }
    if let Some(path) = &args.journal {
        builder = builder.journal_path(path.clone());
    }
    if let Some(secs) = args.runtime_key_retention {
        builder = builder.runtime_key_retention(Duration::from_secs_f64(secs));
    }

    // Installed first, so an interrupt at any point reports the key.
    let interrupted = match crate::signals::shutdown() {
        Ok(signal) => signal,
        Err(e) => {
            // Nothing was sent: "did not run" only for a key no earlier call
            // may have used.
            let ran = crate::outcome::class_for(arcp_sdk::Execution::NotSent, origin);
            return CallOutcome::Failed(Failure {
                code: "INTERNAL_CLIENT_ERROR".into(),
                message: format!("cannot listen for signals: {e}"),
                key: key.to_string(),
                job_id: None,
                attempts: 0,
                ran,
                origin,
                exit_code: crate::outcome::EXIT_OTHER,
            });
        }
    };
    tokio::pin!(interrupted);

    let connected = tokio::select! {
        connected = builder.connect() => connected,
        () = &mut interrupted => {
            return CallOutcome::Failed(Failure::interrupted(key.to_string(), origin, None));
        }
    };
    let client = match connected {
        Ok(client) => client,
        // The client reports a handshake cut short by our deadline as a
        // connect or handshake failure; say what really ran out.
        Err(error) if args.deadline.is_some() && started.elapsed() >= deadline => {
            return CallOutcome::Failed(Failure::deadline_while_connecting(
                &error,
                key.to_string(),
                origin,
            ));
        }
        Err(error) => {
            return CallOutcome::Failed(Failure::before_the_call(&error, key.to_string(), origin));
        }
    };

    let remaining = deadline
        .saturating_sub(started.elapsed())
        .max(Duration::from_millis(1));
    let mut call = client
        .invoke_tool(args.tool.clone(), arguments)
        .idempotency_key(key.clone())
        .deadline(remaining)
        .send();
    let handle = call.handle();
    let (stop_renderer, stop) = oneshot::channel();
    let renderer =
        tokio::spawn(EventRenderer::new(redactor(args), logging).run(call.events(), stop));
    let result = tokio::select! {
        result = &mut call => Some(result),
        () = &mut interrupted => None,
    };
    // A finished call has ended its event stream; an interrupted one has
    // not. Either way, let the renderer clear its bar before printing.
    if result.is_none() {
        let _ = stop_renderer.send(());
    }
    let _ = tokio::time::timeout(EVENTS_DRAIN, renderer).await;
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, client.close()).await;

    match result {
        Some(Ok(output)) => CallOutcome::Ok(output),
        Some(Err(error)) => CallOutcome::Failed(Failure::from_error(
            &error,
            key.to_string(),
            origin,
            handle.job_id(),
        )),
        None => CallOutcome::Failed(Failure::interrupted(
            key.to_string(),
            origin,
            handle.job_id(),
        )),
    }
}

/// The secrets this invocation holds (the token, the URL's), scrubbed from
/// whatever it prints.
fn redactor(args: &InvokeArgs) -> arcp_sdk::Redactor {
    arcp_sdk::Redactor::new(args.token.as_deref(), &args.url)
}
