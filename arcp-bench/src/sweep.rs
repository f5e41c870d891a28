//! The `sweep` section: throughput, p99 and client CPU per call against
//! calls in flight (fast WebSocket server), a table and an SVG chart.

use std::fmt::Write as _;
use std::path::PathBuf;

use arcp_sdk::Dialect;

use crate::cli::Plan;
use crate::scenarios::{self, Driver, Scenario};
use crate::servers::{ServerKind, Servers};
use crate::stats::{median, Sample};

pub(crate) async fn run(
    p: &Plan,
    cs: &[usize],
    chart: Option<&PathBuf>,
    servers: &mut Servers,
    md: &mut String,
) -> Result<(), String> {
    let series = [
        (Driver::RawWebSocket, Dialect::Legacy),
        (Driver::Ours, Dialect::Legacy),
        (Driver::Ours, Dialect::V1_1),
        (Driver::Reference, Dialect::Legacy),
    ];
    let mut table = Vec::new();
    for &c in cs {
        for (driver, dialect) in series {
            table.push(Scenario::new(driver, ServerKind::FastWebSocket, dialect, c));
        }
    }
    let samples = scenarios::rounds("sweep", p.rounds, p.warmup, p.window, &table, servers).await?;
    let _ = writeln!(
        md,
        "## Calls in flight sweep (fast server; {} rounds, median)\n\n| client | dialect | c | calls/s | p50 us | p99 us | client CPU us/call |\n|---|---|---|---|---|---|---|",
        p.rounds
    );
    let mut lines = Vec::new();
    for (driver, dialect) in series {
        let mut points = Vec::new();
        for (s, v) in table.iter().zip(&samples) {
            if s.driver != driver || s.dialect != dialect {
                continue;
            }
            let m = |f: &dyn Fn(&Sample) -> f64| median(&v.iter().map(f).collect::<Vec<_>>());
            let (tp, p50, p99, cpu) = (
                m(&|x| x.throughput()),
                m(&|x| x.pct_us(50.0)),
                m(&|x| x.pct_us(99.0)),
                m(&|x| x.client_cpu_us()),
            );
            let _ = writeln!(
                md,
                "| {} | {} | {} | {tp:.0} | {p50:.0} | {p99:.0} | {cpu:.2} |",
                driver.name(),
                s.dialect,
                s.in_flight
            );
            points.push(crate::chart::Point {
                in_flight: s.in_flight as f64,
                calls_per_sec: tp,
                p99_us: p99,
                cpu_us: cpu,
            });
        }
        lines.push((format!("{} {dialect}", driver.short_name()), points));
    }
    let _ = writeln!(md);
    if let Some(path) = chart {
        std::fs::write(path, crate::chart::svg(&lines))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let _ = writeln!(md, "Chart: `{}`\n", path.display());
    }
    Ok(())
}
