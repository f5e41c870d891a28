//! The markdown report: one table per section, and the ratios taken inside
//! each round (scenarios of a round ran seconds apart), then the median
//! over rounds.

use std::fmt::Write as _;

use arcp_sdk::Dialect;

use crate::cli::Plan;
use crate::scenarios::{find, Driver, Scenario};
use crate::servers::ServerKind;
use crate::stats::{self, median, min_max, Sample};

/// `median (min-max)`.
pub(crate) fn fmt_range(xs: &[f64], digits: usize) -> String {
    let (lo, hi) = min_max(xs);
    format!("{:.d$} ({:.d$}-{:.d$})", median(xs), lo, hi, d = digits)
}

/// The machine, in one line.
pub(crate) fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    format!("nproc {nproc}, {cpu}, Linux {kernel}")
}

/// Bytes of one call's request as the scenario's driver sends it (over
/// HTTP: the envelope in the body, without a session).
fn request_bytes(s: &Scenario) -> usize {
    if s.server == ServerKind::FastHttp {
        return crate::http_raw::template("echo").0.len();
    }
    match s.driver {
        Driver::RawWebSocket | Driver::Ours | Driver::OursAsDocumented | Driver::RawReqwest => {
            crate::raw::template(s.dialect, &format!("sess_{}", ulid::Ulid::new()))
                .0
                .len()
        }
        // Not taken from the Python client's process.
        Driver::PythonClient => 0,
        Driver::Reference => {
            let mut env = arcp_core::Envelope::new(arcp_core::MessageType::ToolInvoke(
                arcp_core::messages::ToolInvokePayload::new("echo", crate::clients::echo_args()),
            ));
            env.session_id = Some(arcp_core::ids::SessionId::new());
            serde_json::to_string(&env).map_or(0, |s| s.len())
        }
    }
}

/// The figure a ratio compares.
#[derive(Clone, Copy)]
pub(crate) enum Figure {
    CallsPerSec,
    ClientCpu,
    P50,
}

impl Figure {
    fn of(self, s: &Sample) -> f64 {
        match self {
            Figure::CallsPerSec => s.throughput(),
            Figure::ClientCpu => s.client_cpu_us(),
            Figure::P50 => s.pct_us(50.0),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Figure::CallsPerSec => "calls/s",
            Figure::ClientCpu => "client CPU per call",
            Figure::P50 => "p50 latency",
        }
    }
}

/// One ratio row: `a / b` of `figure`, per round, and the bar it is held to.
pub(crate) struct Ratio {
    pub a: Scenario,
    pub b: Scenario,
    pub figure: Figure,
    pub bar: &'static str,
}

impl Ratio {
    pub(crate) fn new(a: Scenario, b: Scenario, figure: Figure, bar: &'static str) -> Self {
        Ratio { a, b, figure, bar }
    }

    fn name(&self) -> String {
        let (a, b) = (&self.a, &self.b);
        let dialects = if a.dialect == b.dialect {
            a.dialect.to_string()
        } else {
            format!("{} / {}", a.dialect, b.dialect)
        };
        let server = if a.server == b.server {
            a.server.name().to_owned()
        } else {
            format!("{} / {}", a.server.name(), b.server.name())
        };
        format!(
            "{} / {}, {}, {server}, {dialects}, c={}",
            a.driver.short_name(),
            b.driver.short_name(),
            self.figure.name(),
            a.in_flight
        )
    }
}

/// The table of a throughput section, then its ratios.
pub(crate) fn throughput(
    title: &str,
    p: &Plan,
    scenarios: &[Scenario],
    samples: &[Vec<Sample>],
    ratios: &[Ratio],
    md: &mut String,
) {
    let _ = writeln!(
        md,
        "## {title} ({} rounds, interleaved; {:.1} s window after {:.1} s warm-up; median (min-max) over rounds)\n",
        p.rounds,
        p.window.as_secs_f64(),
        p.warmup.as_secs_f64()
    );
    let _ = writeln!(
        md,
        "| client | server | dialect | c | calls/s | p50 us | p99 us | client CPU us/call | server CPU us/call | request B | calls measured | errors |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for (s, v) in scenarios.iter().zip(samples) {
        let col = |f: &dyn Fn(&Sample) -> f64| v.iter().map(f).collect::<Vec<_>>();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            s.driver.name(),
            s.server.name(),
            s.dialect,
            s.in_flight,
            fmt_range(&col(&|x| x.throughput()), 0),
            fmt_range(&col(&|x| x.pct_us(50.0)), 0),
            fmt_range(&col(&|x| x.pct_us(99.0)), 0),
            fmt_range(&col(&|x| x.client_cpu_us()), 2),
            fmt_range(&col(&|x| x.server_cpu_us()), 2),
            match request_bytes(s) {
                0 => String::new(),
                n => n.to_string(),
            },
            v.iter().map(|x| x.calls).sum::<u64>(),
            v.iter().map(|x| x.errors).sum::<u64>(),
        );
    }
    let _ = writeln!(
        md,
        "\n### Ratios (per round, median (min-max) over rounds)\n\n| ratio | measured | bar |\n|---|---|---|"
    );
    for r in ratios {
        let at = |s: &Scenario| find(scenarios, s.driver, s.server, s.dialect, s.in_flight);
        let (Some(a), Some(b)) = (at(&r.a), at(&r.b)) else {
            continue;
        };
        let xs: Vec<f64> = samples[a]
            .iter()
            .zip(&samples[b])
            .map(|(x, y)| r.figure.of(x) / r.figure.of(y))
            .collect();
        let _ = writeln!(md, "| {} | {} | {} |", r.name(), fmt_range(&xs, 2), r.bar);
    }
    let _ = writeln!(md);
}

/// The ratios of the WebSocket `throughput` section.
pub(crate) fn websocket_ratios() -> Vec<Ratio> {
    use Driver::*;
    use Figure::*;
    use ServerKind::*;
    let (l, v) = (Dialect::Legacy, Dialect::V1_1);
    let s = Scenario::new;
    let reference = |c| s(Reference, FastWebSocket, l, c);
    let mut rows = Vec::new();
    for (driver, dialect) in [(Ours, l), (OursAsDocumented, l), (OursAsDocumented, v)] {
        let a = s(driver, FastWebSocket, dialect, 64);
        rows.push(Ratio::new(a, reference(64), CallsPerSec, ">= 1.6"));
        rows.push(Ratio::new(a, reference(64), ClientCpu, "<= 0.5"));
    }
    for dialect in [l, v] {
        rows.push(Ratio::new(
            s(OursAsDocumented, FastWebSocket, dialect, 64),
            s(Ours, FastWebSocket, dialect, 64),
            CallsPerSec,
            "",
        ));
        rows.push(Ratio::new(
            s(Ours, FastWebSocket, dialect, 64),
            s(RawWebSocket, FastWebSocket, dialect, 64),
            CallsPerSec,
            ">= 0.25",
        ));
    }
    for dialect in [l, v] {
        for driver in [Ours, OursAsDocumented] {
            rows.push(Ratio::new(
                s(driver, FastWebSocket, dialect, 1),
                s(RawWebSocket, FastWebSocket, dialect, 1),
                P50,
                "<= 1.1",
            ));
        }
    }
    rows.push(Ratio::new(
        s(Ours, ReferenceRuntime, l, 1),
        s(Reference, ReferenceRuntime, l, 1),
        CallsPerSec,
        ">= 50",
    ));
    rows.push(Ratio::new(
        s(Ours, ReferenceRuntime, l, 64),
        s(Reference, ReferenceRuntime, l, 64),
        CallsPerSec,
        "",
    ));
    rows
}

/// The ratios of the `runtime` section, each concurrency: ours (as the
/// README drives it) against the reference client on arcp-runtime 2.0.0,
/// then against the official Python client on the Python runtime 1.1.3.
pub(crate) fn runtime_ratios() -> Vec<Ratio> {
    use Figure::*;
    let s = |driver, c| Scenario::new(driver, ServerKind::ReferenceRuntime, Dialect::Legacy, c);
    let py = |driver, c| Scenario::new(driver, ServerKind::PythonRuntime, Dialect::V1_1, c);
    let (user, reference) = (Driver::OursAsDocumented, Driver::Reference);
    let mut rows = Vec::new();
    for c in crate::scenarios::RUNTIME_IN_FLIGHT {
        let (calls_bar, cpu_bar) = if c == 64 {
            (">= 1.1", "<= 1.0")
        } else {
            ("", "")
        };
        rows.push(Ratio::new(
            s(user, c),
            s(reference, c),
            CallsPerSec,
            calls_bar,
        ));
        rows.push(Ratio::new(s(user, c), s(reference, c), ClientCpu, cpu_bar));
    }
    for c in crate::scenarios::RUNTIME_IN_FLIGHT {
        let (a, b) = (py(user, c), py(Driver::PythonClient, c));
        rows.push(Ratio::new(a, b, CallsPerSec, ">= 1.0"));
        rows.push(Ratio::new(a, b, ClientCpu, "<= 0.25"));
    }
    rows
}

/// The ratios of the `http` section.
pub(crate) fn http_ratios() -> Vec<Ratio> {
    use Figure::*;
    let s = |driver, c| Scenario::new(driver, ServerKind::FastHttp, Dialect::V1_1, c);
    let (ours, raw) = (Driver::Ours, Driver::RawReqwest);
    vec![
        Ratio::new(s(ours, 64), s(raw, 64), CallsPerSec, ">= 0.8"),
        Ratio::new(s(ours, 64), s(raw, 64), ClientCpu, "<= 1.25"),
        Ratio::new(s(ours, 1), s(raw, 1), P50, "<= 1.15"),
        Ratio::new(s(ours, 1), s(raw, 1), CallsPerSec, ""),
        Ratio::new(s(ours, 1), s(raw, 1), ClientCpu, ""),
    ]
}

/// The memory section's table, from the `MEM {...}` lines of the children.
pub(crate) fn memory(p: &Plan, reports: &[serde_json::Value], md: &mut String) {
    let _ = writeln!(
        md,
        "## Memory (client process, counting allocator; server in its own process)\n\n\
         WebSocket: {} calls in flight on one connection; HTTP: {} calls in flight, one connection each \
         (`hold` tool: accepted, terminal withheld). Growth over {} completed calls at c=64 after {} warm-up calls.\n\n\
         | client | server | dialect | calls in flight | bytes per call in flight (allocator) | RSS per call in flight | left after release, per call | growth per completed call (allocator) | RSS growth per completed call | allocations per call | bytes allocated per call |\n|---|---|---|---|---|---|---|---|---|---|---|",
        p.in_flight, p.http_in_flight, p.mem_calls, p.mem_warm
    );
    for v in reports {
        let g = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
        let http = v["url"].as_str().is_some_and(|u| u.starts_with("http"));
        let name = match v["client"].as_str() {
            Some("ours") => Driver::Ours.name(),
            Some("reqwest") => Driver::RawReqwest.name(),
            _ => Driver::Reference.name(),
        };
        let server = if http {
            ServerKind::FastHttp.name()
        } else {
            ServerKind::FastWebSocket.name()
        };
        let _ = writeln!(
            md,
            "| {name} | {server} | {} | {} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} | {:.1} | {:.0} |",
            v["dialect"].as_str().unwrap_or(""),
            v["in_flight"],
            g("in_flight_alloc_b_per_call"),
            g("in_flight_rss_b_per_call"),
            g("residual_after_release_b_per_call"),
            g("growth_alloc_b_per_call"),
            g("growth_rss_b_per_call"),
            g("allocs_per_call"),
            g("alloc_bytes_per_call"),
        );
    }
    let _ = writeln!(md);
}

pub(crate) fn recovery(rows: &[crate::recovery::Row], md: &mut String) {
    let _ = writeln!(
        md,
        "## Recovery (arcp-mock in this process, one fresh call per trial, connection killed by a one-shot Fault)\n\n\
         | scenario | retry policy | measured from | trials | p50 ms | p99 ms | max ms | outcomes | tool executions per call |\n|---|---|---|---|---|---|---|---|---|"
    );
    for r in rows {
        let ns: Vec<u64> = r.lat_ms.iter().map(|ms| (ms * 1e6) as u64).collect();
        let pct = |p| stats::percentile(&ns, p) as f64 / 1e6;
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {} | {:.2} |",
            r.name,
            r.policy,
            r.measured_from,
            r.trials,
            pct(50.0),
            pct(99.0),
            r.lat_ms.last().copied().unwrap_or(f64::NAN),
            r.outcomes,
            r.executions_per_call
        );
    }
    let _ = writeln!(md);
}

pub(crate) fn codec(rows: &[crate::codec::Row], md: &mut String) {
    let _ = writeln!(
        md,
        "## Codec (this process, one thread, median of 5 batches)\n\n| dialect | what | bytes | ns |\n|---|---|---|---|"
    );
    for r in rows {
        let bytes = if r.bytes > 0 {
            r.bytes.to_string()
        } else {
            String::new()
        };
        let _ = writeln!(md, "| {} | {} | {bytes} | {:.0} |", r.dialect, r.what, r.ns);
    }
    let _ = writeln!(md);
}

pub(crate) fn python(results: Result<crate::python_peer::Results, String>, md: &mut String) {
    use crate::python_peer::med;
    let _ = writeln!(
        md,
        "## Python runtime 1.1.3: ours against its published Python client\n"
    );
    let results = match results {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(md, "Skipped: {e}\n");
            return;
        }
    };
    let _ = writeln!(
        md,
        "Both clients against the same `interop/python/server.py` (agentruntimecontrolprotocol \
         1.1.3, `echo` agent: one log event and the result), one session each, rounds \
         alternated; medians over rounds. Client CPU per call: ours from `getrusage` of this \
         process, the Python client's of its own process.\n"
    );
    let _ = writeln!(
        md,
        "| c | client | calls/s | p50 us | p99 us | client CPU us/call | errors |\n|---|---|---|---|---|---|---|"
    );
    for (c, ours, theirs) in &results {
        for (name, rounds) in [("ours", ours), ("Python client 1.1.3", theirs)] {
            let _ = writeln!(
                md,
                "| {c} | {name} | {:.0} | {:.0} | {:.0} | {:.1} | {} |",
                med(rounds, |f| f.calls_per_sec),
                med(rounds, |f| f.p50_us),
                med(rounds, |f| f.p99_us),
                med(rounds, |f| f.cpu_us_per_call),
                rounds.iter().map(|f| f.errors).sum::<u64>(),
            );
        }
    }
    let _ = writeln!(md);
    for (c, ours, theirs) in &results {
        let ratio = med(ours, |f| f.calls_per_sec)
            / med(theirs, |f| f.calls_per_sec).max(f64::MIN_POSITIVE);
        let cpu = med(ours, |f| f.cpu_us_per_call)
            / med(theirs, |f| f.cpu_us_per_call).max(f64::MIN_POSITIVE);
        let _ = writeln!(
            md,
            "c={c}: ours / Python client, calls/s **{ratio:.2}x**, client CPU per call {cpu:.2}x.\n"
        );
    }
}
