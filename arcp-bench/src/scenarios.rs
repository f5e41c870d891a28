//! The throughput scenarios: which driver calls which server in which
//! dialect at how many calls in flight, the table of those a run measures,
//! and one measured window of one of them.

use std::time::Duration;

use arcp_sdk::Dialect;

use crate::servers::{Server, ServerKind};
use crate::stats::Sample;

/// What drives the calls of a scenario.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Driver {
    /// The WebSocket ceiling: bare tokio-tungstenite, our request bytes, one
    /// task (`raw.rs`).
    RawWebSocket,
    /// Our client, driven by this harness's closed loop in this process.
    Ours,
    /// Our client, driven as the README's `Use` section shows, in a process
    /// of its own (`documented_driver.rs`).
    OursAsDocumented,
    /// The published reference client, `arcp-client 2.0.0`.
    Reference,
    /// The HTTP ceiling: plain reqwest POSTs of our request bytes
    /// (`http_raw.rs`).
    RawReqwest,
    /// The official Python client shipped with the Python runtime
    /// (agentruntimecontrolprotocol 1.1.3), driven as its README shows, in
    /// a process of its own (`python/client_bench.py`).
    PythonClient,
}

impl Driver {
    /// The first part of a scenario's label (`--only`).
    pub(crate) fn tag(self) -> &'static str {
        match self {
            Driver::RawWebSocket => "raw",
            Driver::Ours => "ours",
            Driver::OursAsDocumented => "user",
            Driver::Reference => "ref",
            Driver::RawReqwest => "reqwest",
            Driver::PythonClient => "py",
        }
    }

    /// The name in reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Driver::RawWebSocket => "raw tokio-tungstenite",
            Driver::Ours => "ours (arcp-sdk 0.1)",
            Driver::OursAsDocumented => "ours, driven as the README shows",
            Driver::Reference => "reference arcp-client 2.0.0",
            Driver::RawReqwest => "raw reqwest",
            Driver::PythonClient => "official Python client 1.1.3",
        }
    }

    /// The short name in charts.
    pub(crate) fn short_name(self) -> &'static str {
        match self {
            Driver::Reference => "reference",
            Driver::PythonClient => "Python client",
            other => other.tag(),
        }
    }
}

/// One throughput scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Scenario {
    pub driver: Driver,
    pub server: ServerKind,
    pub dialect: Dialect,
    /// Calls in flight (closed loop).
    pub in_flight: usize,
}

impl Scenario {
    pub(crate) fn new(
        driver: Driver,
        server: ServerKind,
        dialect: Dialect,
        in_flight: usize,
    ) -> Self {
        Scenario {
            driver,
            server,
            dialect,
            in_flight,
        }
    }

    /// `driver/server/dialect/c`, e.g. `ours/fast/legacy/64`.
    pub(crate) fn label(&self) -> String {
        let server = match self.server {
            ServerKind::FastWebSocket => "fast",
            ServerKind::ReferenceRuntime => "runtime",
            ServerKind::FastHttp => "http",
            ServerKind::PythonRuntime => "python",
        };
        format!(
            "{}/{server}/{}/{}",
            self.driver.tag(),
            self.dialect,
            self.in_flight
        )
    }

    /// Whether `--only` selects it.
    pub(crate) fn selected(&self, only: &[String]) -> bool {
        only.is_empty() || only.iter().any(|o| self.label().contains(o.as_str()))
    }
}

/// The WebSocket scenarios of the `throughput` section.
pub(crate) fn websocket_table() -> Vec<Scenario> {
    use Driver::*;
    use ServerKind::*;
    let mut v = Vec::new();
    for c in [1, 64] {
        for dialect in [Dialect::Legacy, Dialect::V1_1] {
            v.push(Scenario::new(RawWebSocket, FastWebSocket, dialect, c));
            v.push(Scenario::new(Ours, FastWebSocket, dialect, c));
            v.push(Scenario::new(OursAsDocumented, FastWebSocket, dialect, c));
        }
        v.push(Scenario::new(Reference, FastWebSocket, Dialect::Legacy, c));
        for driver in [Ours, Reference] {
            v.push(Scenario::new(driver, ReferenceRuntime, Dialect::Legacy, c));
        }
    }
    v
}

/// The scenarios of the `runtime` section, each client in a process of its
/// own, at 1 to 64 calls in flight: our client driven as the README shows
/// and the reference client against the published arcp-runtime 2.0.0
/// (legacy message set); ours and the official Python client against the
/// published Python runtime 1.1.3 (v1.1).
pub(crate) fn runtime_table() -> Vec<Scenario> {
    let mut v = Vec::new();
    for c in RUNTIME_IN_FLIGHT {
        for driver in [Driver::OursAsDocumented, Driver::Reference] {
            v.push(Scenario::new(
                driver,
                ServerKind::ReferenceRuntime,
                Dialect::Legacy,
                c,
            ));
        }
        for driver in [Driver::OursAsDocumented, Driver::PythonClient] {
            v.push(Scenario::new(
                driver,
                ServerKind::PythonRuntime,
                Dialect::V1_1,
                c,
            ));
        }
    }
    v
}

/// Calls in flight of the `runtime` section.
pub(crate) const RUNTIME_IN_FLIGHT: [usize; 4] = [1, 4, 16, 64];

/// The scenarios of the `http` section: the binding speaks v1.1 only.
pub(crate) fn http_table() -> Vec<Scenario> {
    let mut v = Vec::new();
    for c in [1, 64] {
        for driver in [Driver::RawReqwest, Driver::Ours] {
            v.push(Scenario::new(
                driver,
                ServerKind::FastHttp,
                Dialect::V1_1,
                c,
            ));
        }
    }
    v
}

/// Where `(driver, server, dialect, c)` is in `scenarios`.
pub(crate) fn find(
    scenarios: &[Scenario],
    driver: Driver,
    server: ServerKind,
    dialect: Dialect,
    in_flight: usize,
) -> Option<usize> {
    let wanted = Scenario::new(driver, server, dialect, in_flight);
    scenarios.iter().position(|s| *s == wanted)
}

/// One measured window of `scenario` against `server`.
pub(crate) async fn run(
    scenario: Scenario,
    server: &Server,
    warmup: Duration,
    window: Duration,
) -> Result<Sample, String> {
    let pid = Some(server.pid);
    let c = scenario.in_flight;
    let url = server.url.as_str();
    match scenario.driver {
        Driver::RawWebSocket => {
            crate::raw::run(url, scenario.dialect, c, warmup, window, pid).await
        }
        Driver::Ours => {
            let client = crate::clients::ours(url, scenario.dialect, c.max(1024)).await?;
            let args = crate::clients::echo_args();
            let call_client = client.clone();
            let sample = crate::clients::closed_loop(c, warmup, window, pid, move || {
                let (client, args) = (call_client.clone(), args.clone());
                async move {
                    client
                        .invoke_tool("echo", args)
                        .await
                        .map(drop)
                        .map_err(|e| e.to_string())
                }
            })
            .await;
            client.close().await;
            Ok(sample)
        }
        Driver::OursAsDocumented => {
            let token = scenario.server.token();
            crate::documented_driver::run_child(
                url,
                token,
                scenario.dialect,
                c,
                warmup,
                window,
                pid,
            )
            .await
        }
        Driver::PythonClient => {
            crate::python_peer::client_window(url, c, warmup, window, pid).await
        }
        Driver::Reference => {
            let session = crate::clients::reference(url).await?;
            let args = crate::clients::echo_args();
            Ok(
                crate::clients::closed_loop(c, warmup, window, pid, move || {
                    let (session, args) = (session.clone(), args.clone());
                    async move {
                        crate::clients::ref_call(&session, "echo", args)
                            .await
                            .map(drop)
                    }
                })
                .await,
            )
        }
        Driver::RawReqwest => {
            let raw = crate::http_raw::RawHttp::new(url, "echo")?;
            Ok(
                crate::clients::closed_loop(c, warmup, window, pid, move || {
                    let raw = raw.clone();
                    async move { raw.call().await }
                })
                .await,
            )
        }
    }
}

/// Every scenario once per round, the starting point rotated per round, so
/// that drift hits all alike. Returns the samples per scenario.
pub(crate) async fn rounds(
    what: &str,
    rounds: usize,
    warmup: Duration,
    window: Duration,
    scenarios: &[Scenario],
    servers: &mut crate::servers::Servers,
) -> Result<Vec<Vec<Sample>>, String> {
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); scenarios.len()];
    for round in 0..rounds {
        eprintln!("[arcp-bench] {what} round {}/{}", round + 1, rounds);
        for k in 0..scenarios.len() {
            let i = (k + round) % scenarios.len();
            let s = scenarios[i];
            let server = if s.server.fresh_per_window() {
                servers.restart(s.server).await?
            } else {
                servers.running(s.server)?
            };
            let sample = run(s, server, warmup, window).await?;
            eprintln!(
                "  {:<34} {:<18} {:<6} c={:<3} {:>9.0} calls/s  p50 {:>8.1} us  p99 {:>8.1} us  cpu {:>6.2} us/call",
                s.driver.name(),
                s.server.name(),
                s.dialect.to_string(),
                s.in_flight,
                sample.throughput(),
                sample.pct_us(50.0),
                sample.pct_us(99.0),
                sample.client_cpu_us()
            );
            samples[i].push(sample);
        }
    }
    Ok(samples)
}
