//! The seeded fault-schedule checker: random schedules of calls and faults
//! against arcp-mock, every outcome checked against the mock's ground truth.
//!
//! Each seed picks a runtime family (a mock [`Preset`] or a replay policy in
//! either dialect), a transport (WebSocket through a connection killer, or
//! the HTTP binding, directly or through a gateway that answers statuses of
//! its own: 500/502/504/507/599 after forwarding, 401/404/429/503 without,
//! cut and slow answers), a journal or none (an in-memory store or a SQLite file, behind
//! a wrapper that refuses some commits, leaves others unanswered, some of
//! those landed anyway, and may make the store unavailable for a while; and
//! a second client that opens the same store after the first closed, may
//! discard some keys, re-issues the keys that may have run (and the
//! discarded ones that ran) and calls `recover()`, and may close meanwhile;
//! then a client that cannot reach the runtime calls each discarded key;
//! and in any schedule, a client with a new journal that cannot reach the
//! runtime may call the keys that ran), runtimes that forget keys after a short retention
//! (the client told so), hostile additions (a gateway that fingerprints whole bodies and answers 422 to a
//! known key with another body, a gateway that answers 409 before
//! forwarding, a second caller that re-issues, from a client of its own,
//! the keys whose calls ran), a client
//! configuration, a set of calls (fresh keys, keys the client generates
//! (read back from the call, so every claim about them is checked too;
//! some are called again with the key the call reported, once it ended and
//! a while later, under the same intent or another, possibly past a short
//! outcome cache TTL, each such call checked as any with a supplied key),
//! same-key joiners, same-key conflicting intents, tool errors, tools whose
//! own errors look like key conflicts or refused credentials, deadlines,
//! cancels at random moments, callers that drop their call at a random
//! moment and make no claim) and a fault timeline (connection cuts at any
//! frame or byte, stalls, black holes, refused or 429'd reconnects, slow
//! handshakes, request-level closes, also after acceptance, a policy close
//! (1008) after the submit was forwarded then reconnects refused with 401,
//! transient
//! refusals, stray and duplicate frames). The plan is a pure function of the
//! seed; timing is real.
//!
//! The oracle, per call:
//! - `Ok` ⇒ the tool executed exactly once for this key and intent, and the
//!   value is that execution's;
//! - "did not run" ⇒ zero executions of this intent under this key, ever
//!   (checked after the client closed and the runtime settled);
//! - "may have run" ⇒ at most one; "ran" ⇒ exactly one;
//! - `DuplicateKey` ⇒ the key is bound to another intent and this one never
//!   ran, unless it says "may have run" (a gateway that fingerprints whole
//!   bodies refuses our own retry so): then at most once;
//! - "not sent" ⇒ this call ran nothing: no execution of its intent under
//!   its key unless another call of them exists;
//! - "not run stays not run": an execution after a "did not run" is
//!   excused only by a call the user issued again, never by a recovery;
//!   under a generated key, an execution there before its first follow-up
//!   (a call of the key again) was issued is never excused;
//! - a result names the call's own key;
//! - `replayed` ⇒ the runtime got an earlier submit of the key, or another
//!   call of the key and intent answered from the cache;
//! - the call ends within its deadline + 100 ms;
//! - the client's task never dies (no `Closed` while the client is open);
//! - over HTTP, nothing runs that the gateway did not forward;
//! - a cancel reported dispatched or acknowledged reached the runtime (when
//!   no cut was in between).
//!
//! And for every key: at most one execution; once every call ended, the
//! client holds no call and no request ([`Client::stats`]).
//!
//! `ARCP_CHECKER_SEEDS=N` runs N seeds (default 300), `ARCP_CHECKER_FIRST`
//! the first seed (default 0), `ARCP_CHECKER_SEED=S` replays only seed S,
//! `ARCP_CHECKER_PARALLEL` schedules at once (default 10). A long run:
//!
//! ```sh
//! ARCP_CHECKER_SEEDS=10000 cargo test --release --test checker -- --nocapture
//! ```

mod support;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use arcp_mock::{
    ChaosProxy, ChaosProxyHandle, Dialect, ErrorCode, Fault, JobStatus, MockRuntime, Preset,
    ReplayPolicy, ToolFailure,
};
use arcp_sdk::{
    CancelOutcome, Client, ClientBuilder, DialectChoice, Error, Execution, Journal, JournalEntry,
    JournalError, JournalErrorKind, JournalWrite, MemoryJournal, PurgeReport, Retention,
    RetryPolicy, SqliteJournal, SqliteOptions, Synchronous,
};
use arcp_types::IdempotencyKey;
use serde_json::{json, Value};
use support::gateway::{Gateway, Move};
use support::relay::{Relay, RelayHandle};
use tokio::sync::Semaphore;

/// How late a call may end past its deadline, on a runtime whose timers
/// fire on time (plus the worst timer lag seen meanwhile: [`LagProbe`]).
const DEADLINE_SLACK: Duration = Duration::from_millis(100);

/// How starved of CPU the machine is: a thread that sleeps [`Self::TICK`]
/// at a time and records each wake-up later than asked, and (where the
/// kernel keeps it, `/proc/pressure/cpu`) how long tasks waited for a CPU
/// meanwhile. The client keeps a deadline on timers that fire no better
/// than the machine schedules its threads, so a call may end past its
/// deadline by [`DEADLINE_SLACK`] plus the worst such lag, or the CPU
/// waits, seen from its deadline to its end (at most [`Self::MAX_EXCUSE`];
/// the CPU waits, machine-wide, at most [`Self::MAX_WAIT_EXCUSE`], so that
/// a client that spins its own threads cannot excuse much of itself).
/// A thread of its own, not a task: a client that blocks the runtime's
/// workers delays its own timers, and that is not excused (a blocked
/// thread waits for no CPU). On a quiet machine both are about zero.
struct LagProbe {
    /// (woke at, how late), for wake-ups more than a millisecond late.
    late: Mutex<Vec<(Instant, Duration)>>,
    /// (sampled at, CPU wait since the previous sample), when not zero.
    waited: Mutex<Vec<(Instant, Duration)>>,
}

impl LagProbe {
    const TICK: Duration = Duration::from_millis(5);
    const MAX_EXCUSE: Duration = Duration::from_secs(1);
    const MAX_WAIT_EXCUSE: Duration = Duration::from_millis(200);
    /// Samples kept: the last minute or so of a starved machine.
    const KEEP: usize = 16_384;

    /// The process's probe, started on first use.
    fn get() -> &'static LagProbe {
        static PROBE: std::sync::OnceLock<&'static LagProbe> = std::sync::OnceLock::new();
        PROBE.get_or_init(|| {
            let probe: &'static LagProbe = Box::leak(Box::new(LagProbe {
                late: Mutex::new(Vec::new()),
                waited: Mutex::new(Vec::new()),
            }));
            std::thread::spawn(move || {
                let mut pressure = cpu_pressure_total();
                loop {
                    let asked = Instant::now();
                    std::thread::sleep(Self::TICK);
                    let woke = Instant::now();
                    let lag = woke.saturating_duration_since(asked + Self::TICK);
                    if lag > Duration::from_millis(1) {
                        keep(&probe.late, (woke, lag));
                    }
                    let now = cpu_pressure_total();
                    if let (Some(before), Some(after)) = (pressure, now) {
                        if after > before {
                            keep(&probe.waited, (woke, after - before));
                        }
                    }
                    pressure = now;
                }
            });
            probe
        })
    }

    /// The worst lag of a wake-up whose sleep overlapped `from..=to`, or
    /// the CPU waits sampled within it, whichever is more, at most
    /// [`Self::MAX_EXCUSE`].
    fn worst(&self, from: Instant, to: Instant) -> Duration {
        let lag = self
            .late
            .lock()
            .unwrap()
            .iter()
            .filter(|(woke, lag)| {
                *woke >= from
                    && woke
                        .checked_sub(*lag + Self::TICK)
                        .is_none_or(|slept| slept <= to)
            })
            .map(|(_, lag)| *lag)
            .max()
            .unwrap_or_default();
        let waited = self
            .waited
            .lock()
            .unwrap()
            .iter()
            .filter(|(at, _)| *at >= from && *at <= to + Self::TICK)
            .map(|(_, waited)| *waited)
            .sum::<Duration>()
            .min(Self::MAX_WAIT_EXCUSE);
        lag.max(waited).min(Self::MAX_EXCUSE)
    }
}

/// Appends a probe sample, dropping the older half when full.
fn keep(samples: &Mutex<Vec<(Instant, Duration)>>, sample: (Instant, Duration)) {
    let mut samples = samples.lock().unwrap();
    if samples.len() >= LagProbe::KEEP {
        samples.drain(..LagProbe::KEEP / 2);
    }
    samples.push(sample);
}

/// How long, in all, some task of the machine has waited for a CPU
/// (`/proc/pressure/cpu`, "some ... total=" in microseconds); `None`
/// where the kernel does not keep it.
fn cpu_pressure_total() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/pressure/cpu").ok()?;
    let some = text.lines().find(|line| line.starts_with("some "))?;
    let total = some
        .split_whitespace()
        .find_map(|f| f.strip_prefix("total="))?;
    Some(Duration::from_micros(total.parse().ok()?))
}

/// splitmix64: small, fast, and the same on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.range(lo, hi))
    }
}

/// The runtime a schedule runs against.
#[derive(Debug, Clone, Copy)]
enum Family {
    Preset(Preset),
    Policy(Dialect, ReplayPolicy),
}

impl Family {
    fn dialect(self) -> Dialect {
        match self {
            Family::Preset(Preset::Rust200 | Preset::PhpNewer | Preset::PhpOlder) => {
                Dialect::Legacy
            }
            Family::Preset(_) => Dialect::V1_1,
            Family::Policy(d, _) => d,
        }
    }
}

/// How the client reaches the runtime.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Transport {
    /// WebSocket, through the connection killer.
    Ws,
    /// The HTTP binding, directly or through the status-answering gateway.
    Http { gateway: bool },
}

/// The journal of a schedule.
#[derive(Debug, Clone, Copy)]
struct JournalPlan {
    /// Percent of the journal's commits refused (an I/O error).
    refuse_percent: u64,
    /// Percent of the journal's commits left unanswered
    /// ([`JournalErrorKind::Unavailable`]), and of its reads at half that
    /// rate.
    unavailable_percent: u64,
    /// Percent of the unanswered commits that land in the store all the
    /// same (a round trip that timed out while its commit went through):
    /// half of them at once, half a while later (a request delayed on its
    /// way, which lands after commits made since).
    landed_percent: u64,
    /// The store answers nothing for a while: from this offset from the
    /// schedule's start, for this long. Its commits land or not as
    /// `landed_percent` says (a partition: the request may get through,
    /// its answer not).
    outage: Option<(Duration, Duration)>,
    /// A SQLite file instead of the in-memory store (each client opens it
    /// in turn).
    sqlite: bool,
    /// Percent of the calls whose deadline is short (10-150 ms): it falls
    /// while the call's prepare is retried, so the call ends "did not run"
    /// with its prepare's commit still in doubt.
    short_deadline_percent: u64,
    /// A second client opens the store once the first closed, re-issues
    /// the keys that may have run and recovers the unfinished calls.
    second_client: bool,
    /// After a commit that lands unanswered, the store refuses this many
    /// commits outright (a read-only database after a failover, a full
    /// disk): a lost answer, then a refused retry.
    refuse_after_landed: u64,
}

/// Tools whose own errors look like the runtime's refusals: a key conflict
/// (both runtimes' spellings) and refused credentials.
const LOOKALIKE_TOOLS: [&str; 3] = ["dup", "bound", "unauth"];

/// One planned call.
#[derive(Debug, Clone)]
struct PlannedCall {
    /// Index of the key this call uses (shared keys make joiners and
    /// conflicts).
    key: usize,
    tool: &'static str,
    /// The intent's distinguishing argument.
    v: u64,
    ms: u64,
    start: Duration,
    deadline: Duration,
    cancel_after: Option<Duration>,
    /// The caller stops waiting (drops the call's future) after this long:
    /// the call makes no claim, and a later call of its key and intent
    /// must not say "did not run" if it ran.
    drop_after: Option<Duration>,
    /// No key supplied: the client generates one, read back from the call
    /// (only for a key no other planned call uses, but its follow-ups).
    generated: bool,
    /// A follow-up of planned call `.0`, whose key the client generated:
    /// issued `.1` after that call ended, with the key it reported
    /// supplied (as a caller that reads the key back from an outcome or a
    /// handle does, to learn what became of the call, or by mistake for
    /// another intent).
    follows: Option<(usize, Duration)>,
}

/// One planned fault, at an offset from the schedule's start.
#[derive(Debug, Clone)]
enum Action {
    Inject(Fault),
    BlackHoleFor(Duration),
    KillAll,
    StallFor(Duration),
    /// Close every connection that sends a submit with this WebSocket close
    /// code, for a while (after acceptance, a request-level close).
    CloseWithFor(u16, Duration),
    /// At the next `job.accepted` (the submit was forwarded and runs), a
    /// relay in front of the client closes its connection with a policy
    /// close (1008), then refuses its reconnects with 401 for this long:
    /// an auth proxy expiring tokens on long-lived sockets.
    PolicyCloseThen401For(Duration),
}

#[derive(Debug, Clone)]
struct Plan {
    seed: u64,
    family: Family,
    transport: Transport,
    journal: Option<JournalPlan>,
    dialect: DialectChoice,
    heartbeat: Option<Duration>,
    lazy: bool,
    kill_every_bytes: Option<u64>,
    calls: Vec<PlannedCall>,
    faults: Vec<(Duration, Action)>,
    hostile: Hostile,
    /// The runtime forgets keys this long after binding them, and the
    /// client is told so (`runtime_key_retention`); the second client
    /// starts this much later, so some unfinished records outlive it.
    key_retention: Option<(Duration, Duration)>,
    /// The outcome cache's time-to-live, when short: some follow-ups of a
    /// generated key come after its binding expired.
    cache_ttl: Option<Duration>,
}

impl Plan {
    /// The retention the client is told: the runtime's, less the longest
    /// stall of the plan. A send the stalled proxy holds reaches the
    /// runtime that much after it was written, so a user leaves that margin
    /// (as `ClientBuilder::runtime_key_retention` asks); without it, a
    /// re-send written just inside the retention lands outside it and runs
    /// the tool again, whatever the client does.
    fn client_key_retention(&self) -> Option<Duration> {
        let longest_stall = self
            .faults
            .iter()
            .filter_map(|(_, action)| match action {
                Action::StallFor(d) => Some(*d),
                _ => None,
            })
            .max()
            .unwrap_or_default();
        self.key_retention
            .map(|(retention, _)| retention.saturating_sub(longest_stall))
    }
}

fn plan(seed: u64) -> Plan {
    let mut plan = base_plan(seed);
    plan.hostile = hostile(seed, plan.transport);
    // From a stream of its own, so the rest of the plan stays as it was.
    let mut p = Rng(seed ^ 0x1008_0401);
    if plan.transport == Transport::Ws && p.chance(20) {
        let at = p.ms(0, 600);
        plan.faults
            .push((at, Action::PolicyCloseThen401For(p.ms(100, 800))));
        plan.faults.sort_by_key(|(at, _)| *at);
    }
    // A runtime that forgets keys: longer than any call's deadline (its
    // re-sends stay within it), shorter than some records' wait for the
    // second client. (A second caller, with no journal, would run a
    // forgotten key again, as the runtime allows.)
    let mut k = Rng(seed ^ 0x4E7E_4710);
    if plan.journal.is_some_and(|j| j.second_client) && !plan.hostile.second_caller && k.chance(25)
    {
        plan.key_retention = Some((k.ms(2_700, 3_500), k.ms(0, 1_500)));
    }
    follow_ups(&mut plan);
    plan
}

/// Follow-ups of calls under generated keys, from a stream of their own
/// (the rest of the plan stays as it was): some such calls get one or two
/// more under the same key, most of the same intent (to learn the outcome
/// of a call that may have run), some of another (the client must refuse
/// it, or the runtime must: it never runs while the key is bound), each a
/// while after its first call ended, so some come after faults, reconnects
/// or the cache's TTL, and some meet a fault of their own. Some first
/// calls are dropped by their callers (the key is then the handle's).
/// Every family and transport: each takes keys, and the families that do
/// not signal another intent under a bound key (the PHP ones) are where
/// the client's own binding has to refuse it. Most follow-ups come soon: a
/// schedule lasts until its last one ends.
fn follow_ups(plan: &mut Plan) {
    let mut f = Rng(plan.seed ^ 0x0F01_10F0);
    let firsts: Vec<usize> = (0..plan.calls.len())
        .filter(|&i| plan.calls[i].generated)
        .collect();
    for i in firsts {
        if !f.chance(30) {
            continue;
        }
        // Some callers stop waiting first, then ask again with the key
        // their call's handle told them (the client may still hold the
        // call, or only the key's binding).
        let first = &mut plan.calls[i];
        if first.cancel_after.is_none() && first.drop_after.is_none() && f.chance(20) {
            first.drop_after = Some(f.ms(0, 400));
        }
        let repeats = if f.chance(20) { 2 } else { 1 };
        for _ in 0..repeats {
            let first = &plan.calls[i];
            let (tool, v, ms) = if f.chance(20) {
                let v = f.next() % 1_000_000;
                let v = if v == first.v { v + 1 } else { v };
                ("work", v, f.range(0, 250))
            } else {
                (first.tool, first.v, first.ms)
            };
            let longest = if f.chance(80) { 300 } else { 1_500 };
            let delay = f.ms(0, longest);
            let call = PlannedCall {
                key: first.key,
                tool,
                v,
                ms,
                start: Duration::ZERO,
                deadline: f.ms(300, 2_000),
                cancel_after: None,
                drop_after: None,
                generated: false,
                follows: Some((i, delay)),
            };
            plan.calls.push(call);
        }
    }
    // A runtime that deduplicates by key alone (the PHP ones) answers
    // another intent with the original's stored outcome: only the client's
    // memory of the key can refuse it, and that lasts the cache's TTL, for
    // a supplied key's outcome as for a generated key's binding. Past it
    // the client cannot tell, so a short TTL is for the other families
    // only (there the runtime refuses another intent itself).
    let unsignalled = matches!(
        plan.family,
        Family::Preset(Preset::PhpNewer | Preset::PhpOlder)
    );
    let followed = plan.calls.iter().any(|c| c.follows.is_some());
    if followed && f.chance(25) && !unsignalled {
        plan.cache_ttl = Some(f.ms(100, 1_000));
    }
    // The other faults come early: some schedules meet one while their
    // follow-ups run (a lost submit or answer, a cut, a stall).
    if followed && f.chance(25) {
        let at = f.ms(600, 2_000);
        let action = match f.range(0, 4) {
            0 => Action::KillAll,
            1 => Action::Inject(Fault::DropOnSubmit),
            2 => Action::Inject(Fault::DropAfterAccepted),
            3 => Action::Inject(Fault::DropBeforeTerminal),
            _ => Action::StallFor(f.ms(100, 400)),
        };
        plan.faults.push((at, action));
        plan.faults.sort_by_key(|(at, _)| *at);
    }
}

fn base_plan(seed: u64) -> Plan {
    let mut r = Rng(seed ^ 0x00A7_C0DE);
    let families = [
        Family::Preset(Preset::Python113),
        Family::Preset(Preset::Rust200),
        Family::Preset(Preset::TsGoJava),
        Family::Preset(Preset::PhpNewer),
        Family::Preset(Preset::PhpOlder),
        Family::Policy(Dialect::V1_1, ReplayPolicy::TerminalReplay),
        Family::Policy(Dialect::V1_1, ReplayPolicy::AcceptedOnly),
        Family::Policy(Dialect::Legacy, ReplayPolicy::TerminalReplay),
        Family::Policy(Dialect::Legacy, ReplayPolicy::TerminalOnly),
    ];
    let family = families[r.range(0, families.len() as u64 - 1) as usize];
    // The HTTP binding is v1.1's.
    let transport = if family.dialect() == Dialect::V1_1 && r.chance(35) {
        Transport::Http {
            gateway: r.chance(60),
        }
    } else {
        Transport::Ws
    };
    let journal = r.chance(35).then(|| {
        let refuse_percent = if r.chance(50) { r.range(5, 30) } else { 0 };
        let second_client = r.chance(60);
        // The store's other faults draw from a stream of their own, so
        // the rest of the plan is what it was before they existed.
        let mut s = Rng(seed ^ 0x5707_E0FF);
        JournalPlan {
            refuse_percent,
            unavailable_percent: if s.chance(60) { s.range(5, 30) } else { 0 },
            landed_percent: s.range(0, 100),
            outage: s.chance(35).then(|| (s.ms(0, 900), s.ms(50, 400))),
            sqlite: s.chance(25),
            short_deadline_percent: if s.chance(50) { s.range(10, 40) } else { 0 },
            second_client,
            refuse_after_landed: 0,
        }
    });
    let dialect = if r.chance(25) {
        DialectChoice::Auto
    } else if family.dialect() == Dialect::Legacy {
        DialectChoice::Legacy
    } else {
        DialectChoice::V1_1
    };
    let heartbeat = (family.dialect() == Dialect::V1_1 && r.chance(50)).then(|| r.ms(80, 200));
    let n_calls = r.range(3, 10) as usize;
    let mut calls = Vec::with_capacity(n_calls);
    let mut keys = 0;
    for i in 0..n_calls {
        // A fifth of the calls reuse an earlier call's key: half of those
        // with the same intent (a joiner), half with another (a conflict).
        let (key, v) = if i > 0 && r.chance(20) {
            let earlier: &PlannedCall = &calls[r.range(0, i as u64 - 1) as usize];
            let v = if r.chance(50) {
                earlier.v
            } else {
                r.next() % 1_000_000
            };
            (earlier.key, v)
        } else {
            keys += 1;
            (keys - 1, r.next() % 1_000_000)
        };
        let ms = r.range(0, 250);
        let tool = if r.chance(15) {
            "fail"
        } else if r.chance(12) {
            LOOKALIKE_TOOLS[r.range(0, 2) as usize]
        } else {
            "work"
        };
        calls.push(PlannedCall {
            key,
            tool,
            v,
            ms,
            start: r.ms(0, 400),
            deadline: r.ms(300, 2_500),
            cancel_after: r.chance(15).then(|| r.ms(0, 400)),
            drop_after: None,
            generated: false,
            follows: None,
        });
    }
    // Callers that stop waiting, from their own stream of the seed (the
    // plans drawn above stay as they were).
    // Mostly calls whose key and intent a later call uses again: that one
    // must not say "did not run" if the dropped one ran.
    let mut d = Rng(seed ^ 0x0D20_99ED);
    let again: Vec<bool> = calls
        .iter()
        .map(|c| {
            calls
                .iter()
                .any(|o| o.key == c.key && o.v == c.v && o.start > c.start)
        })
        .collect();
    for (c, again) in calls.iter_mut().zip(again) {
        if c.cancel_after.is_none() && d.chance(if again { 50 } else { 5 }) {
            c.drop_after = Some(d.ms(0, 400));
        }
    }
    // Calls with a key of their own leave it to the client, from their own
    // stream of the seed: "did not run" for a generated key is the claim
    // the journal's doubt must not turn false.
    let mut g = Rng(seed ^ 0x6E4E_7A7E);
    let alone: Vec<bool> = calls
        .iter()
        .map(|c| calls.iter().filter(|o| o.key == c.key).count() == 1)
        .collect();
    for (c, alone) in calls.iter_mut().zip(alone) {
        c.generated = alone && g.chance(40);
    }
    if let Some(j) = journal {
        let mut s = Rng(seed ^ 0x0DEA_D11E);
        for c in &mut calls {
            if j.short_deadline_percent > 0 && s.chance(j.short_deadline_percent) {
                c.deadline = s.ms(10, 150);
            }
        }
    }
    // Same key and `v` is the same intent: the same tool and arguments.
    let mut first: HashMap<(usize, u64), (&'static str, u64)> = HashMap::new();
    for c in &mut calls {
        (c.tool, c.ms) = *first.entry((c.key, c.v)).or_insert((c.tool, c.ms));
    }
    let n_faults = r.range(0, 4);
    let mut faults = Vec::new();
    for _ in 0..n_faults {
        let at = r.ms(0, 900);
        let action = match r.range(0, 13) {
            0 => Action::Inject(Fault::DropOnSubmit),
            1 => Action::Inject(Fault::DropAfterAccepted),
            2 => Action::Inject(Fault::DropBeforeTerminal),
            3 => Action::Inject(Fault::DropAfterFrames(r.range(0, 12))),
            4 => Action::Inject(Fault::DropDuringHandshake),
            5 => Action::Inject(Fault::RejectNextSubmit {
                code: ErrorCode::Unavailable,
                retry_after: None,
            }),
            6 => Action::Inject(Fault::RefuseUpgrade {
                status: if r.chance(50) { 429 } else { 503 },
                retry_after: None,
            }),
            7 => Action::Inject(Fault::StrayFrames),
            8 => Action::Inject(Fault::DelayReplies(r.ms(20, 300))),
            9 => Action::BlackHoleFor(r.ms(100, 900)),
            10 => Action::StallFor(r.ms(100, 900)),
            11 => Action::CloseWithFor(if r.chance(50) { 1008 } else { 1009 }, r.ms(100, 900)),
            _ => Action::KillAll,
        };
        faults.push((at, action));
    }
    faults.sort_by_key(|(at, _)| *at);
    let kill_every_bytes = r.chance(40).then(|| r.range(300, 2_500));
    Plan {
        seed,
        family,
        transport,
        journal,
        dialect,
        heartbeat,
        lazy: r.chance(30),
        kill_every_bytes,
        calls,
        faults,
        hostile: Hostile::default(),
        key_retention: None,
        cache_ttl: None,
    }
}

/// What a schedule adds against "did not run" claimed of a key, and
/// `replayed` claimed of an answer.
#[derive(Debug, Clone, Copy, Default)]
struct Hostile {
    /// The HTTP gateway fingerprints whole bodies: a key it saw with
    /// another body (our own retry: a fresh envelope) gets 422.
    fingerprint: bool,
    /// The HTTP gateway answers 409 (no job named) before forwarding, at
    /// this percent of requests.
    conflict_409_percent: u64,
    /// Once the first client closed, a client of its own (no journal, so
    /// no memory of the keys) re-issues every key whose call ran.
    second_caller: bool,
}

/// The hostile additions of `seed`, from their own stream of it (the rest
/// of the plan stays as it was).
fn hostile(seed: u64, transport: Transport) -> Hostile {
    let mut h = Rng(seed ^ 0x7207_4C41);
    let gateway = transport == Transport::Http { gateway: true };
    Hostile {
        fingerprint: gateway && h.chance(40),
        conflict_409_percent: if gateway && h.chance(40) {
            h.range(5, 25)
        } else {
            0
        },
        second_caller: h.chance(30),
    }
}

/// The gateway's moves with the hostile 409s mixed in.
fn hostile_moves(
    seed: u64,
    hostile: Hostile,
    mut inner: impl FnMut() -> Move + Send + 'static,
) -> impl FnMut() -> Move + Send + 'static {
    let mut r = Rng(seed ^ 0x0409_0409);
    move || {
        if hostile.conflict_409_percent > 0 && r.chance(hostile.conflict_409_percent) {
            Move::Refuse(409)
        } else {
            inner()
        }
    }
}

/// The gateway of an HTTP schedule.
async fn start_gateway(plan: &Plan, mock: &MockRuntime) -> Gateway {
    let moves = hostile_moves(plan.seed, plan.hostile, gateway_moves(plan.seed));
    let started = if plan.hostile.fingerprint {
        Gateway::fingerprinting(mock.http_address(), moves).await
    } else {
        Gateway::start(mock.http_address(), moves).await
    };
    started.expect("gateway")
}

/// A second caller of the keys whose calls ran: a client of its own, with
/// no journal and an empty outcome cache, re-issues each (same key, same
/// intent), as another process holding the key would.
async fn second_caller(
    plan: &Plan,
    url: &str,
    keys: &[IdempotencyKey],
    ended: &mut Vec<(usize, Ended)>,
) {
    let client = client_builder(plan, url).connect_lazy();
    let mut tasks = Vec::new();
    for (i, end) in ended.iter() {
        let ran = match &end.outcome {
            Ok(_) => true,
            Err(e) => e.execution() == Execution::Ran,
        };
        if ran && !end.recovered {
            let call = &plan.calls[*i];
            let key = Some(keys[call.key].clone());
            tasks.push((*i, start_call(&client, call, key, Duration::ZERO, false)));
        }
    }
    for (i, t) in tasks {
        if let (_, Ok(end)) = t.await.expect("second caller's call") {
            ended.push((i, end));
        }
    }
    client.close().await;
}

/// Submits the runtime received, per key (either dialect).
fn submits_by_key(mock: &MockRuntime) -> HashMap<String, u64> {
    let mut submits: HashMap<String, u64> = HashMap::new();
    for envelope in mock.received() {
        if envelope.kind != "job.submit" && envelope.kind != "tool.invoke" {
            continue;
        }
        let key = envelope.idempotency_key.clone().or_else(|| {
            serde_json::to_value(&envelope)
                .ok()
                .and_then(|v| v["payload"]["idempotency_key"].as_str().map(str::to_owned))
        });
        if let Some(key) = key {
            *submits.entry(key).or_default() += 1;
        }
    }
    submits
}

/// What one call ended with, and what the client said about its cancel.
struct Ended {
    outcome: Result<Value, Error>,
    elapsed: Duration,
    /// The deadline the call was held to.
    deadline: Duration,
    started: Instant,
    ended: Instant,
    cancel: Option<CancelOutcome>,
    job_id: Option<String>,
    /// A result said it was a stored one.
    replayed: bool,
    /// A call `recover()` handed out (not one a user issued).
    recovered: bool,
    /// Issued with no key: the client generated it.
    generated: bool,
    /// The key the outcome named (a result's, or an error's when it names
    /// one).
    reported: Option<IdempotencyKey>,
    /// A follow-up's: the executions of its key when it was issued (its
    /// first call's, since nothing else used the key yet).
    key_runs_before: Option<u64>,
    /// Ended after its client was closed (a `Closed` is then no violation).
    after_close: bool,
}

async fn start_mock(plan: &Plan) -> MockRuntime {
    let mut b = MockRuntime::builder();
    b = match plan.family {
        Family::Preset(p) => b.preset(p),
        Family::Policy(d, policy) => b.dialect(d).replay_policy(policy),
    };
    if let Some(hb) = plan.heartbeat {
        b = b.heartbeat(hb);
    }
    if let Some((retention, _)) = plan.key_retention {
        b = b.key_retention(retention);
    }
    b.tool("work", |args: Value, ctx| async move {
        ctx.sleep(Duration::from_millis(args["ms"].as_u64().unwrap_or(0)))
            .await;
        Ok(json!({"v": args["v"]}))
    })
    .tool("fail", |_args: Value, _ctx| async move {
        Err(ToolFailure::new("PERMISSION_DENIED", "refused by the tool"))
    })
    // Failures of the tools' own, after acceptance, in the runtime's words.
    .tool("dup", |_args: Value, _ctx| async move {
        Err(ToolFailure::new(
            "DUPLICATE_KEY",
            "the ledger has this entry",
        ))
    })
    .tool("bound", |_args: Value, _ctx| async move {
        Err(ToolFailure::new(
            "FAILED_PRECONDITION",
            "idempotency key k already bound to a different command intent",
        ))
    })
    .tool("unauth", |_args: Value, _ctx| async move {
        Err(ToolFailure::new(
            "UNAUTHENTICATED",
            "the bank refused the tool's token",
        ))
    })
    .start()
    .await
    .expect("mock runtime")
}

/// The store under a schedule's journal: one in-memory store both clients
/// use, or a SQLite file each opens in turn (the second once the first
/// closed it).
enum Store {
    Memory(Arc<MemoryJournal>),
    Sqlite(tempfile::TempDir),
}

impl Store {
    fn new(plan: &JournalPlan) -> Store {
        if plan.sqlite {
            Store::Sqlite(tempfile::tempdir().expect("journal directory"))
        } else {
            Store::Memory(Arc::new(MemoryJournal::new()))
        }
    }

    /// The store, for one client; `None` when its file cannot be opened (the
    /// first client's writer still holds it).
    async fn open(&self) -> Option<Arc<dyn Journal>> {
        match self {
            Store::Memory(store) => Some(store.clone()),
            Store::Sqlite(dir) => {
                let path = dir.path().join("journal.sqlite");
                // Synchronous::Normal: what is checked here is what the
                // client makes of its store's answers, not the disk's.
                let options = SqliteOptions::default().synchronous(Synchronous::Normal);
                let opened =
                    tokio::task::spawn_blocking(move || SqliteJournal::open_with(path, options))
                        .await
                        .expect("journal open task");
                Some(Arc::new(opened.ok()?))
            }
        }
    }
}

/// The journal faults dealt over a run (for its summary): commits refused,
/// unanswered, unanswered but landed; reads unanswered.
static REFUSED: AtomicU64 = AtomicU64::new(0);
static LOST: AtomicU64 = AtomicU64::new(0);
static LANDED: AtomicU64 = AtomicU64::new(0);
static LATE: AtomicU64 = AtomicU64::new(0);
static UNREAD: AtomicU64 = AtomicU64::new(0);
/// Policy closes (1008) the relay made after a forwarded submit.
static POLICY_CLOSES: AtomicU64 = AtomicU64::new(0);
/// Keys a second client discarded.
static DISCARDS: AtomicU64 = AtomicU64::new(0);

/// How one commit of a schedule's journal ends.
enum Fate {
    Commits,
    /// Refused: nothing committed, an I/O error.
    Refused,
    /// Unanswered, and nothing committed.
    Lost,
    /// Unanswered, but the commit went through.
    Landed,
    /// Unanswered, and the commit lands this much later (unless the client
    /// closed the store meanwhile: then it never arrived).
    LandsLate(Duration),
}

/// A journal store shared by the schedule's clients (one after the other),
/// behind a wrapper that fails a seeded share of its operations: commits
/// refused ([`JournalErrorKind::Io`], nothing committed) or unanswered
/// ([`JournalErrorKind::Unavailable`]: nothing committed, or all of it, at
/// once or later), reads unanswered, and everything unanswered during the
/// outage window.
///
/// Every method the client's writer calls is forwarded to the store as one
/// operation with one fate, so a fault means what it would in a store with
/// a round trip per operation. [`Journal::apply_and_insert_new`] is one
/// transaction: "landed" is the store's own `apply_and_insert_new`
/// committed whole (the writes, and a record for each key that had none),
/// with the answer (which keys it recorded) lost; landing late, it is that
/// same operation, on the store as it is then.
struct Faulty {
    store: Arc<dyn Journal>,
    rng: Mutex<Rng>,
    plan: JournalPlan,
    /// The outage window, in time (both clients see the same one).
    outage: Option<(Instant, Instant)>,
    /// Commits still to refuse after one landed unanswered.
    refusals_due: AtomicU64,
}

fn unanswered() -> JournalError {
    JournalError::new(
        JournalErrorKind::Unavailable,
        "checker",
        "the store did not answer (the checker's journal)",
    )
}

impl Faulty {
    fn new(
        store: Arc<dyn Journal>,
        plan: JournalPlan,
        seed: u64,
        outage: Option<(Instant, Instant)>,
    ) -> Faulty {
        Faulty {
            store,
            rng: Mutex::new(Rng(seed)),
            plan,
            outage,
            refusals_due: AtomicU64::new(0),
        }
    }

    fn down(&self) -> bool {
        self.outage
            .is_some_and(|(from, to)| (from..to).contains(&Instant::now()))
    }

    fn fate(&self) -> Fate {
        let mut r = self.rng.lock().unwrap();
        let p = &self.plan;
        let due = self.refusals_due.load(Ordering::Relaxed);
        if due > 0 {
            self.refusals_due.store(due - 1, Ordering::Relaxed);
            return Fate::Refused;
        }
        if self.down() || (p.unavailable_percent > 0 && r.chance(p.unavailable_percent)) {
            if !r.chance(p.landed_percent) {
                Fate::Lost
            } else {
                self.refusals_due
                    .store(p.refuse_after_landed, Ordering::Relaxed);
                if r.chance(50) {
                    Fate::Landed
                } else {
                    Fate::LandsLate(r.ms(1, 1_000))
                }
            }
        } else if p.refuse_percent > 0 && r.chance(p.refuse_percent) {
            Fate::Refused
        } else {
            Fate::Commits
        }
    }

    /// One commit: `op` on the store, as its fate has it.
    fn commit<T>(
        &self,
        op: impl FnOnce(&dyn Journal) -> Result<T, JournalError> + Send + 'static,
    ) -> Result<T, JournalError> {
        let fate = self.fate();
        let counter = match fate {
            Fate::Commits => None,
            Fate::Refused => Some(&REFUSED),
            Fate::Lost => Some(&LOST),
            Fate::Landed => Some(&LANDED),
            Fate::LandsLate(_) => Some(&LATE),
        };
        if let Some(counter) = counter {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        match fate {
            Fate::Commits => op(&*self.store),
            Fate::Refused => Err(JournalError::new(
                JournalErrorKind::Io,
                "checker",
                "the commit was refused (the checker's journal)",
            )),
            Fate::Lost => Err(unanswered()),
            Fate::Landed => {
                op(&*self.store)?;
                Err(unanswered())
            }
            Fate::LandsLate(after) => {
                let store = Arc::downgrade(&self.store);
                std::thread::spawn(move || {
                    std::thread::sleep(after);
                    if let Some(store) = store.upgrade() {
                        let _ = op(&*store);
                    }
                });
                Err(unanswered())
            }
        }
    }

    /// One read (a lookup, a claim): unanswered during the outage, and
    /// outside it at half the commits' rate.
    fn read<T>(
        &self,
        op: impl FnOnce(&dyn Journal) -> Result<T, JournalError>,
    ) -> Result<T, JournalError> {
        let p = &self.plan;
        if self.down()
            || (p.unavailable_percent > 1
                && self.rng.lock().unwrap().chance(p.unavailable_percent / 2))
        {
            UNREAD.fetch_add(1, Ordering::Relaxed);
            return Err(unanswered());
        }
        op(&*self.store)
    }
}

impl Journal for Faulty {
    fn apply(&self, writes: &[JournalWrite]) -> Result<(), JournalError> {
        let writes = writes.to_vec();
        self.commit(move |store| store.apply(&writes))
    }
    fn apply_and_insert_new(
        &self,
        writes: &[JournalWrite],
        new: &[JournalEntry],
    ) -> Result<Vec<bool>, JournalError> {
        let (writes, new) = (writes.to_vec(), new.to_vec());
        self.commit(move |store| store.apply_and_insert_new(&writes, &new))
    }
    fn get(&self, key: &IdempotencyKey) -> Result<Option<JournalEntry>, JournalError> {
        self.read(|store| store.get(key))
    }
    fn get_many(&self, keys: &[IdempotencyKey]) -> Result<Vec<JournalEntry>, JournalError> {
        self.read(|store| store.get_many(keys))
    }
    fn unfinished(&self, limit: usize) -> Result<Vec<JournalEntry>, JournalError> {
        self.read(|store| store.unfinished(limit))
    }
    fn claim(
        &self,
        limit: usize,
        driving: &HashSet<IdempotencyKey>,
    ) -> Result<Vec<JournalEntry>, JournalError> {
        self.read(|store| store.claim(limit, driving))
    }
    fn acquire(&self, key: &IdempotencyKey) -> Result<bool, JournalError> {
        self.read(|store| store.acquire(key))
    }
    /// Unanswered only during the outage: a purge failing at random would
    /// mostly fail the client's start (it purges once when it opens).
    fn purge(&self, retention: &Retention, now: SystemTime) -> Result<PurgeReport, JournalError> {
        if self.down() {
            UNREAD.fetch_add(1, Ordering::Relaxed);
            return Err(unanswered());
        }
        self.store.purge(retention, now)
    }
    fn location(&self) -> String {
        self.store.location()
    }
    fn lease_interval(&self) -> Option<Duration> {
        self.store.lease_interval()
    }
    fn renew(&self) -> Result<Vec<IdempotencyKey>, JournalError> {
        self.store.renew()
    }
    fn take_fenced(&self) -> Vec<IdempotencyKey> {
        self.store.take_fenced()
    }
    fn lease_ttl(&self) -> Option<Duration> {
        self.store.lease_ttl()
    }
}

/// The gateway's seeded moves: mostly forwarding, sometimes a status of
/// its own before or after forwarding, a cut or a slow answer.
fn gateway_moves(seed: u64) -> impl FnMut() -> Move + Send + 'static {
    let mut r = Rng(seed ^ 0x6A7E_3A11);
    move || match r.range(0, 99) {
        0..=54 => Move::Forward,
        // A server error after forwarding, the common ones and not.
        55..=61 => Move::ForwardThen([500, 502, 504, 507, 599][r.range(0, 4) as usize]),
        62..=68 => Move::ForwardCut(r.range(0, 400) as usize),
        69..=75 => Move::ForwardSlowly(r.ms(20, 300)),
        76..=89 => Move::Refuse(if r.chance(50) { 429 } else { 503 }),
        90..=94 => Move::Refuse(404),
        _ => Move::Refuse(401),
    }
}

/// The client of a schedule, on `url`.
fn client_builder(plan: &Plan, url: &str) -> ClientBuilder {
    let mut builder = Client::builder(url)
        .dialect(plan.dialect)
        .handshake_timeout(Duration::from_millis(400))
        .connect_timeout(Duration::from_millis(400))
        .connect_budget(Duration::from_secs(2))
        .cancel_timeout(Duration::from_millis(300))
        .retry(
            RetryPolicy::exponential()
                .initial_delay(Duration::from_millis(10))
                .max_delay(Duration::from_millis(150))
                .max_attempts(8)
                .max_elapsed(Duration::from_secs(2))
                .outcome_poll(Duration::from_millis(80)),
        );
    if let Some(hb) = plan.heartbeat {
        builder = builder.heartbeat_interval(hb);
    }
    if let Some(retention) = plan.client_key_retention() {
        builder = builder.runtime_key_retention(retention);
    }
    if let Some(ttl) = plan.cache_ttl {
        builder = builder.tuning(arcp_sdk::tuning::Tuning::new().outcome_cache(1024, ttl));
    }
    builder
}

/// A call's key (from its handle), and its ending (`Err(started)`: the
/// caller dropped the call it started then).
type CallEnd = (Option<IdempotencyKey>, Result<Ended, Instant>);

/// Starts planned call `call` on `client` under `key` (`None`: the client
/// generates one); with `cancel`, its planned cancel or drop too. The task
/// answers the call's key, and its ending (`Err(started)`: the caller
/// dropped the call it started then).
fn start_call(
    client: &Client,
    call: &PlannedCall,
    key: Option<IdempotencyKey>,
    delay: Duration,
    cancel: bool,
) -> tokio::task::JoinHandle<CallEnd> {
    let client = client.clone();
    let call = call.clone();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let started = Instant::now();
        let generated = key.is_none();
        let mut builder = client
            .invoke_tool(call.tool, json!({"v": call.v, "ms": call.ms}))
            .deadline(call.deadline);
        if let Some(key) = key {
            builder = builder.idempotency_key(key);
        }
        let invocation = builder.send();
        let handle = invocation.handle();
        let key = handle.key().cloned();
        let canceller = call.cancel_after.filter(|_| cancel).map(|after| {
            let handle = handle.clone();
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                handle.cancel().await
            })
        });
        let outcome = match call.drop_after.filter(|_| cancel) {
            Some(after) => match tokio::time::timeout(after, invocation).await {
                Ok(outcome) => outcome,
                Err(_) => return (key, Err(started)),
            },
            None => invocation.await,
        };
        let replayed = outcome.as_ref().is_ok_and(|out| out.replayed);
        let reported = match &outcome {
            Ok(out) => Some(out.key.clone()),
            Err(e) => e.key().cloned(),
        };
        let outcome = outcome.map(|out| out.value);
        let elapsed = started.elapsed();
        let cancel = match canceller {
            Some(c) => Some(c.await.expect("cancel task")),
            None => None,
        };
        let end = Ended {
            outcome,
            elapsed,
            deadline: call.deadline,
            started,
            ended: started + elapsed,
            cancel,
            job_id: handle.job_id(),
            replayed,
            recovered: false,
            generated,
            reported,
            key_runs_before: None,
            after_close: false,
        };
        (key, Ok(end))
    })
}

/// What a call with follow-ups reported of its key once it ended (`None`:
/// nothing).
type Reported = Option<IdempotencyKey>;

/// Follow-ups issued, and those not issued because their first call
/// reported no key.
static FOLLOW_UPS: AtomicU64 = AtomicU64::new(0);
static FOLLOW_UPS_SKIPPED: AtomicU64 = AtomicU64::new(0);
/// Calls with follow-ups that their callers dropped (the follow-ups took
/// the key from the call's handle).
static FOLLOWED_DROPPED: AtomicU64 = AtomicU64::new(0);
/// How the first client's follow-ups ended, by intent (same / other), what
/// their first call said (ok, its execution claim, or dropped) and outcome
/// class.
static FOLLOW_UP_ENDS: Mutex<std::collections::BTreeMap<String, u64>> =
    Mutex::new(std::collections::BTreeMap::new());
/// The errors, by code, of the first calls that reported no key (their
/// follow-ups were not issued).
static FOLLOW_UP_SKIPS: Mutex<std::collections::BTreeMap<String, u64>> =
    Mutex::new(std::collections::BTreeMap::new());

/// Starts follow-up `call` once its first call ended (`first` tells the key
/// it reported), `delay` after: with that key supplied, as any call of a
/// key the caller names. `None` when the first call reported no key (then
/// there is nothing to call again with).
fn start_follow_up(
    client: &Client,
    call: &PlannedCall,
    mut first: tokio::sync::watch::Receiver<Option<Reported>>,
    delay: Duration,
    mock: Arc<MockRuntime>,
) -> tokio::task::JoinHandle<Option<CallEnd>> {
    let client = client.clone();
    let call = call.clone();
    tokio::spawn(async move {
        let reported = match first.wait_for(Option::is_some).await {
            Ok(told) => told.clone().flatten(),
            Err(_) => None,
        };
        let Some(key) = reported else {
            FOLLOW_UPS_SKIPPED.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        FOLLOW_UPS.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(delay).await;
        // What the key ran before this call: nothing else of this client
        // uses it, so that is its first call's.
        let runs_before = mock.executions_for_key(key.as_str());
        let task = start_call(&client, &call, Some(key), Duration::ZERO, true);
        let (key, mut end) = task.await.expect("follow-up task");
        if let Ok(end) = &mut end {
            end.key_runs_before = Some(runs_before);
        }
        Some((key, end))
    })
}

/// Runs one schedule; returns the oracle's violations.
async fn run(plan: Plan) -> Vec<String> {
    let lag = LagProbe::get();
    let mock = Arc::new(start_mock(&plan).await);
    let proxy = match plan.transport {
        Transport::Ws => {
            let mut proxy = ChaosProxy::builder(mock.address())
                .seed(plan.seed)
                .max_kills(6)
                .spare_first_frames(2);
            if let Some(n) = plan.kill_every_bytes {
                proxy = proxy.kill_every_bytes(n);
            }
            Some(proxy.start().await.expect("chaos proxy"))
        }
        Transport::Http { .. } => None,
    };
    let gateway = match plan.transport {
        Transport::Http { gateway: true } => Some(start_gateway(&plan, &mock).await),
        _ => None,
    };
    let policy_close = plan
        .faults
        .iter()
        .any(|(_, a)| matches!(a, Action::PolicyCloseThen401For(_)));
    let relay = match &proxy {
        Some(proxy) if policy_close => Some(
            RelayHandle::start(proxy.local_addr(), Relay::PolicyCloseThen401)
                .await
                .expect("relay"),
        ),
        _ => None,
    };
    let url = match (&relay, &proxy, &gateway) {
        (Some(relay), _, _) => relay.ws_url("/arcp"),
        (None, Some(proxy), _) => proxy.ws_url("/arcp"),
        (None, None, Some(gateway)) => gateway.url(),
        (None, None, None) => mock.http_url(),
    };
    let store = plan.journal.map(|j| Store::new(&j));
    let started = Instant::now();
    let outage = plan
        .journal
        .and_then(|j| j.outage)
        .map(|(at, len)| (started + at, started + at + len));
    let mut builder = client_builder(&plan, &url);
    let mut violations = Vec::new();
    if let (Some(j), Some(store)) = (plan.journal, &store) {
        let Some(opened) = store.open().await else {
            violations.push("the journal could not be opened".to_owned());
            return violations;
        };
        builder = builder.journal(Faulty::new(opened, j, plan.seed ^ 0x10, outage));
    }
    let client = if plan.lazy {
        Ok(builder.connect_lazy())
    } else {
        builder.connect().await
    };
    let client = match client {
        Ok(c) => c,
        Err(e) => {
            // The first connection may meet a fault; then nothing ran.
            if mock.total_executions() != 0 {
                violations.push(format!("connect failed ({e}) but tools ran"));
            }
            return violations;
        }
    };
    // A generated key's slot is filled once its call told it.
    let mut keys: Vec<IdempotencyKey> = (0..plan.calls.len())
        .map(|_| IdempotencyKey::new())
        .collect();
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    // What each call with follow-ups reported of its key, once it ended.
    let mut reports: HashMap<usize, tokio::sync::watch::Receiver<Option<Reported>>> =
        HashMap::new();
    for (i, call) in plan.calls.iter().enumerate() {
        if let Some((first, delay)) = call.follows {
            let report = reports
                .get(&first)
                .expect("a follow-up's first call")
                .clone();
            tasks.push(start_follow_up(&client, call, report, delay, mock.clone()));
            continue;
        }
        let key = (!call.generated).then(|| keys[call.key].clone());
        let task = start_call(&client, call, key, call.start, true);
        let followed = plan
            .calls
            .iter()
            .any(|c| c.follows.is_some_and(|(f, _)| f == i));
        let (report, reported) = tokio::sync::watch::channel(None);
        if followed {
            reports.insert(i, reported);
        }
        tasks.push(tokio::spawn(async move {
            let (key, end) = task.await.expect("call task");
            // An outcome's key, or the handle's for a call its caller
            // dropped.
            let told = match &end {
                Ok(end) => end.reported.clone(),
                Err(_) => key.clone(),
            };
            if let (true, Err(_)) = (followed, &end) {
                FOLLOWED_DROPPED.fetch_add(1, Ordering::Relaxed);
            }
            if let (
                true,
                None,
                Ok(Ended {
                    outcome: Err(e), ..
                }),
            ) = (followed, &told, &end)
            {
                *FOLLOW_UP_SKIPS
                    .lock()
                    .unwrap()
                    .entry(format!("{} {}", e.code_name(), e.execution()))
                    .or_default() += 1;
            }
            report.send_replace(Some(told));
            Some((key, end))
        }));
    }
    // The fault timeline, alongside the calls.
    for (at, action) in &plan.faults {
        tokio::time::sleep_until((t0 + *at).into()).await;
        match action {
            Action::Inject(f) => mock.inject(f.clone()),
            Action::KillAll => {
                if let Some(proxy) = &proxy {
                    proxy.kill_all();
                }
            }
            Action::BlackHoleFor(d) => {
                mock.inject(Fault::BlackHole);
                tokio::time::sleep(*d).await;
                mock.inject(Fault::Recover);
            }
            Action::StallFor(d) => {
                if let Some(proxy) = &proxy {
                    proxy.stall(true);
                    tokio::time::sleep(*d).await;
                    proxy.stall(false);
                }
            }
            Action::CloseWithFor(code, d) => {
                mock.inject_always(Fault::CloseWith { code: *code });
                tokio::time::sleep(*d).await;
                mock.clear_faults();
            }
            Action::PolicyCloseThen401For(d) => {
                if let Some(relay) = &relay {
                    relay.arm(*d);
                }
            }
        }
    }
    // Each outcome, with the planned call it belongs to.
    let mut ended: Vec<(usize, Ended)> = Vec::new();
    // The calls whose callers dropped them, and when each started.
    let mut dropped: Vec<(usize, Instant)> = Vec::new();
    for (i, t) in tasks.into_iter().enumerate() {
        // A follow-up whose first call reported no key was not issued.
        let Some((key, end)) = t.await.expect("call task") else {
            continue;
        };
        let call = &plan.calls[i];
        match key {
            Some(key) if call.generated => keys[call.key] = key,
            None if call.generated => violations.push(format!("call {i}: no generated key")),
            _ => {}
        }
        match end {
            Ok(end) => ended.push((i, end)),
            Err(started) => dropped.push((i, started)),
        }
    }
    // Nothing of a finished call stays behind.
    let stats = client.stats().await;
    if stats.calls != 0 || stats.requests != 0 {
        violations.push(format!("finished calls left state behind: {stats:?}"));
    }
    client.close().await;
    drop(client);
    let first_closed = Instant::now();
    if plan.hostile.second_caller {
        second_caller(&plan, &url, &keys, &mut ended).await;
    }

    // A second process on the same journal: re-issues what may have run,
    // and recovers what is unfinished.
    // (A SQLite file the first client's writer still holds, past its close
    // timeout, is not opened again.)
    if let (Some(j), Some(store)) = (plan.journal.filter(|j| j.second_client), &store) {
        if let Some((_, later)) = plan.key_retention {
            tokio::time::sleep(later).await;
        }
        if let Some(opened) = store.open().await {
            let journal = Faulty::new(opened.clone(), j, plan.seed ^ 0x20, outage);
            let discarded = second_client(
                &plan,
                &url,
                journal,
                &*opened,
                &keys,
                &mut ended,
                &mut violations,
            )
            .await;
            if !discarded.is_empty() {
                if let Some(opened) = store.open().await {
                    unreachable_client(&plan, opened, &keys, &discarded, &mut ended).await;
                }
            }
        }
    }
    // Some schedules call the keys that ran from a client with a new
    // journal that cannot reach the runtime (a stream of their own): a
    // journal with no record of a key proves nothing of it.
    if Rng(plan.seed ^ 0x00FE_E5A1).chance(25) {
        let ran: HashSet<IdempotencyKey> = ended
            .iter()
            .filter(|(_, end)| end.outcome.is_ok() && !end.generated)
            .map(|(i, _)| keys[plan.calls[*i].key].clone())
            .collect();
        let fresh: Arc<dyn Journal> = Arc::new(MemoryJournal::new());
        unreachable_client(&plan, fresh, &keys, &ran, &mut ended).await;
    }
    // Settle: whatever the runtime still runs (calls that gave up) ends,
    // so "did not run" is checked against every execution, ever.
    mock.clear_faults();
    settle(&mock).await;
    check(
        &plan,
        &mock,
        proxy.as_ref(),
        gateway.as_ref(),
        &keys,
        Endings {
            ended: &ended,
            dropped: &dropped,
            first_closed,
            lag,
        },
        &mut violations,
    );
    if let Some(relay) = &relay {
        POLICY_CLOSES.fetch_add(relay.closes(), Ordering::Relaxed);
    }
    drop(proxy);
    violations
}

/// The second client of a journaled schedule: opens the store the first
/// one closed, may discard some keys first, re-issues every key whose call
/// may have run (as a user told "ask again later with this key" does) and
/// every discarded key whose call ran, and calls `recover()` meanwhile. A
/// discarded key not issued again, handed out by `recover()`, is a
/// violation.
async fn second_client(
    plan: &Plan,
    url: &str,
    journal: Faulty,
    store: &dyn Journal,
    keys: &[IdempotencyKey],
    ended: &mut Vec<(usize, Ended)>,
    violations: &mut Vec<String>,
) -> HashSet<IdempotencyKey> {
    let builder = client_builder(plan, url).journal(journal);
    let client = builder.connect_lazy();
    // Some schedules discard keys first (a stream of their own: the plan
    // stays as it was). Only a discard that succeeded is counted.
    let mut d = Rng(plan.seed ^ 0xD15C_A4D5);
    let mut discarded = HashSet::new();
    if d.chance(30) {
        for (i, end) in ended.iter() {
            let key = &keys[plan.calls[*i].key];
            if end.generated || discarded.contains(key) || !d.chance(50) {
                continue;
            }
            if let Ok(true) = client.discard(key).await {
                DISCARDS.fetch_add(1, Ordering::Relaxed);
                discarded.insert(key.clone());
            }
        }
    }
    let mut tasks = Vec::new();
    // Keys issued again here: their new records are recoverable.
    let mut reissued = HashSet::new();
    for (i, end) in ended.iter() {
        let key = &keys[plan.calls[*i].key];
        let ran_then_discarded = end.outcome.is_ok() && discarded.contains(key);
        if ran_then_discarded
            || end
                .outcome
                .as_ref()
                .is_err_and(|e| e.execution() == Execution::MayHaveRun)
        {
            reissued.insert(key.clone());
            let call = &plan.calls[*i];
            let key = Some(keys[call.key].clone());
            tasks.push((*i, start_call(&client, call, key, Duration::ZERO, false)));
        }
    }
    // The unfinished records' intents and deadlines, to tell which planned
    // call a recovered one is: two planned calls may share a key and an
    // intent, and the record holds the deadline of the one that wrote it
    // last, which is the deadline its recovery is held to.
    let intents: HashMap<String, (u64, Duration)> = store
        .unfinished(1_000)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| {
            let invoke: Value = serde_json::from_str(&e.intent).ok()?;
            let v = invoke["arguments"]["v"].as_u64()?;
            Some((e.key.to_string(), (v, e.deadline)))
        })
        .collect();
    // Some schedules close the client while its re-issues and recoveries
    // run (from a stream of their own: the plan stays as it was).
    let mut c = Rng(plan.seed ^ 0xC105_EC10);
    let closer = c.chance(30).then(|| {
        let (client, after) = (client.clone(), c.ms(0, 300));
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let at = Instant::now();
            client.close().await;
            at
        })
    });
    tokio::time::sleep(Duration::from_millis(plan.seed % 50)).await;
    let recovered = client.recover().await.unwrap_or_default();
    let mut recovering = Vec::new();
    for invocation in recovered {
        let only_discarded = |k: &&IdempotencyKey| discarded.contains(*k) && !reissued.contains(*k);
        if let Some(k) = invocation.key().filter(only_discarded) {
            violations.push(format!("recover() handed out the discarded key {k}"));
        }
        let key = invocation.key().map(|k| k.to_string()).unwrap_or_default();
        let Some(&(v, deadline)) = intents.get(&key) else {
            continue;
        };
        let same_intent = |c: &PlannedCall| keys[c.key].to_string() == key && c.v == v;
        let by_deadline = plan
            .calls
            .iter()
            .position(|c| same_intent(c) && c.deadline == deadline);
        let planned = by_deadline.or_else(|| plan.calls.iter().position(same_intent));
        let Some(i) = planned else {
            continue;
        };
        recovering.push((
            i,
            tokio::spawn(async move {
                let started = Instant::now();
                let job_id = invocation.job_id();
                let outcome = invocation.await;
                let replayed = outcome.as_ref().is_ok_and(|out| out.replayed);
                let reported = match &outcome {
                    Ok(out) => Some(out.key.clone()),
                    Err(e) => e.key().cloned(),
                };
                Some(Ended {
                    outcome: outcome.map(|out| out.value),
                    elapsed: started.elapsed(),
                    deadline,
                    started,
                    ended: Instant::now(),
                    cancel: None,
                    job_id,
                    replayed,
                    recovered: true,
                    generated: false,
                    reported,
                    key_runs_before: None,
                    after_close: false,
                })
            }),
        ));
    }
    let mut ends = Vec::new();
    for (i, t) in tasks {
        if let (_, Ok(end)) = t.await.expect("second client's call") {
            ends.push((i, end));
        }
    }
    for (i, t) in recovering {
        if let Some(end) = t.await.expect("second client's recovery") {
            ends.push((i, end));
        }
    }
    let closed_at = match closer {
        Some(closer) => Some(closer.await.expect("closer")),
        None => None,
    };
    for (i, mut end) in ends {
        end.after_close = closed_at.is_some_and(|at| end.ended >= at);
        ended.push((i, end));
    }
    client.close().await;
    discarded
}

/// A client whose runtime cannot be reached (it sends nothing) calls each
/// key of `which` once, on `store` (without faults): the keys a second
/// client discarded, on their store; or the keys that ran, on a new
/// journal. Its claims are checked as any other's: a key whose call ran
/// never says "did not run".
async fn unreachable_client(
    plan: &Plan,
    store: Arc<dyn Journal>,
    keys: &[IdempotencyKey],
    which: &HashSet<IdempotencyKey>,
    ended: &mut Vec<(usize, Ended)>,
) {
    let clean = JournalPlan {
        refuse_percent: 0,
        unavailable_percent: 0,
        landed_percent: 0,
        outage: None,
        sqlite: false,
        short_deadline_percent: 0,
        second_client: false,
        refuse_after_landed: 0,
    };
    // A port held for the while, closing every connection at once: freed
    // instead, another schedule's runtime could take it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let port = listener.local_addr().expect("its address").port();
    let refuser = tokio::spawn(async move {
        while let Ok((connection, _)) = listener.accept().await {
            drop(connection);
        }
    });
    let client = client_builder(plan, &format!("ws://127.0.0.1:{port}/arcp"))
        .journal(Faulty::new(store, clean, plan.seed ^ 0x000D_EAD0, None))
        .connect_lazy();
    let mut called = HashSet::new();
    let mut tasks = Vec::new();
    for (i, call) in plan.calls.iter().enumerate() {
        let key = &keys[call.key];
        if call.generated || !which.contains(key) || !called.insert(key.clone()) {
            continue;
        }
        tasks.push((
            i,
            start_call(&client, call, Some(key.clone()), Duration::ZERO, false),
        ));
    }
    for (i, t) in tasks {
        if let (_, Ok(end)) = t.await.expect("unreachable client's call") {
            ended.push((i, end));
        }
    }
    client.close().await;
    refuser.abort();
}

/// How a schedule's calls ended, each with its planned call's index.
struct Endings<'a> {
    /// The calls that ended with an outcome.
    ended: &'a [(usize, Ended)],
    /// The calls their callers dropped (no outcome, no claim), with the
    /// instant each started.
    dropped: &'a [(usize, Instant)],
    /// When the first client closed (the second caller and the second
    /// client start after it).
    first_closed: Instant,
    /// The machine's scheduling lag while the schedule ran.
    lag: &'a LagProbe,
}

/// The oracle: every outcome against what the runtime executed.
fn check(
    plan: &Plan,
    mock: &MockRuntime,
    proxy: Option<&ChaosProxyHandle>,
    gateway: Option<&Gateway>,
    keys: &[IdempotencyKey],
    endings: Endings<'_>,
    violations: &mut Vec<String>,
) {
    let Endings {
        ended,
        dropped,
        first_closed,
        lag,
    } = endings;
    // Executions per (key, intent) and per key, from the runtime's records.
    let jobs = mock.jobs();
    let mut by_intent: HashMap<(String, u64), u64> = HashMap::new();
    let mut by_key: HashMap<String, u64> = HashMap::new();
    for job in &jobs {
        let Some(key) = &job.idempotency_key else {
            continue;
        };
        let v = job.arguments["v"].as_u64().unwrap_or(u64::MAX);
        *by_intent.entry((key.clone(), v)).or_default() += job.executions;
        *by_key.entry(key.clone()).or_default() += job.executions;
    }
    for (key, n) in &by_key {
        if *n > 1 {
            violations.push(format!("key {key} executed {n} times"));
        }
    }
    if let Some(gateway) = gateway {
        let submitted = mock.http_requests();
        if submitted > gateway.forwarded() {
            violations.push(format!(
                "the runtime got {submitted} requests, the gateway forwarded {}",
                gateway.forwarded()
            ));
        }
    }
    let received = mock.received();
    // A frame written to a socket that is then cut may never arrive: a
    // dispatched cancel is checked against the runtime's log only when no
    // connection was cut or stalled in between.
    let clean_network = proxy.is_some_and(|p| p.report().kills.is_empty())
        && !plan.faults.iter().any(|(_, a)| {
            matches!(
                a,
                Action::KillAll | Action::StallFor(_) | Action::PolicyCloseThen401For(_)
            )
        });
    // Whether a user issued a call with the same key and intent once `end`
    // ended (a recovery is no such call: "not run stays not run"; but a
    // call a caller dropped is one, and its record's recovery may run it).
    let issued_again = |i: usize, end: &Ended| {
        let call = &plan.calls[i];
        let same = |j: usize| {
            let c = &plan.calls[j];
            c.key == call.key && c.v == call.v
        };
        ended
            .iter()
            .any(|(j, other)| same(*j) && other.started >= end.ended && !other.recovered)
            || dropped
                .iter()
                .any(|(j, started)| same(*j) && *started >= end.ended)
    };
    // Whether another call of the same key and intent exists, ended or
    // planned (a caller that dropped its call leaves no outcome).
    let other_call = |i: usize, end: &Ended| {
        let call = &plan.calls[i];
        let planned = plan
            .calls
            .iter()
            .enumerate()
            .filter(|(j, c)| c.key == call.key && c.v == call.v && *j != i)
            .count();
        let outcomes = ended
            .iter()
            .filter(|(j, other)| {
                let c = &plan.calls[*j];
                c.key == call.key && c.v == call.v && !std::ptr::eq(other, end)
            })
            .count();
        planned + outcomes > 0
    };
    // Every ending of a planned key (for a violation's report): each
    // call's index, when it started and ended from the first start, and
    // its outcome's class.
    let t0 = ended.iter().map(|(_, e)| e.started).min();
    let key_calls = |k: usize| {
        let since = |at: Instant| t0.map_or(0, |t0| at.duration_since(t0).as_millis());
        let mut shown: Vec<String> = ended
            .iter()
            .filter(|(j, _)| plan.calls[*j].key == k)
            .map(|(j, e)| {
                let class = match &e.outcome {
                    Ok(_) => "ok".to_owned(),
                    Err(err) => format!("{} {}", err.code_name(), err.execution()),
                };
                let recovered = if e.recovered { " recovered" } else { "" };
                format!(
                    "#{j} {}..{}ms {class}{recovered}",
                    since(e.started),
                    since(e.ended)
                )
            })
            .collect();
        shown.extend(
            dropped
                .iter()
                .filter(|(j, _)| plan.calls[*j].key == k)
                .map(|(j, at)| format!("#{j} from {}ms dropped", since(*at))),
        );
        shown.join(", ")
    };
    // What the key of call `i` (generated) ran before its first follow-up
    // was issued: by then only `i` had used it.
    let runs_before_follow_ups = |i: usize| {
        ended
            .iter()
            .filter(|(j, _)| plan.calls[*j].follows.is_some_and(|(f, _)| f == i))
            .filter_map(|(_, end)| end.key_runs_before)
            .min()
            .unwrap_or(0)
    };
    let submits = submits_by_key(mock);
    for (i, end) in ended {
        let call = &plan.calls[*i];
        let key = keys[call.key].to_string();
        let runs = by_intent.get(&(key.clone(), call.v)).copied().unwrap_or(0);
        // Where it ran (the second caller, a recovery) and its key, to find
        // it in the client's log.
        let by = if end.recovered {
            ", recovered"
        } else if end.started > first_closed {
            ", after the first client closed"
        } else {
            ""
        };
        let who = format!(
            "call {i} ({} v={} key#{} {key}{by})",
            call.tool, call.v, call.key
        );
        // Deadlines are instants: only a stall from the deadline on delays
        // the end.
        let timers_late = lag.worst(end.started + end.deadline, end.ended);
        if end.elapsed > end.deadline + DEADLINE_SLACK + timers_late {
            violations.push(format!(
                "{who}: ended after {:?}, deadline {:?} (threads woke up late, or waited for a \
                 CPU, up to {timers_late:?} meanwhile)",
                end.elapsed, end.deadline
            ));
        }
        // The first client's follow-ups, tallied for the run's summary.
        let first_clients = !end.recovered && end.started < first_closed;
        if let Some((first, _)) = call.follows.filter(|_| first_clients) {
            let intent = if plan.calls[first].v == call.v {
                "same"
            } else {
                "other"
            };
            let class = match &end.outcome {
                Ok(_) if end.replayed => "ok replayed".to_owned(),
                Ok(_) => "ok".to_owned(),
                Err(e) => format!("{} {}", e.code_name(), e.execution()),
            };
            // What the first call said of itself (the first client's own end).
            let said = ended
                .iter()
                .find(|(j, e)| *j == first && e.generated)
                .map_or("dropped".to_owned(), |(_, e)| match &e.outcome {
                    Ok(_) => "ok".to_owned(),
                    Err(e) => e.execution().to_string(),
                });
            *FOLLOW_UP_ENDS
                .lock()
                .unwrap()
                .entry(format!("{intent} after {said}: {class}"))
                .or_default() += 1;
        }
        match &end.outcome {
            Ok(value) => {
                if runs != 1 {
                    violations.push(format!("{who}: Ok but executed {runs} times"));
                }
                if end.reported.as_ref().is_none_or(|k| k.to_string() != key) {
                    violations.push(format!(
                        "{who}: its result names another key ({:?}; the call's is {key})",
                        end.reported
                    ));
                }
                // A replay needs a stored outcome: an earlier submit of the
                // key, or another call of it answered from the cache.
                let submitted = submits.get(&key).copied().unwrap_or(0);
                if end.replayed && submitted == 1 && !other_call(*i, end) {
                    violations.push(format!(
                        "{who}: replayed, but the runtime got one submit of its key and no \
                         other call used it"
                    ));
                }
                if call.tool != "work" || value != &json!({"v": call.v}) {
                    violations.push(format!("{who}: Ok with a value not its own: {value}"));
                }
            }
            Err(e) if is_closed(e) && !end.after_close => {
                violations.push(format!("{who}: Closed while the client was open ({e})"))
            }
            // The key an error names is the call's own (a generated one is
            // read back from the call).
            Err(e) if e.key().is_some_and(|k| k.to_string() != key) => violations.push(format!(
                "{who}: its error names another key ({e}; the call's is {key})"
            )),
            // A generated key is new: nothing of it can have run elsewhere.
            Err(e) if end.generated && e.execution() == Execution::NotSent => violations.push(
                format!("{who}: its key was generated, but it says not sent ({e})"),
            ),
            // A conflict that proves the key bound to another intent (one
            // that may have run, or an HTTP 422 for a supplied key, which a
            // gateway fingerprinting whole bodies answers to the same intent
            // in another envelope, is checked by its class below).
            Err(e @ Error::DuplicateKey { .. }) if e.execution() == Execution::NotRun => {
                // A follow-up of this call came after it ended: it cannot
                // have bound the key against it.
                let later = |c: &PlannedCall| c.follows.is_some_and(|(f, _)| f == *i);
                let later_v = |v: u64| plan.calls.iter().any(|c| later(c) && c.v == v);
                let other = by_intent
                    .iter()
                    .any(|((k, v), n)| *k == key && *v != call.v && *n > 0 && !later_v(*v))
                    || plan
                        .calls
                        .iter()
                        .any(|c| c.key == call.key && c.v != call.v && !later(c));
                // A gateway fingerprinting whole bodies also remembers an
                // attempt it refused (429, 503) unforwarded: our retry of a
                // generated key conflicts with it, though nothing ran.
                if !other && !plan.hostile.fingerprint {
                    violations.push(format!(
                        "{who}: DuplicateKey but no other intent used the key"
                    ));
                }
                // As for any "did not run": a call of the same key and intent
                // started after this one ended may have run it since (the
                // other intent's hold on the key ended before it was sent).
                if runs != 0 && !issued_again(*i, end) {
                    violations.push(format!(
                        "{who}: DuplicateKey but its intent ran {runs} times"
                    ));
                }
            }
            Err(e) => match e.execution() {
                // Its follow-ups excuse a later execution (below), but not
                // one there before the first of them was issued.
                Execution::NotRun if end.generated && runs_before_follow_ups(*i) != 0 => violations
                    .push(format!(
                        "{who}: says it did not run ({e}) but its key ran {} times before its \
                         first follow-up was issued; the key's calls: {}",
                        runs_before_follow_ups(*i),
                        key_calls(call.key)
                    )),
                // Told "did not run", a caller may issue the work again, with
                // the same key too: an execution may be that later call's.
                Execution::NotRun if runs != 0 && !issued_again(*i, end) => {
                    violations.push(format!(
                        "{who}: says it did not run ({e}) but executed {runs} times; the key's \
                         calls: {}",
                        key_calls(call.key)
                    ))
                }
                Execution::Ran if runs != 1 => violations.push(format!(
                    "{who}: says it ran ({e}) but executed {runs} times"
                )),
                Execution::MayHaveRun if runs > 1 => {
                    violations.push(format!("{who}: executed {runs} times ({e})"))
                }
                // This call ran nothing: an execution is another call's.
                Execution::NotSent if runs != 0 && !other_call(*i, end) => violations.push(
                    format!("{who}: says not sent ({e}) but executed {runs} times"),
                ),
                _ => {}
            },
        }
        // Dispatched or acknowledged: the runtime got it. (A cancel can race
        // a job that already ended with a result whose delivery a cut
        // delayed, so the call's outcome is not checked here.)
        if let Some(CancelOutcome::Acknowledged | CancelOutcome::Dispatched) = &end.cancel {
            let sent = end.job_id.as_ref().is_some_and(|job| {
                received.iter().any(|e| {
                    e.kind.contains("cancel")
                        && (e.job_id.as_deref() == Some(job)
                            || ["job_id", "target_id"]
                                .iter()
                                .any(|f| e.payload.get(*f).and_then(Value::as_str) == Some(job)))
                })
            });
            // A black hole records frames it does not process, so a
            // dispatched cancel is in the runtime's log.
            if !sent && clean_network {
                violations.push(format!("{who}: cancel reported dispatched, never received"));
            }
        }
    }
}

/// `Closed`, also as the cause of a "not sent".
fn is_closed(e: &Error) -> bool {
    match e {
        Error::Closed => true,
        Error::NotSent { cause, .. } => is_closed(cause),
        _ => false,
    }
}

/// Waits until no job of the runtime is running (bounded).
async fn settle(mock: &MockRuntime) {
    let until = Instant::now() + Duration::from_secs(3);
    tokio::time::sleep(Duration::from_millis(150)).await;
    while Instant::now() < until && mock.jobs().iter().any(|j| j.status == JobStatus::Running) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_fault_schedules_never_lie() {
    // `RUST_LOG=arcp_sdk=debug`: the client's log, to follow a replay.
    if std::env::var_os("RUST_LOG").is_some() {
        support::init_tracing();
    }
    let seeds: Vec<u64> = match env_u64("ARCP_CHECKER_SEED") {
        Some(s) => vec![s],
        None => {
            let first = env_u64("ARCP_CHECKER_FIRST").unwrap_or(0);
            let n = env_u64("ARCP_CHECKER_SEEDS").unwrap_or(300);
            (first..first + n).collect()
        }
    };
    let parallel = env_u64("ARCP_CHECKER_PARALLEL").unwrap_or(10) as usize;
    let gate = Arc::new(Semaphore::new(parallel.max(1)));
    let started = Instant::now();
    let mut runs = Vec::new();
    for seed in seeds.clone() {
        let gate = gate.clone();
        runs.push(tokio::spawn(async move {
            let _slot = gate.acquire_owned().await.expect("gate");
            let plan = plan(seed);
            let shown = format!("{plan:?}");
            // `ARCP_CHECKER_SHOW_PLAN=1`: every plan, passing or not.
            if env_u64("ARCP_CHECKER_SHOW_PLAN").is_some_and(|v| v != 0) {
                eprintln!("seed {seed} plan: {shown}");
            }
            let violations = tokio::time::timeout(Duration::from_secs(30), run(plan))
                .await
                .unwrap_or_else(|_| vec!["the schedule did not finish within 30 s".into()]);
            (seed, shown, violations)
        }));
    }
    let mut failed = Vec::new();
    for r in runs {
        let (seed, shown, violations) = r.await.expect("schedule task");
        if !violations.is_empty() {
            eprintln!(
                "seed {seed} FAILED:\n  {}\n  plan: {shown}",
                violations.join("\n  ")
            );
            failed.push(seed);
        }
    }
    eprintln!(
        "checker: {} schedules in {:.1?}, {} failed; journal commits refused {}, unanswered {} \
         (landed {}, late {}), reads unanswered {}; policy closes {}; keys discarded {}",
        seeds.len(),
        started.elapsed(),
        failed.len(),
        REFUSED.load(Ordering::Relaxed),
        LOST.load(Ordering::Relaxed)
            + LANDED.load(Ordering::Relaxed)
            + LATE.load(Ordering::Relaxed),
        LANDED.load(Ordering::Relaxed),
        LATE.load(Ordering::Relaxed),
        UNREAD.load(Ordering::Relaxed),
        POLICY_CLOSES.load(Ordering::Relaxed),
        DISCARDS.load(Ordering::Relaxed),
    );
    eprintln!(
        "checker: follow-ups of generated keys issued {} ({} first calls dropped by their \
         callers), not issued {} (their first call's error named no key: {:?}); their ends \
         (intent after what the first call said: outcome) {:?}",
        FOLLOW_UPS.load(Ordering::Relaxed),
        FOLLOWED_DROPPED.load(Ordering::Relaxed),
        FOLLOW_UPS_SKIPPED.load(Ordering::Relaxed),
        FOLLOW_UP_SKIPS.lock().unwrap(),
        FOLLOW_UP_ENDS.lock().unwrap(),
    );
    assert!(
        failed.is_empty(),
        "failing seeds {failed:?}; replay one with ARCP_CHECKER_SEED=<seed> cargo test --test checker -- --nocapture"
    );
}

/// The plan is a pure function of the seed.
#[test]
fn same_seed_same_schedule() {
    for seed in [0, 1, 42, 9_999] {
        assert_eq!(format!("{:?}", plan(seed)), format!("{:?}", plan(seed)));
    }
    assert_ne!(format!("{:?}", plan(1)), format!("{:?}", plan(2)));
}

/// Runs `n` schedules from `first` on, each made by `make` from its seed,
/// `parallel` at once unless `ARCP_CHECKER_PARALLEL` says otherwise;
/// returns the failing seeds (each printed with its violations and plan).
async fn run_family(first: u64, n: u64, parallel: u64, make: fn(u64) -> Plan) -> Vec<u64> {
    let gate = Arc::new(Semaphore::new(
        env_u64("ARCP_CHECKER_PARALLEL").unwrap_or(parallel).max(1) as usize,
    ));
    if std::env::var_os("RUST_LOG").is_some() {
        support::init_tracing();
    }
    // `ARCP_CHECKER_SEED=S` replays only seed S of the family, as above.
    let seeds = match env_u64("ARCP_CHECKER_SEED") {
        Some(s) => s..s + 1,
        None => first..first + n,
    };
    let mut runs = Vec::new();
    for seed in seeds {
        let gate = gate.clone();
        runs.push(tokio::spawn(async move {
            let _slot = gate.acquire_owned().await.expect("gate");
            let plan = make(seed);
            let shown = format!("{plan:?}");
            if env_u64("ARCP_CHECKER_SHOW_PLAN").is_some_and(|v| v != 0) {
                eprintln!("seed {seed} plan: {shown}");
            }
            let violations = tokio::time::timeout(Duration::from_secs(30), run(plan))
                .await
                .unwrap_or_else(|_| vec!["the schedule did not finish within 30 s".into()]);
            (seed, shown, violations)
        }));
    }
    let mut failed = Vec::new();
    for r in runs {
        let (seed, shown, violations) = r.await.expect("schedule task");
        if !violations.is_empty() {
            eprintln!(
                "seed {seed} FAILED:\n  {}\n  plan: {shown}",
                violations.join("\n  ")
            );
            failed.push(seed);
        }
    }
    failed
}

/// Schedules where the runtime forgets keys after a short retention (the
/// client told so) and calls often end while their tools work, leaving
/// unfinished records: the second client starts after some of them
/// outlived the retention, and must never send those again (the tool
/// would run twice). `ARCP_CHECKER_SEEDS` and `ARCP_CHECKER_FIRST` as
/// above (a twentieth as many seeds by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_past_the_runtime_key_retention_are_never_re_sent() {
    let first = env_u64("ARCP_CHECKER_FIRST").unwrap_or(0);
    let n = env_u64("ARCP_CHECKER_SEEDS").map_or(15, |n| (n / 20).max(1));
    // Few at once: it runs alongside the other families, and its short
    // deadlines are held to the same slack.
    let failed = run_family(first, n, 4, |seed| {
        let mut plan = plan(seed);
        let mut r = Rng(seed ^ 0x4E7E_4711);
        plan.hostile.second_caller = false;
        plan.journal = Some(JournalPlan {
            refuse_percent: 0,
            unavailable_percent: 0,
            landed_percent: 0,
            outage: None,
            sqlite: r.chance(25),
            short_deadline_percent: 0,
            second_client: true,
            refuse_after_landed: 0,
        });
        let retention = r.ms(700, 1_200);
        // Deadlines that pass while the tool works (it takes up to 250 ms),
        // and none past the retention: a call's own re-sends stay within it.
        let longest = retention.as_millis() as u64 - 100;
        for call in &mut plan.calls {
            call.deadline = if r.chance(50) {
                r.ms(20, 120)
            } else {
                r.ms(200, longest)
            };
        }
        plan.key_retention = Some((retention, r.ms(0, 1_500)));
        // Stalls of at most half the retention, so the client keeps a
        // retention of its own (`Plan::client_key_retention`).
        for (_, action) in &mut plan.faults {
            if let Action::StallFor(d) = action {
                *d = (*d).min(retention / 2);
            }
        }
        plan
    })
    .await;
    assert!(failed.is_empty(), "failing seeds {failed:?}");
}

/// Schedules whose journal loses a commit's answer (the commit landed) and
/// then refuses the retries outright, as a database demoted to read-only by
/// a failover or a full disk does. Same oracle; in particular a call told
/// "did not run" never runs later, by the second client's recovery or
/// otherwise. `ARCP_CHECKER_SEEDS` and `ARCP_CHECKER_FIRST` as above (a
/// tenth as many seeds by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_commit_answers_then_refused_retries_never_lie() {
    let first = env_u64("ARCP_CHECKER_FIRST").unwrap_or(0);
    let n = env_u64("ARCP_CHECKER_SEEDS").map_or(30, |n| (n / 10).max(1));
    let failed = run_family(first, n, 10, |seed| {
        let mut plan = plan(seed);
        let mut r = Rng(seed ^ 0x0105_7EAD);
        plan.journal = Some(JournalPlan {
            refuse_percent: 0,
            unavailable_percent: r.range(10, 40),
            landed_percent: 100,
            outage: None,
            sqlite: r.chance(25),
            short_deadline_percent: r.range(0, 30),
            second_client: true,
            refuse_after_landed: r.range(1, 4),
        });
        plan
    })
    .await;
    assert!(failed.is_empty(), "failing seeds {failed:?}");
}
