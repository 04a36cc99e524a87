//! The Kubernetes node list reader on realistic `kubectl get nodes` output: GKE A3 Mega, GB200 NVL72.
//!
//! Fixtures live in `tests/fixtures/k8s/`; they are made up (hashed label values, invented names) but
//! keep the shape and fields of real `kubectl get nodes -o json|yaml` and `kubectl get topology` output.

use trainyard_topology::sources::LoadedTopology;
use trainyard_topology::sources::k8s_nodes::{self, NodeListOptions};
use trainyard_topology::{DomainId, Resources, Topology};

const GKE_JSON: &str = include_str!("../fixtures/k8s/gke-a3-mega.json");
const GKE_YAML: &str = include_str!("../fixtures/k8s/gke-a3-mega.yaml");
const GB200_YAML: &str = include_str!("../fixtures/k8s/gb200-nvl72.yaml");
const BROKEN: &str = include_str!("../fixtures/k8s/broken-quantity.json");
const KUEUE_GKE: &str = include_str!("../fixtures/k8s/kueue-topology-gke.yaml");
const KUEUE_GB200: &str = include_str!("../fixtures/k8s/kueue-topology-gb200.json");

const BLOCK: &str = "cloud.google.com/gce-topology-block";
const SUBBLOCK: &str = "cloud.google.com/gce-topology-subblock";
const CLIQUE: &str = "nvidia.com/gpu.clique";
const HOSTNAME: &str = "kubernetes.io/hostname";

fn gke_options() -> NodeListOptions {
    let level_keys = k8s_nodes::level_keys_from_kueue_topology(KUEUE_GKE, "kueue-topology-gke.yaml").unwrap();
    NodeListOptions { level_keys, ..NodeListOptions::default() }
}

/// Domains of one level, by name of the level.
fn domains_at(topo: &Topology, level: &str) -> Vec<DomainId> {
    (0..topo.domain_count() as u32).map(DomainId).filter(|&d| topo.level_name(d) == level).collect()
}

#[test]
fn gke_list_keeps_ready_schedulable_labelled_nodes() {
    let loaded = k8s_nodes::parse(GKE_JSON, "gke-a3-mega.json", &gke_options()).unwrap();
    assert_eq!(loaded.spec.name, "gke-a3-mega.json");
    assert_eq!(loaded.spec.levels, [BLOCK, SUBBLOCK, HOSTNAME]);
    let hosts: Vec<&str> = loaded.spec.nodes.iter().map(|n| n.path[2].as_str()).collect();
    assert_eq!(
        hosts,
        [
            "gke-train-a3mega-pool-5f2c8d1e-0c7m",
            "gke-train-a3mega-pool-5f2c8d1e-5hzx",
            "gke-train-a3mega-pool-5f2c8d1e-8kwp",
            "gke-train-a3mega-pool-5f2c8d1e-9rtn",
            "gke-train-a3mega-pool-5f2c8d1e-b4vs",
            "gke-train-a3mega-pool-5f2c8d1e-g1xc",
        ]
    );
    for node in &loaded.spec.nodes {
        assert_eq!(node.capacity, Resources { gpus: 8, cpu_milli: 207_690, memory_mib: 1_827_440 });
    }
    let warnings: Vec<(&str, &str)> = loaded.warnings.iter().map(|w| (w.item.as_str(), w.message.as_str())).collect();
    assert_eq!(
        warnings,
        [
            (
                "node gke-train-default-pool-a81b27c4-3d9q",
                "no label `cloud.google.com/gce-topology-block`, `cloud.google.com/gce-topology-subblock`; node left out"
            ),
            ("node gke-train-a3mega-pool-5f2c8d1e-2fqd", "unschedulable (cordoned); left out, as Kueue does"),
            (
                "node gke-train-default-pool-a81b27c4-w8ns",
                "no label `cloud.google.com/gce-topology-block`, `cloud.google.com/gce-topology-subblock`; node left out"
            ),
            ("node gke-train-a3mega-pool-5f2c8d1e-d6jl", "not Ready (Ready is \"Unknown\"); left out, as Kueue does"),
        ]
    );

    let topo = Topology::build(&loaded.spec).unwrap();
    assert_eq!(topo.host_count(), 6);
    let blocks = domains_at(&topo, BLOCK);
    let block_gpus: Vec<u64> = blocks.iter().map(|&d| topo.capacity(d).gpus).collect();
    assert_eq!(block_gpus, [32, 16]);
    assert_eq!(domains_at(&topo, SUBBLOCK).len(), 3);
}

#[test]
fn yaml_and_json_of_one_list_agree_and_yaml_warnings_have_lines() {
    let json = k8s_nodes::parse(GKE_JSON, "nodes", &gke_options()).unwrap();
    let yaml = k8s_nodes::parse(GKE_YAML, "nodes", &gke_options()).unwrap();
    assert_eq!(json.spec, yaml.spec);
    assert_eq!(json.warnings.len(), yaml.warnings.len());
    let lines: Vec<&str> = GKE_YAML.lines().collect();
    for (j, y) in json.warnings.iter().zip(&yaml.warnings) {
        assert_eq!((&j.item, &j.message, j.line), (&y.item, &y.message, None));
        let line = y.line.expect("YAML items have lines") as usize;
        assert_eq!(lines[line - 1], "- apiVersion: v1", "line {line} should open the item of {}", y.item);
        let name = y.item.strip_prefix("node ").unwrap();
        let mut item = lines[line..].iter().take_while(|l| l.starts_with(' '));
        assert!(item.any(|l| *l == format!("    name: {name}")), "line {line} should open the item of {name}");
    }
}

#[test]
fn equal_subblock_labels_under_different_blocks_stay_apart() {
    // Give block B's subblock the label value of a subblock in block A.
    let spec = k8s_nodes::parse(GKE_JSON, "g", &gke_options()).unwrap().spec;
    let a_sub = spec.nodes[0].path[1].clone();
    let b_sub = spec.nodes[5].path[1].clone();
    assert_ne!(spec.nodes[0].path[0], spec.nodes[5].path[0]);
    let loaded = k8s_nodes::parse(&GKE_JSON.replace(&b_sub, &a_sub), "g", &gke_options()).unwrap();
    let topo = Topology::build(&loaded.spec).unwrap();
    let subblocks = domains_at(&topo, SUBBLOCK);
    assert_eq!(subblocks.len(), 3);
    let named_alike = subblocks.iter().filter(|&&d| topo.domain(d).name == a_sub).count();
    assert_eq!(named_alike, 2);
}

fn check_gb200(loaded: &LoadedTopology) {
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    assert_eq!(loaded.spec.levels, [BLOCK, SUBBLOCK, CLIQUE, HOSTNAME]);
    assert_eq!(loaded.spec.nodes.len(), 36);
    let topo = Topology::build(&loaded.spec).unwrap();
    let cliques = domains_at(&topo, CLIQUE);
    assert_eq!(cliques.len(), 2);
    for &clique in &cliques {
        assert_eq!(topo.children(clique).len(), 18, "{}", topo.path(clique));
        let capacity = topo.capacity(clique);
        assert_eq!(capacity.gpus, 72);
        assert_eq!(capacity.cpu_milli, 18 * 139_690);
        assert_eq!(capacity.memory_mib, 18 * 825_589);
        assert!(topo.children(clique).iter().all(|&h| topo.as_host(DomainId(h)).is_some()));
        assert!(topo.domain(clique).name.ends_with(".1"), "value is <clusterUUID>.<cliqueId>");
    }
    // One NVL72 rack per subblock: each clique has its own parent.
    assert_ne!(topo.parent(cliques[0]), topo.parent(cliques[1]));
    assert_eq!(topo.capacity(DomainId::ROOT).gpus, 144);
}

#[test]
fn gb200_cliques_are_nvlink_domains_of_18_hosts() {
    let options = NodeListOptions { level_keys: vec![BLOCK.into(), SUBBLOCK.into()], ..NodeListOptions::default() };
    check_gb200(&k8s_nodes::parse(GB200_YAML, "gb200-nvl72.yaml", &options).unwrap());
    // A Kueue Topology that lists the clique label itself gives the same tree.
    let level_keys = k8s_nodes::level_keys_from_kueue_topology(KUEUE_GB200, "kueue-topology-gb200.json").unwrap();
    assert_eq!(level_keys, [BLOCK, SUBBLOCK, CLIQUE, HOSTNAME]);
    let options = NodeListOptions { level_keys, ..NodeListOptions::default() };
    check_gb200(&k8s_nodes::parse(GB200_YAML, "gb200-nvl72.yaml", &options).unwrap());
}

#[test]
fn gb200_with_default_options_is_cliques_of_hosts() {
    let loaded = k8s_nodes::parse(GB200_YAML, "gb200-nvl72.yaml", &NodeListOptions::default()).unwrap();
    assert_eq!(loaded.spec.levels, [CLIQUE, HOSTNAME]);
    let topo = Topology::build(&loaded.spec).unwrap();
    assert_eq!(topo.children(DomainId::ROOT).len(), 2);
}

#[test]
fn a_broken_quantity_names_file_node_and_field() {
    let err = k8s_nodes::parse(BROKEN, "broken-quantity.json", &gke_options()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "broken-quantity.json: field `items[2].status.allocatable.memory`: node gpu-3: \"12Qi\" is not a quantity \
         (unknown suffix \"Qi\")"
    );
}
