//! A Slurm cluster as a trainyard topology: switches from `topology.conf` (or `scontrol show
//! topology`, which prints the same `SwitchName=... Nodes=...` lines), capacities from the nodes.

use std::collections::BTreeMap;

use trainyard_topology::sources::slurm as slurm_topology;
use trainyard_topology::sources::{HostDefaults, LoadedTopology, SourceWarning};
use trainyard_topology::{NodeEntry, ResolvedSpec, Resources};

use crate::nodes::NodeInfo;

/// The cluster trainyard plans for: every usable node with its CPUs, memory and GPUs (GPU type as
/// flavor), placed under its switches when `topology` is given, else directly under the cluster.
/// Nodes that are down or drained, and switch members Slurm does not report, are left out with a
/// warning; a node missing from the switch tree is an error, since its place is unknown.
pub fn import(
    cluster_name: &str,
    nodes: &[NodeInfo],
    topology: Option<(&str, &str)>,
) -> Result<LoadedTopology, trainyard_topology::Error> {
    let by_name: BTreeMap<&str, &NodeInfo> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let mut warnings = Vec::new();
    let capacity = |n: &NodeInfo| Resources { gpus: n.gpus, cpu_milli: n.cpus * 1000, memory_mib: n.memory_mib };
    let skip = |warnings: &mut Vec<SourceWarning>, source: &str, name: &str, message: String| {
        warnings.push(SourceWarning { source_name: source.into(), line: None, item: format!("node {name}"), message });
    };
    let (levels, mut entries) = match topology {
        None => {
            let entries = nodes
                .iter()
                .map(|n| NodeEntry { path: vec![n.name.clone()], capacity: capacity(n), flavor: n.gpu_type.clone() })
                .collect();
            (vec!["node".to_string()], entries)
        }
        Some((text, source)) => {
            let loaded = slurm_topology::parse(text, source, HostDefaults::default())?;
            warnings.extend(loaded.warnings);
            let mut entries = Vec::new();
            for mut entry in loaded.spec.nodes {
                let name = entry.path.last().cloned().unwrap_or_default();
                match by_name.get(name.as_str()) {
                    Some(n) => {
                        entry.capacity = capacity(n);
                        entry.flavor = n.gpu_type.clone();
                        entries.push(entry);
                    }
                    None => skip(&mut warnings, source, &name, "in the switch tree but not reported by Slurm".into()),
                }
            }
            let placed: std::collections::BTreeSet<String> =
                entries.iter().filter_map(|e| e.path.last().cloned()).collect();
            if let Some(n) = nodes.iter().find(|n| !placed.contains(&n.name)) {
                return Err(trainyard_topology::InputError::invalid(
                    source,
                    None,
                    format!("node {}", n.name),
                    "Slurm reports this node but no switch lists it",
                )
                .into());
            }
            (loaded.spec.levels, entries)
        }
    };
    entries.retain(|e| {
        let name = e.path.last().map(String::as_str).unwrap_or_default();
        let node = by_name.get(name);
        let keep = node.is_some_and(|n| n.usable());
        if !keep && let Some(n) = node {
            skip(&mut warnings, "slurm nodes", name, format!("state {}", n.state.join("+")));
        }
        keep
    });
    let spec = ResolvedSpec { name: cluster_name.to_string(), levels, nodes: entries, tori: Vec::new() };
    Ok(LoadedTopology { spec, warnings })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, state: &str) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            cpus: 4,
            memory_mib: 4000,
            gpus: 2,
            gpu_type: None,
            state: vec![state.into()],
            features: vec![],
            partitions: vec!["debug".into()],
        }
    }

    #[test]
    fn switches_place_nodes_and_down_nodes_are_left_out() {
        let nodes = vec![node("n1", "idle"), node("n2", "mixed"), node("n3", "down"), node("n4", "idle")];
        let conf = "SwitchName=s1 Nodes=n[1-2]\nSwitchName=s2 Nodes=n[3-4]\nSwitchName=top Switches=s[1-2]\n";
        let loaded = import("local", &nodes, Some((conf, "topology.conf"))).unwrap();
        let names: Vec<&str> = loaded.spec.nodes.iter().map(|n| n.path.last().unwrap().as_str()).collect();
        assert_eq!(names, vec!["n1", "n2", "n4"]);
        assert_eq!(loaded.spec.nodes[0].capacity, Resources { gpus: 2, cpu_milli: 4000, memory_mib: 4000 });
        assert!(loaded.warnings.iter().any(|w| w.item == "node n3"));
        assert!(trainyard_topology::Topology::build(&loaded.spec).is_ok());
        let stray = vec![node("n9", "idle")];
        let err = import("local", &stray, Some((conf, "topology.conf"))).unwrap_err().to_string();
        assert!(err.contains("n9"), "{err}");
        let flat = import("local", &nodes, None).unwrap();
        assert_eq!(flat.spec.nodes.len(), 3);
    }
}
