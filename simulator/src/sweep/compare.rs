//! A sweep's results side by side: each point's metrics, and per group of points that differ
//! only in their seed, the mean with a 95% confidence interval (Student's t).

use serde::{Deserialize, Serialize};

use super::Point;
use crate::metrics::Summary;

/// What one point's replay gave: its report's summary (overall, per size class, per tenant).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PointResult {
    /// The point's label ([`Point::label`]).
    pub point: String,
    /// The replay's metrics.
    pub summary: Summary,
}

impl PointResult {
    /// The metrics of a replay's report.
    pub fn of(point: &Point, summary: &Summary) -> PointResult {
        PointResult { point: point.label(), summary: summary.clone() }
    }
}

/// A metric over a group's seeds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricCi {
    /// Mean over the seeds.
    pub mean: f64,
    /// Half-width of the 95% confidence interval of the mean; 0 with one seed.
    pub ci95: f64,
}

/// One group: the points that differ only in their seed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupRow {
    /// The group's label ([`Point::group_label`]).
    pub group: String,
    /// Points of the group that finished.
    pub seeds: usize,
    /// Mean queueing delay, seconds.
    pub mean_wait_s: MetricCi,
    /// 99th percentile of the queueing delay, seconds.
    pub p99_wait_s: MetricCi,
    /// GPU utilisation over the makespan.
    pub gpu_utilisation: MetricCi,
    /// Mean job completion time, seconds.
    pub mean_jct_s: MetricCi,
}

/// A whole sweep's comparison.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Every point that finished, in sweep order.
    pub points: Vec<PointResult>,
    /// Per group, in the order of their first point.
    pub groups: Vec<GroupRow>,
    /// Points that failed: `(label, line of the sweep file, error)`.
    pub failed: Vec<(String, u64, String)>,
}

/// Student's t at 97.5% for 1..=30 degrees of freedom (beyond: the normal 1.96).
const T975: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
    2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
];

/// The mean of `values` and the half-width of its 95% confidence interval.
pub fn confidence_half_width(values: &[f64]) -> MetricCi {
    let n = values.len();
    if n == 0 {
        return MetricCi { mean: 0.0, ci95: 0.0 };
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    if n == 1 {
        return MetricCi { mean, ci95: 0.0 };
    }
    let variance = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1) as f64;
    let t = T975.get(n - 2).copied().unwrap_or(1.96);
    MetricCi { mean, ci95: t * (variance / n as f64).sqrt() }
}

/// Compares a sweep's results: `results[i]` is point `i`'s result or its error.
pub fn compare(points: &[Point], results: &[Result<PointResult, String>]) -> Comparison {
    let mut done = Vec::new();
    let mut failed = Vec::new();
    let mut groups: Vec<(String, Vec<&PointResult>)> = Vec::new();
    for (point, result) in points.iter().zip(results) {
        match result {
            Ok(r) => {
                done.push(r.clone());
                let label = point.group_label();
                match groups.iter_mut().find(|(g, _)| *g == label) {
                    Some((_, members)) => members.push(r),
                    None => groups.push((label, vec![r])),
                }
            }
            Err(e) => failed.push((point.label(), point.line, e.clone())),
        }
    }
    let groups = groups
        .into_iter()
        .map(|(group, members)| {
            let ci =
                |f: fn(&PointResult) -> f64| confidence_half_width(&members.iter().map(|r| f(r)).collect::<Vec<_>>());
            GroupRow {
                group,
                seeds: members.len(),
                mean_wait_s: ci(|r| r.summary.queueing_delay.mean),
                p99_wait_s: ci(|r| r.summary.queueing_delay.p99),
                gpu_utilisation: ci(|r| r.summary.gpu_utilisation),
                mean_jct_s: ci(|r| r.summary.jct.mean),
            }
        })
        .collect();
    Comparison { points: done, groups, failed }
}

impl Comparison {
    /// The comparison as a terminal table: one row per group.
    pub fn render_table(&self) -> String {
        let width = self.groups.iter().map(|g| g.group.len()).max().unwrap_or(5).max(5);
        let mut out = format!(
            "{:<width$}  {:>5}  {:>22}  {:>22}  {:>16}\n",
            "point", "seeds", "mean wait (95% CI)", "p99 wait (95% CI)", "GPU util"
        );
        for g in &self.groups {
            let wait = |m: MetricCi| {
                format!("{} ± {}", crate::report::human_duration(m.mean), crate::report::human_duration(m.ci95))
            };
            let util = format!("{:.1}% ± {:.1}", g.gpu_utilisation.mean * 100.0, g.gpu_utilisation.ci95 * 100.0);
            out.push_str(&format!(
                "{:<width$}  {:>5}  {:>22}  {:>22}  {:>16}\n",
                g.group,
                g.seeds,
                wait(g.mean_wait_s),
                wait(g.p99_wait_s),
                util
            ));
        }
        for (label, line, error) in &self.failed {
            out.push_str(&format!("failed: {label} (line {line}): {error}\n"));
        }
        out
    }

    /// Every finished point as CSV, one row each, in sweep order.
    pub fn to_csv(&self) -> String {
        let mut out = String::from(
            "point,jobs,finished,unschedulable,backfilled,makespan_s,gpu_utilisation,mean_wait_s,p50_wait_s,p99_wait_s,mean_jct_s\n",
        );
        for r in &self.points {
            let m = &r.summary;
            out.push_str(&format!(
                "\"{}\",{},{},{},{},{},{},{},{},{},{}\n",
                r.point.replace('"', "\"\""),
                m.jobs,
                m.finished,
                m.unschedulable,
                m.backfilled,
                m.makespan_s,
                m.gpu_utilisation,
                m.queueing_delay.mean,
                m.queueing_delay.p50,
                m.queueing_delay.p99,
                m.jct.mean
            ));
        }
        out
    }

    /// The comparison as pretty JSON (byte-identical for identical results).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a comparison serialises") + "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::SweepSpec;

    fn result(point: &Point, wait: f64) -> PointResult {
        let mut summary = Summary { jobs: 10, finished: 10, gpu_utilisation: 0.5, ..Summary::default() };
        summary.queueing_delay.mean = wait;
        summary.queueing_delay.p99 = wait * 2.0;
        summary.jct.mean = wait + 10.0;
        PointResult { point: point.label(), summary }
    }

    #[test]
    fn the_interval_is_students_t_over_the_seeds() {
        let ci = confidence_half_width(&[10.0, 12.0, 14.0]);
        assert_eq!(ci.mean, 12.0);
        // sd 2, n 3, t(2 df) 4.303: 4.303 * 2 / sqrt(3).
        assert!((ci.ci95 - 4.303 * 2.0 / 3f64.sqrt()).abs() < 1e-9, "{ci:?}");
        assert_eq!(confidence_half_width(&[5.0]).ci95, 0.0);
    }

    #[test]
    fn points_group_by_everything_but_the_seed_and_failures_are_listed() {
        let spec = SweepSpec::parse("grid:\n  policy: [fifo, easy-backfill]\n  seed: [1, 2]\n", "s.yaml").unwrap();
        let results: Vec<Result<PointResult, String>> = vec![
            Ok(result(&spec.points[0], 100.0)),
            Ok(result(&spec.points[1], 300.0)),
            Err("cannot read c.yaml".into()),
            Ok(result(&spec.points[3], 50.0)),
        ];
        let c = compare(&spec.points, &results);
        assert_eq!(c.groups.len(), 2);
        assert_eq!((c.groups[0].seeds, c.groups[0].mean_wait_s.mean), (2, 200.0));
        assert_eq!((c.groups[1].seeds, c.groups[1].mean_wait_s.ci95), (1, 0.0));
        assert_eq!(c.failed, vec![(spec.points[2].label(), 2, "cannot read c.yaml".to_string())]);
        let table = c.render_table();
        assert!(table.contains("cluster=demo policy=fifo") && table.contains("failed: "), "{table}");
        assert_eq!(c.to_csv().lines().count(), 4, "a header and three finished points");
        let back: Comparison = serde_json::from_str(&c.to_json()).unwrap();
        assert_eq!(back, c);
    }
}
