//! Borrowing and reclaim through the engine: exact scenarios and invariants on random work.

use proptest::prelude::*;
use trainyard_policies::{Cycle, Engine, GangId, GangRequest, PolicyConfig, Submitted};
use trainyard_topology::{Cluster, GangShape, Resources};

/// Two racks of two 8-GPU hosts (32 GPUs); queues `a` and `b` of cohort `org` share them
/// 16/16 and may borrow each other's idle quota; owners reclaim it.
fn engine(backfill: &str, nominal_a: u64) -> Engine {
    let cluster =
        Cluster::from_yaml("name: t\nlevels: [rack, host]\ngenerate:\n  counts: [2, 2]\n  node: {gpus: 8}\n", "t.yaml")
            .unwrap();
    let yaml = format!(
        "backfill: {backfill}\nqueues:\n  - {{name: org}}\n  - {{name: a, parent: org, nominal: {{gpus: {nominal_a}}}}}\n  - {{name: b, parent: org, nominal: {{gpus: {}}}}}\nundeclared_queues: reject\nfair_sharing: {{}}\npreemption: {{reclaim: true, checkpoint_interval: 10m}}\n",
        32 - nominal_a
    );
    Engine::new(cluster, PolicyConfig::from_yaml(&yaml, "p.yaml").unwrap())
}

fn gang(id: u64, queue: &str, submit: u64, pods: u32, gpus: u64, topology: &str) -> GangRequest {
    GangRequest {
        id: GangId(id),
        queue: queue.into(),
        priority: 0,
        submit,
        shape: GangShape::single(pods, Resources::gpus(gpus), topology.parse().unwrap()),
        runtime_estimate: Some(3600),
        hosts: Default::default(),
        order: 0,
    }
}

fn ids(cycle: &Cycle) -> (Vec<u64>, Vec<u64>) {
    let mut victims: Vec<u64> = cycle.preempted.iter().map(|p| p.victim.0).collect();
    victims.sort();
    (victims, cycle.admitted.iter().map(|a| a.id.0).collect())
}

fn borrowed(e: &Engine, queue: &str) -> u64 {
    e.quotas().borrowed(e.quotas().find(queue).unwrap()).gpus
}

#[test]
fn an_idle_owner_lends_and_takes_its_quota_back_the_next_cycle() {
    let mut e = engine("easy", 16);
    for id in 1..=4 {
        e.submit(gang(id, "b", 0, 1, 8, "unconstrained")).unwrap();
    }
    assert_eq!(ids(&e.schedule(0).unwrap()), (vec![], vec![1, 2, 3, 4]));
    assert_eq!(borrowed(&e, "b"), 16, "b holds all 32 GPUs, 16 of them a's");
    e.submit(gang(10, "a", 100, 1, 8, "unconstrained")).unwrap();
    let cycle = e.schedule(100).unwrap();
    assert_eq!(cycle.preempted.len(), 1, "one of b's borrowed gangs makes room");
    assert_eq!(cycle.admitted.iter().map(|a| a.id.0).collect::<Vec<_>>(), vec![10]);
    assert_eq!(borrowed(&e, "b"), 8);
    // a may reclaim up to its nominal, not beyond: its third 8-GPU gang would borrow.
    e.submit(gang(11, "a", 200, 1, 8, "unconstrained")).unwrap();
    assert_eq!(ids(&e.schedule(200).unwrap()).1, vec![11]);
    assert_eq!(borrowed(&e, "b"), 0);
    e.submit(gang(12, "a", 300, 1, 8, "unconstrained")).unwrap();
    let cycle = e.schedule(300).unwrap();
    assert_eq!(ids(&cycle), (vec![], vec![]), "b is within its own quota now: nothing to reclaim");
}

#[test]
fn reclaiming_a_whole_rack_takes_the_victims_from_one_rack() {
    let mut e = engine("easy", 16);
    for id in 1..=4 {
        e.submit(gang(id, "b", 0, 1, 8, "unconstrained")).unwrap();
    }
    e.schedule(0).unwrap();
    let rack_of =
        |e: &Engine, id: u64| e.running().find(|(g, _, _)| g.0 == id).map(|(_, p, _)| p.hosts[0].0 / 2).unwrap();
    e.submit(gang(10, "a", 100, 2, 8, "required:rack")).unwrap();
    let cycle = e.schedule(100).unwrap();
    let (victims, admitted) = ids(&cycle);
    assert_eq!(admitted, vec![10]);
    assert_eq!(victims.len(), 2);
    let rack = rack_of(&e, 10);
    let gone: Vec<u64> = (1..=4).filter(|id| !e.running().any(|(g, _, _)| g.0 == *id)).collect();
    assert_eq!(gone, victims);
    assert!((1..=4).filter(|id| !gone.contains(id)).all(|id| rack_of(&e, id) != rack), "victims all in one rack");
}

#[test]
fn a_queue_never_reclaims_beyond_its_nominal() {
    let mut e = engine("easy", 8);
    for id in 1..=4 {
        e.submit(gang(id, "b", 0, 1, 8, "unconstrained")).unwrap();
    }
    e.schedule(0).unwrap();
    // a's nominal is 8: a 16-GPU gang would borrow, so it may not preempt anyone.
    e.submit(gang(10, "a", 100, 2, 8, "unconstrained")).unwrap();
    assert_eq!(ids(&e.schedule(100).unwrap()), (vec![], vec![]));
    assert_eq!(e.running_len(), 4);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// b borrows whatever a leaves idle; when a submits work within its nominal that fits the
    /// empty cluster, its first gang runs in the very next cycle, and no queue ever exceeds
    /// what its limits allow.
    #[test]
    fn lent_capacity_comes_back_within_one_cycle(
        nominal_a in prop_oneof![Just(8u64), Just(16), Just(24)],
        borrowers in prop::collection::vec((1u32..=2, prop_oneof![Just(8u64), Just(4), Just(2)], 0u8..3), 1..12),
        owner in (1u32..=3, prop_oneof![Just(8u64), Just(4)], 0u8..3),
        easy in any::<bool>(),
    ) {
        let mut e = engine(if easy { "easy" } else { "none" }, nominal_a);
        let topology = |t: u8| ["unconstrained", "preferred:rack", "required:rack"][t as usize];
        for (i, &(pods, gpus, t)) in borrowers.iter().enumerate() {
            e.submit(gang(i as u64, "b", 0, pods, gpus, topology(t))).unwrap();
        }
        e.schedule(0).unwrap();
        prop_assert!(e.quotas().audit().is_ok());
        let (pods, gpus, t) = owner;
        let within_nominal = u64::from(pods) * gpus <= nominal_a;
        let queued = e.submit(gang(100, "a", 10, pods, gpus, topology(t))).unwrap() == Submitted::Queued;
        let cycle = e.schedule(10).unwrap();
        prop_assert!(e.quotas().audit().is_ok());
        for p in &cycle.preempted {
            prop_assert!(cycle.admitted.iter().any(|a| a.id == p.by));
        }
        if queued && within_nominal {
            prop_assert!(cycle.admitted.iter().any(|a| a.id == GangId(100)), "owner's gang waits: {:?}", e.explain(GangId(100)));
        }
        // Nothing runs beyond what it may: usage never above the limit of any queue.
        for q in e.quotas().queues() {
            prop_assert!(e.quotas().limit(q).covers(&e.quotas().usage(q)));
        }
    }
}

#[test]
fn a_queue_bound_to_a_flavor_runs_only_on_it_and_unknown_flavors_are_named() {
    let cluster = || {
        Cluster::from_yaml(
            "name: t\nlevels: [rack, host]\nnodes:\n  - {name: a0, at: {rack: r0}, gpus: 8, flavor: a100}\n  - {name: h0, at: {rack: r0}, gpus: 8, flavor: h100}\n",
            "t.yaml",
        )
        .unwrap()
    };
    let yaml = "queues:\n  - {name: team-h100, flavor: h100, nominal: {gpus: 8}}\n  - {name: team-a100, flavor: a100, nominal: {gpus: 8}}\n";
    let mut e = Engine::try_new(cluster(), PolicyConfig::from_yaml(yaml, "p.yaml").unwrap()).unwrap();
    e.submit(gang(1, "team-h100", 0, 1, 8, "unconstrained")).unwrap();
    e.submit(gang(2, "team-h100", 0, 1, 8, "unconstrained")).unwrap();
    e.submit(gang(3, "team-a100", 0, 1, 8, "unconstrained")).unwrap();
    let cycle = e.schedule(0).unwrap();
    let hosts: Vec<(u64, u32)> = cycle.admitted.iter().map(|a| (a.id.0, a.placement.hosts[0].0)).collect();
    assert_eq!(hosts, vec![(1, 1), (3, 0)], "gang 2 waits for the only h100 host");
    let bad = PolicyConfig::from_yaml("queues:\n  - {name: q, flavor: b200}\n", "p.yaml").unwrap();
    let err = Engine::try_new(cluster(), bad).err().unwrap().to_string();
    assert!(
        err.contains("queues[0].flavor") && err.contains("`b200`, which no node has (flavors: a100, h100)"),
        "{err}"
    );
}
