//! One logical call: the builder, the awaitable handle and its events, and
//! the [`Client`] methods that hand them out (here, beside what they
//! return, so that the client module needs nothing of this one).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use arcp_types::{IdempotencyKey, Invoke};
use serde_json::Value;

use crate::client::Client;
use crate::error::Error;
use crate::outcome::{CancelOutcome, ToolOutput};
use crate::request::{CallRequest, CallShared, EventsEnd, TraceId};

mod events;
mod recovery;
mod traceparent;
#[cfg(doc)]
use crate::{Journal, RecoveryMode};
pub use events::Events;
pub use recovery::RecoveryPass;
use traceparent::trace_id_of_traceparent;

/// Turns a call's result into what the caller asked for: the JSON value
/// itself ([`keep`]), or a typed value (`crate::typed`).
pub(crate) type Decode<Out> = fn(ToolOutput) -> Result<ToolOutput<Out>, Error>;

/// The untyped result, as is.
pub(crate) fn keep(output: ToolOutput) -> Result<ToolOutput, Error> {
    Ok(output)
}

/// Starting calls: the builder of a new call, and the calls a journal
/// holds as unfinished.
impl Client {
    /// Invokes a tool with a fresh idempotency key, retrying across failures
    /// without ever running it twice: the one way to start a call (typed
    /// calls go through a [`Tool`](crate::Tool) descriptor).
    ///
    /// The returned builder is awaitable as it is (`.await` sends the call
    /// and waits for its outcome); set options first (an explicit
    /// [`idempotency_key`](InvokeBuilder::idempotency_key), a
    /// [`deadline`](InvokeBuilder::deadline), a trace id), or
    /// [`send`](InvokeBuilder::send) it for an [`Invocation`] whose events,
    /// job id and cancel are at hand while it runs.
    ///
    /// ```no_run
    /// # async fn demo(client: arcp_sdk::Client) -> Result<(), arcp_sdk::Error> {
    /// use std::time::Duration;
    /// use serde_json::json;
    ///
    /// let out = client.invoke_tool("refund", json!({"order": 4812})).await?;
    /// println!("{} (replayed: {})", out.value, out.replayed);
    ///
    /// let mut call = client
    ///     .invoke_tool("refund", json!({"order": 4813}))
    ///     .deadline(Duration::from_secs(30))
    ///     .send();
    /// let mut events = call.events();
    /// tokio::spawn(async move {
    ///     while let Some(event) = events.next().await {
    ///         println!("{event:?}");
    ///     }
    /// });
    /// let out = call.await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// Everything a call can end with but a result is an [`Error`] that
    /// says whether the tool ran ([`Error::execution`]); the crate's
    /// [handling outcomes](crate#handling-outcomes) guide has the table for
    /// WebSocket and HTTP. The runtime's own error for the job is
    /// [`Error::Tool`]; the key bound to another intent,
    /// [`Error::DuplicateKey`]; a request that may have run but whose
    /// outcome could not be had, [`Error::OutcomeUnavailable`] (retry later
    /// with [`Error::key`]); the deadline, [`Error::DeadlineExceeded`];
    /// refusals before acceptance until the budget ran out,
    /// [`Error::RetriesExhausted`]; refused credentials,
    /// [`Error::Unauthenticated`]; a closed client, [`Error::Closed`] or
    /// [`Error::Interrupted`]; an invalid key, trace id or option,
    /// [`Error::InvalidCall`], before anything is sent.
    ///
    /// Dropping the call before it resolves stops this client from driving
    /// it (see [`Invocation`], "Dropping a call").
    pub fn invoke_tool(&self, tool: impl Into<String>, args: Value) -> InvokeBuilder {
        InvokeBuilder::new(self.clone(), tool.into(), Ok(args))
    }
}

/// Builds one call: `client.invoke_tool(tool, args)`, then options, then
/// `.await` (or [`send`](InvokeBuilder::send) for an [`Invocation`]). `Out`
/// is what the call's result becomes: a JSON [`Value`], or the result type
/// of a [`Tool`](crate::Tool) descriptor.
#[must_use = "a call does nothing until awaited"]
pub struct InvokeBuilder<Out = Value> {
    client: Client,
    tool: String,
    /// The arguments, serialized once; or why they could not be.
    arguments: Result<Value, Error>,
    key: Option<Result<IdempotencyKey, Error>>,
    deadline: Option<Duration>,
    trace_id: Option<String>,
    extra: serde_json::Map<String, Value>,
    decode: Decode<Out>,
}

impl<Out> std::fmt::Debug for InvokeBuilder<Out> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InvokeBuilder")
            .field("tool", &self.tool)
            .field("arguments", &self.arguments)
            .field("key", &self.key)
            .field("deadline", &self.deadline)
            .field("trace_id", &self.trace_id)
            .field("extra", &self.extra)
            .field("returns", &std::any::type_name::<Out>())
            .finish_non_exhaustive()
    }
}

impl InvokeBuilder {
    pub(crate) fn new(client: Client, tool: String, arguments: Result<Value, Error>) -> Self {
        InvokeBuilder {
            client,
            tool,
            arguments,
            key: None,
            deadline: None,
            trace_id: None,
            extra: Default::default(),
            decode: keep,
        }
    }
}

impl<Out> InvokeBuilder<Out> {
    /// The same call, its result decoded by `decode` (`crate::typed`).
    pub(crate) fn with_decode<T>(self, decode: Decode<T>) -> InvokeBuilder<T> {
        InvokeBuilder {
            client: self.client,
            tool: self.tool,
            arguments: self.arguments,
            key: self.key,
            deadline: self.deadline,
            trace_id: self.trace_id,
            extra: self.extra,
            decode,
        }
    }

    /// Use this idempotency key instead of a fresh one. Reuse a key (for
    /// example one from [`IdempotencyKey::derive`]) to make a call
    /// idempotent across process restarts.
    pub fn idempotency_key(mut self, key: IdempotencyKey) -> Self {
        self.key = Some(Ok(key));
        self
    }

    /// Use this string as the key; an invalid key fails the call with
    /// [`Error::InvalidCall`] naming the problem.
    pub fn key_str(mut self, key: impl Into<String>) -> Self {
        self.key = Some(
            IdempotencyKey::try_from(key.into()).map_err(|e| Error::invalid_call(e.to_string())),
        );
        self
    }

    /// How long the call may take in all, from the first poll:
    /// waiting for an in-flight slot, recording it in the journal,
    /// connecting and every retry included. The call ends with
    /// [`Error::DeadlineExceeded`] within milliseconds of it, whatever the
    /// connection is doing. Defaults to the client's default deadline.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Use this W3C trace id (32 lowercase hex digits) instead of a fresh one.
    pub fn trace_id(mut self, trace_id: impl Into<String>) -> Self {
        self.trace_id = Some(trace_id.into());
        self
    }

    /// Continues the caller's distributed trace: the trace id of a W3C
    /// `traceparent` header (`00-<32 hex trace id>-<16 hex parent id>-<2 hex
    /// flags>`) becomes the call's trace id, sent on every attempt and
    /// reconnect (WebSocket and HTTP), so one logical call is one trace.
    /// A malformed header fails the call with [`Error::InvalidCall`] naming
    /// it, before anything is sent.
    ///
    /// With `tracing` and `tracing-opentelemetry`, take the current span's
    /// trace id instead: `Span::current().context().span().span_context()
    /// .trace_id().to_string()` passed to [`trace_id`](Self::trace_id).
    pub fn traceparent(mut self, header: &str) -> Self {
        self.trace_id = Some(match trace_id_of_traceparent(header) {
            Some(id) => id.to_owned(),
            // Kept as given: `send` refuses it with the value named.
            None => format!("traceparent {header:?}"),
        });
        self
    }

    /// Adds a dialect payload field to the request (for example
    /// `lease_request` or `max_runtime_sec` in v1.1). It is part of the
    /// intent the runtime fingerprints: keep it identical across retries.
    /// A name the request already carries (the tool, its arguments or its
    /// key, under either dialect's name: [`Invoke::MODELLED_FIELDS`]) fails
    /// the call with [`Error::InvalidCall`] naming it, before anything is
    /// sent.
    pub fn option(mut self, name: impl Into<String>, value: Value) -> Self {
        self.extra.insert(name.into(), value);
        self
    }

    /// Finishes the call. Nothing is sent until the returned [`Invocation`]
    /// is first polled (awaited), as with any Rust future.
    ///
    /// # Errors
    ///
    /// None here: a bad key, trace id or option, or arguments that did not
    /// serialize, end the [`Invocation`] with [`Error::InvalidCall`] or
    /// [`Error::ArgumentsEncode`] when it is awaited, before anything is
    /// sent; its other errors are those of
    /// [`Client::invoke_tool`].
    pub fn send(self) -> Invocation<Out> {
        let shared = Arc::new(CallShared::default());
        let key_supplied = self.key.is_some();
        let key = match self.key {
            None => Ok(IdempotencyKey::new()),
            Some(k) => k,
        };
        let trace_id = match self.trace_id {
            Some(t) if arcp_types::is_trace_id(&t) => Ok(TraceId::new(&t)),
            Some(t) if t.starts_with("traceparent ") => Err(Error::invalid_call(format!(
                "{t} is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>, ids not all zero)"
            ))),
            Some(t) => Err(Error::invalid_call(format!(
                "trace id {t:?} is not 32 lowercase hex digits"
            ))),
            None => Ok(TraceId::random()),
        };
        let options = match Invoke::MODELLED_FIELDS
            .iter()
            .find(|name| self.extra.contains_key(**name))
        {
            Some(name) => Err(Error::invalid_call(format!(
                "option {name:?} names a field the request already carries \
                 (the tool, its arguments or its idempotency key); set it through \
                 invoke_tool and the builder instead"
            ))),
            None => Ok(self.extra),
        };
        let key_for_handle = key.as_ref().ok().cloned();
        let deadline = self
            .deadline
            .unwrap_or(self.client.config().default_deadline);
        let client = self.client.clone();
        // Boxed: the request moves through several futures, each of which
        // would otherwise hold its own copy in the call's state.
        let arguments = self.arguments;
        let request = key.and_then(|key| {
            Ok(Box::new(CallRequest {
                key,
                trace_id: trace_id?,
                invoke: Invoke::new(self.tool, arguments?).with_extra(options?),
                deadline,
                started: Instant::now(),
                events_end: EventsEnd(shared.clone()),
                shared: shared.clone(),
                recorder: None,
                in_doubt: false,
                prior_job: None,
                key_supplied,
                prepared: None,
                claim: None,
            }))
        });
        // Only a valid request becomes a call's future: a refused one would
        // keep its error's room in every call's state.
        let future: OutcomeFuture = match request {
            Ok(request) => Box::pin(async move { client.dispatch(request).await }),
            Err(e) => {
                // Nothing was sent; a valid key the caller supplied may
                // belong to an earlier call that ran: "not sent".
                let e = match (&key_for_handle, key_supplied) {
                    (Some(key), true) => crate::classify::not_sent(e, key),
                    _ => e,
                };
                Box::pin(std::future::ready(Err(e)))
            }
        };
        Invocation {
            future,
            decode: self.decode,
            handle: CallHandle {
                shared,
                key: key_for_handle,
                client: self.client,
            },
        }
    }
}

/// Awaiting the builder sends the call and waits for its outcome:
/// `client.invoke_tool(tool, args).await` is
/// `client.invoke_tool(tool, args).send().await`.
impl<Out> std::future::IntoFuture for InvokeBuilder<Out> {
    type Output = Result<ToolOutput<Out>, Error>;
    type IntoFuture = Invocation<Out>;
    fn into_future(self) -> Invocation<Out> {
        self.send()
    }
}

type OutcomeFuture = Pin<Box<dyn Future<Output = Result<ToolOutput, Error>> + Send>>;

/// A call in progress: await it for the outcome (its result as `Out`: a
/// JSON [`Value`] unless the call is typed); meanwhile read its
/// [`events`](Invocation::events), its [`job_id`](Invocation::job_id), or
/// [`cancel`](Invocation::cancel) it.
///
/// # Errors
///
/// It resolves to `Err` with the errors of
/// [`Client::invoke_tool`]; a typed call also
/// with [`Error::ResultDecode`] and [`Error::ArgumentsEncode`].
///
/// # Dropping a call
///
/// Nothing is sent before the first poll: an invocation dropped unpolled
/// sent nothing. Dropped while in flight, it stops this client from
/// driving the call (no more retries, no cancel is sent): a request that
/// reached the runtime may still run there, at most once, and the
/// runtime keeps its outcome under the key ([`Invocation::key`]), so a
/// later call with the same key gets that outcome instead of running the
/// tool again. To stop the job itself, [`cancel`](Invocation::cancel) it
/// first. With a journal, the call's record stays unfinished, so
/// [`Client::recover`](crate::Client::recover) (in this process or, with a
/// shared journal, another worker) can finish it.
#[must_use = "a call does nothing unless awaited"]
pub struct Invocation<Out = Value> {
    future: OutcomeFuture,
    decode: Decode<Out>,
    handle: CallHandle,
}

/// A cloneable handle on a call, usable from other tasks while the
/// [`Invocation`] itself is being awaited: read its job id or cancel it.
#[derive(Clone)]
pub struct CallHandle {
    shared: Arc<CallShared>,
    key: Option<IdempotencyKey>,
    client: Client,
}

impl std::fmt::Debug for CallHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallHandle")
            .field("key", &self.key)
            .field("job_id", &self.job_id())
            .finish_non_exhaustive()
    }
}

impl<Out> std::fmt::Debug for Invocation<Out> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Invocation")
            .field("key", &self.handle.key)
            .field("job_id", &self.job_id())
            .finish_non_exhaustive()
    }
}

impl<Out> Invocation<Out> {
    /// The call's events, deduplicated by `event_seq`. Take it before
    /// awaiting the call; a second call returns an empty stream. The stream
    /// ends when the call ends. If it is not drained, events beyond the
    /// client's `event_buffer` are dropped (the call itself never blocks).
    pub fn events(&mut self) -> Events {
        let config = self.handle.client.config();
        let (rx, held) = self
            .handle
            .shared
            .watch(config.event_buffer, config.event_buffer_bytes)
            .unzip();
        Events { rx, held }
    }

    /// The call's idempotency key (`None` only if the key given was invalid).
    pub fn key(&self) -> Option<&IdempotencyKey> {
        self.handle.key()
    }

    /// The job id, once the runtime accepted the call.
    pub fn job_id(&self) -> Option<String> {
        self.handle.job_id()
    }

    /// A cloneable handle for other tasks (job id, acceptance, cancel).
    pub fn handle(&self) -> CallHandle {
        self.handle.clone()
    }

    /// Asks the runtime to cancel the call's job. See [`CallHandle::cancel`].
    pub async fn cancel(&self) -> CancelOutcome {
        self.handle.cancel().await
    }

    /// Waits for the runtime to accept the call. See [`CallHandle::accepted`].
    pub async fn accepted(&self) -> Option<String> {
        self.handle.accepted().await
    }
}

impl CallHandle {
    /// The call's idempotency key (`None` only if the key given was invalid).
    pub fn key(&self) -> Option<&IdempotencyKey> {
        self.key.as_ref()
    }

    /// The job id, once the runtime accepted the call.
    pub fn job_id(&self) -> Option<String> {
        self.shared.job_id()
    }

    /// Waits until the runtime accepts the call and returns its job id, or
    /// `None` if the call ended without being accepted. A caller that
    /// joined the same logical call (same key and intent, awaited twice)
    /// learns the same job id.
    pub async fn accepted(&self) -> Option<String> {
        self.shared.accepted().await
    }

    /// Asks the runtime to cancel the call's job and reports truthfully
    /// whether the request was written to a connection and whether the
    /// runtime confirmed it, within the client's `cancel_timeout` whatever
    /// the connection does. While the call is live, a cancel lost with its
    /// connection is sent again on the next one.
    ///
    /// Over the HTTP binding there is no cancel message: the outcome is
    /// always [`CancelOutcome::NotDispatched`] (drop the invocation to stop
    /// waiting; the runtime still finishes the job).
    pub async fn cancel(&self) -> CancelOutcome {
        if !self.shared.dispatched.load(Ordering::Acquire) {
            let reason = if self.shared.ask_cancel_before_handover() {
                "the call had not been sent: it is stopped, and will never be sent"
            } else {
                "the call is being handed to the connection: ask again"
            };
            return CancelOutcome::NotDispatched {
                reason: reason.into(),
            };
        }
        let Some(key) = self.key.clone() else {
            return CancelOutcome::NotDispatched {
                reason: "the call was invalid and never sent".into(),
            };
        };
        self.client.cancel(key, self.shared.clone()).await
    }
}

impl<Out> Future for Invocation<Out> {
    type Output = Result<ToolOutput<Out>, Error>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let decode = self.decode;
        self.future
            .as_mut()
            .poll(cx)
            .map(|outcome| outcome.and_then(decode))
    }
}
