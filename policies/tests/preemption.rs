//! Preemption scenarios with exact outcomes, and its invariants on random workloads.

use proptest::prelude::*;
use trainyard_policies::{BackfillMode, Cycle, Engine, GangId, GangRequest, PolicyConfig, PreemptionRules, Submitted};
use trainyard_topology::{Cluster, GangShape, HostId, Resources};

/// Two racks of two 8-GPU hosts.
fn cluster() -> Cluster {
    Cluster::from_yaml("name: t\nlevels: [rack, host]\ngenerate:\n  counts: [2, 2]\n  node: {gpus: 8}\n", "t.yaml")
        .unwrap()
}

fn engine(backfill: BackfillMode, checkpoint: Option<u64>) -> Engine {
    let mut p = PolicyConfig::builtin("easy-backfill").unwrap();
    p.backfill = backfill;
    let mut e = Engine::new(cluster(), p);
    e.set_preemption(PreemptionRules { within_queue: true, reclaim: false, checkpoint_interval_s: checkpoint });
    e
}

fn gang(id: u64, priority: i32, submit: u64, pods: u32, gpus: u64, topology: &str) -> GangRequest {
    GangRequest {
        id: GangId(id),
        queue: "team".into(),
        priority,
        submit,
        shape: GangShape::single(pods, Resources::gpus(gpus), topology.parse().unwrap()),
        runtime_estimate: Some(1000),
        hosts: Default::default(),
        order: 0,
    }
}

fn ids(cycle: &Cycle) -> (Vec<u64>, Vec<u64>) {
    (cycle.preempted.iter().map(|p| p.victim.0).collect(), cycle.admitted.iter().map(|a| a.id.0).collect())
}

fn hosts_of(e: &Engine, id: u64) -> Vec<HostId> {
    e.running().find(|(g, _, _)| g.0 == id).map(|(_, p, _)| p.per_host().into_iter().map(|(h, _)| h).collect()).unwrap()
}

#[test]
fn a_higher_priority_gang_preempts_the_cheapest_lower_one_and_starts_at_once() {
    let mut e = engine(BackfillMode::Easy, Some(300));
    for (id, submit) in [(1, 0), (2, 100), (3, 200), (4, 250)] {
        e.submit(gang(id, 0, submit, 1, 8, "unconstrained")).unwrap();
        e.schedule(submit).unwrap();
    }
    assert_eq!(e.cluster().total_free().gpus, 0);
    e.submit(gang(9, 10, 400, 1, 8, "unconstrained")).unwrap();
    let cycle = e.schedule(400).unwrap();
    // Lost work since the last checkpoint (every 300 s): 1 ran 400 s (lost 100), 2 ran 300
    // (lost 0), 3 ran 200 (lost 200), 4 ran 150 (lost 150). Gang 2 is the cheapest victim.
    assert_eq!(ids(&cycle), (vec![2], vec![9]));
    assert_eq!((cycle.preempted[0].ran_s, cycle.preempted[0].lost_s, cycle.preempted[0].by), (300, 0, GangId(9)));
    assert_eq!(e.pending().collect::<Vec<_>>(), vec![GangId(2)], "the victim waits again");
}

#[test]
fn a_gang_that_needs_a_whole_rack_takes_its_victims_from_one_rack() {
    let mut e = engine(BackfillMode::Easy, None);
    // Four low-priority single-host gangs, one per host; rack 0's started later (less lost work).
    for (id, submit) in [(1, 0), (2, 0), (3, 500), (4, 500)] {
        e.submit(gang(id, 0, submit, 1, 8, "unconstrained")).unwrap();
        e.schedule(submit).unwrap();
    }
    let rack_of = |e: &Engine, id: u64| hosts_of(e, id)[0].0 / 2;
    let late: Vec<u32> = [3, 4].into_iter().map(|id| rack_of(&e, id)).collect();
    assert_eq!(late[0], late[1], "the two late gangs share a rack");
    e.submit(gang(9, 5, 600, 2, 8, "required:rack")).unwrap();
    let cycle = e.schedule(600).unwrap();
    let (mut victims, admitted) = ids(&cycle);
    victims.sort();
    assert_eq!((victims, admitted), (vec![3, 4], vec![9]), "both victims in the rack with the least lost work");
    assert!(hosts_of(&e, 9).iter().all(|h| h.0 / 2 == late[0]));
}

#[test]
fn no_preemption_when_the_freed_capacity_would_still_not_fit() {
    let mut e = engine(BackfillMode::Easy, None);
    // Each rack: one high-priority gang and one low-priority gang (each pair packs a rack).
    e.submit(gang(1, 10, 0, 1, 8, "unconstrained")).unwrap();
    e.submit(gang(3, 0, 0, 1, 8, "unconstrained")).unwrap();
    e.schedule(0).unwrap();
    e.submit(gang(2, 10, 1, 1, 8, "unconstrained")).unwrap();
    e.submit(gang(4, 0, 1, 1, 8, "unconstrained")).unwrap();
    e.schedule(1).unwrap();
    let racks: Vec<u32> = [1, 2].into_iter().map(|id| hosts_of(&e, id)[0].0 / 2).collect();
    assert_ne!(racks[0], racks[1], "the high-priority gangs sit in different racks");
    // Needs a whole rack: every rack keeps a gang it may not preempt, so nobody is preempted.
    e.submit(gang(9, 5, 2, 2, 8, "required:rack")).unwrap();
    let cycle = e.schedule(2).unwrap();
    assert_eq!(ids(&cycle), (vec![], vec![]));
    assert_eq!(e.running_len(), 4);
}

#[test]
fn equal_priority_never_preempts_and_a_victim_cannot_preempt_back() {
    let mut e = engine(BackfillMode::Easy, None);
    e.submit(gang(1, 0, 0, 4, 8, "unconstrained")).unwrap();
    e.schedule(0).unwrap();
    e.submit(gang(2, 0, 1, 4, 8, "unconstrained")).unwrap();
    assert_eq!(ids(&e.schedule(1).unwrap()), (vec![], vec![]));
    e.submit(gang(3, 5, 2, 4, 8, "unconstrained")).unwrap();
    assert_eq!(ids(&e.schedule(2).unwrap()), (vec![1], vec![3]));
    // Gang 1 (priority 0) cannot displace gang 3 (priority 5); gang 2 still waits too.
    assert_eq!(ids(&e.schedule(3).unwrap()), (vec![], vec![]));
    assert_eq!(e.pending_len(), 2);
}

#[test]
fn two_gangs_that_each_need_most_of_the_cluster_do_not_deadlock() {
    // The Volcano case: two gangs that would each hold part of the cluster and wait for the
    // rest. Gangs are all or nothing here, so one runs, the other waits, then runs.
    let mut e = engine(BackfillMode::None, None);
    e.submit(gang(1, 0, 0, 3, 8, "unconstrained")).unwrap();
    e.submit(gang(2, 0, 0, 3, 8, "unconstrained")).unwrap();
    assert_eq!(ids(&e.schedule(0).unwrap()), (vec![], vec![1]));
    assert_eq!(e.cluster().total_free().gpus, 8, "nothing is held by the waiting gang");
    e.finish(GangId(1), 1000).unwrap();
    assert_eq!(ids(&e.schedule(1000).unwrap()), (vec![], vec![2]));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random gangs with random priorities: every preemption admits its preemptor in the same
    /// cycle, no gang is lost or half-running, and capacity accounting stays exact.
    #[test]
    fn preemption_invariants(
        gangs in prop::collection::vec((0i32..4, 1u32..=3, prop_oneof![Just(8u64), Just(4), Just(2)], 0u8..3, 1u64..50), 1..30),
        easy in any::<bool>(),
    ) {
        let mut e = engine(if easy { BackfillMode::Easy } else { BackfillMode::None }, Some(7));
        let mut now = 0;
        let mut running: Vec<(u64, u64)> = Vec::new();
        let mut submitted = 0;
        for (i, &(priority, pods, gpus, topo, runtime)) in gangs.iter().enumerate() {
            let topology = ["unconstrained", "preferred:rack", "required:rack"][topo as usize];
            let g = gang(i as u64, priority, now, pods, gpus, topology);
            if e.submit(g).unwrap() == Submitted::Queued {
                submitted += 1;
            }
            let cycle = e.schedule(now).unwrap();
            for p in &cycle.preempted {
                prop_assert!(cycle.admitted.iter().any(|a| a.id == p.by), "preemptor {:?} not admitted", p.by);
                running.retain(|&(id, _)| id != p.victim.0);
            }
            for a in &cycle.admitted {
                running.push((a.id.0, now + runtime));
            }
            prop_assert_eq!(e.running_len() + e.pending_len(), submitted);
            let held: u64 = e.cluster().topology().hosts().map(|h| 8 - e.cluster().host_free(h).gpus).sum();
            let expected: u64 = e.running().map(|(id, p, _)| gangs[id.0 as usize].2 * p.hosts.len() as u64).sum();
            prop_assert_eq!(held, expected, "capacity held equals what running gangs use");
            now += 10;
            running.sort();
            let done: Vec<(u64, u64)> = running.iter().copied().filter(|&(_, end)| end <= now).collect();
            for (id, _) in done {
                e.finish(GangId(id), now).unwrap();
                running.retain(|&(x, _)| x != id);
                submitted -= 1;
            }
        }
    }
}

#[test]
fn explanations_name_who_to_wait_for_and_who_to_preempt() {
    let mut e = engine(BackfillMode::Easy, None);
    e.set_preemption(PreemptionRules::default());
    for (id, estimate) in [(1, 100), (2, 200), (3, 300), (4, 400)] {
        let mut g = gang(id, 0, 0, 1, 8, "unconstrained");
        g.runtime_estimate = Some(estimate);
        e.submit(g).unwrap();
    }
    e.schedule(0).unwrap();
    e.submit(gang(9, 0, 1, 2, 8, "required:rack")).unwrap();
    e.schedule(1).unwrap();
    let x = e.explain(GangId(9)).unwrap();
    use trainyard_policies::Counterfactual;
    let rack_of = |id: u64| hosts_of(&e, id)[0].0 / 2;
    assert_eq!(rack_of(1), rack_of(2), "gangs 1 and 2 fill one rack");
    assert_eq!(
        x.counterfactuals,
        vec![
            Counterfactual::WaitingFor { at: 200, last: GangId(2), gangs: 2 },
            Counterfactual::Preempting { domain: format!("rack-{}", rack_of(1)), victims: vec![GangId(1), GangId(2)] },
        ]
    );
    let text = x.to_string();
    assert!(
        text.contains("fits at t=200s when gang #2 ends") && text.contains("if gang(s) #1, #2 are preempted"),
        "{text}"
    );
    assert!(e.explain(GangId(1)).is_none(), "running gangs have nothing to explain");
}
