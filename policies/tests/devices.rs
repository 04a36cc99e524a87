//! Gangs whose pods carry DRA claims through the engine: placed only where every pod gets its
//! devices, started with them, and giving them back on finish and preemption; claims no node can
//! meet, and templates that do not exist, are refused by name.

use std::collections::BTreeSet;

use proptest::prelude::*;
use trainyard_policies::{Engine, GangId, GangRequest, PendingReason, PolicyConfig, Submitted, Unschedulable};
use trainyard_topology::devices::{DeviceId, DraObjects, parse_objects};
use trainyard_topology::{Cluster, GangShape, PodSetShape, Resources, TopologyRequest};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../topology/tests/fixtures/dra");

fn objects() -> DraObjects {
    let mut all = DraObjects::default();
    for file in ["slices-gpu.yaml", "slices-nic.yaml", "slices-partitionable.json", "classes.yaml", "claims.yaml"] {
        let text = std::fs::read_to_string(format!("{DIR}/{file}")).expect("fixture");
        all.extend(parse_objects(&text, file).expect("fixture parses"));
    }
    all
}

/// One licence seat every node reaches (an `allNodes` pool), its class and a claim of it.
const SITE_LICENCE: &str = "
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: site-licences}
spec:
  driver: licence.example.com
  allNodes: true
  pool: {name: site, generation: 1, resourceSliceCount: 1}
  devices:
  - name: seat-0
    attributes:
      product: {string: solver}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: licence.example.com}
spec:
  selectors:
  - cel: {expression: \"device.driver == 'licence.example.com'\"}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: licence, namespace: ml}
spec:
  spec:
    devices:
      requests:
      - name: seat
        exactly: {deviceClassName: licence.example.com}
";

/// node-a, node-b (one GPU tainted), node-c, node-d (partitionable GPUs, no NICs).
fn cluster() -> Cluster {
    let yaml = "name: dra\nlevels: [rack, host]\nnodes:\n\
        - {name: node-a, at: {rack: r1}, gpus: 8, cpus: 64, memory_gib: 512}\n\
        - {name: node-b, at: {rack: r1}, gpus: 8, cpus: 64, memory_gib: 512}\n\
        - {name: node-c, at: {rack: r2}, gpus: 8, cpus: 64, memory_gib: 512}\n\
        - {name: node-d, at: {rack: r2}, gpus: 8, cpus: 64, memory_gib: 512}\n";
    let mut cluster = Cluster::from_yaml(yaml, "dra.yaml").expect("cluster");
    let mut objects = objects();
    objects.extend(parse_objects(SITE_LICENCE, "licence.yaml").expect("licence"));
    cluster.set_devices(objects).expect("devices");
    cluster
}

fn policy(preemption: bool) -> PolicyConfig {
    let yaml = format!(
        "backfill: easy\nqueues:\n  - {{name: a, nominal: {{gpus: 64}}}}\nundeclared_queues: reject\n\
         preemption: {{within_queue: {preemption}, reclaim: false}}\nnode_loss: {{action: replace, grace: 0s}}\n"
    );
    PolicyConfig::from_yaml(&yaml, "dra-policy.yaml").unwrap()
}

fn request(id: u64, priority: i32, pods: u32, gpus: u64, templates: &[&str]) -> GangRequest {
    let mut set = PodSetShape::new("workers", pods, Resources { gpus, cpu_milli: 1000, memory_mib: 1024 });
    set.claims = templates.iter().map(|t| t.to_string()).collect();
    GangRequest {
        id: GangId(id),
        queue: "a".into(),
        priority,
        submit: 0,
        shape: GangShape { sets: vec![set], topology: TopologyRequest::Unconstrained },
        runtime_estimate: Some(100),
        hosts: Default::default(),
        order: 0,
    }
}

/// Devices of every running gang, each once, equal to what the cluster holds in use; every kept
/// count equal to one made from scratch.
fn check_devices(engine: &Engine) -> Result<(), String> {
    let mut held: BTreeSet<DeviceId> = BTreeSet::new();
    for (id, placement, _) in engine.running() {
        for pod in placement.devices.iter().flatten() {
            for result in pod.claims.iter().flat_map(|c| &c.results) {
                if !held.insert(result.device.clone()) {
                    return Err(format!("{} given twice (gang {id})", result.device));
                }
            }
        }
    }
    let in_use: BTreeSet<DeviceId> =
        engine.cluster().devices_in_use().expect("devices").devices.iter().cloned().collect();
    if in_use != held {
        return Err(format!("{} devices in use but running gangs hold {}", in_use.len(), held.len()));
    }
    engine.cluster().audit()?;
    let mut copy = engine.cluster().clone();
    copy.audit_devices()
}

#[test]
fn gpu_nic_pairs_start_as_far_as_aligned_pairs_go_and_the_rest_wait_for_them() {
    let mut e = Engine::new(cluster(), policy(false));
    for id in 0..30 {
        assert_eq!(e.submit(request(id, 0, 1, 1, &["gpu-nic-pair"])).unwrap(), Submitted::Queued);
    }
    let cycle = e.schedule(0).unwrap();
    // 8 pairs on node-a and node-c, 7 on node-b (a tainted GPU), none on node-d (no NICs).
    assert_eq!(cycle.admitted.len(), 23);
    check_devices(&e).unwrap();
    assert!(matches!(e.pending_status(GangId(23)).unwrap().reason, PendingReason::Capacity { .. }));
    e.finish(GangId(0), 10).unwrap();
    e.finish(GangId(1), 10).unwrap();
    let cycle = e.schedule(10).unwrap();
    assert_eq!(cycle.admitted.iter().map(|a| a.id.0).collect::<Vec<_>>(), [23, 24]);
    check_devices(&e).unwrap();
}

#[test]
fn a_gang_whose_claims_no_node_meets_never_fits_and_names_the_request() {
    let mut e = Engine::new(cluster(), policy(false));
    // Eight GPUs of one product: only node-a and node-c have them untainted.
    let got = e.submit(request(1, 0, 3, 8, &["trainer-8gpu"])).unwrap();
    let Submitted::Unschedulable(Unschedulable::NeverFits(PendingReason::Devices { message })) = &got else {
        panic!("{got:?}")
    };
    assert!(message.contains("trainer-8gpu") && message.contains("gpus"), "{message}");
    assert_eq!(e.submit(request(2, 0, 2, 8, &["trainer-8gpu"])).unwrap(), Submitted::Queued);
    assert_eq!(e.schedule(0).unwrap().admitted.len(), 1);
    check_devices(&e).unwrap();
}

#[test]
fn a_missing_template_is_named_and_nothing_is_queued() {
    let mut e = Engine::new(cluster(), policy(false));
    let got = e.submit(request(1, 0, 1, 1, &["gpu-nic-pair", "nvme-scratch"])).unwrap();
    let Submitted::Unschedulable(Unschedulable::InvalidShape { set, message }) = &got else { panic!("{got:?}") };
    assert_eq!(set.as_deref(), Some("workers"));
    assert_eq!(message, "ResourceClaimTemplate nvme-scratch: no such ResourceClaimTemplate");
    assert_eq!(e.pending_len(), 0);
}

#[test]
fn pods_that_ask_gpus_only_through_claims_are_charged_the_claims_gpus() {
    let mut e = Engine::new(cluster(), policy(false));
    assert_eq!(e.submit(request(1, 0, 3, 0, &["gpu-nic-pair"])).unwrap(), Submitted::Queued);
    assert_eq!(e.schedule(0).unwrap().admitted.len(), 1);
    assert_eq!(e.quotas().usage(e.quotas().find("a").unwrap()).gpus, 3);
    let got = e.submit(request(2, 0, 1, 2, &["trainer-8gpu"])).unwrap();
    let Submitted::Unschedulable(Unschedulable::InvalidShape { message, .. }) = &got else { panic!("{got:?}") };
    assert!(message.ends_with("asks for 2 GPUs per pod but its claims get 8"), "{message}");
    check_devices(&e).unwrap();
}

#[test]
fn a_preemptor_gets_the_devices_its_victims_give_back() {
    let mut e = Engine::new(cluster(), policy(true));
    e.submit(request(1, 0, 2, 8, &["trainer-8gpu"])).unwrap();
    assert_eq!(e.schedule(0).unwrap().admitted.len(), 1);
    e.submit(request(2, 10, 2, 8, &["trainer-8gpu"])).unwrap();
    let cycle = e.schedule(1).unwrap();
    assert_eq!(cycle.admitted.iter().map(|a| a.id).collect::<Vec<_>>(), [GangId(2)]);
    assert!(cycle.preempted.iter().any(|p| p.victim == GangId(1)), "{cycle:?}");
    check_devices(&e).unwrap();
}

#[test]
fn a_gang_moved_off_a_lost_node_takes_devices_on_the_new_one_and_gives_back_the_old() {
    let mut e = Engine::new(cluster(), policy(false));
    e.submit(request(1, 0, 1, 8, &["trainer-8gpu"])).unwrap();
    let cycle = e.schedule(0).unwrap();
    let host = cycle.admitted[0].placement.hosts[0];
    let node = |e: &Engine, h| e.cluster().topology().host_name(h).to_string();
    let before = node(&e, host);
    e.set_host_ready(host, false, 1).unwrap();
    let cycle = e.schedule(2).unwrap();
    assert_eq!(cycle.replaced.len(), 1, "{cycle:?}");
    let placement = e.running_placement(GangId(1)).unwrap().clone();
    let after = node(&e, placement.hosts[0]);
    assert_ne!(after, before);
    let pod = placement.devices[0].as_ref().expect("the moved pod has devices");
    assert_eq!(pod.node, after);
    assert!(pod.claims[0].results.iter().all(|r| r.device.pool == after), "{pod:?}");
    check_devices(&e).unwrap();
}

/// Every node counts the one seat as its own, so two pods on two nodes look as if they fit.
#[test]
fn no_gang_is_preempted_for_a_preemptor_whose_devices_would_not_follow() {
    let mut e = Engine::new(cluster(), policy(true));
    e.submit(request(1, 0, 1, 1, &["licence"])).unwrap();
    assert_eq!(e.schedule(0).unwrap().admitted.len(), 1);
    e.submit(request(2, 10, 2, 1, &["licence"])).unwrap();
    let cycle = e.schedule(1).unwrap();
    assert!(cycle.preempted.is_empty() && cycle.admitted.is_empty(), "{cycle:?}");
    assert!(e.running_placement(GangId(1)).is_some(), "the holder of the seat keeps running");
    check_devices(&e).unwrap();
    // A preemptor of one pod does get the seat its victim gives back.
    e.cancel_pending(GangId(2)).unwrap();
    e.submit(request(3, 10, 1, 1, &["licence"])).unwrap();
    let cycle = e.schedule(2).unwrap();
    assert_eq!(cycle.admitted.iter().map(|a| a.id).collect::<Vec<_>>(), [GangId(3)]);
    assert!(cycle.preempted.iter().any(|p| p.victim == GangId(1)), "{cycle:?}");
    check_devices(&e).unwrap();
}

const TEMPLATES: [(&str, u64); 5] =
    [("gpu-nic-pair", 1), ("trainer-8gpu", 8), ("gpus-spread", 4), ("h200-or-h100", 8), ("burn-in", 1)];

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Whatever gangs come, start, finish, are preempted or move off lost nodes: no device is
    /// held twice, what is in use is exactly what running gangs hold (a finished, preempted or
    /// refused gang holds nothing), and every kept count matches a count from scratch.
    #[test]
    fn devices_are_never_given_twice_and_stopped_gangs_give_all_of_theirs_back(
        gangs in prop::collection::vec((0usize..TEMPLATES.len(), 1u32..=3, -1i32..=1, 0u64..3, 0usize..8), 1..24),
        preemption in any::<bool>(),
    ) {
        let mut e = Engine::new(cluster(), policy(preemption));
        let hosts: Vec<_> = e.cluster().topology().hosts().collect();
        let mut now = 0;
        for (i, (template, pods, priority, finish, toggle)) in gangs.into_iter().enumerate() {
            let (name, gpus) = TEMPLATES[template];
            e.submit(request(i as u64, priority, pods, gpus, &[name])).unwrap();
            now += 1;
            // Half the steps lose a node or bring one back.
            if let Some(&host) = hosts.get(toggle) {
                let ready = !e.cluster().usable(host);
                e.set_host_ready(host, ready, now).unwrap();
            }
            e.schedule(now).unwrap();
            prop_assert_eq!(check_devices(&e), Ok(()));
            let running: Vec<GangId> = e.running().map(|(id, _, _)| id).collect();
            for id in running.into_iter().take(finish as usize) {
                e.finish(id, now).unwrap();
            }
            prop_assert_eq!(check_devices(&e), Ok(()));
        }
    }
}
