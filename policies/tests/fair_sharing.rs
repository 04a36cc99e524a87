//! Fair sharing across queues: exact admission orders with and without history.

use trainyard_policies::{BackfillMode, Engine, FairSharing, GangId, GangRequest, PolicyConfig};
use trainyard_topology::{Cluster, GangShape, Resources, TopologyRequest};

/// One rack of four 8-GPU hosts.
fn engine(fair: Option<FairSharing>) -> Engine {
    let cluster =
        Cluster::from_yaml("name: t\nlevels: [rack, host]\ngenerate:\n  counts: [1, 4]\n  node: {gpus: 8}\n", "t.yaml")
            .unwrap();
    let mut p = PolicyConfig::builtin("easy-backfill").unwrap();
    p.backfill = BackfillMode::Easy;
    let mut e = Engine::new(cluster, p);
    e.set_fair_sharing(fair);
    e
}

fn gang(id: u64, queue: &str, submit: u64) -> GangRequest {
    GangRequest {
        id: GangId(id),
        queue: queue.into(),
        priority: 0,
        submit,
        shape: GangShape::single(1, Resources::gpus(8), TopologyRequest::Unconstrained),
        runtime_estimate: Some(100),
        hosts: Default::default(),
        order: 0,
    }
}

fn admitted(e: &mut Engine, now: u64) -> Vec<u64> {
    e.schedule(now).unwrap().admitted.iter().map(|a| a.id.0).collect()
}

#[test]
fn without_fair_sharing_the_earliest_submissions_take_everything() {
    let mut e = engine(None);
    for id in 0..4 {
        e.submit(gang(id, "a", id)).unwrap();
    }
    for id in 4..8 {
        e.submit(gang(id, "b", 10 + id)).unwrap();
    }
    assert_eq!(admitted(&mut e, 20), vec![0, 1, 2, 3]);
}

#[test]
fn fair_sharing_alternates_queues_as_their_shares_grow() {
    let mut e = engine(Some(FairSharing { half_life_s: None }));
    for id in 0..4 {
        e.submit(gang(id, "a", id)).unwrap();
    }
    for id in 4..8 {
        e.submit(gang(id, "b", 10 + id)).unwrap();
    }
    // a's first gang goes first (both shares 0, earlier submission), then b catches up.
    assert_eq!(admitted(&mut e, 20), vec![0, 4, 1, 5]);
}

#[test]
fn history_makes_yesterdays_heavy_user_yield_today() {
    let mut e = engine(Some(FairSharing { half_life_s: Some(3600) }));
    // Queue a used the whole cluster for an hour.
    for id in 0..4 {
        e.submit(gang(id, "a", 0)).unwrap();
    }
    assert_eq!(admitted(&mut e, 0), vec![0, 1, 2, 3]);
    for id in 0..4 {
        e.finish(GangId(id), 3600).unwrap();
    }
    // Both submit again, a first. a's history is 32 GPUs for one half-life, which counts as
    // 16 GPUs now (half the cluster), so b goes first until it holds as much: then the tie
    // goes to a's earlier submission, and b's third gang waits for the last host.
    e.submit(gang(10, "a", 3600)).unwrap();
    e.submit(gang(11, "a", 3600)).unwrap();
    e.submit(gang(20, "b", 3601)).unwrap();
    e.submit(gang(21, "b", 3601)).unwrap();
    e.submit(gang(22, "b", 3601)).unwrap();
    assert_eq!(admitted(&mut e, 3601), vec![20, 21, 10, 22]);
}
