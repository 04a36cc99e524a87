//! A cycle stops as soon as no gang left in it could start, and every gang it did not reach
//! still reads a true reason; a gang that could still start is never cut off.

use trainyard_policies::{BackfillMode, Engine, GangId, GangRequest, PendingReason, PolicyConfig, QueueConfig};
use trainyard_topology::{Cluster, GangShape, Resources, TopologyRequest};

/// Two racks of two 8-GPU hosts.
fn cluster() -> Cluster {
    Cluster::from_yaml("name: t\nlevels: [rack, host]\ngenerate:\n  counts: [2, 2]\n  node: {gpus: 8}\n", "t.yaml")
        .unwrap()
}

fn engine() -> Engine {
    let mut p = PolicyConfig::builtin("easy-backfill").unwrap();
    p.backfill = BackfillMode::Easy;
    Engine::new(cluster(), p)
}

fn gang(id: u64, submit: u64, pods: u32, estimate: u64) -> GangRequest {
    GangRequest {
        id: GangId(id),
        queue: "default".into(),
        priority: 0,
        submit,
        shape: GangShape::single(pods, Resources::gpus(8), TopologyRequest::Unconstrained),
        runtime_estimate: Some(estimate),
        hosts: Default::default(),
        order: 0,
    }
}

/// Three hosts busy until 100; one host free; gang 1 (all four hosts) reserved at 100.
fn busy() -> Engine {
    busy_on(engine())
}

/// [`busy`] on an engine of any policy.
fn busy_on(mut e: Engine) -> Engine {
    e.submit(gang(0, 0, 3, 100)).unwrap();
    assert_eq!(e.schedule(0).unwrap().admitted.len(), 1);
    e.submit(gang(1, 1, 4, 50)).unwrap();
    e
}

#[test]
fn gangs_behind_the_last_shape_that_could_fit_read_their_own_failure() {
    let mut e = busy();
    for id in 2..=9 {
        e.submit(gang(id, 1, 2, 5)).unwrap();
    }
    let before = e.visits();
    let cycle = e.schedule(1).unwrap();
    assert_eq!(e.visits() - before, 1, "gang 1 takes the reservation; a probe finds no room for the rest");
    assert!(cycle.admitted.is_empty());
    assert_eq!(cycle.reservation.map(|r| (r.holder, r.at)), Some((GangId(1), 100)));
    let changed = e.take_changed();
    for id in 2..=9 {
        let status = e.pending_status(GangId(id)).unwrap();
        assert!(
            matches!(status.reason, PendingReason::Capacity { requested, .. } if requested.gpus == 16),
            "gang {id}: {status:?}"
        );
        assert!(changed.contains(&GangId(id)), "gang {id} must be reported as changed");
    }
    e.finish(GangId(0), 100).unwrap();
    let started: Vec<u64> = e.schedule(100).unwrap().admitted.iter().map(|a| a.id.0).collect();
    assert_eq!(started, vec![1], "the reservation holder starts first");
}

#[test]
fn gangs_refused_by_the_reservation_read_it_but_a_short_one_behind_them_still_starts() {
    let mut e = busy();
    // They fit on the free host but would hold it past 100, when gang 1 needs it.
    for id in 2..=9 {
        e.submit(gang(id, 1, 1, 1000)).unwrap();
    }
    // The same shape, ending before the reservation: it must not be cut off.
    e.submit(gang(10, 2, 1, 10)).unwrap();
    let cycle = e.schedule(2).unwrap();
    assert_eq!(cycle.admitted.iter().map(|a| (a.id.0, a.backfilled)).collect::<Vec<_>>(), vec![(10, true)]);
    for id in 2..=9 {
        assert_eq!(
            e.pending_status(GangId(id)).unwrap().reason,
            PendingReason::Reservation { holder: GangId(1), at: 100 },
            "gang {id}"
        );
    }
}

#[test]
fn long_gangs_all_refused_stop_the_cycle_with_the_reservation_as_their_reason() {
    let mut e = busy();
    for id in 2..=9 {
        e.submit(gang(id, 1, 1, 1000 + id)).unwrap();
    }
    let before = e.visits();
    let cycle = e.schedule(2).unwrap();
    assert_eq!(e.visits() - before, 2, "once gang 2 is refused, all of its shape would be");
    assert!(cycle.admitted.is_empty());
    let changed = e.take_changed();
    for id in 2..=9 {
        assert_eq!(
            e.pending_status(GangId(id)).unwrap().reason,
            PendingReason::Reservation { holder: GangId(1), at: 100 },
            "gang {id}"
        );
        assert!(changed.contains(&GangId(id)), "gang {id}");
    }
    // A new gang arriving after the cycle reads its own status, not the last cycle's blanket.
    e.submit(gang(11, 3, 1, 1)).unwrap();
    assert_eq!(e.pending_status(GangId(11)).unwrap().reason, PendingReason::NotYetScheduled);
}

#[test]
fn gangs_whose_queue_has_no_quota_left_read_the_quota_that_blocks_them() {
    let mut p = PolicyConfig::builtin("easy-backfill").unwrap();
    p.backfill = BackfillMode::Easy;
    p.queues = vec![QueueConfig::flat("a", 24), QueueConfig::flat("b", 8)];
    let mut e = Engine::new(cluster(), p);
    let in_queue = |mut g: GangRequest, queue: &str| {
        g.queue = queue.into();
        g
    };
    // Queue b uses all its 8 GPUs until 100; queue a holds two more hosts.
    e.submit(in_queue(gang(0, 0, 1, 100), "b")).unwrap();
    e.submit(in_queue(gang(1, 0, 2, 100), "a")).unwrap();
    assert_eq!(e.schedule(0).unwrap().admitted.len(), 2);
    // Gang 2 needs three hosts: reserved at 100. Queue b's gangs fit the free host, but b has
    // no quota left, and nothing frees any before the cycle ends.
    e.submit(in_queue(gang(2, 1, 3, 50), "a")).unwrap();
    for id in 3..=9 {
        e.submit(in_queue(gang(id, 2, 1, 5), "b")).unwrap();
    }
    let before = e.visits();
    let cycle = e.schedule(2).unwrap();
    assert_eq!(e.visits() - before, 1, "queue b's gangs are settled by its quota without a visit");
    assert!(cycle.admitted.is_empty());
    assert_eq!(cycle.reservation.map(|r| r.holder), Some(GangId(2)));
    for id in 3..=9 {
        let reason = e.pending_status(GangId(id)).unwrap().reason;
        assert!(
            matches!(&reason, PendingReason::Quota { queue, used_gpus: 8, available_gpus: 0, .. } if queue == "b"),
            "gang {id}: {reason:?}"
        );
    }
    // Queue b's gang ends: its quota and host are back, and the next of its gangs starts.
    e.finish(GangId(0), 10).unwrap();
    let started: Vec<u64> = e.schedule(10).unwrap().admitted.iter().map(|a| a.id.0).collect();
    assert_eq!(started, vec![3]);
}

/// A long line of one shape the reservation refuses (they would hold the free host past 100),
/// and behind it a half-host gang that ends before the reservation.
fn long_line_then_a_short_gang(e: &mut Engine) {
    for id in 2..=60 {
        e.submit(gang(id, 1, 1, 1000)).unwrap();
    }
    let mut short = gang(61, 2, 1, 10);
    short.shape = GangShape::single(1, Resources::gpus(4), TopologyRequest::Unconstrained);
    e.submit(short).unwrap();
}

#[test]
fn the_walk_passes_over_refused_gangs_to_the_next_one_that_could_start() {
    let mut e = busy();
    long_line_then_a_short_gang(&mut e);
    let before = e.visits();
    let cycle = e.schedule(2).unwrap();
    assert_eq!(cycle.admitted.iter().map(|a| a.id.0).collect::<Vec<_>>(), vec![61], "the short gang starts");
    assert!(e.visits() - before <= 4, "{} visits: the refused gangs are passed over", e.visits() - before);
    let changed = e.take_changed();
    for id in 2..=60 {
        assert_eq!(
            e.pending_status(GangId(id)).unwrap().reason,
            PendingReason::Reservation { holder: GangId(1), at: 100 },
            "gang {id}"
        );
        assert!(changed.contains(&GangId(id)), "gang {id}");
    }
    // With a starvation limit the walk visits every gang (a starving one would stop it), and
    // decides the same.
    let mut p = PolicyConfig::builtin("easy-backfill").unwrap();
    p.starvation.max_wait_s = Some(1_000_000);
    let mut v = busy_on(Engine::new(cluster(), p));
    long_line_then_a_short_gang(&mut v);
    let before = v.visits();
    assert_eq!(v.schedule(2).unwrap().admitted.iter().map(|a| a.id.0).collect::<Vec<_>>(), vec![61]);
    assert!(v.visits() - before > 60);
}
