//! Measurement plumbing: CPU clocks, percentiles, medians.

use std::time::Duration;

/// CPU time (user + system) of this whole process, all threads.
pub(crate) fn self_cpu() -> Duration {
    // SAFETY: getrusage only writes into the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF is a valid `who`; `ru` is a valid out pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU time of another process: the sum of its threads' `schedstat` run
/// times (nanosecond resolution, unlike the 10 ms ticks of `/proc/PID/stat`).
pub(crate) fn process_cpu(pid: u32) -> Duration {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Duration::ZERO;
    };
    let mut total = 0u64;
    for task in tasks.flatten() {
        if let Ok(s) = std::fs::read_to_string(task.path().join("schedstat")) {
            total += s
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Duration::from_nanos(total)
}

/// One measured window of one scenario.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sample {
    pub calls: u64,
    pub errors: u64,
    pub secs: f64,
    /// Latencies of the calls completed in the window, sorted.
    pub lat_ns: Vec<u64>,
    pub client_cpu: Duration,
    pub server_cpu: Duration,
}

impl Sample {
    pub(crate) fn throughput(&self) -> f64 {
        if self.secs > 0.0 {
            self.calls as f64 / self.secs
        } else {
            0.0
        }
    }

    pub(crate) fn pct_us(&self, p: f64) -> f64 {
        percentile(&self.lat_ns, p) as f64 / 1000.0
    }

    pub(crate) fn client_cpu_us(&self) -> f64 {
        per_call_us(self.client_cpu, self.calls)
    }

    pub(crate) fn server_cpu_us(&self) -> f64 {
        per_call_us(self.server_cpu, self.calls)
    }
}

fn per_call_us(d: Duration, calls: u64) -> f64 {
    if calls == 0 {
        f64::NAN
    } else {
        d.as_secs_f64() * 1e6 / calls as f64
    }
}

/// Nearest-rank percentile of sorted data (0 for no data).
pub(crate) fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Median of a set of figures (NaNs ignored).
pub(crate) fn median(xs: &[f64]) -> f64 {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub(crate) fn min_max(xs: &[f64]) -> (f64, f64) {
    xs.iter()
        .copied()
        .filter(|x| !x.is_nan())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
            (lo.min(x), hi.max(x))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_medians() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 50);
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&[], 50.0), 0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, f64::NAN, 2.0, 3.0]), 2.5);
        assert_eq!(min_max(&[2.0, 5.0, 1.0]), (1.0, 5.0));
    }
}
