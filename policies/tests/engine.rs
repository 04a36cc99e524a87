//! Scenario tests of the engine with exact expected outcomes.

use trainyard_policies::{
    BackfillMode, Engine, GangId, GangRequest, PendingReason, PolicyConfig, QueueConfig, Submitted, Unschedulable,
};
use trainyard_topology::{Cluster, GangShape, HostId, Resources, TopologyRequest};

/// Two racks of two 8-GPU hosts.
fn cluster() -> Cluster {
    Cluster::from_yaml("name: t\nlevels: [rack, host]\ngenerate:\n  counts: [2, 2]\n  node: {gpus: 8}\n", "t.yaml")
        .unwrap()
}

fn policy(backfill: BackfillMode, queues: &[(&str, u64)]) -> PolicyConfig {
    let mut p = PolicyConfig::builtin("easy-backfill").unwrap();
    p.backfill = backfill;
    p.queues = queues.iter().map(|&(name, nominal_gpus)| QueueConfig::flat(name, nominal_gpus)).collect();
    p
}

fn gang(id: u64, queue: &str, submit: u64, pods: u32, gpus: u64, estimate: u64) -> GangRequest {
    GangRequest {
        id: GangId(id),
        queue: queue.into(),
        priority: 0,
        submit,
        shape: GangShape::single(pods, Resources::gpus(gpus), TopologyRequest::Unconstrained),
        runtime_estimate: Some(estimate),
        hosts: Default::default(),
        order: 0,
    }
}

fn admitted(engine: &mut Engine, now: u64) -> Vec<u64> {
    engine.schedule(now).unwrap().admitted.iter().map(|a| a.id.0).collect()
}

#[test]
fn many_gangs_start_in_one_cycle_in_order() {
    let mut e = Engine::new(cluster(), policy(BackfillMode::None, &[]));
    for id in 0..5 {
        assert_eq!(e.submit(gang(id, "a", id, 1, 8, 100)).unwrap(), Submitted::Queued);
    }
    assert_eq!(admitted(&mut e, 10), vec![0, 1, 2, 3]);
    assert_eq!(e.cluster().total_free().gpus, 0);
    assert!(matches!(e.pending_status(GangId(4)).unwrap().reason, PendingReason::Capacity { .. }));
}

#[test]
fn priority_goes_before_submit_time() {
    let mut e = Engine::new(cluster(), policy(BackfillMode::None, &[]));
    e.submit(gang(1, "a", 0, 4, 8, 100)).unwrap();
    let mut urgent = gang(2, "a", 5, 4, 8, 100);
    urgent.priority = 10;
    e.submit(urgent).unwrap();
    assert_eq!(admitted(&mut e, 5), vec![2]);
}

#[test]
fn strict_fifo_blocks_everything_behind_a_gang_that_does_not_fit() {
    let mut e = Engine::new(cluster(), policy(BackfillMode::None, &[]));
    e.submit(gang(0, "a", 0, 3, 8, 100)).unwrap();
    assert_eq!(admitted(&mut e, 0), vec![0]);
    e.submit(gang(1, "a", 1, 2, 8, 100)).unwrap();
    e.submit(gang(2, "a", 2, 1, 8, 10)).unwrap();
    assert_eq!(admitted(&mut e, 2), Vec::<u64>::new());
    assert_eq!(e.pending_status(GangId(2)).unwrap().reason, PendingReason::QueuedBehind { head: GangId(1) });
}

#[test]
fn easy_backfill_starts_a_short_gang_but_not_a_long_one_on_reserved_hosts() {
    let mut e = Engine::new(cluster(), policy(BackfillMode::Easy, &[]));
    e.submit(gang(0, "a", 0, 3, 8, 100)).unwrap();
    assert_eq!(admitted(&mut e, 0), vec![0]);
    // Gang 1 needs all four hosts: it must wait for gang 0 (ends at 100).
    e.submit(gang(1, "a", 1, 4, 8, 50)).unwrap();
    // Gang 2 ends at 52, before the reservation: it may use the free host.
    e.submit(gang(2, "a", 2, 1, 8, 50)).unwrap();
    let cycle = e.schedule(2).unwrap();
    assert_eq!(cycle.admitted.iter().map(|a| (a.id.0, a.backfilled)).collect::<Vec<_>>(), vec![(2, true)]);
    assert_eq!(cycle.reservation.as_ref().map(|r| (r.holder, r.at)), Some((GangId(1), 100)));
    let status = e.pending_status(GangId(1)).unwrap();
    assert_eq!(status.reserved_at, Some(100));
    e.finish(GangId(2), 52).unwrap();
    // Gang 3 would run until 1060 on the only free host, which the reservation needs.
    e.submit(gang(3, "a", 60, 1, 8, 1000)).unwrap();
    assert_eq!(admitted(&mut e, 60), Vec::<u64>::new());
    assert_eq!(e.pending_status(GangId(3)).unwrap().reason, PendingReason::Reservation { holder: GangId(1), at: 100 });
    e.finish(GangId(0), 100).unwrap();
    assert_eq!(admitted(&mut e, 100), vec![1]);
    assert_eq!(e.pending_status(GangId(3)).unwrap().reason.to_string().split(':').next(), Some("capacity"));
}

#[test]
fn a_long_gang_backfills_onto_hosts_the_reservation_does_not_need() {
    let mut e = Engine::new(cluster(), policy(BackfillMode::Easy, &[]));
    e.submit(gang(0, "a", 0, 3, 8, 100)).unwrap();
    assert_eq!(admitted(&mut e, 0), vec![0]);
    // Gang 1 needs one rack; at 100 rack 0 is chosen, so host 3 may run past 100.
    e.submit(gang(1, "a", 1, 2, 8, 50)).unwrap();
    e.submit(gang(2, "a", 2, 1, 8, 1000)).unwrap();
    let cycle = e.schedule(2).unwrap();
    assert_eq!(cycle.reservation.as_ref().map(|r| r.hosts.clone()), Some(vec![(HostId(0), 1), (HostId(1), 1)]));
    assert_eq!(
        cycle.admitted.iter().map(|a| (a.id.0, a.placement.hosts.clone())).collect::<Vec<_>>(),
        vec![(2, vec![HostId(3)])]
    );
    e.finish(GangId(0), 100).unwrap();
    assert_eq!(admitted(&mut e, 100), vec![1]);
}

#[test]
fn a_long_backfill_gang_is_moved_off_the_reserved_hosts() {
    let mut e = Engine::new(cluster(), policy(BackfillMode::Easy, &[]));
    // Hosts 0 and 1 (rack 0) busy until 100; hosts 2 and 3 half used until 1000.
    e.submit(gang(0, "a", 0, 2, 8, 100)).unwrap();
    e.submit(gang(1, "a", 0, 2, 4, 1000)).unwrap();
    assert_eq!(admitted(&mut e, 0), vec![0, 1]);
    // Gang 2 wants a whole rack of 8-GPU pods: reserved at 100 on rack 0.
    e.submit(gang(2, "a", 1, 2, 8, 500)).unwrap();
    // Gang 3 runs long but fits in the 4 free GPUs of rack 1, off the reservation.
    e.submit(gang(3, "a", 2, 1, 4, 5000)).unwrap();
    let cycle = e.schedule(2).unwrap();
    assert_eq!(cycle.reservation.as_ref().map(|r| r.at), Some(100));
    let placed: Vec<(u64, Vec<(HostId, u32)>)> =
        cycle.admitted.iter().map(|a| (a.id.0, a.placement.per_host())).collect();
    assert_eq!(placed.len(), 1);
    assert_eq!(placed[0].0, 3);
    assert!(placed[0].1.iter().all(|(h, _)| h.0 >= 2), "gang 3 must stay off rack 0: {placed:?}");
}

#[test]
fn quota_is_never_exceeded_and_other_queues_pass() {
    let mut e = Engine::new(cluster(), policy(BackfillMode::None, &[("a", 16), ("b", 16)]));
    e.submit(gang(0, "a", 0, 2, 8, 100)).unwrap();
    e.submit(gang(1, "a", 1, 1, 8, 100)).unwrap();
    e.submit(gang(2, "b", 2, 1, 8, 100)).unwrap();
    assert_eq!(admitted(&mut e, 2), vec![0, 2]);
    assert_eq!(
        e.pending_status(GangId(1)).unwrap().reason,
        PendingReason::Quota {
            queue: "a".into(),
            requested_gpus: 8,
            used_gpus: 16,
            available_gpus: 0,
            limit: "queue `a` may use 0 more gpus within its quota, the gang needs 8".into(),
            blocked_by: "the quota of queue `a`".into(),
        }
    );
    assert_eq!(e.quotas().usage(e.quotas().find("a").unwrap()).gpus, 16);
}

#[test]
fn gangs_that_can_never_run_are_reported_not_queued() {
    let mut e = Engine::new(cluster(), policy(BackfillMode::Easy, &[("small", 8)]));
    let huge = gang(0, "a", 0, 512, 8, 10);
    assert!(matches!(e.submit(huge).unwrap(), Submitted::Unschedulable(Unschedulable::NeverFits(_))));
    let over_quota = gang(1, "small", 0, 2, 8, 10);
    assert_eq!(
        e.submit(over_quota).unwrap(),
        Submitted::Unschedulable(Unschedulable::ExceedsQuota {
            queue: "small".into(),
            requested_gpus: 16,
            nominal_gpus: 8
        })
    );
    let mut bad_level = gang(2, "a", 0, 2, 8, 10);
    bad_level.shape.topology = TopologyRequest::Required("block".into());
    assert!(matches!(e.submit(bad_level).unwrap(), Submitted::Unschedulable(Unschedulable::UnknownLevel { .. })));
    let mut too_wide_for_a_rack = gang(3, "a", 0, 3, 8, 10);
    too_wide_for_a_rack.shape.topology = TopologyRequest::Required("rack".into());
    let Submitted::Unschedulable(why) = e.submit(too_wide_for_a_rack).unwrap() else { panic!("must be rejected") };
    assert_eq!(
        why.to_string(),
        "does not fit even on the empty cluster: topology: needs 3 pods in one rack, the best rack fits 2 now"
    );
    assert_eq!(e.pending_len(), 0);
}

#[test]
fn misuse_is_an_error() {
    let mut e = Engine::new(cluster(), policy(BackfillMode::Easy, &[]));
    e.submit(gang(0, "a", 0, 1, 8, 10)).unwrap();
    assert!(e.submit(gang(0, "a", 0, 1, 8, 10)).is_err());
    assert!(e.finish(GangId(0), 5).is_err(), "not running yet");
    e.schedule(5).unwrap();
    assert!(e.schedule(4).is_err(), "time went backwards");
    e.finish(GangId(0), 15).unwrap();
    assert!(e.finish(GangId(0), 16).is_err(), "finished twice");
    assert_eq!(e.cluster().total_free().gpus, 32);
}

#[test]
fn smallest_pending_gpu_gang_skips_cpu_gangs_and_breaks_ties_by_pod_then_order() {
    let yaml = "name: t\nlevels: [rack, host]\ngenerate:\n  counts: [2, 2]\n  node: {gpus: 8, cpus: 8}\n";
    let mut e = Engine::new(Cluster::from_yaml(yaml, "t.yaml").unwrap(), policy(BackfillMode::None, &[]));
    assert_eq!(e.smallest_pending_gpu_gang(), None);
    e.submit(gang(0, "a", 0, 4, 8, 100)).unwrap();
    e.submit(gang(1, "a", 1, 2, 4, 100)).unwrap();
    // Same 8 GPUs as gang 1 but in smaller pods; gang 3 repeats gang 2's shape later.
    e.submit(gang(2, "a", 2, 4, 2, 100)).unwrap();
    e.submit(gang(3, "a", 3, 4, 2, 100)).unwrap();
    let mut cpu = gang(4, "a", 4, 1, 0, 100);
    cpu.shape.sets[0].pod = Resources { gpus: 0, cpu_milli: 1000, memory_mib: 0 };
    assert_eq!(e.submit(cpu).unwrap(), Submitted::Queued);
    assert_eq!(e.smallest_pending_gpu_gang().map(|s| (s.pods(), s.largest_pod().gpus)), Some((4, 2)));
    // Gang 0 takes every GPU; strict FIFO keeps the rest (even the CPU gang) pending.
    assert_eq!(admitted(&mut e, 5), vec![0]);
    let smallest = e.smallest_pending_gpu_gang().unwrap();
    assert_eq!((smallest.pods(), smallest.largest_pod()), (4, Resources::gpus(2)));
    e.cancel_pending(GangId(2)).unwrap();
    e.cancel_pending(GangId(3)).unwrap();
    assert_eq!(e.smallest_pending_gpu_gang().map(|s| (s.pods(), s.largest_pod().gpus)), Some((2, 4)));
    e.cancel_pending(GangId(1)).unwrap();
    assert_eq!(e.smallest_pending_gpu_gang(), None, "only the CPU gang is left");
}

#[test]
fn an_adopted_gang_holds_its_hosts_and_quota_until_it_finishes() {
    let mut e = Engine::new(cluster(), policy(BackfillMode::None, &[("a", 16)]));
    let hosts = vec![HostId(0), HostId(1)];
    assert_eq!(e.adopt(gang(7, "a", 0, 2, 8, 100), hosts, 5).unwrap(), Submitted::Queued);
    assert_eq!((e.pending_len(), e.running_len()), (0, 1));
    assert_eq!(e.cluster().total_free().gpus, 16);
    let a = e.quotas().clone().resolve("a").unwrap();
    assert_eq!(e.quotas().usage(a).gpus, 16);
    // The queue is full, so a new gang waits on quota even though hosts are free.
    e.submit(gang(8, "a", 6, 1, 8, 100)).unwrap();
    assert!(admitted(&mut e, 10).is_empty());
    e.finish(GangId(7), 20).unwrap();
    assert_eq!(admitted(&mut e, 20), vec![8]);
}

#[test]
fn adopting_with_the_wrong_host_count_changes_nothing() {
    let mut e = Engine::new(cluster(), policy(BackfillMode::None, &[]));
    assert!(e.adopt(gang(1, "a", 0, 2, 8, 100), vec![HostId(0)], 0).is_err());
    assert_eq!((e.pending_len(), e.running_len()), (0, 0));
    assert_eq!(e.cluster().total_free().gpus, 32);
    // Unknown queue under a policy without undeclared queues: reported, not recorded.
    let mut strict = policy(BackfillMode::None, &[("a", 8)]);
    strict.undeclared_queues = trainyard_policies::UndeclaredQueues::Reject;
    let mut e = Engine::new(cluster(), strict);
    let out = e.adopt(gang(2, "zz", 0, 1, 8, 100), vec![HostId(0)], 0).unwrap();
    assert!(matches!(out, Submitted::Unschedulable(Unschedulable::UnknownQueue { .. })));
    assert_eq!(e.running_len(), 0);
}
