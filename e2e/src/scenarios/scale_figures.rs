//! The figures of the scale scenario: percentiles, a process's CPU and peak memory from /proc, and
//! sums over the controller's Prometheus text.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};

/// The `p`th percentile (nearest rank) of some durations; zero for none.
pub fn percentile(values: &[Duration], p: u32) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    let mut sorted = values.to_vec();
    sorted.sort();
    let rank = (u64::from(p.min(100)) * sorted.len() as u64).div_ceil(100).max(1) as usize;
    sorted[rank - 1]
}

/// The most items between their two instants at any one moment: of TrainJobs, how many were
/// created and not yet admitted. Pairs whose second instant is before their first count as none.
pub fn most_waiting(pairs: &[(std::time::Instant, std::time::Instant)]) -> usize {
    let mut edges: Vec<(std::time::Instant, i32)> = Vec::with_capacity(pairs.len() * 2);
    for &(from, to) in pairs.iter().filter(|(from, to)| to > from) {
        edges.push((from, 1));
        edges.push((to, -1));
    }
    // At one instant, an arrival after a departure: nothing waits for no time.
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    most as usize
}

/// CPU time used so far and the peak resident memory of a process.
#[derive(Clone, Copy, Debug)]
pub struct Usage {
    /// User plus system time.
    pub cpu: Duration,
    /// Peak resident set (VmHWM), bytes.
    pub peak_rss: u64,
}

/// Clock ticks a second of `/proc/<pid>/stat` (USER_HZ, 100 on Linux).
const TICKS: f64 = 100.0;

/// Reads a process's usage from /proc.
pub fn usage(pid: u32) -> Result<Usage> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).with_context(|| format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces; the fields after its closing parenthesis are
    // fixed: utime and stime are the 12th and 13th of them.
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    let cpu = Duration::from_secs_f64((tick(11) + tick(12)) as f64 / TICKS);
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).with_context(|| format!("/proc/{pid}/status"))?;
    let peak_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    Ok(Usage { cpu, peak_rss: peak_kib * 1024 })
}

/// The series of metric `name` in Prometheus text: labels (as written) and value.
fn series<'t>(text: &'t str, name: &str) -> Vec<(&'t str, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            let labels = match key.strip_prefix(name)? {
                "" => "",
                rest => rest.strip_prefix('{')?.strip_suffix('}')?,
            };
            Some((labels, value.parse().ok()?))
        })
        .collect()
}

/// The sum of metric `name` over the series whose labels contain `having` (all when empty).
pub fn metric_sum(text: &str, name: &str, having: &str) -> f64 {
    series(text, name).iter().filter(|(labels, _)| labels.contains(having)).map(|(_, v)| v).sum()
}

/// API requests sent between two scrapes.
pub fn requests_total(before: &str, after: &str) -> f64 {
    metric_sum(after, "trainyard_api_requests_total", "") - metric_sum(before, "trainyard_api_requests_total", "")
}

/// API requests sent between two scrapes, per admission, by verb and resource, most first:
/// `patch trainjobs 1.02, apply jobsets 1.00, ...`.
pub fn per_admission(before: &str, after: &str, admissions: usize) -> String {
    let name = "trainyard_api_requests_total";
    let mut sent: BTreeMap<String, f64> = BTreeMap::new();
    for (labels, v) in series(after, name) {
        *sent.entry(labels.to_string()).or_default() += v;
    }
    for (labels, v) in series(before, name) {
        *sent.entry(labels.to_string()).or_default() -= v;
    }
    let label = |labels: &str, key: &str| -> String {
        labels
            .split(',')
            .find_map(|kv| kv.strip_prefix(&format!("{key}=\"")))
            .map(|v| v.trim_end_matches('"').to_string())
            .unwrap_or_default()
    };
    let mut rows: Vec<(f64, String)> = sent
        .into_iter()
        .filter(|(_, n)| *n > 0.0)
        .map(|(labels, n)| {
            (n / admissions.max(1) as f64, format!("{} {}", label(&labels, "verb"), label(&labels, "resource")))
        })
        .collect();
    rows.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let total: f64 = rows.iter().map(|(n, _)| n).sum();
    let shown: Vec<String> =
        rows.iter().filter(|(n, _)| *n >= 0.01).map(|(n, what)| format!("{what} {n:.2}")).collect();
    format!("{total:.2} in all ({})", shown.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let d: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&d, 50), Duration::from_millis(50));
        assert_eq!(percentile(&d, 99), Duration::from_millis(99));
        assert_eq!(percentile(&d, 100), Duration::from_millis(100));
        assert_eq!(percentile(&[Duration::from_secs(3)], 99), Duration::from_secs(3));
        assert_eq!(percentile(&[], 99), Duration::ZERO);
    }

    #[test]
    fn metrics_are_summed_and_compared() {
        let before = "# HELP x\ntrainyard_api_requests_total{verb=\"patch\",resource=\"trainjobs\"} 2\n";
        let after = "trainyard_api_requests_total{verb=\"patch\",resource=\"trainjobs\"} 12\n\
                     trainyard_api_requests_total{verb=\"apply\",resource=\"jobsets\"} 5\n\
                     trainyard_reconciles_total{outcome=\"acted\"} 7\ntrainyard_reconciles_total{outcome=\"idle\"} 3\n";
        assert_eq!(metric_sum(after, "trainyard_reconciles_total", ""), 10.0);
        assert_eq!(metric_sum(after, "trainyard_reconciles_total", "outcome=\"idle\""), 3.0);
        assert_eq!(per_admission(before, after, 5), "3.00 in all (patch trainjobs 2.00, apply jobsets 1.00)");
    }

    #[test]
    fn the_most_waiting_at_once_is_counted() {
        let t = std::time::Instant::now();
        let at = |ms: u64| t + Duration::from_millis(ms);
        assert_eq!(most_waiting(&[]), 0);
        assert_eq!(most_waiting(&[(at(0), at(10)), (at(20), at(30))]), 1, "one after the other");
        assert_eq!(most_waiting(&[(at(0), at(10)), (at(10), at(30))]), 1, "one leaves as the next comes");
        assert_eq!(most_waiting(&[(at(0), at(50)), (at(10), at(60)), (at(20), at(30))]), 3);
        assert_eq!(most_waiting(&[(at(10), at(5))]), 0, "before its creation is no wait");
    }

    #[test]
    fn this_process_has_a_usage() {
        let u = usage(std::process::id()).expect("our own /proc");
        assert!(u.peak_rss > 0);
    }
}
