//! A fleet's replay, cluster by cluster: where each gang ran (the `cluster` domain of its last
//! start), and per member cluster its GPUs, the jobs it ran, their GPU-hours and waits, and its
//! utilisation over the replay.

use serde::{Deserialize, Serialize};
use trainyard_topology::{DomainId, Topology};

use crate::{Fate, JobOutcome};

/// Whether a topology is a fleet: its top level is `cluster`.
pub fn is_fleet(topo: &Topology) -> bool {
    topo.levels().first().map(String::as_str) == Some(trainyard_topology::fleet::CLUSTER_LEVEL)
}

/// The member cluster (a domain at depth 1) of the domain a gang was placed in.
pub fn member_of(topo: &Topology, domain: DomainId) -> Option<u32> {
    (topo.depth(domain) >= 1).then(|| topo.ancestor_at(domain, 1).0)
}

/// One member cluster over a replay.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterUsage {
    /// The member's name.
    pub name: String,
    /// Its GPUs.
    pub gpus: u64,
    /// Jobs that finished there (where they last started).
    pub jobs: u64,
    /// GPU-hours of those jobs' last runs.
    pub gpu_hours: f64,
    /// Those GPU-hours over the member's GPUs times the replay's span, in percent.
    pub utilisation_pct: f64,
    /// Mean wait from submission to start of those jobs, seconds.
    pub mean_wait_s: f64,
}

/// Every member, in the fleet's order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetUsage {
    /// Per member cluster.
    pub clusters: Vec<ClusterUsage>,
}

/// The usage of each member of `topo` (a fleet), from the outcomes and where each job last
/// started (`placed_in`, a member's domain id per job); `span_s` is the replay's makespan.
pub fn usage(topo: &Topology, outcomes: &[JobOutcome], placed_in: &[Option<u32>], span_s: u64) -> FleetUsage {
    let members: Vec<u32> = topo.children(DomainId(0)).to_vec();
    let mut clusters: Vec<ClusterUsage> = members
        .iter()
        .map(|&d| ClusterUsage {
            name: topo.domain(DomainId(d)).name.clone(),
            gpus: topo.capacity(DomainId(d)).gpus,
            jobs: 0,
            gpu_hours: 0.0,
            utilisation_pct: 0.0,
            mean_wait_s: 0.0,
        })
        .collect();
    let mut waits = vec![0u64; clusters.len()];
    for (outcome, member) in outcomes.iter().zip(placed_in) {
        let (Fate::Finished { start, end, .. }, Some(member)) = (&outcome.fate, member) else { continue };
        let Some(k) = members.iter().position(|d| d == member) else { continue };
        let c = &mut clusters[k];
        c.jobs += 1;
        c.gpu_hours += outcome.job.gpus() as f64 * end.saturating_sub(*start) as f64 / 3600.0;
        waits[k] += start.saturating_sub(outcome.job.submit);
    }
    for (c, wait) in clusters.iter_mut().zip(waits) {
        if c.jobs > 0 {
            c.mean_wait_s = wait as f64 / c.jobs as f64;
        }
        let available = c.gpus as f64 * span_s as f64 / 3600.0;
        if available > 0.0 {
            c.utilisation_pct = 100.0 * c.gpu_hours / available;
        }
    }
    FleetUsage { clusters }
}

/// The fleet as a text table, for the report.
pub fn table(fleet: &FleetUsage) -> String {
    let mut out = String::from("Clusters of the fleet\n");
    out.push_str(&format!(
        "  {:<16} {:>6} {:>7} {:>11} {:>12} {:>10}\n",
        "cluster", "GPUs", "jobs", "GPU-hours", "utilisation", "mean wait"
    ));
    out.push_str(&format!("  {}\n", "-".repeat(67)));
    for c in &fleet.clusters {
        out.push_str(&format!(
            "  {:<16} {:>6} {:>7} {:>11.1} {:>11.2}% {:>9.0}s\n",
            c.name, c.gpus, c.jobs, c.gpu_hours, c.utilisation_pct, c.mean_wait_s
        ));
    }
    out
}
