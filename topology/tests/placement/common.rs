//! Cluster builders and brute-force oracles shared by the placement tests.

use proptest::prelude::*;
use trainyard_topology::{
    Cluster, HostId, NodeEntry, PlacementRequest, ResolvedSpec, Resources, Topology, TopologyRequest,
};

pub fn cluster(yaml: impl AsRef<str>) -> Cluster {
    Cluster::from_yaml(yaml.as_ref(), "test.yaml").unwrap()
}

pub fn request(c: &Cluster, pods: u32, gpus: u64, topology: &str) -> PlacementRequest {
    let constraint = c.topology().resolve(&topology.parse::<TopologyRequest>().unwrap()).unwrap();
    PlacementRequest::new(pods, Resources::gpus(gpus), constraint)
}

/// A random tree with 1-3 levels above the hosts and up to 12 hosts, with random usage.
pub fn arb_cluster() -> impl Strategy<Value = (Cluster, Vec<u64>)> {
    (1usize..=3, prop::collection::vec((1u64..=8, 0u64..=8, 0u8..4, 0u8..3), 1..=12)).prop_map(|(upper, hosts)| {
        let mut levels: Vec<String> = ["block", "rack", "pod"][..upper].iter().map(|s| s.to_string()).collect();
        levels.push("host".into());
        let nodes = hosts
            .iter()
            .enumerate()
            .map(|(i, &(gpus, _, a, b))| {
                let mut path: Vec<String> =
                    [format!("a{a}"), format!("b{b}"), format!("c{}", (a + b) % 2)][..upper].to_vec();
                path.push(format!("h{i}"));
                NodeEntry { path, capacity: Resources::gpus(gpus), flavor: None }
            })
            .collect();
        let spec = ResolvedSpec { name: "rnd".into(), levels, nodes, tori: Vec::new() };
        let mut cluster = Cluster::new(Topology::build(&spec).unwrap());
        let used: Vec<u64> = hosts.iter().map(|&(gpus, used, _, _)| used.min(gpus)).collect();
        for (h, &u) in used.iter().enumerate() {
            cluster.allocate(HostId(h as u32), Resources::gpus(u)).unwrap();
        }
        (cluster, used)
    })
}

/// Pods of `gpus` that fit in each domain, by brute force over hosts.
pub fn brute_fits(c: &Cluster, gpus: u64) -> Vec<u64> {
    let topo = c.topology();
    let mut fits = vec![0u64; topo.domain_count()];
    for h in topo.hosts() {
        let n = c.host_free(h).gpus / gpus;
        let mut d = topo.host_domain(h);
        loop {
            fits[d.0 as usize] += n;
            match topo.parent(d) {
                Some(p) => d = p,
                None => break,
            }
        }
    }
    fits
}
