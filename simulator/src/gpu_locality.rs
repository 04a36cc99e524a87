//! How close each pod's GPUs sat inside its host, on clusters whose hosts carry a GPU layout
//! (`intra_node` in the cluster YAML): under one PCIe switch, on one NUMA node, or spread.

use serde::{Deserialize, Serialize};
use trainyard_topology::intra_node::Locality;
use trainyard_topology::{Cluster, Placement};

/// Pods that were given GPU indices, by the innermost group holding all of their GPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuLocality {
    /// Pods given GPU indices (pods on hosts with a known layout that asked for GPUs).
    pub pods: u64,
    /// Of them, all GPUs below one PCIe switch.
    pub switch: u64,
    /// All GPUs on one NUMA node, below several switches.
    pub numa: u64,
    /// GPUs on several NUMA nodes.
    pub host: u64,
}

impl GpuLocality {
    /// Counts the pods of a gang just started on `placement`.
    pub fn observe(&mut self, cluster: &Cluster, placement: &Placement) {
        for (&host, &mask) in placement.hosts.iter().zip(&placement.gpus) {
            let Some(groups) = cluster.host_layout(host).filter(|_| mask != 0) else { continue };
            self.pods += 1;
            match groups.locality(mask) {
                Locality::Switch => self.switch += 1,
                Locality::Numa => self.numa += 1,
                Locality::Host => self.host += 1,
            }
        }
    }

    /// `Some` once a pod was counted.
    pub fn if_any(self) -> Option<GpuLocality> {
        (self.pods > 0).then_some(self)
    }

    /// The report's lines for it.
    pub fn render(&self) -> String {
        let share = |n: u64| 100.0 * n as f64 / self.pods.max(1) as f64;
        format!(
            "\nGPU layout inside hosts ({} pods given GPU indices)\n  one PCIe switch {} ({:.1}%), one NUMA node {} ({:.1}%), several NUMA nodes {} ({:.1}%)\n",
            self.pods,
            self.switch,
            share(self.switch),
            self.numa,
            share(self.numa),
            self.host,
            share(self.host)
        )
    }
}
