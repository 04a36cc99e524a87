//! The workers' DRA devices through the manager. Two DRA-only hosts join west and publish four
//! GPUs each as ResourceSlices; east publishes none. A gang whose pods each claim two GPUs is
//! placed by the manager on west, with the devices chosen there: the manager's record names
//! west's pools in fleet names, the copy's record names them as west does, and the claims west's
//! trainyard writes (allocate mode) hold exactly those devices.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use serde_json::{Value, json};

use super::worker::Worker;
use super::{NS, fleet_job, placed};
use crate::kube_util::{Kube, wait_for};
use crate::scenarios::dra::{allocated_device, recorded_devices};
use crate::standins::nodes::FakeNode;
use crate::suite::{Checks, secs};
use crate::world::{RACK, World};

/// The worker that gets the devices.
const WITH_DEVICES: &str = "west";
/// GPUs each DRA-only host publishes.
const HOST_GPUS: u32 = 4;

/// The class, template and runtime every cluster of the fleet has alike.
fn shared_objects() -> Vec<Value> {
    vec![
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": "gpu.fleet.example.com"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}}),
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "gpu-pair", "namespace": NS},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpus", "exactly": {"deviceClassName": "gpu.fleet.example.com", "count": 2}}]}}}}),
        json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
        "metadata": {"name": "torch-dra", "namespace": NS},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [{
            "name": "node",
            "template": {
                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                "spec": {"template": {"spec": {
                    "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": "gpu-pair"}],
                    "containers": [{"name": "node", "image": "example.org/torch:2.9", "resources": {"claims": [{"name": "dev"}]}}],
                }}},
            },
        }]}}}}),
    ]
}

/// The GPU slice of one DRA-only host: its pool is the host.
fn slice(host: &str) -> Value {
    let devices: Vec<Value> = (0..HOST_GPUS)
        .map(|i| json!({"name": format!("gpu-{i}"), "attributes": {"type": {"string": "gpu"}}}))
        .collect();
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": format!("{host}-gpus")},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": host,
                 "pool": {"name": host, "generation": 1, "resourceSliceCount": 1}, "devices": devices}})
}

/// The devices the allocated claims of `ns` hold on a cluster, as `driver/pool/device`, sorted.
async fn allocated_devices(kube: &Kube) -> Result<Vec<String>> {
    let claims = kube.list("resource.k8s.io/v1", "ResourceClaim", Some(NS), None).await?;
    let mut devices: Vec<String> = claims
        .iter()
        .flat_map(|c| {
            c.pointer("/status/allocation/devices/results").and_then(Value::as_array).cloned().unwrap_or_default()
        })
        .map(|r| allocated_device(&r))
        .collect();
    devices.sort();
    Ok(devices)
}

/// The run: devices published on one worker, a claim gang placed there with them.
pub async fn run(w: &World<'_>, workers: &BTreeMap<String, Worker>, queue: &str, c: &mut Checks) -> Result<()> {
    for object in shared_objects() {
        w.kube().apply(&object).await?;
        for worker in workers.values() {
            worker.kube.apply(&object).await?;
        }
    }
    let west = &workers[WITH_DEVICES];
    let rack = format!("{WITH_DEVICES}-r0");
    let hosts: Vec<FakeNode> = (0..2)
        .map(|i| FakeNode { gpus: 0, ..FakeNode::gpu_host(&format!("{WITH_DEVICES}-d{i}"), &[(RACK, rack.as_str())]) })
        .collect();
    west.nodes.create(&west.kube, &hosts).await?;
    for host in &hosts {
        west.kube.apply(&slice(&host.name)).await?;
    }

    let t = Instant::now();
    let mut job = fleet_job(w, "dev", queue, 2);
    job["spec"]["runtimeRef"]["name"] = json!("torch-dra");
    job["spec"]["trainer"] = json!({"numNodes": 2});
    w.submit(&[job]).await?;
    let cluster = placed(w, workers, "dev", 2).await?;
    c.that(cluster == WITH_DEVICES, format!("the claim gang went to the worker with devices ({cluster})"))?;
    let fleet = recorded_devices(&w.trainjob_now("dev").await?);
    c.that(
        fleet.len() == 4
            && fleet.iter().all(|d| d.starts_with(&format!("gpu.nvidia.com/{WITH_DEVICES}/{WITH_DEVICES}-d"))),
        format!("the manager's record gives 4 of {WITH_DEVICES}'s GPUs, pools in fleet names: {fleet:?}"),
    )?;
    let local: Vec<String> = fleet.iter().map(|d| d.replacen(&format!("/{WITH_DEVICES}/"), "/", 1)).collect();
    let copy = west.copy(NS, "dev").await?.ok_or_else(|| anyhow!("no copy of dev on {WITH_DEVICES}"))?;
    let copied = recorded_devices(&copy);
    c.that(copied == local, format!("the copy's record names the same devices in the worker's pools: {copied:?}"))?;
    let held = wait_for("the copy's claims allocated", Duration::from_secs(60), || async {
        let held = allocated_devices(&west.kube).await?;
        if held.len() == local.len() { Ok(Some(held)) } else { Err(anyhow!("allocated {held:?}")) }
    })
    .await?;
    c.that(held == local, format!("the claims on {WITH_DEVICES} hold the recorded devices: {held:?}"))?;
    c.figure(format!(
        "a 2-pod claim gang bound on {WITH_DEVICES} with the manager's devices {} after creation",
        secs(t.elapsed())
    ));
    Ok(())
}
