//! The driver: one task per client, a `select!` loop that moves commands,
//! dial results, frames, write completions and timers between the socket
//! and the core. It awaits nothing but the `select!` (and, taking a burst
//! of commands, one `yield_now`): dialing and writing are futures *inside*
//! the loop, so a deadline, `close()` or `cancel()` is served within
//! milliseconds whatever the network does.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use tokio::sync::mpsc;

use super::ack::{AtRest, OwedAck};
use super::connector;
use super::core::{Command, Core, DialFailure, Established, Loss};
use super::spin::Spin;
use super::transport::{Inbound, Reader, Writer};
use crate::config::Config;

type Dialing =
    Pin<Box<dyn Future<Output = Result<(Reader, Writer, Established), DialFailure>> + Send>>;
type Writing = Pin<Box<dyn Future<Output = (Writer, Vec<String>, Result<(), String>)> + Send>>;

/// Commands taken per loop turn before writing, so bursts leave in one flush.
const MAX_COMMANDS_PER_TURN: usize = 512;
/// Frames already received that are handled in the same turn as the one
/// that woke the loop: their replies and completions then leave together.
const MAX_FRAMES_PER_TURN: usize = 256;
/// Yields in a row that gathered nothing before the driver stops yielding
/// to gather a burst of commands.
const FUTILE_YIELDS: u32 = 4;
/// A read turn hands out the outcomes it has decided every this many
/// frames, not only at its end: a turn that drains a burst of replies takes
/// a few hundred microseconds, and the callers, on other workers, start
/// their next calls meanwhile instead of waiting for all of it. Measured at
/// 64 calls in flight: +9 % calls/s for +4 % CPU per call (a wake of a
/// parked worker per early hand-out); every 24 or 32 frames gained no more
/// and cost more. Turns at fewer calls in flight are shorter than this.
const FRAMES_PER_HAND_OUT: usize = 64;

/// Runs the core until the client closes or every handle is gone.
pub(crate) async fn run(config: Arc<Config>, mut rx: mpsc::Receiver<Command>, mut core: Core) {
    let mut dialing: Option<Dialing> = None;
    // The live connection's halves: the reader, and the writer when idle
    // (a write in progress holds it, with the transmit seq it covers).
    let mut reader: Option<Reader> = None;
    let mut writer: Option<Writer> = None;
    let mut writing: Option<(Writing, u64)> = None;
    // The frames of the next write; the list a write empties comes back
    // (`Writer::write`), so its block is allocated once per connection.
    let mut batch: Vec<String> = Vec::new();
    let mut handles_gone = false;
    // One timer for the loop's whole life, moved to each new wake-up time:
    // a timer made afresh each turn was entered into (and taken out of)
    // tokio's timer wheel each turn, under its lock; moving a registered
    // timer later takes no lock. `armed`: the time it is set for, if any.
    let timer = tokio::time::sleep_until(tokio::time::Instant::now());
    tokio::pin!(timer);
    let mut armed: Option<Instant> = None;
    let mut spin = Spin::new(config.spin_limit);
    let mut gathering = Gathering::default();
    let mut owed_ack = OwedAck::default();
    // Whether the last turn left an owed ACK waiting on freed callers (`ack.rs`).
    let mut ack_yield = false;
    loop {
        let now = Instant::now();
        if core.take_drop().is_some() {
            (reader, writer, writing) = (None, None, None);
        }
        if core.is_closed() {
            break;
        }
        if dialing.is_none() && reader.is_none() {
            if let Some(plan) = core.poll_dial(now) {
                tracing::debug!(?plan, "dialing");
                dialing = Some(Box::pin(connector::dial(config.clone(), plan)));
            }
        }
        if writing.is_none() && core.has_transmit() {
            if let Some(idle) = writer.take() {
                let upto = core.take_transmit(&mut batch);
                let frames = std::mem::take(&mut batch);
                writing = Some((Box::pin(idle.write(frames, config.write_timeout)), upto));
                owed_ack.on_write();
            }
        }
        let wake = match (core.poll_timeout(), owed_ack.due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if wake != armed {
            if let Some(at) = wake {
                timer.as_mut().reset(at.into());
            }
            armed = wake;
        }
        // One per loop turn, on the stack: its size costs nothing.
        #[allow(clippy::large_enum_variant)]
        enum Turn {
            Command(Option<Command>),
            Dialed(Box<Result<(Reader, Writer, Established), DialFailure>>),
            Read(Inbound),
            Wrote(Writer, Result<(), String>),
            Timer,
            Spun,
        }
        let spinning = reader.is_some() && spin.spinning(now);
        let yielding = spinning || (ack_yield && owed_ack.owed());
        let turn = tokio::select! {
            command = rx.recv(), if !handles_gone => Turn::Command(command),
            dialed = poll_opt(&mut dialing) => Turn::Dialed(Box::new(dialed)),
            inbound = read(&mut reader) => Turn::Read(inbound),
            (idle, frames, result) = write_done(&mut writing) => {
                batch = frames;
                Turn::Wrote(idle, result)
            }
            () = &mut timer, if armed.is_some() => Turn::Timer,
            // Polling instead of sleeping (`spin.rs`): back at once, after
            // every other ready task and a look at the sockets.
            () = tokio::task::yield_now(), if yielding => Turn::Spun,
        };
        let now = Instant::now();
        match turn {
            Turn::Command(Some(command)) => {
                // A burst of callers is gathered first (`Gathering`).
                let yielded = gathering.yields(core.calls_waiting());
                let now = if yielded {
                    tokio::task::yield_now().await;
                    Instant::now()
                } else {
                    now
                };
                core.command(command, now);
                let mut taken = 1;
                for _ in 0..MAX_COMMANDS_PER_TURN {
                    match rx.try_recv() {
                        Ok(command) => {
                            core.command(command, now);
                            taken += 1;
                        }
                        Err(_) => break,
                    }
                }
                gathering.took(taken, yielded);
            }
            Turn::Command(None) => {
                // Every handle is gone, so nobody awaits an outcome.
                handles_gone = true;
                core.close(now);
            }
            Turn::Dialed(result) => {
                dialing = None;
                match *result {
                    Ok((r, w, est)) => {
                        if core.is_closed() {
                            w.close().await;
                            break;
                        }
                        core.on_established(est, now);
                        owed_ack.reset();
                        (reader, writer, writing) = (Some(r), Some(w), None);
                    }
                    Err(failure) => core.on_dial_failed(failure, now),
                }
            }
            Turn::Read(first) => {
                // Drain what has already arrived before writing anything.
                let mut inbound = Some(first);
                let mut taken = 0;
                while let Some(next) = inbound.take() {
                    match next {
                        Inbound::Text(text) => core.on_text(&text, now),
                        Inbound::Other => core.on_activity(now),
                        Inbound::Closed { code, reason } => {
                            (reader, writer, writing) = (None, None, None);
                            core.on_lost(loss(code, reason), now);
                            break;
                        }
                    }
                    taken += 1;
                    if taken % FRAMES_PER_HAND_OUT == 0 {
                        owed_ack.handed_out(core.hand_out_replies());
                    }
                    if taken < MAX_FRAMES_PER_TURN && !core.drop_pending() {
                        inbound = reader.as_mut().and_then(|r| r.recv().now_or_never());
                    }
                }
                owed_ack.on_read(now, core.calls_awaiting_runtime());
            }
            Turn::Wrote(idle, Ok(())) => {
                if let Some((_, upto)) = writing.take() {
                    core.on_flushed(upto, now);
                }
                writer = Some(idle);
                spin.on_written(now, core.calls_waiting());
            }
            Turn::Wrote(_, Err(reason)) => {
                (reader, writer, writing) = (None, None, None);
                core.on_lost(Loss::Network(reason), now);
            }
            // Elapsed: set again (even for the same time) before it is
            // awaited again.
            Turn::Timer => armed = None,
            Turn::Spun => owed_ack.on_yield(),
        }
        core.handle_timeout(Instant::now());
        // Outcomes first: whether a caller was freed decides whether its
        // next request may carry the ACK (`ack.rs`).
        owed_ack.handed_out(core.hand_out_replies());
        let at_rest = owed_ack.at_rest(
            Instant::now(),
            core.calls_awaiting_runtime(),
            core.has_transmit(),
            core.requests_unanswered(),
        );
        ack_yield = at_rest == AtRest::Yield;
        if at_rest == AtRest::AckNow {
            if let Some(r) = reader.as_ref() {
                r.rearm_quickack();
            }
        }
        spin.on_turn(now, core.calls_waiting());
        // For a frame that arrives in part before the next turn (`transport`).
        if let Some(r) = reader.as_mut() {
            r.set_quickack_wanted(core.wants_quickack());
        }
    }
    // Outcomes decided as the loop ended (a close fails every call).
    core.hand_out_replies();
    // No command waits for the closing writes below: on a stalled
    // connection they take up to their bounds, and a caller's deadline may
    // be shorter. New commands are refused from here, queued ones answered
    // now (a call `Closed`: it never reached the runtime; another close
    // after the writes).
    rx.close();
    while let Ok(command) = rx.try_recv() {
        core.command(command, Instant::now());
    }
    core.hand_out_replies();
    // Closing: write what is queued (the session close), briefly, then close.
    drop(reader);
    if let Some((pending, upto)) = writing.take() {
        if let Ok((idle, _, _)) = tokio::time::timeout(Duration::from_millis(500), pending).await {
            core.on_flushed(upto, Instant::now());
            writer = Some(idle);
        }
    }
    if let Some(mut w) = writer.take() {
        core.take_transmit(&mut batch);
        let _ = w.send(&mut batch, Duration::from_millis(500)).await;
        w.close().await;
    }
    for reply in core.take_close_replies() {
        let _ = reply.send(());
    }
    // Take the commands still on their way (new ones are refused since the
    // loop ended): a sender that reserved a slot before then still delivers
    // its command,
    // and a command left unread keeps its reply sender alive for as long as
    // the client's own sender lives (its caller would wait forever; a
    // refused connect() did, once in fifty). Dropping a command drops its
    // reply sender, and the caller sees the task is gone.
    while let Some(command) = rx.recv().await {
        drop(command);
    }
}

/// Whether a command turn yields before taking commands. With calls in
/// flight, callers come in bursts (woken together by the replies handed out
/// last turn): letting those already runnable send theirs first (one
/// yield) makes one turn and one write of the burst. Measured at 64 in
/// flight against a fast runtime: a quarter of the writes, 5-8 % less CPU
/// per call. A yield that gathers nothing costs a wake-up of another
/// worker, though, so after [`FUTILE_YIELDS`] such yields in a row (a slow
/// runtime's replies trickle in, and callers with them: measured, two
/// futex wake-ups and a third more CPU per call) commands are taken at
/// once, until two arrive together again.
#[derive(Debug, Default)]
struct Gathering {
    /// Yields in a row that gathered no command but the one that woke us.
    futile: u32,
}

impl Gathering {
    fn yields(&self, calls_in_flight: usize) -> bool {
        calls_in_flight > 0 && self.futile < FUTILE_YIELDS
    }

    /// A turn took `taken` commands, after a yield or not.
    fn took(&mut self, taken: usize, yielded: bool) {
        if taken > 1 {
            self.futile = 0;
        } else if yielded {
            self.futile += 1;
        }
    }
}

/// A close the runtime gave because of something the client sent, or a loss.
fn loss(code: Option<u16>, reason: String) -> Loss {
    match code {
        Some(code @ (1002 | 1003 | 1007 | 1008 | 1009)) => Loss::Rejected { code, reason },
        _ => Loss::Network(reason),
    }
}

async fn poll_opt<T>(future: &mut Option<Pin<Box<dyn Future<Output = T> + Send>>>) -> T {
    match future {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

async fn read(reader: &mut Option<Reader>) -> Inbound {
    match reader {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

async fn write_done(
    writing: &mut Option<(Writing, u64)>,
) -> (Writer, Vec<String>, Result<(), String>) {
    match writing {
        Some((pending, _)) => pending.await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use tokio::sync::oneshot;

    use super::*;

    #[test]
    fn bursts_are_gathered_and_a_trickle_is_not() {
        let mut g = Gathering::default();
        assert!(!g.yields(0), "a lone call is taken at once");
        // Bursts: every turn yields.
        for _ in 0..100 {
            assert!(g.yields(64));
            g.took(7, true);
        }
        // A few futile yields do not stop it...
        for _ in 0..FUTILE_YIELDS - 1 {
            assert!(g.yields(64));
            g.took(1, true);
        }
        g.took(3, true);
        // ...a run of them does.
        for _ in 0..FUTILE_YIELDS {
            assert!(g.yields(64));
            g.took(1, true);
        }
        for _ in 0..100 {
            assert!(!g.yields(64), "a trickle is taken at once");
            g.took(1, false);
        }
        // Two commands that came together: gather again.
        g.took(2, false);
        assert!(g.yields(64));
    }

    /// A command whose slot was reserved before the task ended is still
    /// taken and its caller released (not left waiting on a reply that
    /// nobody will send or drop).
    #[tokio::test]
    async fn a_command_sent_as_the_task_ends_is_never_left_unanswered() {
        let config = Arc::new(Config::new("ws://127.0.0.1:9/arcp".into()));
        let (events, _) = tokio::sync::broadcast::channel(8);
        let core = Core::new(
            config.clone(),
            None,
            Arc::new(Mutex::new(None)),
            events,
            Instant::now(),
        );
        let (tx, rx) = mpsc::channel(8);
        let task = tokio::spawn(run(config, rx, core));
        // A caller is between reserving its slot and sending...
        let late = tx.reserve().await.unwrap();
        // ... when the client closes and the task ends.
        let (reply, closed) = oneshot::channel();
        tx.send(Command::Close { reply }).await.unwrap();
        closed.await.unwrap();
        let (reply, answer) = oneshot::channel();
        late.send(Command::Stats { reply });
        let answer = tokio::time::timeout(Duration::from_secs(2), answer)
            .await
            .expect("a command sent as the task ended was left unanswered");
        assert!(answer.is_err(), "dropped with the task, not answered");
        tokio::time::timeout(Duration::from_secs(2), task)
            .await
            .expect("the task ends once every sender's command is taken")
            .unwrap();
    }
}
