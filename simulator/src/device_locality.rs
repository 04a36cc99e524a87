//! What DRA devices the pods of a device-level cluster got (`--devices`): how many PCIe roots
//! each pod's devices span, and how often a CEL selector result came from the cache.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use trainyard_topology::{Cluster, Placement};

/// Pods that were given devices, by how many PCIe roots their devices sit under.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceLocality {
    /// Pods given devices.
    pub pods: u64,
    /// Devices given to them.
    pub devices: u64,
    /// Of the pods, those whose devices all sit under one PCIe root (a GPU and its NIC paired).
    pub one_root: u64,
    /// Those whose devices sit under several roots.
    pub several_roots: u64,
    /// Those whose devices publish no PCIe root.
    pub unknown_root: u64,
    /// Selector results asked for over the replay.
    pub selector_lookups: u64,
    /// Of them, the share answered from the cache (each result is evaluated once per device).
    pub selector_cache_hit_rate: f64,
}

impl DeviceLocality {
    /// Counts the pods of a gang just started on `placement`.
    pub fn observe(&mut self, cluster: &Cluster, placement: &Placement) {
        for pod in placement.devices.iter().flatten() {
            let ids: Vec<_> = pod.claims.iter().flat_map(|c| &c.results).map(|r| &r.device).collect();
            let roots: BTreeSet<Option<&str>> =
                ids.iter().map(|id| cluster.device(id).and_then(|d| d.pcie_root())).collect();
            self.pods += 1;
            self.devices += ids.len() as u64;
            match (roots.len(), roots.contains(&None)) {
                (_, true) => self.unknown_root += 1,
                (1, false) => self.one_root += 1,
                _ => self.several_roots += 1,
            }
        }
    }

    /// `Some` once a pod was counted, with the cluster's selector counts.
    pub fn finish(mut self, cluster: &Cluster) -> Option<DeviceLocality> {
        let (lookups, evaluations) = cluster.selector_counts();
        self.selector_lookups = lookups;
        let hit = lookups.saturating_sub(evaluations) as f64 / lookups.max(1) as f64;
        self.selector_cache_hit_rate = (hit * 1e4).round() / 1e4;
        (self.pods > 0).then_some(self)
    }

    /// The report's lines for it.
    pub fn render(&self) -> String {
        let share = |n: u64| 100.0 * n as f64 / self.pods.max(1) as f64;
        format!(
            "\nDRA devices ({} pods given {} devices)\n  one PCIe root {} ({:.1}%), several roots {} ({:.1}%), no root published {} ({:.1}%)\n  CEL selector results from the cache: {:.1}% of {}\n",
            self.pods,
            self.devices,
            self.one_root,
            share(self.one_root),
            self.several_roots,
            share(self.several_roots),
            self.unknown_root,
            share(self.unknown_root),
            100.0 * self.selector_cache_hit_rate,
            self.selector_lookups
        )
    }
}
