//! Helpers shared by the Slurm reader tests.

use trainyard_topology::sources::{HostDefaults, LoadedTopology, slurm};
use trainyard_topology::{DomainId, Topology};

pub fn load(text: &str) -> LoadedTopology {
    slurm::parse(text, "topology.conf", HostDefaults::default()).unwrap_or_else(|e| panic!("{e}"))
}

pub fn error(text: &str) -> String {
    slurm::parse(text, "topology.conf", HostDefaults::default()).expect_err(text).to_string()
}

pub fn paths(loaded: &LoadedTopology) -> Vec<String> {
    loaded.spec.nodes.iter().map(|n| n.path.join("/")).collect()
}

/// Domain paths of one level, in tree order.
pub fn level_paths(topo: &Topology, level: &str) -> Vec<String> {
    (0..topo.domain_count() as u32)
        .map(DomainId)
        .filter(|&d| topo.level_name(d) == level)
        .map(|d| topo.path(d))
        .collect()
}
