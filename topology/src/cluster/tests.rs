//! Tests of free-capacity accounting, transactions and live host changes.

use super::*;
use crate::eligibility::{HostAttrs, Taint, TaintEffect, Toleration, TolerationOperator};
use crate::placement::PlacementRequest;

fn small() -> Cluster {
    Cluster::from_yaml("name: t\nlevels: [rack, host]\ngenerate:\n  counts: [2, 2]\n  node: {gpus: 8}\n", "t").unwrap()
}

fn spec(rack: &str, host: &str, gpus: u64) -> HostSpec {
    HostSpec {
        path: vec![rack.to_string(), host.to_string()],
        capacity: Resources::gpus(gpus),
        flavor: None,
        attrs: HostAttrs { node_name: host.to_string(), ..HostAttrs::default() },
        ready: true,
    }
}

fn request(pods: u32, gpus: u64, hosts: HostClass) -> PlacementRequest {
    PlacementRequest {
        pods,
        pod: Resources::gpus(gpus),
        constraint: crate::LevelConstraint::UNCONSTRAINED,
        flavor: None,
        hosts,
    }
}

#[test]
fn allocation_updates_every_ancestor() {
    let mut c = small();
    c.allocate(HostId(3), Resources::gpus(5)).unwrap();
    assert_eq!(c.host_free(HostId(3)).gpus, 3);
    let rack = c.topology().parent(c.topology().host_domain(HostId(3))).unwrap();
    assert_eq!(c.free(rack).gpus, 11);
    assert_eq!(c.total_free().gpus, 27);
}

#[test]
fn overcommit_and_over_release_are_errors() {
    let mut c = small();
    assert!(matches!(c.allocate(HostId(0), Resources::gpus(9)), Err(Error::Overcommit { .. })));
    assert!(matches!(c.release(HostId(0), Resources::gpus(1)), Err(Error::OverRelease { .. })));
    assert_eq!(c.total_free().gpus, 32);
}

#[test]
fn rollback_restores_the_exact_state() {
    let mut c = small();
    c.allocate(HostId(1), Resources::gpus(2)).unwrap();
    let epoch = c.epoch();
    let txn = c.begin();
    c.allocate(HostId(0), Resources::gpus(8)).unwrap();
    c.release(HostId(1), Resources::gpus(2)).unwrap();
    let inner = c.begin();
    c.allocate(HostId(2), Resources::gpus(1)).unwrap();
    c.commit(inner);
    c.rollback(txn);
    assert_eq!(c.host_free(HostId(0)).gpus, 8);
    assert_eq!(c.host_free(HostId(1)).gpus, 6);
    assert_eq!(c.host_free(HostId(2)).gpus, 8);
    assert_eq!(c.total_free().gpus, 30);
    assert_eq!(c.epoch(), epoch, "a release rolled back frees nothing");
}

#[test]
fn foreign_usage_is_free_capacity_no_gang_gets() {
    let mut c = small();
    c.charge_foreign(HostId(0), Resources::gpus(8)).unwrap();
    assert_eq!(c.host_free(HostId(0)).gpus, 0);
    assert!(c.allocate(HostId(0), Resources::gpus(1)).is_err());
    // More than is free: the pods are there, free stays at zero and the host is over-committed.
    c.allocate(HostId(1), Resources::gpus(6)).unwrap();
    c.charge_foreign(HostId(1), Resources::gpus(4)).unwrap();
    assert_eq!(c.host_free(HostId(1)).gpus, 0);
    assert_eq!(c.overcommitted(), vec![HostId(1)]);
    assert_eq!(c.total_free().gpus, 16);
    c.release_foreign(HostId(1), Resources::gpus(4)).unwrap();
    assert_eq!(c.host_free(HostId(1)).gpus, 2);
    assert!(c.release_foreign(HostId(1), Resources::gpus(1)).is_err(), "nothing left to release");
    c.audit().unwrap();
}

#[test]
fn unusable_hosts_are_offered_to_nobody_and_keep_their_gangs() {
    let mut c = small();
    c.allocate(HostId(0), Resources::gpus(4)).unwrap();
    c.set_ready(HostId(0), false).unwrap();
    assert_eq!(c.host_free(HostId(0)).gpus, 0);
    assert_eq!(c.total_free().gpus, 24);
    let placed = c.place(&request(4, 8, HostClass::DEFAULT));
    assert!(placed.is_err(), "three hosts of 8 cannot take four pods of 8");
    c.release(HostId(0), Resources::gpus(4)).unwrap();
    assert_eq!(c.total_free().gpus, 24, "released while unusable: still offered to nobody");
    c.set_ready(HostId(0), true).unwrap();
    assert_eq!(c.total_free().gpus, 32);
    c.audit().unwrap();
}

#[test]
fn a_removed_host_that_gangs_hold_stays_until_released() {
    let mut c = small();
    c.allocate(HostId(2), Resources::gpus(8)).unwrap();
    assert_eq!(c.remove_host(HostId(2)).unwrap(), Removal::Held);
    assert!(c.topology().is_host(HostId(2)));
    assert_eq!(c.host_free(HostId(2)).gpus, 0);
    assert!(c.reap().is_empty());
    c.release(HostId(2), Resources::gpus(8)).unwrap();
    assert_eq!(c.reap(), vec![HostId(2)]);
    assert!(!c.topology().is_host(HostId(2)));
    assert_eq!(c.total_capacity().gpus, 24);
    assert_eq!(c.remove_host(HostId(3)).unwrap(), Removal::Removed);
    assert_eq!(c.topology().children(DomainId::ROOT).len(), 1, "the emptied rack went too");
    c.audit().unwrap();
}

#[test]
fn hosts_join_move_and_resize_in_place() {
    let topo = Topology::empty("live", vec!["rack".into(), "host".into()]).unwrap();
    let mut c = Cluster::new(topo);
    let a = c.add_host(spec("r1", "a", 8)).unwrap();
    let b = c.add_host(spec("r1", "b", 8)).unwrap();
    c.allocate(a, Resources::gpus(4)).unwrap();
    let placed = c.place(&request(2, 8, HostClass::DEFAULT));
    assert!(placed.is_err(), "a holds 4 of its 8");
    let mut moved = spec("r2", "a", 16);
    moved.flavor = Some("h100".into());
    c.update_host(a, moved).unwrap();
    assert_eq!(c.host_used(a).gpus, 4, "its gang moved with it");
    assert_eq!(c.host_free(a).gpus, 12);
    assert_eq!(c.free(c.topology().find(&["r2".to_string()]).unwrap()).gpus, 12);
    assert_eq!(c.free(c.topology().find(&["r1".to_string()]).unwrap()).gpus, 8);
    assert!(c.place(&request(2, 8, HostClass::DEFAULT)).is_ok());
    c.release(a, Resources::gpus(4)).unwrap();
    c.remove_host(b).unwrap();
    c.audit().unwrap();
    assert_eq!(c.total_free().gpus, 16);
}

fn tainted(rack: &str, host: &str, key: &str) -> HostSpec {
    let mut s = spec(rack, host, 8);
    s.attrs.taints.push(Taint { key: key.into(), value: String::new(), effect: TaintEffect::NoSchedule });
    s
}

#[test]
fn classes_see_only_the_hosts_they_tolerate() {
    let topo = Topology::empty("live", vec!["rack".into(), "host".into()]).unwrap();
    let mut c = Cluster::new(topo);
    c.add_host(spec("r1", "a", 8)).unwrap();
    let b = c.add_host(tainted("r1", "b", "gpu-maintenance")).unwrap();
    let tolerant = HostFilter {
        tolerations: vec![Toleration {
            key: "gpu-maintenance".into(),
            operator: TolerationOperator::Exists,
            ..Default::default()
        }],
        ..HostFilter::default()
    };
    let t = c.class_of(&tolerant).unwrap();
    assert_eq!(c.free_for(HostClass::DEFAULT, DomainId::ROOT).gpus, 8);
    assert_eq!(c.free_for(t, DomainId::ROOT).gpus, 16);
    assert!(c.place(&request(2, 8, HostClass::DEFAULT)).is_err());
    assert!(c.place(&request(2, 8, t)).is_ok());
    assert!(c.place_on_empty(&request(2, 8, HostClass::DEFAULT)).is_err(), "never fits without the toleration");
    c.allocate(b, Resources::gpus(3)).unwrap();
    assert_eq!(c.free_for(t, DomainId::ROOT).gpus, 13);
    // The taint goes: both classes see both hosts.
    c.update_host(b, spec("r1", "b", 8)).unwrap();
    assert_eq!(c.free_for(HostClass::DEFAULT, DomainId::ROOT).gpus, 13);
    assert!(c.place_on_empty(&request(2, 8, HostClass::DEFAULT)).is_ok());
    c.audit().unwrap();
    assert_eq!(c.class_of(&tolerant), Some(t), "one class per distinct filter");
    c.release_class(t);
    c.release_class(t);
}

#[test]
fn fit_count_over_busy_subtrees_matches_a_count_host_by_host() {
    let mut c = small();
    c.allocate(HostId(0), Resources::gpus(8)).unwrap();
    c.allocate(HostId(1), Resources::gpus(5)).unwrap();
    c.allocate(HostId(2), Resources::gpus(1)).unwrap();
    for gpus in [1, 2, 3, 4, 7, 8, 9] {
        let pod = Resources::gpus(gpus);
        let by_host = c.topology().hosts().map(|h| c.host_free(h).fit_count(&pod)).sum::<u64>();
        assert_eq!(c.fit_count(&pod), by_host, "pods of {gpus} GPUs");
    }
    // Another resource than GPUs runs out first: nothing fits anywhere.
    let pod = Resources { gpus: 1, cpu_milli: 1, memory_mib: 0 };
    assert_eq!(c.fit_count(&pod), 0);
}
