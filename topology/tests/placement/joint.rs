//! Gangs of several pod sets: the joint search against brute force, and hand-made cases.

use proptest::prelude::*;
use trainyard_topology::{
    Cluster, HostId, JointOptions, JointRequest, LevelConstraint, NodeEntry, PlacementPolicy, PlacementRequest, PodSet,
    ResolvedSpec, Resources, SearchPath, Topology,
};

use crate::common::cluster;

fn set(name: &str, pods: u32, gpus: u64) -> PodSet {
    PodSet { name: name.into(), pods, pod: Resources::gpus(gpus), within: None, slice: None }
}

/// Every way to put the sets' pods on hosts (each set a composition), with capacity checked.
fn brute_force(c: &Cluster, req: &JointRequest) -> Option<u64> {
    let topo = c.topology();
    let hosts: Vec<HostId> = topo.hosts().collect();
    let mut best: Option<u64> = None;
    let mut free: Vec<u64> = hosts.iter().map(|&h| c.host_free(h).gpus).collect();
    let mut sets: Vec<Vec<HostId>> = vec![Vec::new(); req.sets.len()];
    #[allow(clippy::too_many_arguments)]
    fn walk(
        c: &Cluster,
        req: &JointRequest,
        s: usize,
        h: usize,
        left: u32,
        free: &mut Vec<u64>,
        sets: &mut Vec<Vec<HostId>>,
        best: &mut Option<u64>,
    ) {
        let hosts = c.topology().host_count();
        if s == req.sets.len() {
            let topo = c.topology();
            let all: Vec<HostId> = sets.iter().flatten().copied().collect();
            let depth = (0..=topo.host_depth())
                .rev()
                .find(|&d| {
                    let first = topo.ancestor_at(topo.host_domain(all[0]), d);
                    all.iter().all(|&x| topo.ancestor_at(topo.host_domain(x), d) == first)
                })
                .unwrap_or(0);
            if depth < req.constraint.top_depth {
                return;
            }
            for (set, hs) in req.sets.iter().zip(sets.iter()) {
                if let Some(w) = set.within {
                    let first = topo.ancestor_at(topo.host_domain(hs[0]), w);
                    if hs.iter().any(|&x| topo.ancestor_at(topo.host_domain(x), w) != first) {
                        return;
                    }
                }
            }
            let cost = reference_cost(c, req, sets);
            if best.is_none_or(|b| cost < b) {
                *best = Some(cost);
            }
            return;
        }
        if h == hosts {
            if left == 0 {
                let next = req.sets.get(s + 1).map(|x| x.pods).unwrap_or(0);
                walk(c, req, s + 1, 0, next, free, sets, best);
            }
            return;
        }
        let g = req.sets[s].pod.gpus;
        let max = (free[h] / g).min(u64::from(left)) as u32;
        for k in 0..=max {
            free[h] -= g * u64::from(k);
            sets[s].extend(std::iter::repeat_n(HostId(h as u32), k as usize));
            walk(c, req, s, h + 1, left - k, free, sets, best);
            let keep = sets[s].len() - k as usize;
            sets[s].truncate(keep);
            free[h] += g * u64::from(k);
        }
    }
    let first = req.sets[0].pods;
    walk(c, req, 0, 0, first, &mut free, &mut sets, &mut best);
    best
}

/// The documented cost, computed independently: each domain once, stranded GPUs per host.
fn reference_cost(c: &Cluster, req: &JointRequest, sets: &[Vec<HostId>]) -> u64 {
    let topo = c.topology();
    let m = c.cost_model();
    let mut domains: Vec<u32> = Vec::new();
    let mut used = vec![0u64; topo.host_count()];
    for (set, hs) in req.sets.iter().zip(sets) {
        for &h in hs {
            used[h.0 as usize] += set.pod.gpus;
            let mut d = Some(topo.host_domain(h));
            while let Some(x) = d.filter(|x| topo.depth(*x) > 0) {
                domains.push(x.0);
                d = topo.parent(x);
            }
        }
    }
    domains.sort_unstable();
    domains.dedup();
    let weights: u64 =
        domains.iter().map(|&d| m.weight(topo.depth(trainyard_topology::DomainId(d)), topo.host_depth())).sum();
    let stranded: u64 = topo
        .hosts()
        .filter(|h| used[h.0 as usize] > 0)
        .map(|h| m.stranded_per_gpu * (c.host_free(h).gpus - used[h.0 as usize]))
        .sum();
    weights + stranded
}

fn arb_small() -> impl Strategy<Value = Cluster> {
    prop::collection::vec((1u64..=4, 0u64..=2, 0u8..2, 0u8..2), 2..=5).prop_map(|hosts| {
        let nodes = hosts
            .iter()
            .enumerate()
            .map(|(i, &(gpus, _, a, b))| NodeEntry {
                path: vec![format!("a{a}"), format!("b{b}"), format!("h{i}")],
                capacity: Resources::gpus(gpus),
                flavor: None,
            })
            .collect();
        let spec = ResolvedSpec {
            name: "rnd".into(),
            levels: vec!["block".into(), "rack".into(), "host".into()],
            nodes,
            tori: Vec::new(),
        };
        let mut c = Cluster::new(Topology::build(&spec).unwrap());
        for (h, &(gpus, used, _, _)) in hosts.iter().enumerate() {
            c.allocate(HostId(h as u32), Resources::gpus(used.min(gpus))).unwrap();
        }
        c
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 120, ..ProptestConfig::default() })]

    #[test]
    fn joint_search_matches_brute_force(
        mut c in arb_small(), a in (1u32..=3, 1u64..=2), b in (1u32..=2, 1u64..=3), top in 0u8..=3, within in prop::option::of(1u8..=3),
    ) {
        let top = top.min(c.topology().host_depth());
        let mut workers = set("workers", a.0, a.1);
        workers.within = within;
        let req = JointRequest::new(
            vec![set("leader", b.0, b.1), workers],
            LevelConstraint { top_depth: top, preferred_depth: (top > 0).then_some(top), slice: None },
        );
        let optimum = brute_force(&c, &req);
        match c.place_joint(&req, &JointOptions::default()) {
            Ok(p) => {
                prop_assert_eq!(Some(p.cost), optimum, "{:?}", p);
                prop_assert_eq!(p.cost, reference_cost(&c, &req, &p.sets));
                prop_assert_eq!(p.gap(), Some(0));
                for (s, hosts) in req.sets.iter().zip(&p.sets) {
                    prop_assert_eq!(hosts.len(), s.pods as usize);
                }
            }
            Err(e) => prop_assert_eq!(optimum, None, "{:?}", e),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// The engine's exact joint path (branch and bound under a node budget, no clock) finds the
    /// brute-force optimum on small instances, proves it, and gives the same answer every time.
    #[test]
    fn the_engines_exact_joint_path_matches_brute_force(
        mut c in arb_small(), sets in prop::collection::vec((1u32..=3, 1u64..=2, prop::option::of(1u8..=3)), 2..=3),
        top in 0u8..=3,
    ) {
        let top = top.min(c.topology().host_depth());
        let sets: Vec<PodSet> = sets
            .iter()
            .enumerate()
            .map(|(i, &(pods, gpus, within))| PodSet { within, ..set(&format!("s{i}"), pods, gpus) })
            .collect();
        let req = JointRequest::new(sets, LevelConstraint { top_depth: top, preferred_depth: (top > 0).then_some(top), slice: None });
        let optimum = brute_force(&c, &req);
        let demand = trainyard_topology::Demand::Joint(std::sync::Arc::new(req.clone()));
        match c.place_demand_with(PlacementPolicy::Trainyard, &demand) {
            Ok(p) => {
                prop_assert_eq!(Some(p.cost), optimum, "{:?}", p);
                prop_assert_eq!(p.lower_bound, Some(p.cost), "small searches run to their end");
                for (k, s) in req.sets.iter().enumerate() {
                    prop_assert_eq!(p.set_hosts(k).len(), s.pods as usize);
                }
                let again = c.place_demand_with(PlacementPolicy::Trainyard, &demand).unwrap();
                prop_assert_eq!(again, p);
            }
            Err(e) => prop_assert_eq!(optimum, None, "{:?}", e),
        }
    }

    /// The MIP model and the tree search are two exact methods for one pod set: they agree.
    #[test]
    fn the_mip_agrees_with_the_tree_search_on_one_pod_set(
        mut c in arb_small(), pods in 1u32..=4, gpus in 1u64..=3, top in 0u8..=3, preferred in any::<bool>(),
    ) {
        let top = top.min(c.topology().host_depth());
        let constraint = match (top, preferred) {
            (0, _) => LevelConstraint::UNCONSTRAINED,
            (t, true) => LevelConstraint { top_depth: 0, preferred_depth: Some(t), slice: None },
            (t, false) => LevelConstraint { top_depth: t, preferred_depth: Some(t), slice: None },
        };
        let single = PlacementRequest::new(pods, Resources::gpus(gpus), constraint);
        let joint = JointRequest::new(vec![set("all", pods, gpus)], constraint);
        let tree = c.place_with(PlacementPolicy::Trainyard, &single);
        let mip = c.place_joint(&joint, &JointOptions::default());
        match (tree, mip) {
            (Ok(t), Ok(m)) => prop_assert_eq!(t.cost, m.cost, "tree {:?} mip {:?}", t, m),
            (t, m) => prop_assert_eq!(t.is_ok(), m.is_ok(), "tree {:?} mip {:?}", t, m),
        }
    }
}

#[test]
fn a_leader_joins_its_workers_rack() {
    // Rack 0 has 16 GPUs free on two hosts, rack 1 has one host with 2 free. The workers
    // (2 x 8 GPUs) need rack 0; the leader (1 GPU) alone would best-fit rack 1, but together
    // the gang stays in rack 0 only if a host there keeps a GPU: hosts have 9 GPUs.
    let mut c = cluster(
        "name: t\nlevels: [rack, host]\nnodes:\n  - {name: a0, at: {rack: r0}, gpus: 9}\n  - {name: a1, at: {rack: r0}, gpus: 9}\n  - {name: b0, at: {rack: r1}, gpus: 9}\n",
    );
    c.allocate(HostId(2), Resources::gpus(7)).unwrap();
    let req = JointRequest::new(vec![set("leader", 1, 1), set("workers", 2, 8)], LevelConstraint::UNCONSTRAINED);
    let p = c.place_joint(&req, &JointOptions::default()).unwrap();
    assert_eq!(c.topology().level_name(p.domain), "rack");
    assert_eq!(p.sets[1].len(), 2);
    assert!(p.sets[0][0].0 < 2, "the leader sits with its workers: {p:?}");
    assert!(matches!(p.path, SearchPath::Greedy | SearchPath::Exact));
    assert_eq!(p.gap(), Some(0));
}
