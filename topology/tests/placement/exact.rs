//! The exact search against a brute-force optimum, and every policy against its contract.

use proptest::prelude::*;
use trainyard_topology::{
    Cluster, DomainId, HostId, LevelConstraint, PlacementPolicy, PlacementRequest, Resources, SearchPath,
    SliceConstraint, Topology,
};

use crate::common::{arb_cluster, cluster, request};

/// Does a host assignment meet the request's level and slice rules?
fn allowed(topo: &Topology, fits: &[u64], req: &PlacementRequest, per_host: &[(HostId, u32)]) -> bool {
    let used: Vec<HostId> = per_host.iter().filter(|&&(_, k)| k > 0).map(|&(h, _)| h).collect();
    let enclosing = (0..=topo.host_depth())
        .rev()
        .find(|&depth| {
            let first = topo.ancestor_at(topo.host_domain(used[0]), depth);
            used.iter().all(|&h| topo.ancestor_at(topo.host_domain(h), depth) == first)
        })
        .unwrap_or(0);
    let c = req.constraint;
    let mut top = c.top_depth;
    if let Some(p) = c.preferred_depth.filter(|&p| p > top) {
        let held = (0..topo.domain_count() as u32)
            .map(DomainId)
            .any(|d| topo.depth(d) == p && usable_pods(topo, fits, req, d) >= u64::from(req.pods));
        if held {
            top = p;
        }
    }
    if enclosing < top {
        return false;
    }
    if let Some(s) = c.slice {
        for d in (0..topo.domain_count() as u32).map(DomainId).filter(|&d| topo.depth(d) == s.depth) {
            let inside: u32 = per_host
                .iter()
                .filter(|&&(h, _)| topo.ancestor_at(topo.host_domain(h), s.depth) == d)
                .map(|&(_, k)| k)
                .sum();
            if !inside.is_multiple_of(s.size) {
                return false;
            }
        }
    }
    true
}

/// Pods a domain can take while keeping slices whole.
fn usable_pods(topo: &Topology, fits: &[u64], req: &PlacementRequest, d: DomainId) -> u64 {
    match req.constraint.slice {
        Some(s) if topo.depth(d) <= s.depth => (0..topo.domain_count() as u32)
            .map(DomainId)
            .filter(|&x| topo.depth(x) == s.depth && topo.ancestor_at(x, topo.depth(d)) == d)
            .map(|x| fits[x.0 as usize] / u64::from(s.size) * u64::from(s.size))
            .sum(),
        _ => fits[d.0 as usize],
    }
}

/// Pods per domain by brute force (slices ignored: used only for the preferred-level rule).
fn pod_fits(c: &Cluster, pod: Resources) -> Vec<u64> {
    let topo = c.topology();
    let mut fits = vec![0u64; topo.domain_count()];
    for h in topo.hosts() {
        let n = c.host_free(h).fit_count(&pod);
        let mut d = Some(topo.host_domain(h));
        while let Some(x) = d {
            fits[x.0 as usize] += n;
            d = topo.parent(x);
        }
    }
    fits
}

/// The cheapest allowed placement's cost, by enumerating every split of the pods over hosts.
fn brute_force(c: &Cluster, req: &PlacementRequest) -> Option<u64> {
    let topo = c.topology();
    let fits = pod_fits(c, req.pod);
    let caps: Vec<u32> =
        topo.hosts().map(|h| c.host_free(h).fit_count(&req.pod).min(u64::from(req.pods)) as u32).collect();
    let mut best = None;
    let mut counts = vec![0u32; caps.len()];
    fn walk(i: usize, left: u32, caps: &[u32], counts: &mut Vec<u32>, visit: &mut dyn FnMut(&[u32])) {
        if i == caps.len() {
            if left == 0 {
                visit(counts);
            }
            return;
        }
        for k in 0..=caps[i].min(left) {
            counts[i] = k;
            walk(i + 1, left - k, caps, counts, visit);
        }
        counts[i] = 0;
    }
    walk(0, req.pods, &caps, &mut counts, &mut |counts| {
        let per_host: Vec<(HostId, u32)> =
            counts.iter().enumerate().filter(|&(_, &k)| k > 0).map(|(h, &k)| (HostId(h as u32), k)).collect();
        if allowed(topo, &fits, req, &per_host) {
            let cost = c.cost_model().cost(topo, c.free_all(), req.pod, &per_host);
            if best.is_none_or(|b| cost < b) {
                best = Some(cost);
            }
        }
    });
    best
}

/// Checks a placement against free capacity: every pod placed, no host over-committed.
fn valid(c: &Cluster, req: &PlacementRequest, per_host: &[(HostId, u32)]) -> bool {
    let placed: u32 = per_host.iter().map(|&(_, k)| k).sum();
    placed == req.pods && per_host.iter().all(|&(h, k)| c.host_free(h).fit_count(&req.pod) >= u64::from(k))
}

fn arb_request(topo_depth: u8) -> impl Strategy<Value = (u32, u64, u8, u8, Option<(u8, u32)>)> {
    (
        1u32..=6,
        prop_oneof![3 => 1u64..=4, 1 => 5u64..=8],
        0u8..=topo_depth,
        0u8..3,
        prop::option::of((1u8..=topo_depth, 1u32..=3)),
    )
}

fn constraint(topo: &Topology, top: u8, kind: u8, slice: Option<(u8, u32)>) -> LevelConstraint {
    let top = top.min(topo.host_depth());
    let slice = slice.map(|(d, size)| SliceConstraint { depth: d.min(topo.host_depth()), size });
    match kind {
        0 => LevelConstraint { slice, ..LevelConstraint::UNCONSTRAINED },
        1 if top > 0 => LevelConstraint { top_depth: 0, preferred_depth: Some(top), slice },
        _ => LevelConstraint { top_depth: top, preferred_depth: (top > 0).then_some(top), slice },
    }
}

/// A request from drawn values; slices that do not divide the gang are dropped.
fn random_request(
    topo: &Topology,
    pods: u32,
    gpus: u64,
    top: u8,
    kind: u8,
    slice: Option<(u8, u32)>,
) -> PlacementRequest {
    let mut constraint = constraint(topo, top, kind, slice);
    if constraint.slice.is_some_and(|s| !pods.is_multiple_of(s.size)) {
        constraint.slice = None;
    }
    PlacementRequest::new(pods, Resources::gpus(gpus), constraint)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn exact_path_matches_the_brute_force_optimum(
        (mut c, _) in arb_cluster(), (pods, gpus, top, kind, slice) in arb_request(4),
    ) {
        let topo = c.topology().clone();
        let req = random_request(&topo, pods, gpus, top, kind, slice);
        let optimum = brute_force(&c, &req);
        match c.place_with(PlacementPolicy::Trainyard, &req) {
            Ok(p) => {
                prop_assert!(valid(&c, &req, &p.per_host()));
                prop_assert!(allowed(&topo, &pod_fits(&c, req.pod), &req, &p.per_host()), "{:?}", p);
                prop_assert_eq!(Some(p.cost), optimum, "{:?}", p);
                prop_assert_eq!(p.lower_bound, Some(p.cost));
                prop_assert_eq!(p.gap(), Some(0));
            }
            Err(e) => prop_assert_eq!(optimum, None, "{:?}", e),
        }
    }

    #[test]
    fn every_policy_places_whole_valid_gangs_and_trainyard_is_never_costlier(
        (mut c, _) in arb_cluster(), (pods, gpus, top, kind, slice) in arb_request(4),
    ) {
        let topo = c.topology().clone();
        let req = random_request(&topo, pods, gpus, top, kind, slice);
        let constraint = req.constraint;
        let fits = pod_fits(&c, req.pod);
        let trainyard = c.place_with(PlacementPolicy::Trainyard, &req);
        for policy in PlacementPolicy::ALL {
            let placed = c.place_with(policy, &req);
            prop_assert_eq!(placed.is_ok(), trainyard.is_ok(), "{} disagrees on whether the gang fits", policy);
            let Ok(p) = placed else { continue };
            prop_assert!(valid(&c, &req, &p.per_host()), "{}: {:?}", policy, p);
            let honours_preference = policy != PlacementPolicy::FirstFit;
            if honours_preference || constraint.preferred_depth.is_none() || constraint.top_depth > 0 {
                prop_assert!(allowed(&topo, &fits, &req, &p.per_host()), "{}: {:?}", policy, p);
            }
            if constraint.preferred_depth.is_none() || constraint.top_depth > 0 || honours_preference {
                prop_assert!(trainyard.as_ref().unwrap().cost <= p.cost, "{} beat trainyard: {:?}", policy, p);
            }
            for &h in &p.hosts {
                prop_assert_eq!(topo.ancestor_at(topo.host_domain(h), p.depth), p.domain);
            }
        }
    }
}

#[test]
fn exact_search_finds_the_rack_with_fewer_hosts_when_greedy_ties() {
    // Rack 0: four hosts with 1 GPU free; rack 1: two hosts with 2 free. Both racks hold four
    // 1-GPU pods with the same free GPUs, so greedy takes the first; the exact search sees
    // that rack 1 needs two hosts instead of four.
    let mut c = cluster(
        "name: t\nlevels: [rack, host]\nnodes:\n".to_string()
            + &(0..4).map(|i| format!("  - {{name: a{i}, at: {{rack: r0}}, gpus: 8}}\n")).collect::<String>()
            + &(0..2).map(|i| format!("  - {{name: b{i}, at: {{rack: r1}}, gpus: 8}}\n")).collect::<String>(),
    );
    for h in 0..4 {
        c.allocate(HostId(h), Resources::gpus(7)).unwrap();
    }
    for h in 4..6 {
        c.allocate(HostId(h), Resources::gpus(6)).unwrap();
    }
    let req = request(&c, 4, 1, "unconstrained");
    let greedy = c.place_with(PlacementPolicy::Greedy, &req).unwrap();
    assert_eq!(greedy.per_host().len(), 4);
    let exact = c.place_with(PlacementPolicy::Trainyard, &req).unwrap();
    assert_eq!(exact.per_host(), vec![(HostId(4), 2), (HostId(5), 2)]);
    assert_eq!(exact.path, SearchPath::Exact);
    assert_eq!(exact.cost, 4096 + 2 * 1024);
    assert!(greedy.cost > exact.cost);
    assert_eq!(exact.gap(), Some(0));
}

#[test]
fn slices_stay_whole_inside_their_level() {
    // Four racks of two 8-GPU hosts; 6 pods in slices of 2 per rack, whole gang in a block.
    let mut c = cluster("name: t\nlevels: [block, rack, host]\ngenerate:\n  counts: [1, 4, 2]\n  node: {gpus: 8}\n");
    c.allocate(HostId(0), Resources::gpus(8)).unwrap(); // rack 0 holds one pod
    let topo = c.topology().clone();
    let constraint =
        LevelConstraint { top_depth: 1, preferred_depth: Some(1), slice: Some(SliceConstraint { depth: 2, size: 2 }) };
    let req = PlacementRequest::new(6, Resources::gpus(8), constraint);
    for policy in PlacementPolicy::ALL {
        let p = c.place_with(policy, &req).unwrap();
        for (rack, hosts) in [(0, [0u32, 1]), (1, [2, 3]), (2, [4, 5]), (3, [6, 7])] {
            let inside = p.hosts.iter().filter(|h| hosts.contains(&h.0)).count();
            assert!(inside.is_multiple_of(2), "{policy}: rack {rack} holds {inside} pods, a broken slice");
        }
        assert_eq!(topo.level_name(p.domain), "block");
    }
    let odd = PlacementRequest { pods: 5, ..req };
    assert!(c.place(&odd).is_err());
}

#[test]
fn every_policy_keeps_a_flavored_gang_on_its_flavor() {
    // Rack r0: two a100 hosts; rack r1: one a100 and two h100 hosts.
    let mut c = cluster(
        "name: t\nlevels: [rack, host]\nnodes:\n  - {name: a0, at: {rack: r0}, gpus: 8, flavor: a100}\n  - {name: a1, at: {rack: r0}, gpus: 8, flavor: a100}\n  - {name: a2, at: {rack: r1}, gpus: 8, flavor: a100}\n  - {name: h0, at: {rack: r1}, gpus: 8, flavor: h100}\n  - {name: h1, at: {rack: r1}, gpus: 8, flavor: h100}\n",
    );
    let topo = c.topology().clone();
    assert_eq!(topo.flavors(), ["a100", "h100"]);
    let h100 = topo.flavor_id("h100");
    let req = PlacementRequest { flavor: h100, ..request(&c, 2, 8, "unconstrained") };
    for policy in PlacementPolicy::ALL {
        let p = c.place_with(policy, &req).unwrap();
        assert!(p.hosts.iter().all(|&h| topo.host_flavor(h) == h100), "{policy}: {p:?}");
    }
    // Three h100 pods do not fit although 40 GPUs are free.
    let three = PlacementRequest { pods: 3, ..req };
    assert!(c.place(&three).is_err());
    assert!(c.place(&PlacementRequest { flavor: None, ..three }).is_ok());
}
