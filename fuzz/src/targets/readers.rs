//! The configuration readers: cluster descriptions (trainyard YAML, Kubernetes node lists,
//! Slurm topology.conf, Lingjun, NCCL topology XML, DRA objects), the policy, sweep files, Slurm
//! gang files and Kueue objects.

use trainyard_policies::{Engine, PolicyConfig};
use trainyard_topology::sources::k8s_nodes::{self, NodeListOptions};
use trainyard_topology::sources::{HostDefaults, lingjun, slurm};
use trainyard_topology::{Cluster, Topology};

use super::{Target, Verdict, seed, text, verdict};
use crate::mutate::Mutator;

pub(super) fn targets() -> Vec<Target> {
    vec![
        Target {
            name: "cluster-yaml",
            source: "fuzz-cluster.yaml",
            seeds: || {
                vec![
                    seed!("examples/clusters/demo.yaml"),
                    seed!("examples/clusters/listed.yaml"),
                    seed!("examples/clusters/gb200-nvl72.yaml"),
                    seed!("examples/clusters/gpu-tpu.yaml"),
                    seed!("examples/clusters/p4d-layout.yaml"),
                    seed!("examples/clusters/dra-h100.yaml"),
                    seed!("tests/fixtures/render/gke-tpu.cluster.yaml"),
                ]
            },
            generate: Some(cluster_yaml),
            run: |bytes| match text(bytes, "fuzz-cluster.yaml") {
                Ok(t) => verdict(Cluster::from_yaml(&t, "fuzz-cluster.yaml")),
                Err(v) => v,
            },
        },
        Target {
            name: "fleet-yaml",
            source: "fuzz-fleet.yaml",
            seeds: || vec![seed!("examples/clusters/fleet.yaml"), seed!("topology/tests/fixtures/fleet-inline.yaml")],
            generate: None,
            run: |bytes| match text(bytes, "fuzz-fleet.yaml") {
                Ok(t) => verdict(fleet(&t)),
                Err(v) => v,
            },
        },
        Target {
            name: "k8s-nodes",
            source: "fuzz-nodes.yaml",
            seeds: || {
                vec![
                    seed!("topology/tests/fixtures/k8s/gke-a3-mega.yaml", 2000),
                    seed!("topology/tests/fixtures/k8s/gke-a3-mega.json", 4000),
                    seed!("topology/tests/fixtures/k8s/broken-quantity.json"),
                    seed!("topology/tests/fixtures/k8s/gb200-nvl72.yaml", 600),
                ]
            },
            generate: None,
            run: |bytes| match text(bytes, "fuzz-nodes.yaml") {
                Ok(t) => verdict(
                    k8s_nodes::parse(&t, "fuzz-nodes.yaml", &NodeListOptions::default())
                        .and_then(|loaded| Topology::build(&loaded.spec)),
                ),
                Err(v) => v,
            },
        },
        Target {
            name: "slurm-topology",
            source: "fuzz-topology.conf",
            seeds: || vec![seed!("data/topologies/slurm-tree.conf"), seed!("data/topologies/slurm-block.conf")],
            generate: None,
            run: |bytes| match text(bytes, "fuzz-topology.conf") {
                Ok(t) => verdict(
                    slurm::parse(&t, "fuzz-topology.conf", HostDefaults::default())
                        .and_then(|loaded| Topology::build(&loaded.spec)),
                ),
                Err(v) => v,
            },
        },
        Target {
            name: "lingjun",
            source: "fuzz-lingjun.csv",
            seeds: || vec![seed!("data/topologies/lingjun-topo.csv", 300)],
            generate: None,
            run: |bytes| match text(bytes, "fuzz-lingjun.csv") {
                Ok(t) => verdict(
                    lingjun::parse(&t, "fuzz-lingjun.csv", HostDefaults::default())
                        .and_then(|loaded| Topology::build(&loaded.spec)),
                ),
                Err(v) => v,
            },
        },
        Target {
            name: "nccl-xml",
            source: "fuzz-topo.xml",
            seeds: || {
                vec![
                    seed!("data/topologies/intra-node/azure-ndv4-a100-topo.xml"),
                    seed!("data/topologies/intra-node/azure-ndv5-h100-topo.xml"),
                    seed!("data/topologies/intra-node/aws-p4d-24xl-a100-topo.xml"),
                ]
            },
            generate: None,
            run: |bytes| match text(bytes, "fuzz-topo.xml") {
                Ok(t) => verdict(trainyard_topology::intra_node::parse_nccl_xml(&t, "fuzz-topo.xml")),
                Err(v) => v,
            },
        },
        Target {
            name: "dra-objects",
            source: "fuzz-devices.yaml",
            seeds: || {
                vec![
                    seed!("examples/clusters/dra-h100.devices.yaml"),
                    seed!("examples/kubernetes/claim-templates.yaml"),
                    seed!("topology/tests/fixtures/dra/classes.yaml"),
                    seed!("topology/tests/fixtures/dra/slices-gpu.yaml"),
                    seed!("topology/tests/fixtures/dra/slices-nic.yaml"),
                    seed!("topology/tests/fixtures/dra/slices-partitionable.json"),
                    seed!("topology/tests/fixtures/dra/claims.yaml"),
                ]
            },
            generate: None,
            run: dra_objects,
        },
        Target {
            name: "policy-yaml",
            source: "fuzz-policy.yaml",
            seeds: || {
                vec![
                    seed!("examples/policies/easy-backfill.yaml"),
                    seed!("examples/policies/teams.yaml"),
                    seed!("examples/policies/cohorts.yaml"),
                    seed!("examples/policies/fair-share.yaml"),
                    seed!("examples/policies/gpu-tpu.yaml"),
                    seed!("examples/policies/philly-vcs.yaml"),
                ]
            },
            generate: None,
            run: policy_yaml,
        },
        Target {
            name: "sweep",
            source: "fuzz-sweep.yaml",
            seeds: || vec![seed!("examples/sweeps/helios-sizes.yaml"), seed!("tests/fixtures/sweep/indexed.yaml")],
            generate: None,
            run: |bytes| match text(bytes, "fuzz-sweep.yaml") {
                Ok(t) => verdict(trainyard_simulator::sweep::SweepSpec::parse(&t, "fuzz-sweep.yaml")),
                Err(v) => v,
            },
        },
        Target {
            name: "slurm-gang",
            source: "fuzz-gang.yaml",
            seeds: || {
                vec![
                    seed!("bridges/tests/fixtures/slurm/minimal.yaml"),
                    seed!("bridges/tests/fixtures/slurm/array.yaml"),
                    seed!("bridges/tests/fixtures/slurm/gpu_nodelist.yaml"),
                    seed!("bridges/tests/fixtures/slurm/switches.yaml"),
                ]
            },
            generate: None,
            run: |bytes| match text(bytes, "fuzz-gang.yaml") {
                Ok(t) => verdict(trainyard_bridges::slurm::parse_gang(&t, "fuzz-gang.yaml")),
                Err(v) => v,
            },
        },
        Target {
            name: "kueue",
            source: "fuzz-kueue.yaml",
            seeds: || {
                vec![
                    seed!("tests/fixtures/kueue/single-clusterqueue.yaml"),
                    seed!("tests/fixtures/kueue/cohort-borrowing.yaml"),
                    seed!("tests/fixtures/kueue/resource-groups.yaml"),
                    seed!("tests/fixtures/kueue/tas-gpu-queues.yaml"),
                ]
            },
            generate: None,
            run: kueue,
        },
    ]
}

/// A cluster YAML built from its parts: some levels, generated or listed nodes, with values
/// drawn from the small, the ordinary and the absurd.
/// A fleet file read as the CLI reads it; a member's `file` stands for the built-in cluster, as
/// no file is opened here.
fn fleet(text: &str) -> trainyard_topology::Result<Cluster> {
    use trainyard_topology::fleet::{FleetSpec, Member, resolve_fleet};
    let written = FleetSpec::from_yaml(text, "fuzz-fleet.yaml")?;
    let demo =
        trainyard_topology::ClusterSpec::from_yaml(include_str!("../../../examples/clusters/demo.yaml"), "demo.yaml")?;
    let members: Vec<Member> = written
        .clusters
        .iter()
        .map(|m| Member {
            name: m.value.name.clone(),
            spec: m.value.cluster.clone().unwrap_or_else(|| demo.clone()),
            source: "fuzz-fleet.yaml".into(),
        })
        .collect();
    let resolved = resolve_fleet(&written.name, &members, "fuzz-fleet.yaml")?;
    Cluster::from_fleet(&resolved, |_| None)
}

fn cluster_yaml(m: &mut Mutator) -> Vec<u8> {
    let names = ["block", "rack", "host", "nvlink", "zone", "", "host"];
    let depth = 1 + m.below(4);
    let levels: Vec<&str> = (0..depth).map(|_| *m.pick(&names)).collect();
    let count = |m: &mut Mutator| -> String {
        (*m.pick(&["0", "1", "2", "3", "8", "40", "100000", "4294967296", "-1", "1.5", "x"])).to_string()
    };
    let mut yaml = format!("name: fuzz\nlevels: [{}]\n", levels.join(", "));
    if m.chance(50) {
        let counts: Vec<String> =
            (0..depth.saturating_sub(if m.chance(80) { 0 } else { 1 })).map(|_| count(m)).collect();
        yaml.push_str(&format!(
            "generate:\n  counts: [{}]\n  node: {{gpus: {}, cpus: {}, memory_gib: {}}}\n",
            counts.join(", "),
            count(m),
            count(m),
            count(m)
        ));
    } else {
        yaml.push_str("nodes:\n");
        for i in 0..m.below(6) {
            let at: Vec<String> = levels[..depth - 1].iter().map(|l| format!("{l}: d{}", m.below(3))).collect();
            yaml.push_str(&format!("  - {{name: n{i}, at: {{{}}}, gpus: {}}}\n", at.join(", "), count(m)));
        }
    }
    yaml.into_bytes()
}

fn dra_objects(bytes: &[u8]) -> Verdict {
    let text = match text(bytes, "fuzz-devices.yaml") {
        Ok(t) => t,
        Err(v) => return v,
    };
    let objects = match trainyard_topology::devices::parse_objects(&text, "fuzz-devices.yaml") {
        Ok(o) => o,
        Err(e) => return Verdict::Refused(e.to_string()),
    };
    // The objects also meet a cluster, as `--devices` has them do.
    let cluster = Cluster::from_yaml(include_str!("../../../examples/clusters/dra-h100.yaml"), "dra-h100.yaml");
    match cluster {
        Ok(mut cluster) => verdict(cluster.set_devices(objects)),
        Err(e) => Verdict::Broken(format!("the shipped DRA cluster does not read: {e}")),
    }
}

fn policy_yaml(bytes: &[u8]) -> Verdict {
    let text = match text(bytes, "fuzz-policy.yaml") {
        Ok(t) => t,
        Err(v) => return v,
    };
    let config = match PolicyConfig::from_yaml(&text, "fuzz-policy.yaml") {
        Ok(c) => c,
        Err(e) => return Verdict::Refused(e.to_string()),
    };
    // Quotas in topology units resolve against a cluster, as a replay does.
    let cluster = Cluster::from_yaml(include_str!("../../../examples/clusters/demo.yaml"), "demo.yaml");
    match cluster {
        Ok(cluster) => verdict(Engine::try_new(cluster, config)),
        Err(e) => Verdict::Broken(format!("the demo cluster does not read: {e}")),
    }
}

/// Kueue objects as `import kueue` reads a file: its documents, a `List` standing for its items.
fn kueue(bytes: &[u8]) -> Verdict {
    use trainyard::kueue_import::{ImportOptions, Sourced, import};
    let text = match text(bytes, "fuzz-kueue.yaml") {
        Ok(t) => t,
        Err(v) => return v,
    };
    // As `import kueue` reads a file (`inputs::read_objects`).
    let objects: Vec<Sourced> = match trainyard_topology::input_text::yaml_objects(&text, "fuzz-kueue.yaml") {
        Ok(read) => {
            read.into_iter().map(|(line, value)| Sourced { origin: format!("fuzz-kueue.yaml:{line}"), value }).collect()
        }
        Err(e) => return Verdict::Refused(e.to_string()),
    };
    // A file that says what kind an object is holds an object: read as none, it was lost.
    let names_a_kind = text.lines().any(|l| l.trim_start().starts_with("kind:"));
    if objects.is_empty() && names_a_kind {
        return Verdict::Broken("a file naming a kind read as no object".into());
    }
    verdict(import(&objects, &ImportOptions::default()))
}
