//! Gang lifecycle: requeue with backoff when pods are not ready in time; starvation limit.

use trainyard_policies::{BackfillMode, Engine, GangId, GangRequest, LifecycleRules, PendingReason, PolicyConfig};
use trainyard_topology::{Cluster, GangShape, Resources, TopologyRequest};

/// Two 8-GPU hosts in one rack.
fn engine(rules: LifecycleRules) -> Engine {
    let cluster =
        Cluster::from_yaml("name: t\nlevels: [rack, host]\ngenerate:\n  counts: [1, 2]\n  node: {gpus: 8}\n", "t.yaml")
            .unwrap();
    let mut p = PolicyConfig::builtin("easy-backfill").unwrap();
    p.backfill = BackfillMode::Easy;
    let mut e = Engine::new(cluster, p);
    e.set_lifecycle(rules);
    e
}

fn gang(id: u64, submit: u64, pods: u32, estimate: u64) -> GangRequest {
    GangRequest {
        id: GangId(id),
        queue: "q".into(),
        priority: 0,
        submit,
        shape: GangShape::single(pods, Resources::gpus(8), TopologyRequest::Unconstrained),
        runtime_estimate: Some(estimate),
        hosts: Default::default(),
        order: 0,
    }
}

fn admitted(e: &mut Engine, now: u64) -> Vec<u64> {
    e.schedule(now).unwrap().admitted.iter().map(|a| a.id.0).collect()
}

#[test]
fn an_admission_that_never_gets_ready_is_requeued_with_doubling_backoff() {
    let rules = LifecycleRules { ready_timeout_s: Some(600), backoff_s: 60, max_backoff_s: 200, ..Default::default() };
    assert_eq!([1, 2, 3, 4].map(|a| rules.backoff(a)), [60, 120, 200, 200]);
    let mut e = engine(rules);
    e.submit(gang(1, 0, 2, 3600)).unwrap();
    assert_eq!(admitted(&mut e, 0), vec![1]);
    assert!(e.overdue(599).is_empty());
    assert_eq!(e.overdue(600), vec![GangId(1)]);
    assert_eq!(e.requeue_unready(GangId(1), 600).unwrap(), 660);
    assert_eq!(e.cluster().total_free().gpus, 16, "its capacity is free again");
    assert_eq!(admitted(&mut e, 630), Vec::<u64>::new());
    assert_eq!(e.pending_status(GangId(1)).unwrap().reason, PendingReason::Backoff { until: 660, attempts: 1 });
    assert_eq!(admitted(&mut e, 660), vec![1]);
    e.mark_ready(GangId(1)).unwrap();
    assert!(e.overdue(5000).is_empty(), "a ready gang is never overdue");
}

#[test]
fn an_old_enough_gang_is_no_longer_passed_by_backfill() {
    let rules = LifecycleRules { max_wait_s: Some(1000), ..Default::default() };
    let mut e = engine(rules);
    e.submit(gang(1, 0, 1, 5000)).unwrap();
    assert_eq!(admitted(&mut e, 0), vec![1]);
    // Gang 2 needs both hosts and is reserved for t=5000; short gang 3 backfills meanwhile.
    e.submit(gang(2, 10, 2, 100)).unwrap();
    e.submit(gang(3, 10, 1, 100)).unwrap();
    assert_eq!(admitted(&mut e, 10), vec![3], "a young gang may be passed by one that ends in time");
    e.finish(GangId(3), 110).unwrap();
    e.submit(gang(5, 1005, 1, 10)).unwrap();
    assert_eq!(admitted(&mut e, 1010), Vec::<u64>::new(), "nobody passes a starving gang");
    assert!(matches!(e.pending_status(GangId(5)).unwrap().reason, PendingReason::QueuedBehind { head: GangId(2) }));
}
