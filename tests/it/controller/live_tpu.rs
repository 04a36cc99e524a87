//! GKE TPU node pools in the live picture: a node pool of hosts labelled with a TPU topology is a
//! torus, and a multi-slice TPU TrainJob takes whole pools, one per slice, in one block.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use trainyard::api::Topology;
use trainyard::controller::deciding::scheduling_loop::Decision;

use super::cluster::*;

/// A v5p host of pool `pool` in block `block`: four chips, GKE's TPU labels.
fn tpu_node(name: &str, block: &str, pool: &str) -> k8s_openapi::api::core::v1::Node {
    let mut n = node(name, 0);
    let allocatable = n.status.as_mut().unwrap().allocatable.as_mut().unwrap();
    allocatable.remove("nvidia.com/gpu");
    allocatable.insert("google.com/tpu".into(), Quantity("4".into()));
    let n = labelled(n, "cloud.google.com/gce-topology-block", block);
    let n = labelled(n, "cloud.google.com/gke-nodepool", pool);
    let n = labelled(n, "cloud.google.com/gke-tpu-accelerator", "tpu-v5p-slice");
    labelled(n, "cloud.google.com/gke-tpu-topology", "2x2x4")
}

fn topology() -> Topology {
    serde_saphyr::from_str(
        "apiVersion: trainyard.io/v1alpha1
kind: Topology
metadata: {name: default}
spec:
  levels: [{nodeLabel: cloud.google.com/gce-topology-block}, {nodeLabel: cloud.google.com/gke-nodepool}]
  gpuResource: google.com/tpu
",
    )
    .expect("topology parses")
}

fn tpu_runtime() -> String {
    runtime_yaml(
        "tpu",
        "                nodeSelector: {cloud.google.com/gke-tpu-accelerator: tpu-v5p-slice, cloud.google.com/gke-tpu-topology: 2x2x4}\n",
    )
    .replace("      - name: node\n        template:", "      - name: node\n        replicas: 2\n        template:")
}

/// A TPU TrainJob of `nodes` hosts of four chips.
fn tpu_job(name: &str, nodes: u32, created: u64) -> trainyard::api::TrainJob {
    let mut job = trainjob(name, "tpu", "team", nodes, 0, created);
    let mut value = serde_json::to_value(&job).unwrap();
    value["spec"]["trainer"]["resourcesPerNode"] =
        serde_json::json!({"requests": {"google.com/tpu": 4}, "limits": {"google.com/tpu": 4}});
    job = serde_json::from_value(value).unwrap();
    job
}

#[test]
fn a_multi_slice_tpu_trainjob_takes_two_whole_node_pools() {
    let mut nodes = Vec::new();
    for (block, pools) in [("b0", ["p0", "p1"]), ("b1", ["p2", "p3"])] {
        for pool in pools {
            nodes.extend((0..4).map(|i| tpu_node(&format!("{pool}-h{i}"), block, pool)));
        }
    }
    // One host of p0 is busy with another workload: p0 is no whole slice now.
    let mut busy = pod("foreign", "p0-h2", 0, None);
    let requests = busy.spec.as_mut().unwrap().containers[0].resources.as_mut().unwrap().requests.as_mut().unwrap();
    requests.insert("google.com/tpu".into(), Quantity("1".into()));
    let runtimes = runtimes(&[tpu_runtime()]);
    let policy = "queues:\n  - {name: team, nominal: {gpus: 256}}\nundeclared_queues: reject\n";
    let mut live = start_on(policy, &[topology()], &nodes, std::slice::from_ref(&busy), &[], runtimes.clone(), T0);
    let job = tpu_job("slices", 8, 0);
    live.apply(
        trainyard::controller::watching::live::Change::Job(Box::new(kube::runtime::watcher::Event::Apply(job.clone()))),
        T0,
    );
    live.cycle(T0);
    let Some(Decision::Admit(record)) = live.decision("team/slices").cloned() else {
        panic!("not admitted: {:?}", live.decision("team/slices"))
    };
    let hosts = hosts_of(&record);
    let pools: Vec<&str> = hosts.iter().map(|h| h.split_once('-').unwrap().0).collect();
    assert_eq!(hosts.len(), 8, "{hosts:?}");
    assert!(pools[..4].iter().all(|p| *p == pools[0]) && pools[4..].iter().all(|p| *p == pools[4]), "{hosts:?}");
    assert_ne!(pools[0], pools[4], "two slices, two pools: {hosts:?}");
    assert!(!pools.contains(&"p0"), "p0 has a busy host, so it is no whole slice: {hosts:?}");
    // A controller started afresh from the same objects (a restart, or a relist after 410 Gone)
    // sees the same tori and decides the same.
    let mut fresh = start_on(policy, &[topology()], &nodes, &[busy], &[job], runtimes.clone(), T0);
    fresh.cycle(T0);
    assert_eq!(fresh.decision("team/slices").cloned(), Some(Decision::Admit(record.clone())));

    // A third slice does not fit anywhere whole now; it waits, said in TPU terms.
    let mut more = tpu_job("more", 12, 1);
    more.metadata.uid = Some("uid-more".into());
    live.apply(
        trainyard::controller::watching::live::Change::Job(Box::new(kube::runtime::watcher::Event::Apply(more))),
        T0,
    );
    live.cycle(T0 + 1);
    match live.decision("team/more").cloned() {
        Some(Decision::Pending { reason, .. }) => assert_eq!(reason, "TpuSlicesUnavailable"),
        other => panic!("three slices with one pool free: {other:?}"),
    }
}
