//! TPU slices through the gang model: tori in the cluster description, slices placed as boxes of
//! whole free hosts, all or none, inside the gang's domain; and the errors for shapes the cluster
//! can never hold.

use std::collections::BTreeSet;

use proptest::prelude::*;
use trainyard_topology::torus::SliceShape;
use trainyard_topology::{
    Cluster, Demand, DomainId, Error, GangShape, HostClass, HostId, PlacementFailure, PodSetShape, Resources,
    TopologyRequest,
};

/// Two blocks; block-0 has two static 2x2x4 pools (GKE node pools), block-1 one 4x4x4 torus of
/// sixteen hosts. Every host has four chips.
const TPU: &str = "\
name: tpu
levels: [block, pool, host]
nodes:
";

fn tpu_cluster() -> Cluster {
    let mut yaml = TPU.to_string();
    let mut add = |block: &str, pool: &str, hosts: usize| {
        for i in 0..hosts {
            yaml.push_str(&format!(
                "  - {{name: {pool}-h{i}, at: {{block: {block}, pool: {pool}}}, gpus: 4, cpus: 200, memory_gib: 400, flavor: tpu-v5p}}\n"
            ));
        }
    };
    add("block-0", "pool-a", 4);
    add("block-0", "pool-b", 4);
    add("block-1", "cube", 16);
    yaml.push_str(
        "tori:\n  - {level: pool, torus: \"2x2x4:host=2x2x1\", domains: [pool-a, pool-b]}\n  - {level: pool, torus: \"4x4x4:host=2x2x1\", domains: [cube]}\n",
    );
    Cluster::from_yaml(&yaml, "tpu.yaml").unwrap()
}

fn chip_pod() -> Resources {
    Resources { gpus: 4, cpu_milli: 1000, memory_mib: 1024 }
}

fn tpu_shape(pods: u32, shape: &str, topology: TopologyRequest) -> GangShape {
    let set = PodSetShape { tpu: Some(shape.parse().unwrap()), ..PodSetShape::new("node", pods, chip_pod()) };
    GangShape { sets: vec![set], topology }
}

fn demand(c: &Cluster, shape: &GangShape) -> Result<Demand, Error> {
    c.topology().demand(shape, None, HostClass::DEFAULT)
}

/// The slices of a placement: its hosts cut into runs of `per_slice`.
fn slices(hosts: &[HostId], per_slice: usize) -> Vec<Vec<HostId>> {
    hosts.chunks(per_slice).map(<[HostId]>::to_vec).collect()
}

/// Whether `hosts` are exactly the blocks of one box of `shape` (some orientation) on one torus.
fn is_box(c: &Cluster, hosts: &[HostId], shape: &SliceShape) -> bool {
    let topo = c.topology();
    let positions: Vec<(DomainId, Vec<u32>)> = hosts.iter().map(|&h| topo.torus_position(h).unwrap()).collect();
    let torus = positions[0].0;
    if positions.iter().any(|(d, _)| *d != torus) {
        return false;
    }
    let spec = topo.torus(torus).unwrap();
    // The box's extent along each dimension, allowing wrap: the number of distinct coordinates.
    let rank = spec.rank();
    let extent: Vec<u32> = (0..rank)
        .map(|i| {
            let distinct: BTreeSet<u32> = positions.iter().map(|(_, p)| p[i]).collect();
            distinct.len() as u32 * spec.host_block[i]
        })
        .collect();
    let mut want = shape.0.clone();
    let mut got = extent.clone();
    want.sort_unstable();
    got.sort_unstable();
    let blocks: u64 = extent.iter().zip(&spec.host_block).map(|(e, b)| u64::from(e / b)).product();
    want == got && blocks == hosts.len() as u64
}

#[test]
fn two_slices_take_two_whole_pools() {
    let mut c = tpu_cluster();
    let shape = tpu_shape(8, "2x2x4", TopologyRequest::Unconstrained);
    let d = demand(&c, &shape).unwrap();
    let Demand::Tpu(t) = &d else { panic!("a TPU set is a TPU demand: {d:?}") };
    assert_eq!((t.hosts_per_slice, t.slices()), (4, 2));
    let p = c.place_demand(&d).unwrap();
    assert_eq!(p.hosts.len(), 8);
    let pools: BTreeSet<String> =
        p.hosts.iter().map(|&h| c.topology().path(c.topology().parent(c.topology().host_domain(h)).unwrap())).collect();
    assert_eq!(pools.len(), 2, "each slice fills one pool: {pools:?}");
    for slice in slices(&p.hosts, 4) {
        assert!(is_box(&c, &slice, &"2x2x4".parse().unwrap()));
    }
    // Pools are fuller than the cube (equal free chips go to the first), so the cube stays whole.
    assert!(p.hosts.iter().all(|&h| !c.topology().host_name(h).starts_with("cube")));
}

#[test]
fn a_busy_host_breaks_its_pool_and_the_cube_takes_the_slice() {
    let mut c = tpu_cluster();
    let busy = c.topology().hosts().find(|&h| c.topology().host_name(h) == "pool-a-h2").unwrap();
    c.allocate(busy, Resources { gpus: 1, ..Resources::ZERO }).unwrap();
    let shape = tpu_shape(8, "2x2x4", TopologyRequest::Unconstrained);
    let p = c.place_demand(&demand(&c, &shape).unwrap()).unwrap();
    assert!(!p.hosts.iter().any(|h| c.topology().host_name(*h).starts_with("pool-a")));
    assert!(p.hosts.iter().any(|h| c.topology().host_name(*h).starts_with("cube")));
    // Both slices in block-0 cannot be had now: pool-b is the only whole pool there.
    let within = tpu_shape(8, "2x2x4", TopologyRequest::Required("block".into()));
    let d = demand(&c, &within).unwrap();
    let p = c.place_demand(&d).unwrap();
    assert!(p.hosts.iter().all(|h| c.topology().host_name(*h).starts_with("cube")), "block-1 holds both");
    let too_many = tpu_shape(20, "2x2x4", TopologyRequest::Required("block".into()));
    match c.place_demand(&demand(&c, &too_many).unwrap()) {
        Err(PlacementFailure::Slices { slices: 5, placed, .. }) => assert!(placed < 5),
        other => panic!("five slices never fit in one block: {other:?}"),
    }
}

#[test]
fn shapes_the_cluster_cannot_hold_are_errors_naming_the_set() {
    let c = tpu_cluster();
    let err = demand(&c, &tpu_shape(6, "2x2x4", TopologyRequest::Unconstrained)).unwrap_err();
    assert!(err.to_string().contains("pod set \"node\": 6 pods do not make whole TPU slices of 2x2x4"), "{err}");
    let err = demand(&c, &tpu_shape(4, "8x8x8", TopologyRequest::Unconstrained)).unwrap_err();
    assert!(err.to_string().contains("fits no torus"), "{err}");
    let err = demand(&c, &tpu_shape(1, "1x1x1", TopologyRequest::Unconstrained)).unwrap_err();
    assert!(err.to_string().contains("smaller than a host"), "{err}");
    let gpu = Cluster::from_yaml(
        "name: g\nlevels: [rack, host]\ngenerate: {counts: [2, 2], node: {gpus: 8, cpus: 8}}\n",
        "g.yaml",
    )
    .unwrap();
    let err = demand(&gpu, &tpu_shape(4, "2x2x4", TopologyRequest::Unconstrained)).unwrap_err();
    assert!(err.to_string().contains("without TPU tori"), "{err}");
}

#[test]
fn a_torus_must_hold_one_host_per_block_of_its_chips() {
    let short = "name: t\nlevels: [pool, host]\ngenerate: {counts: [1, 3], node: {gpus: 4, cpus: 8}}\ntori:\n  - {level: pool, torus: \"2x2x4:host=2x2x1\"}\n";
    let err = Cluster::from_yaml(short, "t.yaml").unwrap_err().to_string();
    assert!(err.contains("t.yaml: line 5: field `tori[0].torus`") && err.contains("has 3 hosts"), "{err}");
    let chips = "name: t\nlevels: [pool, host]\ngenerate: {counts: [1, 4], node: {gpus: 8, cpus: 8}}\ntori:\n  - {level: pool, torus: \"2x2x4:host=2x2x1\"}\n";
    let err = Cluster::from_yaml(chips, "t.yaml").unwrap_err().to_string();
    assert!(err.contains("has 8 chips"), "{err}");
    let level = "name: t\nlevels: [pool, host]\ngenerate: {counts: [1, 4], node: {gpus: 4, cpus: 8}}\ntori:\n  - {level: host, torus: \"2x2x4:host=2x2x1\"}\n";
    let err = Cluster::from_yaml(level, "t.yaml").unwrap_err().to_string();
    assert!(err.contains("field `tori[0].level`"), "{err}");
    let shape = "name: t\nlevels: [pool, host]\ngenerate: {counts: [1, 4], node: {gpus: 4, cpus: 8}}\ntori:\n  - {level: pool, torus: \"2x2xq\"}\n";
    let err = Cluster::from_yaml(shape, "t.yaml").unwrap_err().to_string();
    assert!(err.contains("field `tori[0].torus`"), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever is busy: every slice is a box of the asked shape on one torus, of hosts that had
    /// room, no host twice, all slices or none, inside the required block.
    #[test]
    fn slices_are_whole_boxes_of_free_hosts(
        busy in proptest::collection::vec(0usize..24, 0..10),
        slices_wanted in 1u32..5,
        shape in prop_oneof![Just("2x2x4"), Just("2x2x2"), Just("4x4x4"), Just("2x4x4")],
        in_block in any::<bool>(),
    ) {
        let mut c = tpu_cluster();
        let hosts: Vec<HostId> = c.topology().hosts().collect();
        for &b in &busy {
            let _ = c.allocate(hosts[b], Resources { gpus: 1, ..Resources::ZERO });
        }
        let topology = if in_block { TopologyRequest::Required("block".into()) } else { TopologyRequest::Unconstrained };
        let shape_text = shape;
        let slice: SliceShape = shape_text.parse().unwrap();
        let per_slice = (slice.chips() / 4) as u32;
        let gang = tpu_shape(per_slice * slices_wanted, shape_text, topology);
        let d = demand(&c, &gang).unwrap();
        let free_before: Vec<Resources> = hosts.iter().map(|&h| c.host_free(h)).collect();
        match c.place_demand(&d) {
            Ok(mut p) => {
                prop_assert_eq!(p.hosts.len() as u32, per_slice * slices_wanted);
                let distinct: BTreeSet<HostId> = p.hosts.iter().copied().collect();
                prop_assert_eq!(distinct.len(), p.hosts.len());
                for &h in &p.hosts {
                    prop_assert!(free_before[h.0 as usize].covers(&chip_pod()));
                }
                for s in slices(&p.hosts, per_slice as usize) {
                    prop_assert!(is_box(&c, &s, &slice), "not a {} box: {:?}", shape_text, s);
                }
                if in_block {
                    let topo = c.topology();
                    let blocks: BTreeSet<DomainId> = p.hosts.iter().map(|&h| topo.ancestor_at(topo.host_domain(h), 1)).collect();
                    prop_assert_eq!(blocks.len(), 1);
                }
                c.allocate_placement(&mut p).unwrap();
            }
            Err(PlacementFailure::Slices { slices, placed, .. }) => {
                prop_assert_eq!(slices, slices_wanted);
                prop_assert!(placed < slices_wanted);
            }
            Err(other) => prop_assert!(false, "unexpected failure {:?}", other),
        }
    }
}
