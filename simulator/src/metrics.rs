//! Replay metrics: makespan, GPU utilisation, and queueing-delay / completion-time
//! distributions overall, per job-size class and per tenant.
//!
//! Everything here is deterministic: groups are kept in `Vec`s in a fixed order
//! (size classes in [`SIZE_CLASSES`] order, tenants sorted by name), so the same
//! outcomes always serialise to byte-identical JSON.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::job::{Fate, JobOutcome};

/// Job-size classes by total GPUs of the gang, smallest first.
pub const SIZE_CLASSES: [&str; 6] = ["cpu-only", "1", "2-8", "9-64", "65-256", "257+"];

/// The size class of a job asking for `gpus` GPUs in total (one of [`SIZE_CLASSES`]).
pub fn size_class(gpus: u64) -> &'static str {
    SIZE_CLASSES[size_class_index(gpus)]
}

/// Position of [`size_class`]`(gpus)` in [`SIZE_CLASSES`].
fn size_class_index(gpus: u64) -> usize {
    match gpus {
        0 => 0,
        1 => 1,
        2..=8 => 2,
        9..=64 => 3,
        65..=256 => 4,
        _ => 5,
    }
}

/// Rounds `x` to `decimals` decimal places (for readable, stable JSON).
fn round_to(x: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (x * scale).round() / scale
}

/// Summary statistics of a set of durations in seconds.
///
/// Percentiles use the nearest-rank method: the p-th percentile of `n` sorted
/// samples is `sorted[ceil(p/100 * n) - 1]`, so every percentile is an
/// observed value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    /// Number of samples.
    pub count: u64,
    /// Arithmetic mean, rounded to 3 decimals.
    pub mean: f64,
    /// Median (nearest rank).
    pub p50: f64,
    /// 95th percentile (nearest rank).
    pub p95: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// 99.9th percentile (nearest rank).
    #[serde(rename = "p99_9")]
    pub p999: f64,
    /// Largest sample.
    pub max: f64,
}

impl Distribution {
    /// Statistics of `samples` (in any order). An empty slice gives all zeros.
    pub fn from_samples(samples: &[u64]) -> Self {
        if samples.is_empty() {
            return Distribution::default();
        }
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let n = sorted.len();
        let sum: u128 = sorted.iter().map(|&s| u128::from(s)).sum();
        // Percentile in tenths of a percent, in exact integer arithmetic so that
        // e.g. p99.9 of 1000 samples is rank 999, not 1000 after float rounding.
        let pct = |per_mille: u128| -> f64 {
            let rank = (per_mille * n as u128).div_ceil(1000).max(1);
            sorted[(rank - 1) as usize] as f64
        };
        Distribution {
            count: n as u64,
            mean: round_to(sum as f64 / n as f64, 3),
            p50: pct(500),
            p95: pct(950),
            p99: pct(990),
            p999: pct(999),
            max: sorted[n - 1] as f64,
        }
    }
}

/// Statistics of one group of jobs (a size class or a tenant).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupStats {
    /// Group name: a size class from [`SIZE_CLASSES`] or a tenant name.
    pub name: String,
    /// Jobs of the trace in this group.
    pub jobs: u64,
    /// Of those, how many finished.
    pub finished: u64,
    /// Of those, how many could never run.
    pub unschedulable: u64,
    /// GPU-hours consumed by the finished jobs, rounded to 3 decimals.
    pub gpu_hours: f64,
    /// Seconds from submission to start, over finished jobs.
    pub queueing_delay: Distribution,
    /// Job completion time: seconds from submission to end, over finished jobs.
    pub jct: Distribution,
}

/// Whole-replay metrics computed from the outcome of every job.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Jobs in the input (finished + unschedulable).
    pub jobs: u64,
    /// Jobs that ran to completion.
    pub finished: u64,
    /// Jobs that could never run.
    pub unschedulable: u64,
    /// Finished jobs that started by backfill.
    pub backfilled: u64,
    /// Latest end of a finished job minus earliest submission of any job, in
    /// seconds; 0 when nothing finished.
    pub makespan_s: u64,
    /// GPU-seconds used by finished jobs over GPU-seconds available during the
    /// makespan (`cluster_gpus * makespan_s`), rounded to 6 decimals; 0 when
    /// the makespan or the cluster is empty.
    pub gpu_utilisation: f64,
    /// GPU-hours consumed by finished jobs, rounded to 3 decimals.
    pub gpu_hours: f64,
    /// Seconds from submission to start, over all finished jobs.
    pub queueing_delay: Distribution,
    /// Seconds from submission to end, over all finished jobs.
    pub jct: Distribution,
    /// Per size class, in [`SIZE_CLASSES`] order; only classes with jobs.
    pub by_size_class: Vec<GroupStats>,
    /// Per tenant, sorted by tenant name.
    pub by_tenant: Vec<GroupStats>,
    /// Per gang shape (`one pod set`, `one pod set, sliced`, `several pod sets`), in that
    /// order; empty, and left out of the JSON, when every gang is one plain pod set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_gang_shape: Vec<GroupStats>,
}

/// The gang shapes [`Summary::by_gang_shape`] groups by.
pub const GANG_SHAPES: [&str; 4] = ["one pod set", "one pod set, sliced", "several pod sets", "TPU slices"];

/// Position of a gang's shape in [`GANG_SHAPES`].
fn gang_shape_index(gang: &trainyard_topology::GangShape) -> usize {
    match gang.sets.as_slice() {
        [s] if s.tpu.is_some() => 3,
        [s] if s.slice.is_none() => 0,
        [_] => 1,
        _ => 2,
    }
}

/// Running totals for one group while the outcomes are scanned.
#[derive(Default)]
struct Acc {
    jobs: u64,
    finished: u64,
    unschedulable: u64,
    gpu_seconds: u128,
    delays: Vec<u64>,
    jcts: Vec<u64>,
}

impl Acc {
    fn add(&mut self, outcome: &JobOutcome) {
        self.jobs += 1;
        match &outcome.fate {
            Fate::Finished { start, end, .. } => {
                self.finished += 1;
                self.gpu_seconds += gpu_seconds(outcome);
                self.delays.push(start.saturating_sub(outcome.job.submit));
                self.jcts.push(end.saturating_sub(outcome.job.submit));
            }
            Fate::Unschedulable { .. } => self.unschedulable += 1,
        }
    }

    fn into_stats(self, name: String) -> GroupStats {
        GroupStats {
            name,
            jobs: self.jobs,
            finished: self.finished,
            unschedulable: self.unschedulable,
            gpu_hours: gpu_hours(self.gpu_seconds),
            queueing_delay: Distribution::from_samples(&self.delays),
            jct: Distribution::from_samples(&self.jcts),
        }
    }
}

/// GPU-seconds a finished job used (0 for one that never ran).
fn gpu_seconds(outcome: &JobOutcome) -> u128 {
    match outcome.fate {
        Fate::Finished { start, end, .. } => u128::from(outcome.job.gpus()) * u128::from(end.saturating_sub(start)),
        Fate::Unschedulable { .. } => 0,
    }
}

fn gpu_hours(gpu_seconds: u128) -> f64 {
    round_to(gpu_seconds as f64 / 3600.0, 3)
}

impl Summary {
    /// Computes the metrics of a replay from every job's outcome on a cluster
    /// with `cluster_gpus` GPUs in total.
    pub fn new(outcomes: &[JobOutcome], cluster_gpus: u64) -> Self {
        let mut all = Acc::default();
        let mut classes: [Acc; SIZE_CLASSES.len()] = Default::default();
        let mut tenants: BTreeMap<&str, Acc> = BTreeMap::new();
        let mut shapes: [Acc; GANG_SHAPES.len()] = Default::default();
        let mut backfilled = 0u64;
        let mut first_submit: Option<u64> = None;
        let mut last_end: Option<u64> = None;

        for outcome in outcomes {
            all.add(outcome);
            classes[size_class_index(outcome.job.gpus())].add(outcome);
            tenants.entry(outcome.job.tenant.as_str()).or_default().add(outcome);
            shapes[gang_shape_index(&outcome.job.gang)].add(outcome);
            first_submit = Some(first_submit.map_or(outcome.job.submit, |s| s.min(outcome.job.submit)));
            if let Fate::Finished { end, backfilled: bf, .. } = outcome.fate {
                last_end = Some(last_end.map_or(end, |e| e.max(end)));
                backfilled += u64::from(bf);
            }
        }

        let makespan_s = match (first_submit, last_end) {
            (Some(first), Some(last)) => last.saturating_sub(first),
            _ => 0,
        };
        let capacity = u128::from(cluster_gpus) * u128::from(makespan_s);
        let gpu_utilisation = if capacity == 0 { 0.0 } else { round_to(all.gpu_seconds as f64 / capacity as f64, 6) };

        let by_size_class = classes
            .into_iter()
            .zip(SIZE_CLASSES)
            .filter(|(acc, _)| acc.jobs > 0)
            .map(|(acc, name)| acc.into_stats(name.to_string()))
            .collect();
        let by_tenant = tenants.into_iter().map(|(name, acc)| acc.into_stats(name.to_string())).collect();
        let rich = shapes[1..].iter().any(|acc| acc.jobs > 0);
        let by_gang_shape = if rich {
            shapes
                .into_iter()
                .zip(GANG_SHAPES)
                .filter(|(acc, _)| acc.jobs > 0)
                .map(|(acc, name)| acc.into_stats(name.to_string()))
                .collect()
        } else {
            Vec::new()
        };

        let summary = Summary {
            jobs: all.jobs,
            finished: all.finished,
            unschedulable: all.unschedulable,
            backfilled,
            makespan_s,
            gpu_utilisation,
            gpu_hours: gpu_hours(all.gpu_seconds),
            queueing_delay: Distribution::from_samples(&all.delays),
            jct: Distribution::from_samples(&all.jcts),
            by_size_class,
            by_tenant,
            by_gang_shape,
        };
        debug_assert_eq!(summary.finished + summary.unschedulable, summary.jobs);
        debug_assert_eq!(summary.jobs, outcomes.len() as u64);
        summary
    }
}

#[cfg(test)]
mod tests {
    use trainyard_topology::Resources;

    use super::*;
    use crate::job::TraceJob;

    fn job(id: &str, tenant: &str, pods: u32, pod: Resources, submit: u64) -> TraceJob {
        TraceJob::recorded(id.to_string(), submit, 1, tenant.to_string(), (pods, pod), 0)
    }

    fn finished(job: TraceJob, start: u64, end: u64, backfilled: bool) -> JobOutcome {
        JobOutcome { job, fate: Fate::Finished { start, end, backfilled, span_level: String::new() } }
    }

    fn unschedulable(job: TraceJob, reason: &str) -> JobOutcome {
        JobOutcome { job, fate: Fate::Unschedulable { reason: reason.to_string() } }
    }

    /// Four finished jobs and one unschedulable one on a 16-GPU cluster.
    fn sample_outcomes() -> Vec<JobOutcome> {
        let cpu = Resources { gpus: 0, cpu_milli: 1000, memory_mib: 0 };
        vec![
            finished(job("a", "alice", 1, Resources::gpus(8), 0), 0, 3600, false),
            finished(job("b", "bob", 2, Resources::gpus(4), 100), 3600, 7300, false),
            finished(job("c", "alice", 1, Resources::gpus(1), 200), 300, 1200, true),
            finished(job("d", "bob", 1, cpu, 50), 60, 120, false),
            unschedulable(job("e", "carol", 32, Resources::gpus(8), 10), "needs 256 GPUs, cluster has 16"),
        ]
    }

    #[test]
    fn percentiles_of_one_to_a_thousand() {
        let samples: Vec<u64> = (1..=1000).rev().collect();
        let d = Distribution::from_samples(&samples);
        assert_eq!(d.count, 1000);
        assert_eq!(d.mean, 500.5);
        assert_eq!(d.p50, 500.0);
        assert_eq!(d.p95, 950.0);
        assert_eq!(d.p99, 990.0);
        assert_eq!(d.p999, 999.0);
        assert_eq!(d.max, 1000.0);
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        // n = 4: p50 -> rank 2, p95/p99/p99.9 -> rank 4.
        let d = Distribution::from_samples(&[3500, 0, 100, 10]);
        assert_eq!((d.p50, d.p95, d.p99, d.p999, d.max), (10.0, 3500.0, 3500.0, 3500.0, 3500.0));
        assert_eq!(d.mean, 902.5);
        // Mean is rounded to 3 decimals.
        assert_eq!(Distribution::from_samples(&[1, 1, 2]).mean, 1.333);
    }

    #[test]
    fn empty_distribution_is_all_zero() {
        assert_eq!(Distribution::from_samples(&[]), Distribution::default());
        let d = Distribution::from_samples(&[]);
        assert_eq!((d.count, d.mean, d.p50, d.p999, d.max), (0, 0.0, 0.0, 0.0, 0.0));
    }

    #[test]
    fn one_sample_is_every_percentile() {
        let d = Distribution::from_samples(&[42]);
        assert_eq!(d.count, 1);
        for v in [d.mean, d.p50, d.p95, d.p99, d.p999, d.max] {
            assert_eq!(v, 42.0);
        }
    }

    #[test]
    fn distribution_json_names() {
        let json = serde_json::to_string(&Distribution::from_samples(&[1, 2])).unwrap();
        assert_eq!(json, r#"{"count":2,"mean":1.5,"p50":1.0,"p95":2.0,"p99":2.0,"p99_9":2.0,"max":2.0}"#);
    }

    #[test]
    fn size_class_boundaries() {
        let cases = [
            (0, "cpu-only"),
            (1, "1"),
            (2, "2-8"),
            (8, "2-8"),
            (9, "9-64"),
            (64, "9-64"),
            (65, "65-256"),
            (256, "65-256"),
            (257, "257+"),
            (u64::MAX, "257+"),
        ];
        for (gpus, class) in cases {
            assert_eq!(size_class(gpus), class, "{gpus} GPUs");
        }
    }

    #[test]
    fn summary_of_hand_made_outcomes() {
        let s = Summary::new(&sample_outcomes(), 16);
        assert_eq!((s.jobs, s.finished, s.unschedulable, s.backfilled), (5, 4, 1, 1));
        assert_eq!(s.finished + s.unschedulable, s.jobs);
        // Last end 7300, first submit 0.
        assert_eq!(s.makespan_s, 7300);
        // 8*3600 + 8*3700 + 1*900 + 0*60 = 59300 GPU-s over 16 * 7300.
        assert_eq!(s.gpu_utilisation, 0.507705);
        assert_eq!(s.gpu_hours, 16.472);

        assert_eq!(s.queueing_delay, Distribution::from_samples(&[0, 3500, 100, 10]));
        assert_eq!(s.jct.count, 4);
        assert_eq!((s.jct.mean, s.jct.p50, s.jct.max), (2967.5, 1000.0, 7200.0));

        let classes: Vec<(&str, u64, u64, u64)> =
            s.by_size_class.iter().map(|g| (g.name.as_str(), g.jobs, g.finished, g.unschedulable)).collect();
        assert_eq!(classes, [("cpu-only", 1, 1, 0), ("1", 1, 1, 0), ("2-8", 2, 2, 0), ("65-256", 1, 0, 1)]);
        let two_to_eight = &s.by_size_class[2];
        assert_eq!(two_to_eight.gpu_hours, 16.222);
        assert_eq!(two_to_eight.queueing_delay.max, 3500.0);
        assert_eq!(two_to_eight.jct.mean, 5400.0);
        assert_eq!(s.by_size_class[0].gpu_hours, 0.0);
        assert_eq!(s.by_size_class[3].jct, Distribution::default());

        let tenants: Vec<&str> = s.by_tenant.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(tenants, ["alice", "bob", "carol"]);
        let alice = &s.by_tenant[0];
        assert_eq!((alice.jobs, alice.finished, alice.unschedulable, alice.gpu_hours), (2, 2, 0, 8.25));
        assert_eq!(alice.queueing_delay.mean, 50.0);
        assert_eq!(alice.jct.p50, 1000.0);
        assert_eq!(alice.jct.max, 3600.0);
        let bob = &s.by_tenant[1];
        assert_eq!((bob.jobs, bob.finished, bob.gpu_hours), (2, 2, 8.222));
        assert_eq!((bob.queueing_delay.p50, bob.queueing_delay.max), (10.0, 3500.0));
        let carol = &s.by_tenant[2];
        assert_eq!((carol.jobs, carol.finished, carol.unschedulable), (1, 0, 1));
        assert_eq!(carol.queueing_delay.count, 0);
    }

    #[test]
    fn summary_of_nothing_or_only_unschedulable_is_zero() {
        let empty = Summary::new(&[], 64);
        assert_eq!(empty, Summary::default());

        let cpu = Resources { gpus: 0, cpu_milli: 1000, memory_mib: 0 };
        let only = [unschedulable(job("x", "t", 1, cpu, 5), "no")];
        let s = Summary::new(&only, 64);
        assert_eq!((s.jobs, s.unschedulable, s.makespan_s, s.gpu_utilisation), (1, 1, 0, 0.0));
        // A cluster without GPUs does not divide by zero.
        let s = Summary::new(&sample_outcomes(), 0);
        assert_eq!(s.gpu_utilisation, 0.0);
    }

    #[test]
    fn makespan_starts_at_the_earliest_submission() {
        let outcomes = [
            finished(job("a", "t", 1, Resources::gpus(2), 1000), 1000, 2000, false),
            finished(job("b", "t", 1, Resources::gpus(2), 1500), 2000, 3000, false),
        ];
        let s = Summary::new(&outcomes, 4);
        assert_eq!(s.makespan_s, 2000);
        // 2*1000 + 2*1000 GPU-s over 4 * 2000.
        assert_eq!(s.gpu_utilisation, 0.5);
    }

    #[test]
    fn summary_json_is_deterministic() {
        let a = serde_json::to_string(&Summary::new(&sample_outcomes(), 16)).unwrap();
        let b = serde_json::to_string(&Summary::new(&sample_outcomes(), 16)).unwrap();
        assert_eq!(a, b);
    }
}
