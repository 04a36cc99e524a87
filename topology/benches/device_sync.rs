//! Following a live cluster's DRA objects on 1,000 nodes of 8 GPUs and 8 RDMA NICs, with three
//! classes of device needs in use and a quarter of the nodes' devices held by gangs: what one
//! claim of another workload costs (`set_observed_devices`, moves only its devices' host), what one
//! node's slices published again cost (`replace_pools`: that pool read, that node counted again),
//! what a changed class or template costs (`replace_devices`: the pool view built again, holders
//! carried over, every host whose pools changed counted again), and the GPUs counted from devices. The baseline, in
//! the same run, is giving a fresh cluster its devices (`set_devices` on no needs). Prints
//! per-change times and the ratios; `-- --quick` repeats less.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use trainyard_topology::devices::synth::{TEMPLATES, hgx_h100_objects};
use trainyard_topology::devices::{DeviceId, DraObjects};
use trainyard_topology::{Cluster, GangShape, PodSetShape, Resources, TopologyRequest};

const CLUSTER: &str = "name: dra-1k
levels: [block, rack, host]
generate:
  counts: [5, 25, 8]
  node: {gpus: 8, cpus: 192, memory_gib: 2048}
";

fn objects(cluster: &Cluster) -> DraObjects {
    let topo = cluster.topology();
    hgx_h100_objects(topo.hosts().map(|h| topo.host_name(h).to_string()))
}

fn shape(template: &str, pods: u32) -> GangShape {
    let mut set = PodSetShape::new("workers", pods, Resources { gpus: 0, cpu_milli: 1000, memory_mib: 1024 });
    set.claims = vec![template.to_string()];
    GangShape { sets: vec![set], topology: TopologyRequest::Unconstrained }
}

fn time<T>(runs: usize, mut f: impl FnMut(usize) -> T) -> Duration {
    let started = Instant::now();
    for i in 0..runs {
        std::hint::black_box(f(i));
    }
    started.elapsed() / runs as u32
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let runs = if quick { 3 } else { 10 };
    let mut cluster = Cluster::from_yaml(CLUSTER, "dra-1k").expect("valid cluster");
    let objects = objects(&cluster);
    let fresh = time(runs, |_| {
        let mut c = Cluster::from_yaml(CLUSTER, "dra-1k").expect("valid cluster");
        c.set_devices(objects.clone()).expect("devices")
    });
    cluster.set_devices(objects.clone()).expect("devices");
    // Every need's class in use, and a quarter of the nodes' devices held by whole-node gangs.
    let mut classes = Vec::new();
    for (template, _) in TEMPLATES {
        let mut s = shape(template, 1);
        let fit = cluster.device_fit(&mut s).expect("claims resolve");
        classes.push(cluster.class_for(&Default::default(), None, fit).expect("class"));
    }
    let mut whole = shape("node-8gpu-8nic", 250);
    let fit = cluster.device_fit(&mut whole).expect("claims resolve");
    let class = cluster.class_for(&Default::default(), None, fit).expect("class");
    let demand = cluster.topology().demand(&whole, None, class).expect("demand");
    let mut placement = cluster.place_demand(&demand).expect("room for 250 nodes");
    cluster.allocate_placement(&mut placement).expect("devices");
    let held = cluster.devices_in_use().expect("devices").devices.len();
    // One claim of another workload: 8 GPUs of a free node, taken and given back.
    let free_node = cluster
        .topology()
        .hosts()
        .map(|h| cluster.topology().host_name(h).to_string())
        .find(|n| !placement.hosts.iter().any(|&h| cluster.topology().host_name(h) == n))
        .expect("a free node");
    let claim: HashSet<DeviceId> =
        (0..8).map(|i| DeviceId::new("gpu.nvidia.com", &free_node, &format!("gpu-{i}"))).collect();
    let observed = time(runs * 20, |i| {
        cluster.set_observed_devices(if i % 2 == 0 { claim.clone() } else { HashSet::new() });
        // The classes count the host again when they are next read.
        cluster.free_for(classes[0], trainyard_topology::DomainId::ROOT)
    });
    let replace = time(runs, |_| cluster.replace_devices(objects.clone()).expect("devices"));
    // One node's GPU pool published again (a new generation, one device fewer and back).
    let key = ("gpu.nvidia.com".to_string(), free_node.clone());
    let slices: Vec<_> = objects.slices.iter().filter(|s| s.driver == key.0 && s.pool.name == key.1).cloned().collect();
    let mut fewer = slices.clone();
    fewer[0].devices.pop();
    let pool = time(runs * 20, |i| {
        let publish = if i % 2 == 0 { &fewer } else { &slices };
        cluster.replace_pools(std::slice::from_ref(&key), publish).expect("a node-local pool");
        cluster.free_for(classes[0], trainyard_topology::DomainId::ROOT)
    });
    assert_eq!(cluster.devices_in_use().expect("devices").devices.len(), held, "holders carried over");
    let gpus = time(runs, |_| cluster.gpu_devices());
    assert_eq!(cluster.gpu_devices().len(), 1_000);
    cluster.audit_devices().expect("counts agree after every change");
    let view = time(runs, |_| trainyard_topology::devices::PoolView::build(&objects.slices));
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("  (the pool view alone: {:.3} ms)", ms(view));
    println!("device sync, 1,000 nodes x (8 GPUs + 8 NICs), {held} devices held, {} need classes", classes.len() + 1);
    println!("  baseline: devices given to a fresh cluster      {:>9.3} ms", ms(fresh));
    println!(
        "  replace_devices (a class or template changed)    {:>9.3} ms  ({:.2}x baseline)",
        ms(replace),
        ms(replace) / ms(fresh)
    );
    println!(
        "  replace_pools (one node's pool published again)  {:>9.3} ms  ({:.4}x baseline)",
        ms(pool),
        ms(pool) / ms(fresh)
    );
    println!(
        "  set_observed_devices (one claim of 8 GPUs)       {:>9.3} ms  ({:.4}x baseline)",
        ms(observed),
        ms(observed) / ms(fresh)
    );
    println!("  gpu_devices (GPUs counted from devices)          {:>9.3} ms", ms(gpus));
}
