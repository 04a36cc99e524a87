//! The Slurm cluster as the controller sees it: what the last look at Slurm found, and the cluster
//! the Slurm scheduling loop places gangs on.
//!
//! Slurm allocates whole nodes to a job's `--nodes`, so the Slurm loop must never put two pods of
//! a gang on one host. Its cluster counts one node slot per host where memory would be, and each
//! pod takes one slot; memory is left to Slurm, which enforces `--mem` per node.

use std::collections::BTreeMap;

use trainyard_slurm::import::import;
use trainyard_slurm::{JobInfo, NodeInfo};
use trainyard_topology::{Cluster, GangShape, ResolvedSpec, Topology as Tree};

use crate::controller::deciding::scheduling_loop::{CycleStats, Decision, JobEntry, JobState, SchedulingLoop};

/// What the controller knows of its Slurm cluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlurmSnapshot {
    /// The newest job of each trainyard gang, by gang id; `None` until Slurm first answered.
    pub jobs: Option<BTreeMap<String, JobInfo>>,
    /// Why the last look at Slurm failed; `None` when it answered.
    pub unreachable: Option<String>,
    /// Gangs whose submission Slurm refused, with Slurm's message.
    pub refused: BTreeMap<String, String>,
    /// Nodes per partition (lower case), to tell a job that asks for more than its partition has.
    pub partition_nodes: BTreeMap<String, u64>,
}

impl SlurmSnapshot {
    /// Records a successful look at Slurm.
    pub fn observed(&mut self, jobs: &[JobInfo], nodes: Option<&[NodeInfo]>) {
        let mut by_gang: BTreeMap<String, JobInfo> = BTreeMap::new();
        for job in jobs {
            let Some(gang) = &job.gang else { continue };
            if by_gang.get(gang).is_none_or(|seen| seen.id < job.id) {
                by_gang.insert(gang.clone(), job.clone());
            }
        }
        self.jobs = Some(by_gang);
        self.unreachable = None;
        if let Some(nodes) = nodes {
            self.partition_nodes = partition_nodes(nodes);
        }
    }

    /// The job of `gang`, if Slurm reported one.
    pub fn job(&self, gang: &str) -> Option<&JobInfo> {
        self.jobs.as_ref()?.get(gang)
    }

    /// Nodes of `partition` (empty: the default, counted as every node), when known.
    pub fn nodes_in(&self, partition: &str) -> Option<u64> {
        if partition.is_empty() {
            return Some(self.partition_nodes.values().copied().max().unwrap_or(0)).filter(|n| *n > 0);
        }
        self.partition_nodes.get(&partition.to_ascii_lowercase()).copied()
    }

    /// trainyard's gangs by state (`running`, `pending`, ...), as Slurm last reported them.
    pub fn gang_states(&self) -> BTreeMap<String, u64> {
        let mut out: BTreeMap<String, u64> = BTreeMap::new();
        for job in self.jobs.iter().flat_map(|j| j.values()) {
            let state = serde_json::to_value(job.state).ok().and_then(|v| v.as_str().map(str::to_lowercase));
            *out.entry(state.unwrap_or_default()).or_default() += 1;
        }
        out
    }

    /// Gang ids whose job is different (state, nodes or reason) in `self` than in `before`.
    pub fn changed_gangs(&self, before: &SlurmSnapshot) -> Vec<String> {
        let (now, was) = (self.jobs.clone().unwrap_or_default(), before.jobs.clone().unwrap_or_default());
        let mut changed: Vec<String> = now
            .iter()
            .filter(|(gang, job)| was.get(*gang) != Some(*job))
            .map(|(gang, _)| gang.clone())
            .chain(was.keys().filter(|g| !now.contains_key(*g)).cloned())
            .collect();
        changed.sort();
        changed.dedup();
        changed
    }
}

fn partition_nodes(nodes: &[NodeInfo]) -> BTreeMap<String, u64> {
    let mut out: BTreeMap<String, u64> = BTreeMap::new();
    for node in nodes {
        for p in &node.partitions {
            *out.entry(p.clone()).or_default() += 1;
        }
    }
    out
}

/// The cluster the Slurm loop places on: the usable nodes under their switches, with a node slot
/// in place of memory.
pub fn slurm_cluster(name: &str, nodes: &[NodeInfo], topology: Option<&str>) -> Result<Cluster, String> {
    let source = topology.map(|text| (text, "scontrol show topology"));
    let loaded = import(name, nodes, source).map_err(|e| e.to_string())?;
    node_slot_cluster(loaded.spec).map_err(|e| e.to_string())
}

/// A cluster whose hosts each hold one node slot where memory would be (see the module docs).
pub fn node_slot_cluster(mut spec: ResolvedSpec) -> Result<Cluster, trainyard_topology::Error> {
    for node in &mut spec.nodes {
        node.capacity.memory_mib = 1;
    }
    Ok(Cluster::new(Tree::build(&spec)?))
}

/// A gang's shape as the Slurm loop charges it: one node slot per pod.
pub fn node_slot_shape(shape: &GangShape) -> GangShape {
    let mut slots = shape.clone();
    for set in &mut slots.sets {
        set.pod.memory_mib = 1;
    }
    slots
}

/// Decisions and counts of one cycle over both clusters.
pub type SplitCycle = (BTreeMap<String, Decision>, Vec<CycleStats>);

/// Runs one cycle of each loop, each over the TrainJobs of its cluster's queues (admitted ones over
/// the cluster their record names). Entries that want nothing (inactive, kept) go to both, so
/// that a loop that tracks one sees it leave.
pub fn split_cycle(
    kubernetes: &mut SchedulingLoop,
    slurm: Option<&mut SchedulingLoop>,
    entries: &[JobEntry],
    now: u64,
    slurm_missing: &str,
) -> SplitCycle {
    let k8s: Vec<JobEntry> = entries.iter().filter(|e| on_slurm(e) != Some(true)).cloned().collect();
    let hpc: Vec<JobEntry> = entries.iter().filter(|e| on_slurm(e) != Some(false)).cloned().collect();
    let (mut decisions, stats) = kubernetes.cycle(&k8s, now);
    let (slurm_decisions, slurm_stats) = slurm_cycle(slurm, &hpc, now, slurm_missing);
    decisions.extend(slurm_decisions);
    let mut all_stats = vec![stats];
    all_stats.extend(slurm_stats);
    (decisions, all_stats)
}

/// Where a TrainJob's gang runs: an admitted gang stays with the loop that placed it, whatever
/// its queue says now; `None` for one that wants nothing.
fn on_slurm(e: &JobEntry) -> Option<bool> {
    match &e.state {
        JobState::Waiting(i) => Some(i.slurm.is_some()),
        JobState::Admitted(_, record) => Some(record.slurm),
        JobState::Kept | JobState::Inactive => None,
    }
}

/// One cycle of the Slurm loop over the TrainJobs of Slurm queues (`entries` may hold others,
/// which it ignores). Without a Slurm loop yet (Slurm never answered, or its cluster could not be
/// read), waiting Slurm gangs are pending with `slurm_missing` as the reason and admitted ones keep
/// running.
pub fn slurm_cycle(
    slurm: Option<&mut SchedulingLoop>,
    entries: &[JobEntry],
    now: u64,
    slurm_missing: &str,
) -> (BTreeMap<String, Decision>, Option<CycleStats>) {
    let hpc: Vec<JobEntry> = entries.iter().filter(|e| on_slurm(e) != Some(false)).cloned().collect();
    match slurm {
        Some(looped) => {
            let (decisions, stats) = looped.cycle(&hpc, now);
            (decisions, Some(stats))
        }
        None => {
            let decisions = hpc
                .iter()
                .filter(|e| on_slurm(e) == Some(true))
                .map(|e| {
                    let decision = match e.state {
                        JobState::Waiting(_) => {
                            Decision::Pending { reason: "SlurmUnavailable".into(), message: slurm_missing.to_string() }
                        }
                        _ => Decision::Running,
                    };
                    (e.key.clone(), decision)
                })
                .collect();
            (decisions, None)
        }
    }
}
