//! Placement policies side by side on one trace: a per-gang shadow comparison and a full
//! replay per policy.
//!
//! ```text
//!  trace ──replay (trainyard)──> each cycle: free state before every admission rebuilt
//!                                   │ every baseline asked for the same gang there
//!                                   ▼
//!                               Shadow: costs, domains per level, head-to-head counts
//!  trace ──replay (each baseline)──> PolicyRun: JCT, wait, slowdown, spans, fragmentation
//! ```
//! The trainyard replay that drives the shadow comparison is also trainyard's full replay:
//! observing never changes what the engine does.

mod render;
mod runs;
mod shadow;
mod summary;

use serde::Serialize;
use trainyard_policies::PolicyConfig;
use trainyard_topology::{Cluster, PlacementPolicy, Topology};

pub use runs::{PolicyRun, replay_policy};
pub use shadow::{Answer, ShadowGang};
pub use summary::{LevelDomains, Loss, MAX_LISTED_LOSSES, PlacementView, Shadow, ShadowPolicy};

use crate::slowdown::LevelFactor;
use crate::{EstimateSource, Progress, ReplayOptions, SimError, Slowdown, SlowdownError, TraceJob, replay_observed};

/// Version of the JSON layout written by [`Comparison::to_json`].
pub const COMPARISON_VERSION: u32 = 1;

/// Runtime factors by distance from the host level: the host level itself, the level above
/// (rack, ToR), the one above that (block, aggregation switch), and everything wider.
pub const DEFAULT_FACTORS: [f64; 4] = [1.0, 1.05, 1.15, 1.25];

/// How to compare.
#[derive(Clone, Debug)]
pub struct CompareOptions {
    /// Scheduling policy (backfill mode, queues, default estimate); its placement policy is
    /// replaced by each compared one.
    pub policy: PolicyConfig,
    /// Where runtime estimates come from.
    pub estimates: EstimateSource,
    /// Runtime factors by span, applied in every replay.
    pub slowdown: Slowdown,
    /// Policies compared with trainyard, in table order (trainyard itself is skipped here).
    pub baselines: Vec<PlacementPolicy>,
}

impl CompareOptions {
    /// `policy` against every other placement policy, estimates from the trace, runtimes
    /// stretched by `slowdown` (see [`default_slowdown`]).
    pub fn new(policy: PolicyConfig, slowdown: Slowdown) -> CompareOptions {
        CompareOptions {
            policy,
            estimates: EstimateSource::Trace,
            slowdown,
            baselines: PlacementPolicy::ALL.into_iter().filter(|&p| p != PlacementPolicy::Trainyard).collect(),
        }
    }

    /// The baselines without trainyard and without repeats, in the order given.
    fn baselines(&self) -> Vec<PlacementPolicy> {
        let mut out: Vec<PlacementPolicy> = Vec::new();
        for &p in &self.baselines {
            if p != PlacementPolicy::Trainyard && !out.contains(&p) {
                out.push(p);
            }
        }
        out
    }
}

/// [`DEFAULT_FACTORS`] named after `topo`'s levels: on `[block, rack, host]` this is
/// `host=1,rack=1.05,block=1.15,cluster=1.25`; on Lingjun's `[dsw, psw, tor, host]` it is
/// `host=1,tor=1.05,psw=1.15,dsw=1.25,cluster=1.25`. Fails on a level name that cannot be
/// written in the `LEVEL=FACTOR` syntax.
pub fn default_slowdown(topo: &Topology) -> Result<Slowdown, SlowdownError> {
    let names = topo.levels().iter().rev().map(String::as_str).chain(std::iter::once("cluster"));
    let entries: Vec<String> = names
        .enumerate()
        .map(|(i, name)| format!("{name}={}", DEFAULT_FACTORS[i.min(DEFAULT_FACTORS.len() - 1)]))
        .collect();
    entries.join(",").parse()
}

/// Everything one comparison produced.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    /// Layout version of the JSON, [`COMPARISON_VERSION`].
    pub comparison_version: u32,
    /// Cluster name.
    pub cluster: String,
    /// Hosts of the cluster.
    pub cluster_hosts: u64,
    /// GPUs of the cluster.
    pub cluster_gpus: u64,
    /// The cluster's levels, outermost first, hosts last.
    pub levels: Vec<String>,
    /// Trace name, as the caller gave it (empty unless set).
    pub trace: String,
    /// Jobs in the trace.
    pub jobs: u64,
    /// Name of the scheduling policy.
    pub scheduling_policy: String,
    /// Its backfill mode.
    pub backfill: String,
    /// Where runtime estimates came from: `trace` or `actual`.
    pub estimates: String,
    /// The slowdown factor of every level.
    pub slowdown: Vec<LevelFactor>,
    /// Per gang, every policy on trainyard's free states.
    pub shadow: Shadow,
    /// One full replay per policy, trainyard first.
    pub replays: Vec<PolicyRun>,
}

impl Comparison {
    /// Pretty-printed JSON with a trailing newline; the same comparison gives the same bytes.
    pub fn to_json(&self) -> String {
        // Only string-keyed structs and sequences: serialisation cannot fail.
        let mut json = serde_json::to_string_pretty(self).expect("a comparison always serialises to JSON");
        json.push('\n');
        json
    }

    /// The plain-text tables: header, shadow comparison, full replays, then any gangs on which
    /// trainyard did worse. The same comparison gives the same text.
    pub fn render_table(&self) -> String {
        render::render(self)
    }
}

/// Runs the trainyard replay with the shadow comparison, then one replay per baseline.
/// `progress` is told which policy is replaying.
pub fn compare(
    cluster: Cluster,
    jobs: &[TraceJob],
    options: &CompareOptions,
    progress: &mut dyn FnMut(PlacementPolicy, Progress),
) -> Result<Comparison, SimError> {
    let topo = cluster.topology().clone();
    let slowdown = options.slowdown.resolve(&topo)?.levels().to_vec();
    let cluster_gpus = cluster.total_capacity().gpus;
    let (shadow, own) =
        shadow_replay(cluster.clone(), jobs, options, &mut |p| progress(PlacementPolicy::Trainyard, p))?;
    let mut replays = vec![own];
    for policy in options.baselines() {
        replays.push(replay_policy(cluster.clone(), jobs, options, policy, &mut |p| progress(policy, p))?);
    }
    Ok(Comparison {
        comparison_version: COMPARISON_VERSION,
        cluster: topo.name().to_string(),
        cluster_hosts: topo.host_count() as u64,
        cluster_gpus,
        levels: topo.levels().to_vec(),
        trace: String::new(),
        jobs: jobs.len() as u64,
        scheduling_policy: options.policy.name.clone(),
        backfill: options.policy.backfill.to_string(),
        estimates: match options.estimates {
            EstimateSource::Trace => "trace",
            EstimateSource::Actual => "actual",
        }
        .to_string(),
        slowdown,
        shadow,
        replays,
    })
}

/// Replays `jobs` under trainyard's placement and asks every baseline of `options`, before
/// each admission, where it would put the gang. Returns the comparison and trainyard's run.
pub fn shadow_replay(
    cluster: Cluster,
    jobs: &[TraceJob],
    options: &CompareOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<(Shadow, PolicyRun), SimError> {
    let topo = cluster.topology().clone();
    let cluster_gpus = cluster.total_capacity().gpus;
    let baselines = options.baselines();
    let mut observer = shadow::ShadowObserver::new(&cluster, jobs, &baselines);
    let mut policy = options.policy.clone();
    policy.placement = PlacementPolicy::Trainyard;
    let replay_options =
        ReplayOptions { estimates: options.estimates, slowdown: options.slowdown.clone(), ..ReplayOptions::default() };
    let result = replay_observed(cluster, policy, jobs, replay_options, progress, &mut |engine, cycle| {
        observer.observe(engine, cycle)
    })?;
    if let Some(e) = observer.error {
        return Err(e);
    }
    let mut tally = runs::SpanTally::new(&topo);
    for gang in &observer.gangs {
        let committed = gang.moved.as_ref().unwrap_or(&gang.trainyard);
        tally.add(&committed.spans, committed.depth, jobs[gang.job].gang.pods());
    }
    let run = PolicyRun::new(PlacementPolicy::Trainyard, &topo, cluster_gpus, &result, &tally);
    Ok((summary::summarise(&topo, &baselines, observer.gangs, &result.outcomes), run))
}
