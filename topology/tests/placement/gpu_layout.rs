//! GPU layouts inside hosts: classes of a layout see exactly the pods each host's groups hold,
//! allocation gives every pod GPU indices inside its group, and nothing is handed out twice.

use proptest::prelude::*;
use trainyard_topology::eligibility::HostFilter;
use trainyard_topology::{
    Cluster, DomainId, GangShape, GpuLayout, HostClass, HostId, LayoutNeed, Placement, PodSetShape, Resources,
    TopologyRequest,
};

/// `hosts` AWS p4d hosts (2 NUMA nodes x 2 PCIe switches x 2 GPUs) in one rack.
fn p4d(hosts: u32) -> Cluster {
    let yaml = format!(
        "name: p4d\nlevels: [rack, host]\ngenerate:\n  counts: [1, {hosts}]\n  node: {{gpus: 8, cpus: 96}}\n  intra_node: aws-p4d\n"
    );
    Cluster::from_yaml(&yaml, "p4d.yaml").unwrap()
}

fn gang(pods: u32, gpus: u64, layout: Option<GpuLayout>) -> GangShape {
    let set = PodSetShape { gpu_layout: layout, ..PodSetShape::new("node", pods, Resources::gpus(gpus)) };
    GangShape { sets: vec![set], topology: TopologyRequest::Unconstrained }
}

/// Places and allocates a gang in its layout's class; `None` when it does not fit.
fn start(c: &mut Cluster, shape: &GangShape) -> Option<(Placement, HostClass)> {
    let class = c.class_for(&HostFilter::default(), shape.layout_need(), None).unwrap();
    let demand = c.topology().demand(shape, None, class).unwrap();
    match c.place_demand(&demand) {
        Ok(mut p) => {
            c.allocate_placement(&mut p).expect("what placement found, allocation takes");
            Some((p, class))
        }
        Err(_) => {
            c.release_class(class);
            None
        }
    }
}

fn switch_of(c: &Cluster, host: HostId, gpu: u8) -> (i32, String) {
    let layout = c.host_layout(host).unwrap().layout();
    (layout.gpu(gpu).unwrap().numa_id, layout.switch_of(gpu).unwrap().busid.clone())
}

fn gpus_of(mask: u64) -> Vec<u8> {
    (0..64u8).filter(|g| mask & (1 << g) != 0).collect()
}

#[test]
fn a_layout_class_offers_only_whole_pods_of_its_layout() {
    let mut c = p4d(2);
    let switch2 =
        c.class_for(&HostFilter::default(), Some(LayoutNeed { gpus: 2, within: GpuLayout::Switch }), None).unwrap();
    assert_eq!(c.free_for(switch2, DomainId::ROOT).gpus, 16);
    // One 1-GPU pod on the first host breaks one switch for 2-GPU pods: 3 switches left there.
    let (p, _) = start(&mut c, &gang(1, 1, None)).unwrap();
    assert_eq!(gpus_of(p.gpus[0]).len(), 1);
    let host = c.topology().host_domain(p.hosts[0]);
    assert_eq!(c.free_for(switch2, host).gpus, 6);
    assert_eq!(c.free(host).gpus, 7, "the plain view still counts every free GPU");
    let numa4 =
        c.class_for(&HostFilter::default(), Some(LayoutNeed { gpus: 4, within: GpuLayout::Numa }), None).unwrap();
    assert_eq!(c.free_for(numa4, host).gpus, 4, "one NUMA node of that host is whole");
    c.release_placement(&p).unwrap();
    assert_eq!(c.free_for(switch2, host).gpus, 8);
    assert_eq!(c.free_for(numa4, host).gpus, 8);
    c.audit().unwrap();
}

#[test]
fn pods_of_a_layout_get_gpus_inside_one_group_and_never_twice() {
    let mut c = p4d(1);
    // Two 1-GPU pods first, on two switches' worth of GPUs at most.
    let (a, _) = start(&mut c, &gang(3, 1, None)).unwrap();
    let (b, _) = start(&mut c, &gang(2, 2, Some(GpuLayout::Switch))).unwrap();
    let host = b.hosts[0];
    for &mask in &b.gpus {
        let gpus = gpus_of(mask);
        assert_eq!(gpus.len(), 2);
        assert_eq!(switch_of(&c, host, gpus[0]), switch_of(&c, host, gpus[1]), "GPUs {gpus:?} share a switch");
    }
    let all: Vec<u64> = a.gpus.iter().chain(&b.gpus).copied().collect();
    for (i, x) in all.iter().enumerate() {
        for y in &all[i + 1..] {
            assert_eq!(x & y, 0, "a GPU is given twice");
        }
    }
    assert_eq!(c.host_gpus_taken(host).count_ones(), 7);
    // The one GPU left cannot take another 2-GPU pod, whatever the count says.
    assert!(start(&mut c, &gang(1, 2, Some(GpuLayout::Switch))).is_none());
    c.release_placement(&a).unwrap();
    c.release_placement(&b).unwrap();
    assert_eq!(c.host_gpus_taken(host), 0);
    c.audit().unwrap();
}

#[test]
fn hosts_without_a_known_layout_never_take_a_pod_that_asks_for_one() {
    let yaml = "name: mixed\nlevels: [host]\nnodes:\n  - {name: plain, gpus: 8}\n  - {name: p4d, gpus: 8, intra_node: aws-p4d}\n";
    let mut c = Cluster::from_yaml(yaml, "mixed.yaml").unwrap();
    let (p, _) = start(&mut c, &gang(2, 4, Some(GpuLayout::Numa))).unwrap();
    assert!(p.hosts.iter().all(|&h| c.topology().host_name(h) == "p4d"));
    assert!(start(&mut c, &gang(1, 4, Some(GpuLayout::Numa))).is_none(), "the plain host has no known NUMA nodes");
    // A pod without a layout still runs on the plain host, without GPU indices there.
    let (q, _) = start(&mut c, &gang(1, 4, None)).unwrap();
    assert_eq!(c.topology().host_name(q.hosts[0]), "plain");
    assert!(q.gpus.is_empty());
}

#[test]
fn bad_layouts_name_the_field_and_the_node() {
    let unknown = "name: x\nlevels: [host]\nnodes:\n  - {name: a, gpus: 8, intra_node: dgx-z}\n";
    let err = Cluster::from_yaml(unknown, "x.yaml").unwrap_err().to_string();
    assert!(err.contains("x.yaml") && err.contains("nodes[0].intra_node") && err.contains("dgx-z"), "{err}");
    let wrong = "name: x\nlevels: [host]\ngenerate:\n  counts: [2]\n  node: {gpus: 4}\n  intra_node: azure-ndv5\n";
    let err = Cluster::from_yaml(wrong, "x.yaml").unwrap_err().to_string();
    assert!(err.contains("generate.intra_node") && err.contains("8 GPUs") && err.contains("has 4"), "{err}");
}

#[test]
fn one_gang_asks_for_one_layout() {
    let mut shape = gang(2, 2, Some(GpuLayout::Switch));
    let other = PodSetShape { gpu_layout: Some(GpuLayout::Numa), ..PodSetShape::new("other", 1, Resources::gpus(4)) };
    shape.sets.push(other);
    let err = shape.validate().unwrap_err();
    assert_eq!(err.set.as_deref(), Some("other"));
    assert!(err.message.contains("same one"), "{err}");
    let none = gang(1, 0, Some(GpuLayout::Switch));
    let mut cpu = none.clone();
    cpu.sets[0].pod.cpu_milli = 1000;
    assert!(cpu.validate().unwrap_err().message.contains("1 to 64 GPUs"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Gangs with and without layouts come and go: every allocation the placement found takes,
    /// no GPU index is held twice, a host's indices add up to its GPUs in use, every pod of a
    /// layout sits inside one group, and every view matches its hosts.
    #[test]
    fn gpu_indices_stay_exact(steps in prop::collection::vec((1u32..=3, 0usize..3, 0u8..3, any::<bool>()), 1..40)) {
        let mut c = p4d(3);
        let mut running: Vec<(Placement, HostClass)> = Vec::new();
        for (pods, size, layout, end) in steps {
            if end && !running.is_empty() {
                let (p, class) = running.remove(0);
                c.release_placement(&p).unwrap();
                c.release_class(class);
                continue;
            }
            let gpus = [1u64, 2, 4][size];
            let layout = [None, Some(GpuLayout::Switch), Some(GpuLayout::Numa)][usize::from(layout)];
            // A 4-GPU pod never fits one p4d switch.
            let layout = layout.filter(|l| !(gpus == 4 && *l == GpuLayout::Switch));
            if let Some((p, class)) = start(&mut c, &gang(pods, gpus, layout)) {
                prop_assert_eq!(p.gpus.len(), p.hosts.len());
                for (&h, &mask) in p.hosts.iter().zip(&p.gpus) {
                    let g = gpus_of(mask);
                    prop_assert_eq!(g.len() as u64, gpus);
                    let groups: std::collections::BTreeSet<(i32, String)> = g.iter().map(|&x| switch_of(&c, h, x)).collect();
                    match layout {
                        Some(GpuLayout::Switch) => prop_assert_eq!(groups.len(), 1),
                        Some(GpuLayout::Numa) => prop_assert_eq!(groups.iter().map(|s| s.0).collect::<std::collections::BTreeSet<_>>().len(), 1),
                        None => {}
                    }
                }
                running.push((p, class));
            }
            for h in c.topology().hosts() {
                let masks: Vec<u64> = running.iter().flat_map(|(p, _)| p.hosts.iter().zip(&p.gpus).filter(move |(x, _)| **x == h).map(|(_, m)| *m)).collect();
                let union = masks.iter().fold(0u64, |a, m| a | m);
                prop_assert_eq!(masks.iter().map(|m| m.count_ones()).sum::<u32>(), union.count_ones(), "a GPU held twice");
                prop_assert_eq!(union, c.host_gpus_taken(h));
                prop_assert_eq!(u64::from(union.count_ones()), c.host_used(h).gpus);
            }
            prop_assert!(c.audit().is_ok(), "{:?}", c.audit());
        }
    }
}
