//! Devices in the cluster model: classes of a device need count whole pods per host from the
//! free devices, allocation gives each pod its devices all or none, release and rollback give
//! them back, and every kept count matches one made from scratch.

use std::collections::BTreeMap;

use trainyard_topology::devices::objects::AttributeValue;
use trainyard_topology::eligibility::HostFilter;
use trainyard_topology::{Cluster, DomainId, Error, GangShape, HostClass, PodSetShape, Resources, TopologyRequest};

use super::load;

/// node-a and node-b (H100, gpu-7 of node-b tainted) in rack r1, node-c (H200) and node-d
/// (partitionable GPUs) in rack r2; every node 8 GPUs as the cluster counts them.
pub(crate) fn cluster() -> Cluster {
    let yaml = "name: dra\nlevels: [rack, host]\nnodes:\n\
        - {name: node-a, at: {rack: r1}, gpus: 8, cpus: 64, memory_gib: 512}\n\
        - {name: node-b, at: {rack: r1}, gpus: 8, cpus: 64, memory_gib: 512}\n\
        - {name: node-c, at: {rack: r2}, gpus: 8, cpus: 64, memory_gib: 512}\n\
        - {name: node-d, at: {rack: r2}, gpus: 8, cpus: 64, memory_gib: 512}\n";
    let mut cluster = Cluster::from_yaml(yaml, "dra.yaml").expect("cluster");
    let reports = cluster.set_devices(load()).expect("devices");
    assert!(reports.iter().any(|r| r.subject.contains("node-e")), "node-e's incomplete pool is reported: {reports:?}");
    cluster
}

pub(crate) fn shape(pods: u32, gpus: u64, templates: &[&str]) -> GangShape {
    let mut set = PodSetShape::new("workers", pods, Resources { gpus, cpu_milli: 1000, memory_mib: 1024 });
    set.claims = templates.iter().map(|t| t.to_string()).collect();
    GangShape { sets: vec![set], topology: TopologyRequest::Unconstrained }
}

fn class(cluster: &mut Cluster, shape: &GangShape) -> HostClass {
    let fit = cluster.device_fit(&mut shape.clone()).expect("claims resolve");
    cluster.class_for(&HostFilter::default(), shape.layout_need(), fit).expect("class")
}

fn per_host_gpus(cluster: &Cluster, class: HostClass) -> BTreeMap<String, u64> {
    let topo = cluster.topology();
    topo.hosts().map(|h| (topo.host_name(h).to_string(), cluster.free_for(class, topo.host_domain(h)).gpus)).collect()
}

fn attribute(cluster: &Cluster, device: &trainyard_topology::devices::DeviceId, name: &str) -> Option<AttributeValue> {
    let _ = cluster;
    let objects = load();
    let view = trainyard_topology::devices::PoolView::build(&objects.slices);
    let pool = view.pools.get(&(device.driver.clone(), device.pool.clone()))?;
    pool.devices.iter().find(|d| d.id == *device)?.attribute(name).cloned()
}

#[test]
fn a_class_of_gpu_nic_pairs_offers_each_host_as_many_gpus_as_it_has_aligned_pairs() {
    let mut cluster = cluster();
    let shape = shape(1, 1, &["gpu-nic-pair"]);
    let c = class(&mut cluster, &shape);
    let offered = per_host_gpus(&cluster, c);
    // node-b's tainted gpu-7 makes one pair fewer; node-d has no NICs at all.
    let want: BTreeMap<String, u64> =
        [("node-a", 8), ("node-b", 7), ("node-c", 8), ("node-d", 0)].map(|(n, g)| (n.to_string(), g)).into();
    assert_eq!(offered, want);
    assert_eq!(cluster.free_for(c, DomainId::ROOT).gpus, 23);
    // The plain class still sees every GPU the cluster counts.
    assert_eq!(cluster.free_for(HostClass::DEFAULT, DomainId::ROOT).gpus, 32);
    cluster.audit().unwrap();
    cluster.audit_devices().unwrap();
}

#[test]
fn allocation_gives_each_pod_a_gpu_and_nic_on_one_pcie_root_and_release_gives_them_back() {
    let mut cluster = cluster();
    let shape = shape(12, 1, &["gpu-nic-pair"]);
    let c = class(&mut cluster, &shape);
    let demand = cluster.topology().demand(&shape, None, c).expect("demand");
    let mut placement = cluster.place_demand(&demand).expect("room for 12 pairs");
    cluster.allocate_placement(&mut placement).expect("devices for every pod");
    assert_eq!(placement.devices.len(), 12);
    let root = "resource.kubernetes.io/pcieRoot";
    for (i, pod) in placement.devices.iter().enumerate() {
        let pod = pod.as_ref().expect("every pod carries the claim");
        let [claim] = pod.claims.as_slice() else { panic!("one claim per pod: {pod:?}") };
        let roots: Vec<_> = claim.results.iter().map(|r| attribute(&cluster, &r.device, root)).collect();
        assert_eq!(roots.len(), 2, "pod {i}: a GPU and a NIC");
        assert!(roots[0].is_some() && roots[0] == roots[1], "pod {i}: {roots:?}");
        assert_eq!(pod.node, cluster.topology().host_name(placement.hosts[i]));
    }
    let in_use = cluster.devices_in_use().expect("devices").devices.len();
    assert_eq!(in_use, 24);
    // What is left for the class is what the remaining pairs give.
    assert_eq!(cluster.free_for(c, DomainId::ROOT).gpus, 23 - 12);
    cluster.audit().unwrap();
    cluster.audit_devices().unwrap();
    release_all(&mut cluster, &placement, c, 23);
}

/// Releases the only gang running and checks every device is free and `class` offers `gpus`.
pub(crate) fn release_all(
    cluster: &mut Cluster,
    placement: &trainyard_topology::Placement,
    class: HostClass,
    gpus: u64,
) {
    cluster.release_placement(placement).unwrap();
    assert!(cluster.devices_in_use().unwrap().devices.is_empty());
    assert_eq!(cluster.free_for(class, DomainId::ROOT).gpus, gpus);
    cluster.audit_devices().unwrap();
}

#[test]
fn a_pod_whose_claims_fail_leaves_the_whole_gang_unallocated() {
    let mut cluster = cluster();
    let shape = shape(3, 1, &["gpu-nic-pair"]);
    let c = class(&mut cluster, &shape);
    let demand = cluster.topology().demand(&shape, None, c).expect("demand");
    let mut placement = cluster.place_demand(&demand).expect("room");
    // Put every pod on node-d, which has GPUs but no NICs: the placement search never would.
    let d = cluster.topology().find_host(&["r2".into(), "node-d".into()]).expect("node-d");
    placement.hosts = vec![d; 3];
    let before = cluster.total_free();
    match cluster.allocate_placement(&mut placement) {
        Err(Error::Devices { pod: 0, node, reason }) => {
            assert_eq!(node, "node-d");
            assert!(reason.contains("gpu-nic-pair") && reason.contains("nic"), "{reason}");
        }
        other => panic!("expected a device failure, got {other:?}"),
    }
    assert!(cluster.devices_in_use().unwrap().devices.is_empty());
    assert_eq!(cluster.total_free(), before);
    assert!(placement.devices.is_empty());
    cluster.audit_devices().unwrap();
}

#[test]
fn a_rolled_back_transaction_gives_the_devices_back() {
    let mut cluster = cluster();
    let shape = shape(2, 8, &["trainer-8gpu"]);
    let c = class(&mut cluster, &shape);
    // Eight GPUs of one product: node-a (H100) and node-c (H200); node-b's taint leaves 7.
    let want: BTreeMap<String, u64> =
        [("node-a", 8), ("node-b", 0), ("node-c", 8), ("node-d", 0)].map(|(n, g)| (n.to_string(), g)).into();
    assert_eq!(per_host_gpus(&cluster, c), want);
    let demand = cluster.topology().demand(&shape, None, c).expect("demand");
    let mut placement = cluster.place_demand(&demand).expect("node-a and node-c");
    let txn = cluster.begin();
    cluster.allocate_placement(&mut placement).unwrap();
    assert_eq!(cluster.devices_in_use().unwrap().devices.len(), 16);
    assert_eq!(cluster.free_for(c, DomainId::ROOT).gpus, 0);
    cluster.rollback(txn);
    assert!(cluster.devices_in_use().unwrap().devices.is_empty());
    assert_eq!(per_host_gpus(&cluster, c), want);
    cluster.audit().unwrap();
    cluster.audit_devices().unwrap();
}

#[test]
fn first_available_takes_h200s_where_a_node_has_them_and_falls_back_to_h100s_elsewhere() {
    let mut cluster = cluster();
    // As upstream, the first alternative that fits is chosen node by node.
    let two = shape(2, 8, &["h200-or-h100"]);
    let c = class(&mut cluster, &two);
    let demand = cluster.topology().demand(&two, None, c).expect("demand");
    let mut placement = cluster.place_demand(&demand).unwrap();
    cluster.allocate_placement(&mut placement).unwrap();
    let mut by_node: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for pod in placement.devices.iter().flatten() {
        let requests = pod.claims[0].results.iter().map(|r| r.request.clone());
        by_node.entry(pod.node.clone()).or_default().extend(requests);
    }
    assert_eq!(by_node.keys().collect::<Vec<_>>(), ["node-a", "node-c"]);
    assert!(by_node["node-c"].iter().all(|r| r == "gpus/h200"), "{by_node:?}");
    assert!(by_node["node-a"].iter().all(|r| r == "gpus/h100"), "{by_node:?}");
    cluster.audit_devices().unwrap();
}

#[test]
fn missing_templates_and_clusters_without_devices_are_named() {
    let mut cluster = cluster();
    let err = cluster.device_fit(&mut shape(1, 1, &["no-such-template"])).unwrap_err();
    assert_eq!(err.to_string(), "ResourceClaimTemplate no-such-template: no such ResourceClaimTemplate");
    let mut plain =
        Cluster::from_yaml("name: p\nlevels: [host]\ngenerate:\n  counts: [2]\n  node: {gpus: 8}\n", "p").unwrap();
    let err = plain.device_fit(&mut shape(1, 1, &["gpu-nic-pair"])).unwrap_err();
    assert!(err.to_string().contains("publishes no devices"), "{err}");
}

#[test]
fn pods_count_the_whole_gpus_their_claims_get() {
    let mut cluster = cluster();
    // No GPUs asked: the claims' are counted (one GPU of a pair; MIG slices are not whole GPUs).
    for (template, gpus) in [("gpu-nic-pair", 1), ("trainer-8gpu", 8), ("h200-or-h100", 8), ("two-mig-slices", 0)] {
        let mut asked = shape(1, 0, &[template]);
        let fit = cluster.device_fit(&mut asked).unwrap().unwrap();
        assert_eq!((asked.sets[0].pod.gpus, fit.pod.gpus), (gpus, gpus), "{template}");
    }
    // Asking for another number is refused, naming both.
    let err = cluster.device_fit(&mut shape(2, 4, &["gpu-nic-pair"])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "ResourceClaimTemplate gpu-nic-pair: pod set \"workers\" asks for 4 GPUs per pod but its claims get 1"
    );
}

#[test]
fn gangs_whose_sets_mix_claims_on_one_pod_shape_are_refused() {
    let mut shape = shape(2, 1, &["gpu-nic-pair"]);
    shape.sets.push(PodSetShape::new("launcher", 1, shape.sets[0].pod));
    let err = shape.validate().unwrap_err();
    assert_eq!(err.set.as_deref(), Some("workers"));
    assert!(err.message.contains("launcher"), "{err}");
}

/// Two NVMe devices of a rack-level pool (`nodeSelector` on the rack label) that both nodes of
/// rack r1 reach.
const RACK_NVME: &str = "
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: r1-nvme}
spec:
  driver: nvme.example.com
  nodeSelector: {nodeSelectorTerms: [{matchExpressions: [{key: rack, operator: In, values: [r1]}]}]}
  pool: {name: r1, generation: 1, resourceSliceCount: 1}
  devices:
  - {name: nvme-0}
  - {name: nvme-1}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: nvme.example.com}
spec:
  selectors:
  - cel: {expression: \"device.driver == 'nvme.example.com'\"}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: scratch, namespace: ml}
spec:
  spec:
    devices:
      requests:
      - {name: disk, exactly: {deviceClassName: nvme.example.com}}
";

#[test]
fn a_rack_level_pool_serves_the_nodes_its_selector_matches_and_is_shared_among_them() {
    let yaml = "name: dra\nlevels: [rack, host]\nnodes:\n\
        - {name: node-a, at: {rack: r1}, gpus: 8, cpus: 64, memory_gib: 512, labels: {rack: r1}}\n\
        - {name: node-b, at: {rack: r1}, gpus: 8, cpus: 64, memory_gib: 512, labels: {rack: r1}}\n\
        - {name: node-c, at: {rack: r2}, gpus: 8, cpus: 64, memory_gib: 512, labels: {rack: r2}}\n";
    let mut cluster = Cluster::from_yaml(yaml, "dra.yaml").expect("cluster");
    let objects = trainyard_topology::devices::parse_objects(RACK_NVME, "nvme.yaml").expect("objects");
    assert!(cluster.set_devices(objects).expect("devices").is_empty());
    let scratch = shape(2, 0, &["scratch"]);
    let c = class(&mut cluster, &scratch);
    let cpus = |cluster: &Cluster| -> BTreeMap<String, u64> {
        let topo = cluster.topology();
        topo.hosts()
            .map(|h| (topo.host_name(h).to_string(), cluster.free_for(c, topo.host_domain(h)).cpu_milli))
            .collect()
    };
    // Pods that ask no GPUs are offered by their whole shape: two per r1 node, none on r2.
    let want: BTreeMap<String, u64> =
        [("node-a", 2000), ("node-b", 2000), ("node-c", 0)].map(|(n, m)| (n.to_string(), m)).into();
    assert_eq!(cpus(&cluster), want);
    let demand = cluster.topology().demand(&scratch, None, c).expect("demand");
    let mut placement = cluster.place_demand(&demand).expect("room in r1");
    cluster.allocate_placement(&mut placement).expect("both disks");
    assert_eq!(cluster.devices_in_use().unwrap().devices.len(), 2);
    // The disks are gone for every node that shares the pool, not only the one that took them.
    let none: BTreeMap<String, u64> =
        [("node-a", 0), ("node-b", 0), ("node-c", 0)].map(|(n, m)| (n.to_string(), m)).into();
    assert_eq!(cpus(&cluster), none);
    cluster.audit().unwrap();
    cluster.audit_devices().unwrap();
    cluster.release_placement(&placement).unwrap();
    assert_eq!(cpus(&cluster), want);
    cluster.audit_devices().unwrap();
}
