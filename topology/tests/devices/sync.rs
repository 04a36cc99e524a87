//! Devices of a live cluster: slices, classes and templates replaced while gangs hold devices,
//! devices held by claims the engine does not place, and GPUs counted from devices.

use std::collections::{BTreeMap, HashSet};

use trainyard_topology::devices::{DeviceId, DraObjects};
use trainyard_topology::{Cluster, DomainId, Placement};

use super::cluster::{cluster, release_all, shape};
use super::{id, load};

fn pairs_class(cluster: &mut Cluster) -> trainyard_topology::HostClass {
    let shape = shape(1, 1, &["gpu-nic-pair"]);
    let fit = cluster.device_fit(&mut shape.clone()).expect("claims resolve");
    cluster.class_for(&Default::default(), shape.layout_need(), fit).expect("class")
}

fn place(cluster: &mut Cluster, pods: u32) -> Placement {
    let shape = shape(pods, 1, &["gpu-nic-pair"]);
    let c = pairs_class(cluster);
    let demand = cluster.topology().demand(&shape, None, c).expect("demand");
    let mut placement = cluster.place_demand(&demand).expect("room");
    cluster.allocate_placement(&mut placement).expect("devices");
    placement
}

fn per_host(cluster: &Cluster, class: trainyard_topology::HostClass) -> BTreeMap<String, u64> {
    let topo = cluster.topology();
    topo.hosts().map(|h| (topo.host_name(h).to_string(), cluster.free_for(class, topo.host_domain(h)).gpus)).collect()
}

#[test]
fn replacing_the_objects_keeps_what_gangs_hold_and_counts_again() {
    let mut cluster = cluster();
    let placement = place(&mut cluster, 12);
    let held = cluster.devices_in_use().unwrap().devices.clone();
    assert_eq!(held.len(), 24);
    let c = pairs_class(&mut cluster);
    let before = per_host(&cluster, c);
    cluster.replace_devices(load()).expect("the same objects again");
    assert_eq!(cluster.devices_in_use().unwrap().devices, held, "holders carried over");
    assert_eq!(pairs_class(&mut cluster), c, "the need keeps its class");
    assert_eq!(per_host(&cluster, c), before);
    cluster.audit_devices().unwrap();
    release_all(&mut cluster, &placement, c, 23);
}

#[test]
fn a_node_whose_slices_go_offers_nothing_and_its_holders_let_go_quietly() {
    let mut cluster = cluster();
    let placement = place(&mut cluster, 20);
    let mut objects = load();
    objects.slices.retain(|s| s.node_name.as_deref() != Some("node-a"));
    cluster.replace_devices(objects).expect("fewer slices");
    let c = pairs_class(&mut cluster);
    assert_eq!(per_host(&cluster, c)["node-a"], 0);
    cluster.audit_devices().unwrap();
    // node-b's 7 and node-c's 8 pairs.
    release_all(&mut cluster, &placement, c, 15);
}

#[test]
fn a_template_deleted_holds_no_pods_until_it_comes_back() {
    let mut cluster = cluster();
    let one = shape(1, 1, &["gpu-nic-pair"]);
    let fit = cluster.device_fit(&mut one.clone()).expect("claims resolve");
    let c = pairs_class(&mut cluster);
    let mut objects = load();
    objects.claims.retain(|t| t.name != "gpu-nic-pair");
    cluster.replace_devices(objects).unwrap();
    assert_eq!(cluster.class_for(&Default::default(), None, fit), Some(c), "gangs hold the need by index");
    let demand = cluster.topology().demand(&one, None, c).expect("demand");
    assert!(cluster.place_demand(&demand).is_err(), "no host holds a pod of a need that does not resolve");
    let mut again = shape(1, 1, &["gpu-nic-pair"]);
    let error = cluster.device_fit(&mut again).unwrap_err().to_string();
    assert!(error.contains("gpu-nic-pair") && error.contains("no such ResourceClaimTemplate"), "{error}");
    cluster.replace_devices(load()).unwrap();
    assert_eq!(pairs_class(&mut cluster), c);
    assert_eq!(cluster.free_for(c, DomainId::ROOT).gpus, 23);
    cluster.audit_devices().unwrap();
}

#[test]
fn devices_the_cluster_shows_allocated_are_not_offered_and_shared_holds_wait_for_both() {
    let mut cluster = cluster();
    let c = pairs_class(&mut cluster);
    let gpu = |i: u32| id("gpu.nvidia.com", "node-a", &format!("gpu-{i}"));
    let observed: HashSet<DeviceId> = (0..4).map(gpu).collect();
    cluster.set_observed_devices(observed.clone());
    assert_eq!(per_host(&cluster, c)["node-a"], 4);
    cluster.audit_devices().unwrap();
    // A gang on node-a takes the other four pairs; one of its GPUs is then also claimed outside.
    let placement = place(&mut cluster, 19);
    assert_eq!(cluster.free_for(c, DomainId::ROOT).gpus, 0);
    let mine: Vec<DeviceId> = placement
        .devices
        .iter()
        .flatten()
        .flat_map(|p| p.claims.iter().flat_map(|c| c.results.iter().map(|r| r.device.clone())))
        .filter(|d| d.pool == "node-a" && d.driver == "gpu.nvidia.com")
        .collect();
    assert_eq!(mine.len(), 4);
    let mut both = observed.clone();
    both.insert(mine[0].clone());
    cluster.set_observed_devices(both);
    cluster.release_placement(&placement).unwrap();
    assert!(cluster.devices_in_use().unwrap().devices.contains(&mine[0]), "still claimed outside");
    assert_eq!(per_host(&cluster, c)["node-a"], 3);
    cluster.set_observed_devices(HashSet::new());
    assert!(cluster.devices_in_use().unwrap().devices.is_empty());
    assert_eq!(per_host(&cluster, c)["node-a"], 8);
    cluster.audit_devices().unwrap();
}

#[test]
fn whole_gpus_are_counted_from_the_devices_of_gpu_classes() {
    let mut cluster = cluster();
    let gpus = cluster.gpu_devices();
    let want: BTreeMap<String, u64> = [("node-a", 8), ("node-b", 8), ("node-c", 8), ("node-d", 1), ("node-e", 1)]
        .map(|(n, g)| (n.to_string(), g))
        .into();
    assert_eq!(gpus, want, "NICs and MIG partitions are not whole GPUs");
    let mut empty = Cluster::from_yaml("name: x\nlevels: [host]\nnodes:\n- {name: n, cpus: 8}\n", "x.yaml").unwrap();
    empty.replace_devices(DraObjects::default()).unwrap();
    assert!(empty.gpu_devices().is_empty());
}

#[test]
fn a_node_local_pool_published_again_changes_only_its_node() {
    let mut cluster = cluster();
    let c = pairs_class(&mut cluster);
    let placement = place(&mut cluster, 23);
    let held = cluster.devices_in_use().unwrap().devices.clone();
    let key = ("gpu.nvidia.com".to_string(), "node-b".to_string());
    let mut slices: Vec<_> = load().slices.into_iter().filter(|s| s.driver == key.0 && s.pool.name == key.1).collect();
    assert_eq!(slices.len(), 1);
    // node-b's driver drops gpu-0 (say it fell off the bus): its pairs go from 7 to 6 and the gang
    // that held it holds the rest.
    slices[0].devices.retain(|d| d.name != "gpu-0");
    let (nodes, reports) = cluster.replace_pools(std::slice::from_ref(&key), &slices).expect("a node-local pool");
    assert!(reports.is_empty(), "{reports:?}");
    assert_eq!(nodes.into_iter().collect::<Vec<_>>(), vec!["node-b"]);
    let only: std::collections::BTreeSet<String> = ["node-b".to_string()].into();
    assert_eq!(cluster.gpu_devices_of(Some(&only)), [("node-b".to_string(), 7)].into());
    let now = cluster.devices_in_use().unwrap().devices.clone();
    let lost = id("gpu.nvidia.com", "node-b", "gpu-0");
    assert!(held.contains(&lost) && !now.contains(&lost));
    assert_eq!(now.len(), held.len() - 1);
    cluster.audit_devices().unwrap();
    cluster.release_placement(&placement).unwrap();
    assert!(cluster.devices_in_use().unwrap().devices.is_empty());
    let offered = per_host(&cluster, c);
    assert_eq!((offered["node-a"], offered["node-b"], offered["node-c"]), (8, 6, 8));
    // The pool gone altogether: node-b offers nothing.
    cluster.replace_pools(std::slice::from_ref(&key), &[]).expect("a node-local pool");
    assert_eq!(per_host(&cluster, c)["node-b"], 0);
    cluster.audit_devices().unwrap();
}

#[test]
fn a_pool_several_nodes_share_is_left_to_a_whole_replacement() {
    let mut cluster = cluster();
    let mut objects = load();
    let mut shared = objects.slices.iter().find(|s| s.node_name.as_deref() == Some("node-a")).unwrap().clone();
    shared.node_name = None;
    shared.all_nodes = true;
    shared.pool.name = "site".into();
    shared.name = "site-licence".into();
    objects.slices.push(shared.clone());
    cluster.replace_devices(objects).unwrap();
    let key = (shared.driver.clone(), "site".to_string());
    let before = cluster.devices_in_use().unwrap().devices.len();
    assert!(cluster.replace_pools(std::slice::from_ref(&key), std::slice::from_ref(&shared)).is_none());
    assert_eq!(cluster.devices_in_use().unwrap().devices.len(), before);
}
