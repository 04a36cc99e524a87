//! Live changes to a cluster: any sequence of host changes, usage by other pods and gang
//! allocations leaves the same state as a cluster built from scratch on the end result, and
//! every sum stays equal to what its hosts hold.

use std::collections::BTreeMap;

use proptest::prelude::*;
use trainyard_topology::eligibility::{HostAttrs, HostFilter, Taint, TaintEffect, Toleration, TolerationOperator};
use trainyard_topology::{
    Cluster, DomainId, HostClass, HostId, HostSpec, LevelConstraint, PlacedSet, PlacementPolicy, PlacementRequest,
    Removal, Resources, Topology,
};

#[derive(Clone, Debug)]
enum Op {
    Add { host: u8, rack: u8, gpus: u64, tainted: bool },
    Remove { host: u8 },
    Move { host: u8, rack: u8 },
    Resize { host: u8, gpus: u64 },
    Taint { host: u8, tainted: bool },
    Ready { host: u8, ready: bool },
    Foreign { host: u8, gpus: u64 },
    ReleaseForeign { host: u8 },
    Allocate { host: u8, gpus: u64 },
    Release { host: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    let h = 0u8..8;
    prop_oneof![
        (h.clone(), 0u8..3, prop::sample::select(vec![4u64, 8]), any::<bool>())
            .prop_map(|(host, rack, gpus, tainted)| Op::Add { host, rack, gpus, tainted }),
        h.clone().prop_map(|host| Op::Remove { host }),
        (h.clone(), 0u8..3).prop_map(|(host, rack)| Op::Move { host, rack }),
        (h.clone(), prop::sample::select(vec![2u64, 4, 8])).prop_map(|(host, gpus)| Op::Resize { host, gpus }),
        (h.clone(), any::<bool>()).prop_map(|(host, tainted)| Op::Taint { host, tainted }),
        (h.clone(), any::<bool>()).prop_map(|(host, ready)| Op::Ready { host, ready }),
        (h.clone(), 1u64..6).prop_map(|(host, gpus)| Op::Foreign { host, gpus }),
        h.clone().prop_map(|host| Op::ReleaseForeign { host }),
        (h.clone(), 1u64..5).prop_map(|(host, gpus)| Op::Allocate { host, gpus }),
        h.prop_map(|host| Op::Release { host }),
    ]
}

/// What the test believes about one host.
#[derive(Clone, Debug)]
struct Known {
    id: HostId,
    rack: u8,
    gpus: u64,
    tainted: bool,
    ready: bool,
    foreign: u64,
    used: u64,
    gone: bool,
}

fn spec(name: &str, k: &Known) -> HostSpec {
    let taints = if k.tainted {
        vec![Taint { key: "maintenance".into(), value: String::new(), effect: TaintEffect::NoSchedule }]
    } else {
        Vec::new()
    };
    HostSpec {
        path: vec![format!("r{}", k.rack), name.to_string()],
        capacity: Resources::gpus(k.gpus),
        flavor: None,
        attrs: HostAttrs { node_name: name.to_string(), taints, ..HostAttrs::default() },
        ready: k.ready,
    }
}

fn tolerant() -> HostFilter {
    HostFilter {
        tolerations: vec![Toleration {
            key: "maintenance".into(),
            operator: TolerationOperator::Exists,
            ..Default::default()
        }],
        ..HostFilter::default()
    }
}

fn empty() -> Cluster {
    Cluster::new(Topology::empty("live", vec!["rack".into(), "host".into()]).unwrap())
}

/// Free capacity per domain path for a class, for comparing two clusters.
fn free_by_path(c: &Cluster, class: HostClass) -> BTreeMap<String, u64> {
    let topo = c.topology();
    let mut out = BTreeMap::new();
    for h in topo.hosts() {
        let mut d = Some(topo.host_domain(h));
        while let Some(x) = d {
            out.insert(topo.path(x), c.free_for(class, x).gpus);
            d = topo.parent(x);
        }
    }
    out
}

fn apply(c: &mut Cluster, known: &mut BTreeMap<String, Known>, op: &Op) {
    let name = |h: u8| format!("h{h}");
    match *op {
        Op::Add { host, rack, gpus, tainted } => {
            if known.contains_key(&name(host)) {
                return;
            }
            let mut k = Known { id: HostId(0), rack, gpus, tainted, ready: true, foreign: 0, used: 0, gone: false };
            k.id = c.add_host(spec(&name(host), &k)).unwrap();
            known.insert(name(host), k);
        }
        Op::Remove { host } => {
            let Some(k) = known.get_mut(&name(host)).filter(|k| !k.gone) else { return };
            if k.foreign > 0 {
                c.release_foreign(k.id, Resources::gpus(k.foreign)).unwrap();
                k.foreign = 0;
            }
            match c.remove_host(k.id).unwrap() {
                Removal::Removed => {
                    known.remove(&name(host));
                }
                Removal::Held => k.gone = true,
            }
        }
        Op::Move { host, rack } => {
            let Some(k) = known.get_mut(&name(host)).filter(|k| !k.gone) else { return };
            k.rack = rack;
            c.update_host(k.id, spec(&name(host), k)).unwrap();
        }
        Op::Resize { host, gpus } => {
            let Some(k) = known.get_mut(&name(host)).filter(|k| !k.gone) else { return };
            k.gpus = gpus;
            c.update_host(k.id, spec(&name(host), k)).unwrap();
        }
        Op::Taint { host, tainted } => {
            let Some(k) = known.get_mut(&name(host)).filter(|k| !k.gone) else { return };
            k.tainted = tainted;
            c.update_host(k.id, spec(&name(host), k)).unwrap();
        }
        Op::Ready { host, ready } => {
            let Some(k) = known.get_mut(&name(host)).filter(|k| !k.gone) else { return };
            k.ready = ready;
            c.set_ready(k.id, ready).unwrap();
        }
        Op::Foreign { host, gpus } => {
            let Some(k) = known.get_mut(&name(host)).filter(|k| !k.gone) else { return };
            k.foreign += gpus;
            c.charge_foreign(k.id, Resources::gpus(gpus)).unwrap();
        }
        Op::ReleaseForeign { host } => {
            let Some(k) = known.get_mut(&name(host)).filter(|k| k.foreign > 0) else { return };
            c.release_foreign(k.id, Resources::gpus(k.foreign)).unwrap();
            k.foreign = 0;
        }
        Op::Allocate { host, gpus } => {
            let Some(k) = known.get_mut(&name(host)) else { return };
            let free = c.host_free(k.id).gpus;
            let fits = k.ready && !k.gone && k.used + k.foreign + gpus <= k.gpus;
            assert_eq!(free >= gpus, fits, "free {free} on {host} for {gpus}: {k:?}");
            if fits {
                c.allocate(k.id, Resources::gpus(gpus)).unwrap();
                k.used += gpus;
            } else {
                assert!(c.allocate(k.id, Resources::gpus(gpus)).is_err(), "never over-committed by an allocation");
            }
        }
        Op::Release { host } => {
            let Some(k) = known.get_mut(&name(host)).filter(|k| k.used > 0) else { return };
            c.release(k.id, Resources::gpus(k.used)).unwrap();
            k.used = 0;
            if k.gone {
                assert_eq!(c.reap(), vec![k.id]);
                known.remove(&name(host));
            }
        }
    }
}

/// The cluster a fresh start on the same state builds.
fn from_scratch(known: &BTreeMap<String, Known>) -> Cluster {
    let mut c = empty();
    for (name, k) in known {
        let h = c.add_host(spec(name, &Known { ready: true, ..k.clone() })).unwrap();
        if k.used > 0 {
            let placement =
                c.recorded_placement(&[PlacedSet { pods: 1, pod: Resources::gpus(k.used) }], vec![h]).unwrap();
            c.charge_placement(&placement);
        }
        if k.foreign > 0 {
            c.charge_foreign(h, Resources::gpus(k.foreign)).unwrap();
        }
        if k.gone {
            assert_eq!(c.remove_host(h).unwrap(), Removal::Held);
        } else if !k.ready {
            c.set_ready(h, false).unwrap();
        }
    }
    c
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn live_changes_equal_a_fresh_build(ops in prop::collection::vec(op(), 1..60)) {
        let mut c = empty();
        let class = c.class_of(&tolerant()).unwrap();
        let mut known = BTreeMap::new();
        for op in &ops {
            apply(&mut c, &mut known, op);
            c.audit().map_err(|e| TestCaseError::fail(format!("after {op:?}: {e}")))?;
            // A one-pod gang's host comes off the index of hosts by free GPUs: the same host the
            // full greedy search over the tree picks (trainyard's policy is checked likewise by
            // a debug assertion inside the search).
            for gpus in [1, 3, 8] {
                let request = PlacementRequest::new(1, Resources::gpus(gpus), LevelConstraint::UNCONSTRAINED);
                let indexed = c.place_with(PlacementPolicy::Greedy, &request).map(|p| p.hosts);
                let walked = c.place_within(&request, DomainId::ROOT).map(|p| p.hosts);
                prop_assert_eq!(indexed, walked, "after {:?}, one pod of {} GPUs", op, gpus);
                let _ = c.place(&request);
            }
        }
        let mut fresh = from_scratch(&known);
        let fresh_class = fresh.class_of(&tolerant()).unwrap();
        prop_assert_eq!(c.canonical(), fresh.canonical());
        prop_assert_eq!(free_by_path(&c, HostClass::DEFAULT), free_by_path(&fresh, HostClass::DEFAULT));
        prop_assert_eq!(free_by_path(&c, class), free_by_path(&fresh, fresh_class));
        prop_assert_eq!(c.total_capacity(), fresh.total_capacity());
        prop_assert_eq!(c.topology().host_count(), fresh.topology().host_count());
    }
}
