//! The placement section of a report: the slowdown in force, how widely gangs spread, and
//! how fragmented the free GPUs were.

use serde::{Deserialize, Serialize};

use crate::fragmentation::Fragmentation;
use crate::job::{Fate, JobOutcome};
use crate::replay::ReplayResult;
use crate::slowdown::SlowdownTable;

/// One topology level: its slowdown factor and the finished gangs whose pods it held.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SpanLevel {
    /// Level name; `cluster` for the whole cluster.
    pub level: String,
    /// Runtime factor of gangs spanning a domain of this level.
    pub factor: f64,
    /// The level whose listed factor applies (the level itself when listed), or `default`.
    pub from: String,
    /// Finished gangs whose smallest enclosing domain is at this level.
    pub gangs: u64,
    /// Their GPUs.
    pub gpus: u64,
    /// `gangs` over all finished gangs, rounded to 6 decimals.
    pub gang_share: f64,
    /// `gpus` over the GPUs of all finished gangs, rounded to 6 decimals.
    pub gpu_share: f64,
}

/// Where gangs ran and what it cost them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlacementSummary {
    /// Mean slowdown factor over finished gangs, rounded to 6 decimals.
    pub mean_factor: f64,
    /// Mean slowdown factor weighted by each gang's GPUs, rounded to 6 decimals.
    pub gpu_weighted_mean_factor: f64,
    /// Every level of the cluster, the host level first and `cluster` last.
    pub levels: Vec<SpanLevel>,
    /// Free GPUs the smallest waiting gang could not use, over time.
    pub fragmentation: Fragmentation,
    /// How close each pod's GPUs sat in its host; absent when no host has a GPU layout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_locality: Option<crate::gpu_locality::GpuLocality>,
    /// The PCIe roots each pod's DRA devices span; absent when no pod carried claims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_locality: Option<crate::device_locality::DeviceLocality>,
}

impl PlacementSummary {
    /// The placement section of a replay.
    pub fn of(result: &ReplayResult) -> PlacementSummary {
        let summary = PlacementSummary::new(&result.outcomes, &result.slowdown, result.fragmentation.clone());
        PlacementSummary {
            gpu_locality: result.gpu_locality.clone(),
            device_locality: result.device_locality.clone(),
            ..summary
        }
    }

    /// Counts finished outcomes by their span level. Outcomes whose level the table does not
    /// know (made outside a replay) are left out of every number.
    pub fn new(outcomes: &[JobOutcome], slowdown: &SlowdownTable, fragmentation: Fragmentation) -> PlacementSummary {
        let mut levels: Vec<SpanLevel> = slowdown
            .levels()
            .iter()
            .rev()
            .map(|l| SpanLevel {
                level: l.level.clone(),
                factor: l.factor,
                from: l.from.clone(),
                ..SpanLevel::default()
            })
            .collect();
        let (mut gangs, mut gpus) = (0u64, 0u64);
        let (mut factor_sum, mut weighted_sum) = (0f64, 0f64);
        for outcome in outcomes {
            let Fate::Finished { span_level, .. } = &outcome.fate else {
                continue;
            };
            let Some(level) = levels.iter_mut().find(|l| &l.level == span_level) else {
                continue;
            };
            let g = outcome.job.gpus();
            level.gangs += 1;
            level.gpus += g;
            gangs += 1;
            gpus += g;
            factor_sum += level.factor;
            weighted_sum += level.factor * g as f64;
        }
        for level in &mut levels {
            level.gang_share = ratio(level.gangs as f64, gangs as f64);
            level.gpu_share = ratio(level.gpus as f64, gpus as f64);
        }
        PlacementSummary {
            mean_factor: ratio(factor_sum, gangs as f64),
            gpu_weighted_mean_factor: ratio(weighted_sum, gpus as f64),
            levels,
            fragmentation,
            gpu_locality: None,
            device_locality: None,
        }
    }
}

/// `part / whole` rounded to 6 decimals; 0 for an empty whole.
fn ratio(part: f64, whole: f64) -> f64 {
    if whole == 0.0 { 0.0 } else { (part / whole * 1e6).round() / 1e6 }
}

#[cfg(test)]
mod tests {
    use trainyard_topology::{Cluster, Resources};

    use super::*;
    use crate::job::TraceJob;
    use crate::slowdown::Slowdown;

    fn finished(gpus: u64, span_level: &str) -> JobOutcome {
        let job = TraceJob::recorded("j".into(), 0, 10, "t".into(), (1, Resources::gpus(gpus)), 0);
        JobOutcome { job, fate: Fate::Finished { start: 0, end: 10, backfilled: false, span_level: span_level.into() } }
    }

    #[test]
    fn shares_and_mean_factors_by_hand() {
        let yaml = "name: t\nlevels: [rack, host]\ngenerate:\n  counts: [2, 2]\n  node: {gpus: 8}\n";
        let cluster = Cluster::from_yaml(yaml, "t.yaml").unwrap();
        let table = "rack=1.05,cluster=1.25".parse::<Slowdown>().unwrap().resolve(cluster.topology()).unwrap();
        let mut outcomes =
            vec![finished(1, "host"), finished(1, "host"), finished(16, "rack"), finished(32, "cluster")];
        outcomes.push(JobOutcome { job: outcomes[0].job.clone(), fate: Fate::Unschedulable { reason: "no".into() } });
        outcomes.push(finished(8, ""));
        let p = PlacementSummary::new(&outcomes, &table, Fragmentation::default());
        let rows: Vec<(&str, f64, &str, u64, u64)> =
            p.levels.iter().map(|l| (l.level.as_str(), l.factor, l.from.as_str(), l.gangs, l.gpus)).collect();
        assert_eq!(
            rows,
            [("host", 1.0, "default", 2, 2), ("rack", 1.05, "rack", 1, 16), ("cluster", 1.25, "cluster", 1, 32)]
        );
        assert_eq!(p.levels.iter().map(|l| l.gang_share).collect::<Vec<_>>(), [0.5, 0.25, 0.25]);
        // 2 + 16 + 32 = 50 GPUs.
        assert_eq!(p.levels.iter().map(|l| l.gpu_share).collect::<Vec<_>>(), [0.04, 0.32, 0.64]);
        // (1 + 1 + 1.05 + 1.25) / 4 and (2 + 16.8 + 40) / 50.
        assert_eq!(p.mean_factor, 1.075);
        assert_eq!(p.gpu_weighted_mean_factor, 1.176);
        assert_eq!(PlacementSummary::new(&[], &table, Fragmentation::default()).mean_factor, 0.0);
    }
}
