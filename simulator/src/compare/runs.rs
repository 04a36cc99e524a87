//! Full replays, one per placement policy: how each policy's choices play out over time,
//! each with its own evolution of the free capacity and the slowdown its spans cause.

use serde::Serialize;
use trainyard_policies::{Cycle, Engine};
use trainyard_topology::{Cluster, PlacementPolicy, Spans, Topology};

use super::CompareOptions;
use super::summary::{LevelDomains, rack_depth};
use crate::metrics::Summary;
use crate::placement::PlacementSummary;
use crate::{Progress, ReplayOptions, ReplayResult, SimError, TraceJob, replay_observed};

/// What one full replay under one placement policy produced.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicyRun {
    /// Placement policy name.
    pub policy: String,
    /// Jobs that ran to completion.
    pub finished: u64,
    /// Jobs that could never run.
    pub unschedulable: u64,
    /// Mean job completion time (submit to end), seconds, 3 decimals.
    pub mean_jct_s: f64,
    /// 95th percentile of the job completion time, seconds.
    pub p95_jct_s: f64,
    /// Mean queueing delay (submit to start), seconds, 3 decimals.
    pub mean_wait_s: f64,
    /// 95th percentile of the queueing delay, seconds.
    pub p95_wait_s: f64,
    /// Latest end minus earliest submission, seconds.
    pub makespan_s: u64,
    /// GPU-seconds used over GPU-seconds available during the makespan, 6 decimals.
    pub gpu_utilisation: f64,
    /// Mean slowdown factor over finished gangs, 6 decimals.
    pub mean_slowdown: f64,
    /// Mean slowdown factor weighted by GPUs, 6 decimals.
    pub gpu_weighted_slowdown: f64,
    /// Name of the level just above hosts (rack, ToR).
    pub rack_level: String,
    /// Share of admitted gangs kept within one domain of that level, 6 decimals.
    pub confined_share: f64,
    /// The same share over gangs of more than one pod, 6 decimals.
    pub multi_pod_confined_share: f64,
    /// Domains used per level, summed over admitted gangs.
    pub domains_per_level: Vec<LevelDomains>,
    /// Domains used above the host level, summed over admitted gangs.
    pub domains_above_hosts: u64,
    /// Time-weighted mean of free GPUs the smallest waiting gang could not use, 3 decimals.
    pub mean_fragmented_gpus: f64,
    /// Fragmented GPU-seconds over free GPU-seconds, 6 decimals.
    pub fragmented_share_of_free: f64,
    /// Scheduling cycles run.
    pub cycles: u64,
}

/// Spans of the placements a replay committed.
#[derive(Clone, Debug)]
pub(crate) struct SpanTally {
    rack_depth: u8,
    per_level: Vec<u64>,
    gangs: u64,
    confined: u64,
    multi_pod: u64,
    multi_pod_confined: u64,
}

impl SpanTally {
    pub(crate) fn new(topo: &Topology) -> SpanTally {
        SpanTally {
            rack_depth: rack_depth(topo),
            per_level: vec![0; topo.levels().len()],
            gangs: 0,
            confined: 0,
            multi_pod: 0,
            multi_pod_confined: 0,
        }
    }

    /// Counts one committed placement of a gang of `pods` pods.
    pub(crate) fn add(&mut self, spans: &Spans, depth: u8, pods: u32) {
        for (sum, &n) in self.per_level.iter_mut().zip(&spans.per_level) {
            *sum += u64::from(n);
        }
        let confined = u64::from(depth >= self.rack_depth);
        self.gangs += 1;
        self.confined += confined;
        if pods > 1 {
            self.multi_pod += 1;
            self.multi_pod_confined += confined;
        }
    }

    /// Counts every admission of a cycle.
    pub(crate) fn observe(&mut self, engine: &Engine, cycle: &Cycle, jobs: &[TraceJob]) {
        let topo = engine.cluster().topology();
        for a in &cycle.admitted {
            let pods = jobs[a.id.0 as usize].gang.pods();
            self.add(&Spans::of(topo, a.placement.hosts.iter().copied()), a.placement.depth, pods);
        }
    }
}

/// Replays `jobs` under `options` with `placement` as the placement policy.
pub fn replay_policy(
    cluster: Cluster,
    jobs: &[TraceJob],
    options: &CompareOptions,
    placement: PlacementPolicy,
    progress: &mut dyn FnMut(Progress),
) -> Result<PolicyRun, SimError> {
    let topo = cluster.topology().clone();
    let cluster_gpus = cluster.total_capacity().gpus;
    let mut policy = options.policy.clone();
    policy.placement = placement;
    let mut tally = SpanTally::new(&topo);
    let replay_options =
        ReplayOptions { estimates: options.estimates, slowdown: options.slowdown.clone(), ..ReplayOptions::default() };
    let result = replay_observed(cluster, policy, jobs, replay_options, progress, &mut |engine, cycle| {
        tally.observe(engine, cycle, jobs)
    })?;
    Ok(PolicyRun::new(placement, &topo, cluster_gpus, &result, &tally))
}

impl PolicyRun {
    pub(crate) fn new(
        policy: PlacementPolicy,
        topo: &Topology,
        cluster_gpus: u64,
        result: &ReplayResult,
        tally: &SpanTally,
    ) -> PolicyRun {
        let summary = Summary::new(&result.outcomes, cluster_gpus);
        let placement = PlacementSummary::of(result);
        let levels = topo.levels();
        let rack_level = levels.len().checked_sub(2).map_or("cluster", |i| levels[i].as_str()).to_string();
        let domains_per_level: Vec<LevelDomains> = levels
            .iter()
            .zip(&tally.per_level)
            .map(|(level, &domains)| LevelDomains { level: level.clone(), domains })
            .collect();
        let hosts = tally.per_level.last().copied().unwrap_or(0);
        PolicyRun {
            policy: policy.name().to_string(),
            finished: summary.finished,
            unschedulable: summary.unschedulable,
            mean_jct_s: summary.jct.mean,
            p95_jct_s: summary.jct.p95,
            mean_wait_s: summary.queueing_delay.mean,
            p95_wait_s: summary.queueing_delay.p95,
            makespan_s: summary.makespan_s,
            gpu_utilisation: summary.gpu_utilisation,
            mean_slowdown: placement.mean_factor,
            gpu_weighted_slowdown: placement.gpu_weighted_mean_factor,
            rack_level,
            confined_share: share(tally.confined, tally.gangs),
            multi_pod_confined_share: share(tally.multi_pod_confined, tally.multi_pod),
            domains_above_hosts: tally.per_level.iter().sum::<u64>() - hosts,
            domains_per_level,
            mean_fragmented_gpus: placement.fragmentation.mean_fragmented_gpus,
            fragmented_share_of_free: placement.fragmentation.fragmented_share_of_free,
            cycles: result.cycles,
        }
    }
}

/// `part / whole` rounded to 6 decimals; 0 for an empty whole.
fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { (part as f64 / whole as f64 * 1e6).round() / 1e6 }
}
