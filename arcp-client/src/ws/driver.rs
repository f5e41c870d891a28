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
use tokio::time::Sleep;

use super::ack::{AtRest, OwedAck};
use super::connector;
use super::core::{Command, Core};
use super::link_io::{DialFailure, Established, Loss};
use super::spin::Spin;
use super::transport::{Inbound, SocketReader, SocketWriter};
use crate::config::Config;

type Dialing = Pin<
    Box<dyn Future<Output = Result<(SocketReader, SocketWriter, Established), DialFailure>> + Send>,
>;
type Writing =
    Pin<Box<dyn Future<Output = (SocketWriter, Vec<String>, Result<(), String>)> + Send>>;

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
pub(crate) async fn run(config: Arc<Config>, rx: mpsc::Receiver<Command>, core: Core) {
    let mut driver = Driver::new(config, rx, core);
    while driver.turn().await == Flow::Go {}
    driver.shut_down().await;
}

/// Whether the loop goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Go,
    Stop,
}

/// What woke a loop turn. One per turn, on the stack: its size costs
/// nothing.
#[allow(clippy::large_enum_variant)]
enum Turn {
    Command(Option<Command>),
    Dialed(Box<Result<(SocketReader, SocketWriter, Established), DialFailure>>),
    Read(Inbound),
    Wrote(SocketWriter, Result<(), String>),
    Timer,
    Spun,
}

/// The loop's state: the core, the command channel, the dial and write in
/// progress, the live connection's halves and the loop's one timer. Each
/// turn ([`Driver::turn`]) starts a dial or a write if one is due, arms the
/// timer, waits for one event, serves it (commands, a dial's result, reads,
/// a write's completion), then serves the core's timers.
struct Driver {
    config: Arc<Config>,
    rx: mpsc::Receiver<Command>,
    core: Core,
    dialing: Option<Dialing>,
    // The live connection's halves: the reader, and the writer when idle
    // (a write in progress holds it, with the transmit seq it covers).
    reader: Option<SocketReader>,
    writer: Option<SocketWriter>,
    writing: Option<(Writing, u64)>,
    // The frames of the next write; the list a write empties comes back
    // (`SocketWriter::write`), so its block is allocated once per connection.
    batch: Vec<String>,
    handles_gone: bool,
    // One timer for the loop's whole life, moved to each new wake-up time:
    // a timer made afresh each turn was entered into (and taken out of)
    // tokio's timer wheel each turn, under its lock; moving a registered
    // timer later takes no lock. `armed`: the time it is set for, if any.
    timer: Pin<Box<Sleep>>,
    armed: Option<Instant>,
    spin: Spin,
    gathering: Gathering,
    owed_ack: OwedAck,
    /// Whether the last turn left an owed ACK waiting on freed callers (`ack.rs`).
    ack_yield: bool,
}

impl Driver {
    fn new(config: Arc<Config>, rx: mpsc::Receiver<Command>, core: Core) -> Self {
        Driver {
            spin: Spin::new(config.spin_limit),
            config,
            rx,
            core,
            dialing: None,
            reader: None,
            writer: None,
            writing: None,
            batch: Vec::new(),
            handles_gone: false,
            timer: Box::pin(tokio::time::sleep_until(tokio::time::Instant::now())),
            armed: None,
            gathering: Gathering::default(),
            owed_ack: OwedAck::default(),
            ack_yield: false,
        }
    }

    /// One loop turn: start what is due, wait for one event, serve it.
    async fn turn(&mut self) -> Flow {
        let now = Instant::now();
        if self.core.take_drop().is_some() {
            self.drop_connection();
        }
        if self.core.is_closed() {
            return Flow::Stop;
        }
        self.start_dial(now);
        self.start_write();
        self.arm_timer();
        let spinning = self.reader.is_some() && self.spin.spinning(now);
        let yielding = spinning || (self.ack_yield && self.owed_ack.owed());
        let turn = self.wait(yielding).await;
        let now = Instant::now();
        match turn {
            Turn::Command(Some(command)) => self.take_commands(command, now).await,
            Turn::Command(None) => {
                // Every handle is gone, so nobody awaits an outcome.
                self.handles_gone = true;
                self.core.close(now);
            }
            Turn::Dialed(result) => {
                if self.on_dialed(*result, now).await == Flow::Stop {
                    return Flow::Stop;
                }
            }
            Turn::Read(first) => self.read(first, now),
            Turn::Wrote(idle, result) => self.on_flushed(idle, result, now),
            // Elapsed: set again (even for the same time) before it is
            // awaited again.
            Turn::Timer => self.armed = None,
            Turn::Spun => self.owed_ack.on_yield(),
        }
        self.serve_timers(now);
        Flow::Go
    }

    /// Forgets the live connection's halves and any write in progress.
    fn drop_connection(&mut self) {
        (self.reader, self.writer, self.writing) = (None, None, None);
    }

    /// Dials when the core asks to and nothing is dialed or connected.
    fn start_dial(&mut self, now: Instant) {
        if self.dialing.is_none() && self.reader.is_none() {
            if let Some(plan) = self.core.poll_dial(now) {
                tracing::debug!(?plan, "dialing");
                self.dialing = Some(Box::pin(connector::dial(self.config.clone(), plan)));
            }
        }
    }

    /// Hands the queued frames to the idle writer, as one write.
    fn start_write(&mut self) {
        if self.writing.is_none() && self.core.has_transmit() {
            if let Some(idle) = self.writer.take() {
                let upto = self.core.take_transmit(&mut self.batch);
                let frames = std::mem::take(&mut self.batch);
                self.writing = Some((
                    Box::pin(idle.write(frames, self.config.write_timeout)),
                    upto,
                ));
                self.owed_ack.on_write();
            }
        }
    }

    /// Moves the loop's timer to the earliest of the core's next look and
    /// the owed ACK's.
    fn arm_timer(&mut self) {
        let wake = match (self.core.poll_timeout(), self.owed_ack.due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if wake != self.armed {
            if let Some(at) = wake {
                self.timer.as_mut().reset(at.into());
            }
            self.armed = wake;
        }
    }

    /// Waits for the first of: a command, a dial's result, a frame, a
    /// write's completion, the timer, or (spinning, or an owed ACK giving
    /// freed callers their chance) a yield.
    async fn wait(&mut self, yielding: bool) -> Turn {
        tokio::select! {
            command = self.rx.recv(), if !self.handles_gone => Turn::Command(command),
            dialed = poll_opt(&mut self.dialing) => Turn::Dialed(Box::new(dialed)),
            inbound = read(&mut self.reader) => Turn::Read(inbound),
            (idle, frames, result) = write_done(&mut self.writing) => {
                self.batch = frames;
                Turn::Wrote(idle, result)
            }
            () = self.timer.as_mut(), if self.armed.is_some() => Turn::Timer,
            // Polling instead of sleeping (`spin.rs`): back at once, after
            // every other ready task and a look at the sockets.
            () = tokio::task::yield_now(), if yielding => Turn::Spun,
        }
    }

    /// Takes `first` and the commands queued behind it.
    async fn take_commands(&mut self, first: Command, now: Instant) {
        // A burst of callers is gathered first (`Gathering`).
        let yielded = self.gathering.yields(self.core.calls_waiting());
        let now = if yielded {
            tokio::task::yield_now().await;
            Instant::now()
        } else {
            now
        };
        self.core.command(first, now);
        let mut taken = 1;
        for _ in 0..MAX_COMMANDS_PER_TURN {
            match self.rx.try_recv() {
                Ok(command) => {
                    self.core.command(command, now);
                    taken += 1;
                }
                Err(_) => break,
            }
        }
        self.gathering.took(taken, yielded);
    }

    /// A dial ended: a session (kept unless the client closed meanwhile:
    /// then the loop stops) or a failure.
    async fn on_dialed(
        &mut self,
        result: Result<(SocketReader, SocketWriter, Established), DialFailure>,
        now: Instant,
    ) -> Flow {
        self.dialing = None;
        match result {
            Ok((r, w, est)) => {
                if self.core.is_closed() {
                    w.close().await;
                    return Flow::Stop;
                }
                self.core.on_established(est, now);
                self.owed_ack.reset();
                (self.reader, self.writer, self.writing) = (Some(r), Some(w), None);
            }
            Err(failure) => self.core.on_dial_failed(failure, now),
        }
        Flow::Go
    }

    /// Reads `first` and what has already arrived behind it, before
    /// writing anything.
    fn read(&mut self, first: Inbound, now: Instant) {
        let core = &mut self.core;
        let owed_ack = &mut self.owed_ack;
        let mut inbound = Some(first);
        let mut taken = 0;
        while let Some(next) = inbound.take() {
            match next {
                Inbound::Text(text) => core.on_text(&text, now),
                Inbound::Other => core.on_activity(now),
                Inbound::Closed { code, reason } => {
                    (self.reader, self.writer, self.writing) = (None, None, None);
                    core.on_lost(loss(code, reason), now);
                    break;
                }
            }
            taken += 1;
            if taken % FRAMES_PER_HAND_OUT == 0 {
                owed_ack.handed_out(core.hand_out_replies());
            }
            if taken < MAX_FRAMES_PER_TURN && !core.drop_pending() {
                inbound = self.reader.as_mut().and_then(|r| r.recv().now_or_never());
            }
        }
        owed_ack.on_read(
            now,
            core.calls_awaiting_runtime(),
            core.requests_unanswered(),
        );
    }

    /// A write ended: flushed (the writer is idle again), or failed (the
    /// connection is lost).
    fn on_flushed(&mut self, idle: SocketWriter, result: Result<(), String>, now: Instant) {
        match result {
            Ok(()) => {
                if let Some((_, upto)) = self.writing.take() {
                    self.core.on_flushed(upto, now);
                }
                self.writer = Some(idle);
                self.spin.on_written(now, self.core.calls_waiting());
            }
            Err(reason) => {
                self.drop_connection();
                self.core.on_lost(Loss::Network(reason), now);
            }
        }
    }

    /// The end of every turn, whatever woke it: the core's timers, the
    /// outcomes they decided, the owed ACK, the spin and TCP_QUICKACK.
    fn serve_timers(&mut self, now: Instant) {
        self.core.handle_timeout(Instant::now());
        // Outcomes first: whether a caller was freed decides whether its
        // next request may carry the ACK (`ack.rs`).
        self.owed_ack.handed_out(self.core.hand_out_replies());
        let at_rest = self.owed_ack.at_rest(
            Instant::now(),
            self.core.calls_awaiting_runtime(),
            self.core.has_transmit(),
            self.core.requests_unanswered(),
        );
        self.ack_yield = at_rest == AtRest::Yield;
        if at_rest == AtRest::AckNow {
            if let Some(r) = self.reader.as_ref() {
                r.rearm_quickack();
            }
        }
        self.spin.on_turn(now, self.core.calls_waiting());
        // For a frame that arrives in part before the next turn (`transport`).
        if let Some(r) = self.reader.as_mut() {
            r.set_quickack_wanted(self.core.wants_quickack());
        }
    }

    /// After the loop: hands out what is decided, answers the commands
    /// still queued, writes what is queued (the session close), briefly,
    /// and closes.
    async fn shut_down(mut self) {
        let core = &mut self.core;
        let rx = &mut self.rx;
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
        drop(self.reader.take());
        let mut writer = self.writer.take();
        if let Some((pending, upto)) = self.writing.take() {
            if let Ok((idle, _, _)) =
                tokio::time::timeout(Duration::from_millis(500), pending).await
            {
                core.on_flushed(upto, Instant::now());
                writer = Some(idle);
            }
        }
        if let Some(mut w) = writer.take() {
            core.take_transmit(&mut self.batch);
            let _ = w.send(&mut self.batch, Duration::from_millis(500)).await;
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

async fn read(reader: &mut Option<SocketReader>) -> Inbound {
    match reader {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

async fn write_done(
    writing: &mut Option<(Writing, u64)>,
) -> (SocketWriter, Vec<String>, Result<(), String>) {
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
