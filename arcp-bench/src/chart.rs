//! A small SVG chart (no dependencies): calls/s, p99 latency and client CPU
//! per call against calls in flight, both axes logarithmic.

use std::fmt::Write as _;

/// One client's figures at one number of calls in flight.
pub(crate) struct Point {
    pub in_flight: f64,
    pub calls_per_sec: f64,
    pub p99_us: f64,
    pub cpu_us: f64,
}

/// A named series of points.
pub(crate) type Line = (String, Vec<Point>);

const COLORS: [&str; 6] = [
    "#777777", "#1f77b4", "#2ca02c", "#ff7f0e", "#d62728", "#9467bd",
];

/// `lines`: a name and its points.
pub(crate) fn svg(lines: &[Line]) -> String {
    let (w, h) = (1470.0, 420.0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    panel(&mut out, lines, 60.0, "calls/s (one connection)", |p| {
        p.calls_per_sec
    });
    panel(&mut out, lines, 550.0, "p99 latency (us)", |p| p.p99_us);
    panel(&mut out, lines, 1040.0, "client CPU per call (us)", |p| {
        p.cpu_us
    });
    for (i, (name, _)) in lines.iter().enumerate() {
        let x = 60.0 + 160.0 * i as f64;
        let color = COLORS[i % COLORS.len()];
        let _ = writeln!(
            out,
            r#"<line x1="{x}" y1="400" x2="{}" y2="400" stroke="{color}" stroke-width="3"/><text x="{}" y="404">{name}</text>"#,
            x + 20.0,
            x + 26.0
        );
    }
    out.push_str("</svg>\n");
    out
}

fn panel(out: &mut String, lines: &[Line], left: f64, title: &str, y_of: impl Fn(&Point) -> f64) {
    let (pw, ph, top) = (380.0, 300.0, 40.0);
    let all: Vec<(f64, f64)> = lines
        .iter()
        .flat_map(|(_, pts)| pts.iter().map(|p| (p.in_flight, y_of(p))))
        .filter(|(x, y)| *x > 0.0 && *y > 0.0 && y.is_finite())
        .collect();
    if all.is_empty() {
        return;
    }
    let lx = |x: f64| x.log2();
    let (x0, x1) = all.iter().fold((f64::MAX, f64::MIN), |(a, b), p| {
        (a.min(lx(p.0)), b.max(lx(p.0)))
    });
    let (y0, y1) = all.iter().fold((f64::MAX, f64::MIN), |(a, b), p| {
        (a.min(p.1.log10().floor()), b.max(p.1.log10().ceil()))
    });
    let x1 = if x1 > x0 { x1 } else { x0 + 1.0 };
    let y1 = if y1 > y0 { y1 } else { y0 + 1.0 };
    let sx = |x: f64| left + (lx(x) - x0) / (x1 - x0) * pw;
    let sy = |y: f64| top + ph - (y.log10() - y0) / (y1 - y0) * ph;
    let _ = writeln!(
        out,
        r#"<text x="{}" y="24" font-size="14" text-anchor="middle">{title}</text><rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#,
        left + pw / 2.0
    );
    let mut decade = y0;
    while decade <= y1 {
        let y = sy(10f64.powf(decade));
        let _ = writeln!(
            out,
            r##"<line x1="{left}" y1="{y}" x2="{}" y2="{y}" stroke="#dddddd"/><text x="{}" y="{}" text-anchor="end">1e{decade}</text>"##,
            left + pw,
            left - 4.0,
            y + 4.0
        );
        decade += 1.0;
    }
    let mut xs: Vec<f64> = all.iter().map(|p| p.0).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    for x in xs {
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle">{x}</text>"#,
            sx(x),
            top + ph + 16.0
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">calls in flight</text>"#,
        left + pw / 2.0,
        top + ph + 34.0
    );
    for (i, (_, pts)) in lines.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let coords: Vec<String> = pts
            .iter()
            .filter(|p| y_of(p) > 0.0 && y_of(p).is_finite())
            .map(|p| format!("{:.1},{:.1}", sx(p.in_flight), sy(y_of(p))))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            coords.join(" ")
        );
        for c in coords {
            let (x, y) = c.split_once(',').unwrap_or(("0", "0"));
            let _ = writeln!(out, r#"<circle cx="{x}" cy="{y}" r="3" fill="{color}"/>"#);
        }
    }
}
