//! One call over the HTTP binding: attempts with the same key and intent,
//! classified by status code and envelope, until a terminal answer or a
//! typed give-up.
//!
//! ```text
//!  attempt ──2xx terminal envelope────────────────────────────▶ done (Ok / Tool error)
//!     │    ──422 / DUPLICATE_KEY──────────────────────────────▶ DuplicateKey
//!     │    ──401 / 403────────────────────────────────────────▶ Unauthenticated
//!     │    ──TLS refused (certificate) / proxy 407 to CONNECT─▶ Connect, not retried
//!     │    ──429 / 503 / 408 / retryable error, not accepted──▶ Transient: backoff, Retry-After floor
//!     │    ──409 / job.accepted only──────────────────────────▶ Pending: ladder wait (key is bound)
//!     │    ──reset / cut body / 5xx (not 501, 505) / 1xx ─────▶ Lost: backoff (outcome uncertain)
//!     │      / no terminal
//!     └──── retry with the same key until the budget is spent: RetriesExhausted or
//!           OutcomeUnavailable (when the job may exist); the deadline bounds it all
//! ```

mod answer;
mod setup;
mod status;

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arcp_types::{Dialect, EncodedRequest, Header};
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http::{Method, Request, Uri};
use tokio::sync::watch;
use tracing::{debug, info, warn, Instrument};

use super::gate::{AttemptGate, GatedBody};
use super::transport::{definitive_failure, Transport};
use super::{describe, idempotency_key_header, IDEMPOTENCY_KEY_HEADER};
use crate::attempts::{Attempts, NextAttempt};
use crate::cache::{
    conflict, intent_of_payload, Cached, Intent, KeyOrigin, Outcome, OutcomeCache, PlainResult,
    Settled,
};
use crate::classify::{give_up, Ended, Ending, Exposure};
use crate::config::Config;
use crate::deadline::Deadline;
use crate::error::{Error, Execution};
use crate::outcome::ToolOutput;
use crate::profile::RuntimeProfile;
use crate::redact::Redactor;
use crate::request::CallRequest;
use crate::retry::{Decision, Exhausted, Schedule};
use crate::telemetry::Answered;

/// What the client sends in `Accept`: a stream of envelopes preferred (it
/// carries the job's events), one terminal envelope accepted.
const ACCEPT_BOTH: &str = "application/x-ndjson, application/json;q=0.9";

/// The HTTP backend of a [`crate::Client`]: the connection pool, the
/// endpoint, and the outcome cache. Calls run on the caller's task; nothing
/// is spawned but hyper's connection tasks.
pub(crate) struct HttpBackend {
    transport: Transport,
    /// The endpoint as given (with `/arcp` when it named no path), for
    /// messages; `target` is the same, as each request carries it.
    endpoint: String,
    target: Uri,
    config: Arc<Config>,
    auth: Option<HeaderValue>,
    /// The token and the URL's own secrets (the Basic credentials made of
    /// its user info too), kept out of every message.
    pub(crate) redactor: Redactor,
    /// The caller's extra headers ([`crate::ClientBuilder::header`]).
    headers: Vec<(HeaderName, HeaderValue)>,
    /// Shared with the task that expires it on time ([`sweep`]).
    cache: Arc<Mutex<OutcomeCache>>,
    closed: watch::Sender<bool>,
}

impl std::fmt::Debug for HttpBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpBackend")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl HttpBackend {
    /// The binding's behaviour, in place of a negotiated profile: there is no
    /// welcome, so name and version are unknown (empty); a repeated key gets
    /// the stored terminal (the binding requires it); there are no sessions,
    /// so no resume, subscribe, ping or ack.
    pub(crate) fn profile(&self) -> RuntimeProfile {
        RuntimeProfile {
            name: String::new(),
            version: String::new(),
            dialect: Dialect::V1_1,
            replays_terminal: true,
            echoes_request_id_on_errors: false,
            supports_resume: false,
            supports_subscribe: false,
            answers_ping: false,
            sends_ping: false,
            accepts_ack: false,
            key_echo_marks_replay: false,
            writes_in_pieces: false,
        }
    }

    /// Fails every call in flight, and every later one, with [`Error::Closed`].
    pub(crate) fn close(&self) {
        self.closed.send_replace(true);
    }

    /// Runs one call to its outcome.
    pub(crate) async fn invoke(&self, mut req: CallRequest) -> Result<ToolOutput, Error> {
        req.seal();
        // The intent is encoded once: every attempt sends these bytes, and
        // the outcome cache tells intents apart by them.
        let encoded = Dialect::V1_1.encode_invoke(&req.invoke);
        let Intent { fingerprint, size } = intent_of_payload(encoded.payload());
        let now = Instant::now();
        let key_origin = KeyOrigin::of(req.key_supplied, req.in_doubt);
        // A key generated for this call is in no earlier entry.
        let cached = match key_origin {
            KeyOrigin::Named => self.cache().get(&req.key, fingerprint, now),
            KeyOrigin::Generated => Cached::Miss,
        };
        match cached {
            Cached::Hit(outcome) => {
                req.shared.set_answered(Answered::Cache);
                // The trace is the caller's, as on the WebSocket transport.
                return outcome.into_outcome().map(|mut out| {
                    out.trace_id = req.trace_id.text();
                    out
                });
            }
            Cached::Conflict => return Err(conflict(req.key)),
            Cached::Bound(_) | Cached::Miss => {}
        }
        if size > self.config.max_frame_size {
            return Err(Error::invalid_call(format!(
                "the request is {size} bytes; the frame size limit is {}",
                self.config.max_frame_size
            )));
        }
        let key_header = idempotency_key_header(req.key.as_str())?;
        let mut closed = self.closed.subscribe();
        if *closed.borrow_and_update() {
            return Err(Error::Closed);
        }
        let span = req.span("http");
        let earlier_send = matches!(cached, Cached::Bound(_)) || req.in_doubt;
        let prior_job = req.prior_job.clone();
        let mut call = HttpCall::new(self, req, key_header, encoded, fingerprint);
        let deadline = call.deadline;
        let deadline_at = tokio::time::Instant::from_std(deadline.at());
        // An earlier call with this key and intent may have run it.
        if earlier_send {
            call.record.in_doubt();
        }
        if let Some(job) = prior_job {
            call.bind(&job);
        }
        enum End {
            Done(Outcome),
            Deadline,
            Closed,
        }
        let end = async {
            tokio::select! {
                outcome = tokio::time::timeout_at(deadline_at, call.run()) => match outcome {
                    Ok(outcome) => End::Done(outcome),
                    Err(_) => End::Deadline,
                },
                _ = closed.wait_for(|closed| *closed) => End::Closed,
            }
        }
        .instrument(span.clone())
        .await;
        // From here the outcome goes to the cache below, whatever it is.
        call.settled = true;
        // A request in flight when the deadline or the close cut it short
        // may have reached the runtime: `exposure` counts it.
        let outcome = match end {
            End::Done(outcome) => outcome,
            End::Deadline => {
                call.cut_attempt();
                Err(deadline.exceeded_error(call.ended()))
            }
            End::Closed => {
                call.cut_attempt();
                Err(call.end(Ending::Closed))
            }
        };
        let outcome = outcome.map_err(|e| e.with_attempts(call.record.count()));
        match &outcome {
            Ok(out) => {
                info!(parent: &span, attempts = out.attempts, replayed = out.replayed, job_id = ?out.job_id, "call succeeded")
            }
            Err(e) => {
                info!(parent: &span, attempts = call.record.count(), error = %e, "call failed")
            }
        }
        if call.record.dropped_events() > 0 {
            warn!(parent: &span, dropped = call.record.dropped_events(), "events dropped: the caller did not drain the event stream");
        }
        // The cache admits only the key's own outcome (`cache::admits`); a
        // value kept as text is shared with it, and parsed here once.
        let settled = match (outcome, call.value_text.take()) {
            (Ok(out), Some(value_text)) => Settled::Plain(PlainResult {
                value_text,
                job_id: out.job_id.map(Arc::from),
                key: out.key,
                replayed: out.replayed,
                attempts: out.attempts,
            }),
            (outcome, _) => Settled::Whole(outcome),
        };
        let key_origin = KeyOrigin::of(call.req.key_supplied, call.req.in_doubt);
        self.cache().insert(
            call.req.key.clone(),
            fingerprint,
            &settled,
            key_origin,
            Instant::now(),
        );
        // The trace is set here, for every result alike (the cache keeps
        // none: a hit gets its own caller's).
        settled.into_outcome().map(|mut out| {
            out.trace_id = call.req.trace_id.text();
            out
        })
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, OutcomeCache> {
        // A panic while holding the lock cannot leave the cache inconsistent
        // in a way that matters (entries are whole outcomes): keep using it.
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What one attempt led to.
enum Next {
    /// The call is over.
    Done(Outcome),
    /// Refused before acceptance, transiently: this attempt ran nothing.
    Transient {
        floor: Option<Duration>,
        reason: String,
    },
    /// The key is bound to a job whose outcome this answer did not carry
    /// (409, or `job.accepted` only): wait on the ladder, then ask again.
    Pending {
        floor: Option<Duration>,
        reason: String,
    },
    /// The answer was lost or cut short: the job may have started.
    Lost {
        floor: Option<Duration>,
        reason: String,
    },
}

struct HttpCall<'a> {
    backend: &'a HttpBackend,
    req: CallRequest,
    deadline: Deadline,
    /// The intent's fingerprint in the outcome cache.
    fingerprint: u64,
    /// The call reached its end in `invoke` (its outcome is cached there);
    /// a call dropped before that is remembered on drop.
    settled: bool,
    key_header: HeaderValue,
    /// The intent's payload, encoded once: every attempt sends these bytes
    /// under a fresh envelope header.
    encoded: EncodedRequest,
    /// The current attempt's envelope id and timestamp (buffers reused).
    message_id: String,
    timestamp: String,
    /// A plainly successful result's value, kept as its wire text: parsed
    /// once for the caller, and shared (not copied) by the outcome cache.
    value_text: Option<Arc<str>>,
    /// Requests sent (a request that never connected is not counted), the
    /// job, what the attempts exposed, the last error, the retry budget
    /// and the events delivered (`attempts.rs`).
    record: Attempts,
    /// Whether the key was bound when the current attempt was sent, and to
    /// which job if the runtime said (`replayed`).
    bound_before: Option<Option<Arc<str>>>,
    /// The current attempt's answer is a stream of envelopes, where a new
    /// execution's `job.accepted` comes before its terminal (a JSON body
    /// carries the terminal alone).
    streamed: bool,
    /// A request is on its way: handed to the HTTP client and not yet
    /// answered (a deadline or a close that cuts it short leaves it in
    /// doubt if its gate released its body).
    in_flight: bool,
    /// The current attempt's gate (`gate.rs`).
    gate: Option<Arc<AttemptGate>>,
    /// The current attempt's stream carried `job.accepted`.
    accepted_now: bool,
    ladder: Option<Schedule>,
    /// The token provider's token of the latest attempt (redacted from
    /// what comes back).
    provided: Option<crate::config::Secret>,
}

impl<'a> HttpCall<'a> {
    fn new(
        backend: &'a HttpBackend,
        req: CallRequest,
        key_header: HeaderValue,
        encoded: EncodedRequest,
        fingerprint: u64,
    ) -> Self {
        let record = Attempts::new(false, req.shared.send_limit());
        HttpCall {
            backend,
            deadline: Deadline::new(req.started, req.deadline),
            req,
            fingerprint,
            settled: false,
            key_header,
            encoded,
            message_id: String::with_capacity(32),
            timestamp: String::with_capacity(32),
            value_text: None,
            record,
            bound_before: None,
            streamed: false,
            in_flight: false,
            gate: None,
            accepted_now: false,
            ladder: None,
            provided: None,
        }
    }

    fn config(&self) -> &Config {
        &self.backend.config
    }

    async fn run(&mut self) -> Outcome {
        let deadline_at = self.deadline.at();
        loop {
            // Every send of the key before the runtime may have forgotten
            // it; past that, asking again cannot help.
            if let Err(why) = self.record.budget().may_send_at(Instant::now()) {
                return Err(self.end(Ending::BudgetSpent {
                    reason: why.to_string(),
                    permanent: true,
                }));
            }
            let next = self.attempt().await;
            let backend = self.backend;
            let retry = &backend.config.retry;
            let now = Instant::now();
            let decision = match next {
                Next::Done(outcome) => return outcome,
                Next::Transient { floor, reason } | Next::Lost { floor, reason } => {
                    let next = NextAttempt::Backoff { floor };
                    self.record.retried(retry, next, reason, deadline_at, now)
                }
                Next::Pending { floor, reason } => {
                    // Patient, unjittered waits: the job is running.
                    let wait = self
                        .ladder
                        .get_or_insert_with(|| retry.ladder())
                        .next_ceiling();
                    let wait = floor.map_or(wait, |f| wait.max(f));
                    let next = NextAttempt::After(wait);
                    self.record.retried(retry, next, reason, deadline_at, now)
                }
            };
            match decision {
                Decision::RetryAt(at) => {
                    debug!(attempt = self.record.count(), delay = ?at - now, reason = ?self.record.last_error(), "retrying with the same key");
                    tokio::time::sleep_until(at.into()).await;
                }
                // The deadline cannot be kept: ended now as it would end it.
                Decision::GiveUp(Exhausted::Deadline { .. }) => {
                    return Err(self.deadline.exceeded_error(self.ended()))
                }
                Decision::GiveUp(why @ Exhausted::KeyRetention { .. }) => {
                    return Err(self.end(Ending::BudgetSpent {
                        reason: why.to_string(),
                        permanent: true,
                    }))
                }
                Decision::GiveUp(why) => return Err(self.give_up(&why.to_string())),
            }
        }
    }

    /// The typed give-up when the retry budget is spent:
    /// `OutcomeUnavailable` when the job may exist, `RetriesExhausted` when
    /// every attempt was refused before acceptance.
    fn give_up(&self, reason: &str) -> Error {
        self.end(Ending::BudgetSpent {
            reason: reason.to_owned(),
            permanent: false,
        })
    }

    /// Ends the call without the runtime's terminal, by the one give-up rule.
    fn end(&self, ending: Ending) -> Error {
        give_up(self.ended(), ending)
    }

    /// The call as an ending names it, for the give-up rule.
    fn ended(&self) -> Ended<'_> {
        self.record.ended(&self.req.key, self.in_flight)
    }

    /// The call ends (deadline, close, its caller gone) with an attempt
    /// out: an attempt whose body was never released sent nothing, and
    /// never will (`gate.rs`); it is not counted.
    fn cut_attempt(&mut self) {
        if self.in_flight && !self.gate.as_ref().is_some_and(|gate| gate.cut()) {
            self.in_flight = false;
            self.record.withdrawn();
        }
    }

    /// What the attempts so far exposed to the runtime, the one in flight
    /// included.
    fn exposure(&self) -> Exposure {
        self.record.exposure_with(self.in_flight)
    }

    /// Sends the request once: the same intent (its payload encoded once,
    /// so byte-identical) under a fresh envelope id and timestamp.
    async fn attempt(&mut self) -> Next {
        let provided = match crate::credentials::provided_authorization(self.config()).await {
            Ok(provided) => provided,
            // Nothing was sent: wait and try again, as for a refused connect.
            Err(e) => {
                return Next::Transient {
                    floor: None,
                    reason: e.to_string(),
                }
            }
        };
        let provided = provided.map(|(token, header)| {
            self.provided = Some(token);
            header
        });
        arcp_types::write_new_message_id_and_timestamp(&mut self.message_id, &mut self.timestamp);
        let mut header = Header::outgoing(&self.message_id, &self.timestamp);
        let mut trace = [0; 32];
        header.trace_id = Some(Cow::Borrowed(self.req.trace_id.write(&mut trace)));
        // The body is this string's buffer, taken without a copy.
        let body = Bytes::from(self.encoded.frame_with(&header));
        // What the key was bound to before this attempt, for `replayed`.
        self.bound_before = (self.record.exposure().bound).then(|| self.record.job().cloned());
        self.accepted_now = false;
        // The first send starts the runtime's memory of the key; the
        // journal records the send before it can reach the runtime.
        let retention = self.config().runtime_key_retention;
        self.record
            .sent(retention, Instant::now())
            .write(&self.req.key, self.req.recorder.as_deref());
        let gate = AttemptGate::new(self.req.shared.clone());
        self.gate = Some(gate.clone());
        let mut request = Request::new(GatedBody::new(body, gate));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.backend.target.clone();
        let headers = request.headers_mut();
        headers.reserve(6);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static(ACCEPT_BOTH));
        headers.insert(
            HeaderName::from_static(IDEMPOTENCY_KEY_HEADER),
            self.key_header.clone(),
        );
        if let Some(auth) = provided.as_ref().or(self.backend.auth.as_ref()) {
            headers.insert(AUTHORIZATION, auth.clone());
        }
        for (name, value) in &self.backend.headers {
            headers.insert(name.clone(), value.clone());
        }
        debug!(attempt = self.record.count(), request_id = %self.message_id, "request queued");
        // From here until an answer, the request may reach the runtime
        // (once its gate releases the body).
        self.in_flight = true;
        let next = self.send(request).await;
        self.in_flight = false;
        next
    }

    async fn send(&mut self, request: Request<GatedBody>) -> Next {
        match self.backend.transport.send(request).await {
            Ok(response) => {
                let (parts, mut body) = response.into_parts();
                self.on_response(parts.status.as_u16(), &parts.headers, &mut body)
                    .await
            }
            Err(e) => {
                // Whether the request went out is the gate's to say: a
                // body never released was never sent, whatever failed (a
                // connect, a new connection closed before it took the
                // request). That costs time, not an attempt.
                let released = self.gate.as_ref().is_some_and(|gate| gate.cut());
                if released {
                    self.record.lost();
                    return Next::Lost {
                        floor: None,
                        reason: format!("no response: {}", describe(&e)),
                    };
                }
                self.record.withdrawn();
                if let Some(message) = definitive_failure(&e) {
                    // An untrusted certificate, a proxy that wants
                    // credentials: retrying cannot change it.
                    self.in_flight = false;
                    let refused = Error::Connect {
                        url: self.backend.endpoint.clone(),
                        message,
                        retryable: false,
                        source: Some(crate::error::ErrorSource::new(e)),
                    };
                    return Next::Done(Err(self.end(Ending::ConnectFailed(refused))));
                }
                let what = if e.is_connect() {
                    "could not connect"
                } else {
                    "not sent"
                };
                Next::Transient {
                    floor: None,
                    reason: format!("{what}: {}", describe(&e)),
                }
            }
        }
    }

    /// The backend's redactor, with the provider's token of this call when
    /// there is one (it is fetched per call, so the backend's lacks it).
    fn redactor(&self) -> Cow<'_, Redactor> {
        match &self.provided {
            Some(token) => Cow::Owned(self.backend.redactor.clone().with_secret(token.0.clone())),
            None => Cow::Borrowed(&self.backend.redactor),
        }
    }

    fn redact(&self, text: String) -> String {
        self.redactor().redact_owned(text)
    }
}

/// A call whose caller stopped waiting (its future dropped) before it
/// ended: if a request may have reached the runtime, the key is remembered
/// as bound to this intent, so a later call with the key and intent cannot
/// say it did not run (it sends again, and takes what comes back as the
/// key's stored outcome), as the WebSocket transport remembers it.
impl Drop for HttpCall<'_> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        self.cut_attempt();
        if self.exposure().unresolved() == Execution::MayHaveRun {
            self.backend.cache().remember_binding(
                self.req.key.clone(),
                self.fingerprint,
                None,
                Instant::now(),
            );
        }
    }
}
