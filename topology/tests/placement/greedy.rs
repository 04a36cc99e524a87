//! The greedy search on hand-made clusters, and its invariants on random ones.

use proptest::prelude::*;
use trainyard_topology::{
    DomainId, HostId, LevelConstraint, PlacementFailure, PlacementPolicy, PlacementRequest, Resources,
};

use crate::common::{arb_cluster, brute_fits, cluster, request};

const TWO_RACKS: &str = "name: t\nlevels: [rack, host]\ngenerate:\n  counts: [2, 2]\n  node: {gpus: 8}\n";

#[test]
fn single_pod_goes_to_the_fullest_host_that_fits() {
    let mut c = cluster(TWO_RACKS);
    c.allocate(HostId(2), Resources::gpus(6)).unwrap();
    c.allocate(HostId(1), Resources::gpus(5)).unwrap();
    let req = request(&c, 1, 2, "unconstrained");
    let p = c.place(&req).unwrap();
    assert_eq!(p.hosts, vec![HostId(2)], "host 2 has exactly 2 free: the best fit");
    assert_eq!(p.depth, 2);
}

#[test]
fn a_gang_stays_in_one_rack_when_a_rack_can_hold_it() {
    let mut c = cluster(TWO_RACKS);
    c.allocate(HostId(0), Resources::gpus(1)).unwrap();
    let req = request(&c, 2, 8, "unconstrained");
    let p = c.place(&req).unwrap();
    assert_eq!(p.per_host(), vec![(HostId(2), 1), (HostId(3), 1)]);
    assert_eq!(c.topology().level_name(p.domain), "rack");
}

#[test]
fn required_level_fails_with_a_topology_reason_when_only_a_spread_fits() {
    let mut c = cluster(TWO_RACKS);
    c.allocate(HostId(0), Resources::gpus(8)).unwrap();
    c.allocate(HostId(2), Resources::gpus(8)).unwrap();
    let req = request(&c, 2, 8, "required:rack");
    assert_eq!(
        c.place(&req).unwrap_err(),
        PlacementFailure::Topology { level: "rack".into(), pods: 2, best_domain_fit: 1 }
    );
    let spread = c.place(&request(&c, 2, 8, "preferred:rack")).unwrap();
    assert_eq!(spread.domain, DomainId::ROOT);
    assert_eq!(spread.per_host(), vec![(HostId(1), 1), (HostId(3), 1)]);
}

#[test]
fn fragmented_free_capacity_is_a_capacity_failure() {
    let mut c = cluster(TWO_RACKS);
    for h in 0..4 {
        c.allocate(HostId(h), Resources::gpus(5)).unwrap();
    }
    // 12 GPUs free in total, but 3 per host: no 4-GPU pod fits anywhere.
    assert!(matches!(c.place(&request(&c, 1, 4, "unconstrained")), Err(PlacementFailure::Capacity { .. })));
}

#[test]
fn large_gangs_fill_roomy_children_first_then_best_fit_the_rest() {
    let mut c = cluster("name: t\nlevels: [rack, host]\ngenerate:\n  counts: [1, 4]\n  node: {gpus: 8}\n");
    c.allocate(HostId(0), Resources::gpus(6)).unwrap();
    c.allocate(HostId(1), Resources::gpus(2)).unwrap();
    // 10 one-GPU pods: host 2 and 3 (8 free each) would be wasteful; expect 8 on one host,
    // then the rest on the host with exactly 2 free.
    let p = c.place(&request(&c, 10, 1, "unconstrained")).unwrap();
    assert_eq!(p.per_host(), vec![(HostId(0), 2), (HostId(2), 8)]);
}

#[test]
fn the_generated_philly_cluster_has_2490_gpus() {
    let c = cluster(
        "name: philly\nlevels: [rack, host]\ngenerate:\n  counts: [39, 8]\n  node: {gpus: 8}\n  total_gpus: 2490\n",
    );
    assert_eq!(c.total_capacity().gpus, 2490);
    assert_eq!(c.topology().host_count(), 312);
}

proptest! {
    #[test]
    fn placement_is_whole_valid_lowest_and_complete(
        (mut c, _) in arb_cluster(), pods in 1u32..=10, gpus in 1u64..=8, top in 0u8..=4, required in any::<bool>(),
    ) {
        let topo = c.topology().clone();
        let top = top.min(topo.host_depth());
        let constraint = LevelConstraint { top_depth: if required { top } else { 0 }, preferred_depth: None, slice: None };
        let req = PlacementRequest::new(pods, Resources::gpus(gpus), constraint);
        let fits = brute_fits(&c, gpus);
        let lowest_fitting_depth = (0..topo.domain_count())
            .filter(|&d| fits[d] >= u64::from(pods) && topo.depth(DomainId(d as u32)) >= constraint.top_depth)
            .map(|d| topo.depth(DomainId(d as u32)))
            .max();
        let before: Vec<Resources> = topo.hosts().map(|h| c.host_free(h)).collect();
        match c.place_with(PlacementPolicy::Greedy, &req) {
            Ok(mut p) => {
                prop_assert_eq!(p.hosts.len(), pods as usize);
                prop_assert_eq!(Some(p.depth), lowest_fitting_depth);
                for &h in &p.hosts {
                    prop_assert_eq!(topo.ancestor_at(topo.host_domain(h), p.depth), p.domain);
                }
                // The whole gang can be allocated: no host goes negative.
                c.allocate_placement(&mut p).unwrap();
                c.release_placement(&p).unwrap();
            }
            Err(_) => prop_assert_eq!(lowest_fitting_depth, None, "greedy missed a domain that fits"),
        }
        let after: Vec<Resources> = topo.hosts().map(|h| c.host_free(h)).collect();
        prop_assert_eq!(before, after);
    }

    #[test]
    fn aggregates_always_equal_the_sum_of_hosts((mut c, _) in arb_cluster(), ops in prop::collection::vec((0usize..12, 0u64..=8, any::<bool>()), 0..40)) {
        let hosts = c.topology().host_count();
        for (h, amount, alloc) in ops {
            let host = HostId((h % hosts) as u32);
            let r = Resources::gpus(amount);
            // Errors are fine (they must leave state untouched); successes must keep sums exact.
            let _ = if alloc { c.allocate(host, r) } else { c.release(host, r) };
            let sum: u64 = c.topology().hosts().map(|h| c.host_free(h).gpus).sum();
            prop_assert_eq!(c.total_free().gpus, sum);
            for h in c.topology().hosts() {
                prop_assert!(c.host_free(h).gpus <= c.topology().host_capacity(h).gpus);
            }
        }
    }
}
