//! One call's intent as handed to a transport, and the state it shares with
//! its [`Invocation`](crate::Invocation) handle: job id, acceptance, whether
//! a request went out, and the event stream.
//! [`PreparedCall`] is the per-call work done on the caller's task before
//! the hand-over, and [`Outgoing`] what the call sends.
//!
//! The "sent" and "abandoned" marks form a small protocol between the
//! transport and the caller's future, so that a caller whose deadline fires
//! reports [`Execution::NotRun`](crate::Execution::NotRun) only when no
//! request can ever go out: the transport marks a waiter sent *before*
//! writing, and skips waiters already abandoned; the caller marks itself
//! abandoned and reads whether it was sent, in one atomic step.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use arcp_types::{DecodeError, Dialect, EncodedRequest, IdempotencyKey, Invoke};
use tokio::sync::{mpsc, Notify};

use crate::cache::{fingerprint_of, serialized_size, Intent};
use crate::classify::{Ended, Exposure};
use crate::intent_digest;
use crate::outcome::InvocationEvent;
use crate::sync::lock;
use crate::telemetry::Answered;

/// Where a transport reports a call's progress (the journal, when one is
/// configured). Called on the connection task: must not block.
pub(crate) trait CallRecorder: Send + Sync {
    /// Attempt number `attempts` of the call is being written.
    fn sent(&self, key: &IdempotencyKey, attempts: u32);
    /// The runtime bound the call to `job_id`.
    fn accepted(&self, key: &IdempotencyKey, job_id: &str);
}

/// A call's W3C trace id, kept inline: a call holds it for its whole life,
/// writes it into every attempt's envelope and into its result, and needs
/// no text of it until then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TraceId {
    /// 32 lowercase hex digits, as a number (high and low halves).
    Hex(u64, u64),
    /// An id not in that form, kept as given (a journal record written by
    /// another version, say; ids a caller gives are checked first).
    Other(Box<str>),
}

impl TraceId {
    /// The trace id of `text`.
    pub(crate) fn new(text: &str) -> Self {
        match u128::from_str_radix(text, 16) {
            Ok(n) if arcp_types::is_trace_id(text) => Self::of_u128(n),
            _ => TraceId::Other(text.into()),
        }
    }

    /// A fresh trace id: 128 random bits (W3C asks for random trace ids;
    /// all zero is invalid, and drawn again).
    pub(crate) fn random() -> Self {
        loop {
            let n: u128 = rand::random();
            if n != 0 {
                return Self::of_u128(n);
            }
        }
    }

    fn of_u128(n: u128) -> Self {
        TraceId::Hex((n >> 64) as u64, n as u64)
    }

    /// The id as text, written into `buf`.
    pub(crate) fn write<'a>(&'a self, buf: &'a mut [u8; 32]) -> &'a str {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        match self {
            TraceId::Hex(high, low) => {
                let n = (u128::from(*high) << 64) | u128::from(*low);
                for (i, digit) in buf.iter_mut().enumerate() {
                    *digit = HEX[((n >> (124 - 4 * i)) & 0xf) as usize];
                }
                std::str::from_utf8(buf).unwrap_or_default()
            }
            TraceId::Other(text) => text,
        }
    }
}

impl TraceId {
    /// The id as an owned string, sized to fit.
    pub(crate) fn text(&self) -> String {
        self.write(&mut [0; 32]).to_owned()
    }
}

impl std::fmt::Display for TraceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.write(&mut [0; 32]))
    }
}

/// A call handed from an `Invocation` to a transport.
pub(crate) struct CallRequest {
    pub(crate) key: IdempotencyKey,
    pub(crate) trace_id: TraceId,
    /// The intent, with the key set: every attempt sends exactly this.
    pub(crate) invoke: Invoke,
    pub(crate) deadline: Duration,
    pub(crate) started: Instant,
    pub(crate) shared: Arc<CallShared>,
    /// Held, never read: dropping it ends the call's event stream.
    #[allow(dead_code)]
    pub(crate) events_end: EventsEnd,
    /// The journal's hook (when journaled): told of sends and acceptance.
    pub(crate) recorder: Option<Box<dyn CallRecorder>>,
    /// An earlier process or worker may have sent this call (it comes from
    /// the journal, whose record of a send may lag the send): whatever
    /// happens now, it never reports "did not run".
    pub(crate) in_doubt: bool,
    /// The job an earlier process's attempt was bound to, as its journal
    /// record says: the call starts bound to it.
    pub(crate) prior_job: Option<String>,
    /// The caller chose the key (an earlier process may have used it);
    /// `false` for a key generated for this call, which no runtime has seen.
    pub(crate) key_supplied: bool,
    /// The WebSocket transport's per-call work, done on the caller's task
    /// before the call is handed over (see [`PreparedCall`]);
    /// `None` until then.
    pub(crate) prepared: Option<PreparedCall>,
    /// A recovered call's claim, counted as driven by this client until
    /// the journal counts the call itself (its prepare): a `recover`
    /// meanwhile never hands the call out again. Held, never read.
    pub(crate) claim: Option<Box<dyn Send + Sync>>,
}

impl CallRequest {
    /// The call's tracing span, one shape for both transports: opened on
    /// the caller's task (a child of its span); the transport records the
    /// attempt, the job and the outcome.
    pub(crate) fn span(&self, transport: &'static str) -> tracing::Span {
        tracing::info_span!(
            "arcp.call",
            tool = %self.invoke.tool,
            key = %self.key,
            trace_id = %self.trace_id,
            transport,
            attempt = tracing::field::Empty,
            job_id = tracing::field::Empty,
            outcome = tracing::field::Empty,
        )
    }

    /// Puts the key into the intent: what is fingerprinted, journaled and
    /// sent is the same value.
    pub(crate) fn seal(&mut self) {
        if self.invoke.idempotency_key.as_deref() != Some(self.key.as_str()) {
            self.invoke.idempotency_key = Some(self.key.to_string());
        }
    }
}

const SENT: u8 = 1;
const ABANDONED: u8 = 2;
/// The journal decided this call's prepare: it drives a record of its own.
const RECORDED: u8 = 4;
/// A cancel was asked for (see [`CallShared::ask_cancel_before_handover`]).
const CANCEL_ASKED: u8 = 8;
/// The call was handed to a transport.
const HANDED_OVER: u8 = 16;

/// State shared between an [`Invocation`](crate::Invocation) and the
/// transport running its call.
#[derive(Debug, Default)]
pub(crate) struct CallShared {
    job_id: OnceLock<Arc<str>>,
    /// Woken on acceptance and at the end.
    changed: Notify,
    ended: AtomicBool,
    /// The call was handed to a transport (a cancel can be asked for).
    pub(crate) dispatched: AtomicBool,
    attempts: AtomicU32,
    marks: AtomicU8,
    /// Where the outcome came from ([`Answered`]), for the metrics.
    answered: AtomicU8,
    /// The events channel exists only once someone asked for it: most calls
    /// are never watched, and a channel costs a few KiB.
    events: Mutex<EventSlot>,
    /// No send of the key at or after this instant: its journal record was
    /// prepared (by this process or an earlier one) the runtime's key
    /// retention before it (`retry/budget.rs`), with that retention.
    send_limit: OnceLock<(Instant, Duration)>,
}

#[derive(Debug, Default)]
enum EventSlot {
    #[default]
    Unwatched,
    Watched(EventSender),
    Ended,
}

/// A watcher's buffer: bounded in events by the channel, and in bytes by
/// `held` (shared with the receiving end, [`EventBytes`]).
#[derive(Debug)]
struct EventSender {
    tx: mpsc::Sender<InvocationEvent>,
    held: EventBytes,
    max_bytes: usize,
}

/// The bytes of the events buffered for a watcher: added when one is
/// buffered, taken off when the watcher receives it.
#[derive(Debug, Clone, Default)]
pub(crate) struct EventBytes(Arc<std::sync::atomic::AtomicUsize>);

impl EventBytes {
    /// The watcher received `event`.
    pub(crate) fn received(&self, event: &InvocationEvent) {
        self.0.fetch_sub(event.held_bytes(), Ordering::AcqRel);
    }
}

/// A call as its shared state shows it when it ends outside its
/// transport (a deadline over a wait, a journal's failure, the connection
/// task gone): what the give-up rule reads, built here alone
/// ([`CallShared::ended`]).
#[derive(Debug)]
pub(crate) struct SharedEnd {
    job_id: Option<String>,
    exposure: Exposure,
    attempts: u32,
}

impl SharedEnd {
    /// The ending record of the call with `key`.
    pub(crate) fn of<'a>(&'a self, key: &'a IdempotencyKey) -> Ended<'a> {
        Ended {
            key,
            job_id: self.job_id.as_deref(),
            exposure: self.exposure,
            attempts: self.attempts,
            last_error: None,
        }
    }
}

impl CallShared {
    /// The call as it ends outside its transport: bound if a job id was
    /// seen, in doubt as the caller says (a request went out, or an
    /// earlier process may have sent the key), its attempts so far.
    pub(crate) fn ended(&self, in_doubt: bool) -> SharedEnd {
        let job_id = self.job_id();
        SharedEnd {
            exposure: Exposure {
                bound: job_id.is_some(),
                in_doubt,
            },
            job_id,
            attempts: self.attempts(),
        }
    }

    /// Records acceptance (the first job id wins) and wakes `accepted()`.
    pub(crate) fn set_job(&self, job_id: &Arc<str>) {
        if self.job_id.get().is_none() {
            let _ = self.job_id.set(job_id.clone());
            self.changed.notify_waiters();
        }
    }

    /// The job id, once accepted.
    pub(crate) fn job_id(&self) -> Option<String> {
        self.job_id.get().map(|job| job.to_string())
    }

    /// Waits for acceptance: the job id, or `None` if the call ended
    /// without one.
    pub(crate) async fn accepted(&self) -> Option<String> {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(job) = self.job_id.get() {
                return Some(job.to_string());
            }
            if self.ended.load(Ordering::Acquire) {
                return None;
            }
            notified.await;
        }
    }

    /// The transport is about to write a request for this waiter. Returns
    /// false when the waiter already gave up (nothing may be sent for it).
    pub(crate) fn mark_sent(&self) -> bool {
        self.marks.fetch_or(SENT, Ordering::AcqRel) & ABANDONED == 0
    }

    /// The caller gives up (deadline or drop). Returns whether a request
    /// may have gone out for it.
    pub(crate) fn abandon(&self) -> bool {
        self.marks.fetch_or(ABANDONED, Ordering::AcqRel) & SENT != 0
    }

    /// The journal recorded the call (its prepare decided it is to be
    /// sent): the key's record is this call's to finish.
    pub(crate) fn mark_recorded(&self) {
        self.marks.fetch_or(RECORDED, Ordering::AcqRel);
    }

    /// Whether the journal recorded the call (see [`mark_recorded`](Self::mark_recorded)).
    pub(crate) fn is_recorded(&self) -> bool {
        self.marks.load(Ordering::Acquire) & RECORDED != 0
    }

    /// A cancel asked before the call reaches a transport: returns whether
    /// it was in time (the call will never be handed over, so never sent),
    /// and wakes a wait for an in-flight slot.
    pub(crate) fn ask_cancel_before_handover(&self) -> bool {
        let before = self.marks.fetch_or(CANCEL_ASKED, Ordering::AcqRel);
        let in_time = before & HANDED_OVER == 0;
        if in_time {
            self.changed.notify_waiters();
        }
        in_time
    }

    /// The call is about to be handed to a transport: returns false if a
    /// cancel came first (it must not be sent).
    pub(crate) fn hand_over(&self) -> bool {
        self.marks.fetch_or(HANDED_OVER, Ordering::AcqRel) & CANCEL_ASKED == 0
    }

    /// Waits until a cancel is asked before the call was handed over.
    pub(crate) async fn cancelled_before_handover(&self) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let marks = self.marks.load(Ordering::Acquire);
            if marks & CANCEL_ASKED != 0 && marks & HANDED_OVER == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Whether the caller gave up.
    pub(crate) fn is_abandoned(&self) -> bool {
        self.marks.load(Ordering::Acquire) & ABANDONED != 0
    }

    /// Notes that the outcome came from a cache or the journal rather than
    /// from the runtime.
    pub(crate) fn set_answered(&self, by: Answered) {
        self.answered.store(by.as_u8(), Ordering::Release);
    }

    /// Where the outcome came from.
    pub(crate) fn answered(&self) -> Answered {
        Answered::from_u8(self.answered.load(Ordering::Acquire))
    }

    /// Sets the key's send limit (the first one set stays).
    pub(crate) fn set_send_limit(&self, until: Instant, retention: Duration) {
        let _ = self.send_limit.set((until, retention));
    }

    /// The key's send limit and the retention it came from, when the
    /// journal set one.
    pub(crate) fn send_limit(&self) -> Option<(Instant, Duration)> {
        self.send_limit.get().copied()
    }

    /// Requests sent so far.
    pub(crate) fn attempts(&self) -> u32 {
        self.attempts.load(Ordering::Acquire)
    }

    pub(crate) fn set_attempts(&self, n: u32) {
        self.attempts.store(n, Ordering::Release);
    }

    /// Starts watching the call's events, unless it already ended.
    /// The buffer holds at most `capacity` events and `max_bytes` of them
    /// (one event whatever its size, when the buffer is empty).
    pub(crate) fn watch(
        &self,
        capacity: usize,
        max_bytes: usize,
    ) -> Option<(mpsc::Receiver<InvocationEvent>, EventBytes)> {
        let mut slot = lock(&self.events);
        match *slot {
            EventSlot::Unwatched => {
                let (tx, rx) = mpsc::channel(capacity);
                let held = EventBytes::default();
                *slot = EventSlot::Watched(EventSender {
                    tx,
                    held: held.clone(),
                    max_bytes,
                });
                Some((rx, held))
            }
            EventSlot::Watched(_) | EventSlot::Ended => None,
        }
    }

    /// Whether someone watches the call's events (a decoder keeps an
    /// event's body only then).
    pub(crate) fn is_watched(&self) -> bool {
        matches!(*lock(&self.events), EventSlot::Watched(_))
    }

    /// Hands an event to the watcher, if any. Returns false when it was
    /// dropped because the watcher's buffer is full.
    pub(crate) fn deliver(&self, event: &InvocationEvent) -> bool {
        let slot = lock(&self.events);
        match &*slot {
            // Copied only for a watcher: most calls' events are not watched.
            EventSlot::Watched(sender) => {
                let size = event.held_bytes();
                let before = sender.held.0.fetch_add(size, Ordering::AcqRel);
                if before > 0 && before + size > sender.max_bytes {
                    sender.held.0.fetch_sub(size, Ordering::AcqRel);
                    return false;
                }
                match sender.tx.try_send(event.clone()) {
                    Ok(()) => true,
                    Err(e) => {
                        sender.held.0.fetch_sub(size, Ordering::AcqRel);
                        !matches!(e, mpsc::error::TrySendError::Full(_))
                    }
                }
            }
            _ => true,
        }
    }

    /// The call ended: its event stream ends, and `accepted()` returns.
    pub(crate) fn end(&self) {
        *lock(&self.events) = EventSlot::Ended;
        self.ended.store(true, Ordering::Release);
        self.changed.notify_waiters();
    }
}

/// Ends a call's event stream when dropped: carried by the call's request,
/// so however the call ends (answered, abandoned, client closed), its
/// watcher sees the end.
#[derive(Debug)]
pub(crate) struct EventsEnd(pub(crate) Arc<CallShared>);

impl Drop for EventsEnd {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// What a call sends: its request until the first attempt, then only the
/// request's payload encoded for the connection's dialect. Keeping both
/// held the caller's arguments for the whole life of the call.
pub(crate) enum Outgoing {
    Request(Box<Invoke>),
    Encoded(EncodedRequest),
}

impl Outgoing {
    /// Encodes the request for `dialect` unless it already is. Re-encoding
    /// for the other dialect starts from the request decoded back from its
    /// bytes; a client keeps the dialect of its first session, so that is a
    /// safeguard (an option named like one of the other dialect's payload
    /// fields would not survive it).
    pub(crate) fn prepare(&mut self, dialect: Dialect) -> Result<(), DecodeError> {
        let encoded = match self {
            Outgoing::Encoded(e) if e.dialect() == dialect => return Ok(()),
            Outgoing::Encoded(e) => dialect.encode_invoke(&e.to_invoke()?),
            Outgoing::Request(invoke) => dialect.encode_invoke(invoke),
        };
        *self = Outgoing::Encoded(encoded);
        Ok(())
    }

    /// The encoded payload, once [`prepare`](Self::prepare)d.
    pub(crate) fn encoded(&self) -> Option<&EncodedRequest> {
        match self {
            Outgoing::Encoded(e) => Some(e),
            Outgoing::Request(_) => None,
        }
    }
}

/// The per-call work that needs no connection, done on the caller's task
/// before the call is handed to the connection task: the intent's
/// fingerprint and size, the trace id, the tracing span, and the request
/// encoded for the dialect the client speaks (once it knows it). The
/// connection task serves every call in turn, so what a caller does here
/// is off everyone's critical path; a call handed over without it (or
/// encoded for another dialect) is prepared there instead, the same way.
pub(crate) struct PreparedCall {
    pub(crate) intent: Intent,
    pub(crate) trace_id: TraceId,
    pub(crate) outgoing: Outgoing,
    pub(crate) span: tracing::Span,
}

impl PreparedCall {
    /// Prepares `req` (sealed: its key is in the intent), encoding it for
    /// `dialect` when given. Takes the request's `invoke`: from here on the
    /// call sends `outgoing`.
    pub(crate) fn new(req: &mut CallRequest, dialect: Option<Dialect>) -> Self {
        let fingerprint = fingerprint_of(&req.invoke);
        let span = req.span("ws");
        let invoke = std::mem::replace(&mut req.invoke, taken_invoke());
        let (outgoing, size) = match dialect {
            Some(dialect) => {
                let encoded = dialect.encode_invoke(&invoke);
                let size = encoded.payload().len();
                (Outgoing::Encoded(encoded), size)
            }
            None => {
                let size = serialized_size(&invoke);
                (Outgoing::Request(Box::new(invoke)), size)
            }
        };
        PreparedCall {
            intent: Intent { fingerprint, size },
            trace_id: req.trace_id.clone(),
            outgoing,
            span,
        }
    }
}

/// Whether two serialized intents are the same intent, compared in
/// canonical form: the same bytes, or the same JSON values (object members
/// in any order; a number keeps its kind, so `1` and `1.0` differ, as a
/// runtime comparing texts tells them apart). A record written by a build
/// whose maps keep insertion order is no conflict with the same arguments
/// serialized here; what is sent stays the bytes serialized once.
///
/// A record whose arguments the journal's redaction hook changed (either
/// side) is compared by the digest of the unredacted intent it carries.
pub(crate) fn same_intent(recorded: &str, ours: &str) -> bool {
    if recorded == ours {
        return true;
    }
    let (Ok(a), Ok(b)) = (
        serde_json::from_str::<serde_json::Value>(recorded),
        serde_json::from_str::<serde_json::Value>(ours),
    ) else {
        return false;
    };
    if intent_digest::is_marked(&a) || intent_digest::is_marked(&b) {
        return matches!(
            (intent_digest::identity(&a), intent_digest::identity(&b)),
            (Some(x), Some(y)) if x == y
        );
    }
    a == b
}

/// What a prepared request's `invoke` is left as (allocates nothing).
fn taken_invoke() -> Invoke {
    Invoke::new(String::new(), serde_json::Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A call ending outside its transport is judged by the one give-up
    /// rule from what its shared state shows: a job seen binds it, a
    /// request out (or an earlier process's) leaves it in doubt, and the
    /// attempts and job id are the ones the transport recorded.
    #[test]
    fn an_ending_outside_the_transport_reads_the_shared_state() {
        use crate::classify::{give_up, outcome_unknown, Ending};
        use crate::error::{Error, Execution};
        let key = IdempotencyKey::new();
        let shared = CallShared::default();
        let fresh = shared.ended(false);
        assert!(matches!(
            give_up(fresh.of(&key), Ending::Closed),
            Error::Closed
        ));
        let e = give_up(fresh.of(&key), Ending::Deadline(Duration::from_secs(1)));
        assert_eq!(e.execution(), Execution::NotRun, "{e}");
        // Sent, not yet bound: in doubt by the caller's word only.
        shared.set_attempts(2);
        match give_up(shared.ended(true).of(&key), Ending::Closed) {
            Error::Interrupted {
                job_id: None,
                attempts: 2,
                ..
            } => {}
            other => panic!("{other:?}"),
        }
        // Bound: may have run whatever the caller says, and the job is named.
        shared.set_job(&Arc::from("job-1"));
        let bound = shared.ended(false);
        let e = give_up(bound.of(&key), Ending::Deadline(Duration::from_secs(1)));
        assert_eq!(e.execution(), Execution::MayHaveRun, "{e}");
        assert_eq!(e.job_id(), Some("job-1"));
        match outcome_unknown(bound.of(&key), "the journal failed".into()) {
            Error::OutcomeUnavailable {
                job_id: Some(job),
                attempts: 2,
                permanent: false,
                reason,
                ..
            } => assert_eq!(
                (job.as_str(), reason.as_str()),
                ("job-1", "the journal failed")
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn trace_ids_are_written_back_as_given() {
        for text in [
            "4bf92f3577b34da6a3ce929d0e0e4736",
            "00000000000000000000000000000001",
            "ffffffffffffffffffffffffffffffff",
        ] {
            let id = TraceId::new(text);
            assert!(matches!(id, TraceId::Hex(..)), "{text}");
            assert_eq!(id.write(&mut [0; 32]), text);
        }
        let generated = arcp_types::new_trace_id();
        assert_eq!(TraceId::new(&generated).write(&mut [0; 32]), generated);
        // Not in W3C form (upper case): kept verbatim, not normalised.
        let odd = TraceId::new("4BF92F3577B34DA6A3CE929D0E0E4736");
        assert_eq!(odd.write(&mut [0; 32]), "4BF92F3577B34DA6A3CE929D0E0E4736");
    }

    #[test]
    fn intents_are_compared_in_canonical_form() {
        let ours =
            r#"{"tool":"t","arguments":{"a":1,"b":[2,{"c":3,"d":4}]},"idempotency_key":"k"}"#;
        let reordered =
            r#"{"arguments":{"b":[2,{"d":4,"c":3}],"a":1},"idempotency_key":"k","tool":"t"}"#;
        assert!(same_intent(reordered, ours));
        assert!(same_intent(ours, ours));
        for other in [
            r#"{"tool":"t","arguments":{"a":1.0,"b":[2,{"c":3,"d":4}]},"idempotency_key":"k"}"#,
            r#"{"tool":"t","arguments":{"a":1,"b":[{"c":3,"d":4},2]},"idempotency_key":"k"}"#,
            r#"{"tool":"t","arguments":{"a":1},"idempotency_key":"k"}"#,
            "not json",
        ] {
            assert!(!same_intent(other, ours), "{other}");
        }
    }

    #[test]
    fn abandon_and_send_are_linearized() {
        let shared = CallShared::default();
        assert!(!shared.abandon(), "nothing was sent");
        assert!(!shared.mark_sent(), "an abandoned waiter is never sent");

        let shared = CallShared::default();
        assert!(shared.mark_sent());
        assert!(shared.abandon(), "a sent waiter may have run");
    }

    #[tokio::test]
    async fn accepted_resolves_on_job_or_end() {
        let shared = Arc::new(CallShared::default());
        let waiter = tokio::spawn({
            let shared = shared.clone();
            async move { shared.accepted().await }
        });
        tokio::task::yield_now().await;
        shared.set_job(&Arc::from("job_1"));
        assert_eq!(waiter.await.unwrap().as_deref(), Some("job_1"));

        let shared = Arc::new(CallShared::default());
        let waiter = tokio::spawn({
            let shared = shared.clone();
            async move { shared.accepted().await }
        });
        tokio::task::yield_now().await;
        shared.end();
        assert_eq!(waiter.await.unwrap(), None);
    }

    #[test]
    fn a_request_re_encoded_for_the_other_dialect_is_the_same_request() {
        let invoke: Invoke = serde_json::from_value(json!({
            "tool": "refund", "arguments": {"order": 4812, "note": "é\"x"},
            "idempotency_key": "k-1", "max_runtime_sec": 9
        }))
        .unwrap();
        for (first, then) in [
            (Dialect::V1_1, Dialect::Legacy),
            (Dialect::Legacy, Dialect::V1_1),
        ] {
            let mut outgoing = Outgoing::Request(Box::new(invoke.clone()));
            outgoing.prepare(first).unwrap();
            let bytes = outgoing.encoded().unwrap().payload().to_owned();
            assert_eq!(bytes, first.encode_invoke(&invoke).payload());
            // The request itself is gone; only its bytes are kept.
            assert!(matches!(outgoing, Outgoing::Encoded(_)));
            outgoing.prepare(then).unwrap();
            let direct = then.encode_invoke(&invoke);
            let encoded = outgoing.encoded().unwrap();
            assert_eq!(encoded.dialect(), then);
            assert_eq!(encoded.payload(), direct.payload(), "{first} -> {then}");
            let header = arcp_types::Header::outgoing("msg_1", "2026-01-01T00:00:00.000000Z");
            assert_eq!(encoded.frame_with(&header), direct.frame_with(&header));
        }
    }

    /// A watcher that lags holds at most the byte bound of events (one
    /// event always fits an empty buffer), and what it receives frees room.
    #[test]
    fn a_lagging_watcher_buffers_events_up_to_the_byte_bound() {
        let event = |n: usize| InvocationEvent {
            event_seq: Some(n as u64),
            event: arcp_types::JobEvent::new("log", json!({"message": "x".repeat(600)})),
        };
        let size = event(0).held_bytes();
        let shared = CallShared::default();
        let (mut rx, held) = shared.watch(100, size + size / 2).unwrap();
        assert!(shared.deliver(&event(1)));
        assert!(!shared.deliver(&event(2)), "past the byte bound: dropped");
        let first = rx.try_recv().unwrap();
        held.received(&first);
        assert!(shared.deliver(&event(3)), "room again");
        // A single event larger than the bound still reaches an empty buffer.
        let tiny = CallShared::default();
        let (_rx2, _h2) = tiny.watch(100, 10).unwrap();
        assert!(tiny.deliver(&event(4)));
        assert!(!tiny.deliver(&event(5)));
    }
}
