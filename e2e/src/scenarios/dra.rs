//! DRA in both commit modes. Four nodes publish their GPUs and RDMA NICs as ResourceSlices (two
//! GPUs and one NIC under each of four PCIe roots); a gang of six pods each claims two GPUs and
//! a NIC of one root. With `delegate` kube-scheduler's DynamicResources plugin allocates each
//! claim on the node trainyard pinned; with `allocate` trainyard writes the allocation it chose
//! and kube-scheduler only reserves it. Either way every pod is bound where recorded with its
//! devices on one PCIe root, and when the gang ends its claims go and a second gang that needs
//! every device gets them.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use serde_json::{Value, json};

use crate::Options;
use crate::kube_util::{name_of, wait_for};
use crate::standins::nodes::FakeNode;
use crate::suite::{Checks, Suite, secs};
use crate::world::{ADMISSION, RACK, World};

const ROOTS: u32 = 4;

/// GPU and NIC slices of one node: two GPUs and one NIC per PCIe root.
fn slices(node: &str) -> Vec<Value> {
    let root = |r: u32| format!("pci0000:{:02x}", 0x10 * (r + 1));
    let gpus: Vec<Value> = (0..ROOTS * 2)
        .map(|i| {
            json!({"name": format!("gpu-{i}"), "attributes": {
            "type": {"string": "gpu"}, "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "resource.kubernetes.io/pcieRoot": {"string": root(i / 2)}},
            "capacity": {"memory": {"value": "80Gi"}}})
        })
        .collect();
    let nics: Vec<Value> = (0..ROOTS)
        .map(|r| {
            json!({"name": format!("nic-{r}"), "attributes": {
            "type": {"string": "rdma"}, "resource.kubernetes.io/pcieRoot": {"string": root(r)}}})
        })
        .collect();
    let slice = |driver: &str, devices: Vec<Value>| {
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": format!("{node}-{driver}")},
            "spec": {"driver": driver, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices}})
    };
    vec![slice("gpu.nvidia.com", gpus), slice("nic.example.com", nics)]
}

async fn setup<'s>(suite: &'s mut Suite, tag: &str, mode: &str) -> Result<(World<'s>, String)> {
    let mut w = World::new(suite, tag).await?;
    let nodes: Vec<FakeNode> = (0..4)
        .map(|h| {
            let mut n = FakeNode::gpu_host(&format!("{tag}-h{h}"), &[(RACK, &format!("{tag}-r0"))]);
            n.gpus = 0;
            n
        })
        .collect();
    w.add_nodes(nodes.clone()).await?;
    w.topology(&[RACK]).await?;
    // Class names carry the scenario's tag; the label `gpu` in a class's name makes its devices GPUs.
    for (class, driver, type_) in [("gpu", "gpu.nvidia.com", "gpu"), ("rdma", "nic.example.com", "rdma")] {
        let expression = format!("device.driver == '{driver}' && device.attributes['{driver}'].type == '{type_}'");
        w.cluster_object(json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": format!("{class}.{tag}.example.com")}, "spec": {"selectors": [{"cel": {"expression": expression}}]}}))
            .await?;
    }
    for n in &nodes {
        for s in slices(&n.name) {
            w.cluster_object(s).await?;
        }
    }
    w.kube()
        .apply(&json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpu-nic", "namespace": w.ns},
        "spec": {"spec": {"devices": {
            "requests": [
                {"name": "gpus", "exactly": {"deviceClassName": format!("gpu.{tag}.example.com"), "count": 2}},
                {"name": "nic", "exactly": {"deviceClassName": format!("rdma.{tag}.example.com")}},
            ],
            "constraints": [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}],
        }}}}))
        .await?;
    w.kube()
        .apply(&json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
            "metadata": {"name": "torch", "namespace": w.ns},
            "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [{
                "name": "node",
                "template": {
                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"template": {"spec": {
                        "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": "gpu-nic"}],
                        "containers": [{"name": "node", "image": "example.org/torch:2.9", "resources": {"claims": [{"name": "dev"}]}}],
                    }}},
                },
            }]}}},
        }))
        .await?;
    let queue = w.queue("team", 256, None).await?;
    w.start_trainyard(&[&format!("--dra-commit={mode}")]).await?;
    Ok((w, queue))
}

/// The device attributes of every published device, by `driver/pool/device`.
async fn device_roots(w: &World<'_>) -> Result<BTreeMap<String, String>> {
    let mut roots = BTreeMap::new();
    for s in w.kube().list("resource.k8s.io/v1", "ResourceSlice", None, None).await? {
        let (driver, pool) =
            (s["spec"]["driver"].as_str().unwrap_or_default(), s["spec"]["pool"]["name"].as_str().unwrap_or_default());
        for d in s["spec"]["devices"].as_array().cloned().unwrap_or_default() {
            let root = d
                .pointer("/attributes/resource.kubernetes.io~1pcieRoot/string")
                .and_then(Value::as_str)
                .unwrap_or_default();
            roots.insert(format!("{driver}/{pool}/{}", d["name"].as_str().unwrap_or_default()), root.to_string());
        }
    }
    Ok(roots)
}

/// One result of a claim's allocation, as `driver/pool/device`.
pub(crate) fn allocated_device(result: &Value) -> String {
    let field = |name: &str| result[name].as_str().unwrap_or_default().to_string();
    format!("{}/{}/{}", field("driver"), field("pool"), field("device"))
}

/// The devices a TrainJob's admission record gives its pods, as `driver/pool/device`, sorted.
pub(crate) fn recorded_devices(tj: &Value) -> Vec<String> {
    let text = tj.pointer(&format!("/metadata/annotations/{}", ADMISSION.replace('/', "~1"))).and_then(Value::as_str);
    let record: Value = text.and_then(|t| serde_json::from_str(t).ok()).unwrap_or_default();
    let mut devices: Vec<String> = record["devices"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|slot| slot["claims"].as_array().cloned().unwrap_or_default())
        .flat_map(|claim| claim[1].as_array().cloned().unwrap_or_default())
        .map(|r| {
            format!("{}/{}/{}", r[1].as_str().unwrap_or(""), r[2].as_str().unwrap_or(""), r[3].as_str().unwrap_or(""))
        })
        .collect();
    devices.sort();
    devices
}

/// Checks every bound pod's claim: allocated on the pod's node, reserved for it, its GPUs and NIC
/// on one PCIe root; returns the devices by pod.
async fn check_claims(w: &World<'_>, job: &str, c: &mut Checks) -> Result<BTreeMap<String, Vec<String>>> {
    let roots = device_roots(w).await?;
    let mut by_pod = BTreeMap::new();
    for pod in w.gang_pods(job).await? {
        let pname = name_of(&pod);
        let node = pod.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or_default().to_string();
        let claim_name = pod
            .pointer("/status/resourceClaimStatuses/0/resourceClaimName")
            .and_then(Value::as_str)
            .with_context(|| format!("pod {pname} has no claim"))?
            .to_string();
        let claim = w
            .kube()
            .get("resource.k8s.io/v1", "ResourceClaim", Some(&w.ns), &claim_name)
            .await?
            .context("claim gone")?;
        let results =
            claim.pointer("/status/allocation/devices/results").and_then(Value::as_array).cloned().unwrap_or_default();
        let devices: Vec<String> = results.iter().map(allocated_device).collect();
        c.that(devices.len() == 3, format!("claim {claim_name} of {pname} holds 2 GPUs and a NIC: {devices:?}"))?;
        let on: std::collections::BTreeSet<&str> = results.iter().filter_map(|r| r["pool"].as_str()).collect();
        c.that(
            on.len() == 1 && on.contains(node.as_str()),
            format!("{pname}'s devices are on its node {node}: {on:?}"),
        )?;
        let pcie: std::collections::BTreeSet<&String> = devices.iter().filter_map(|d| roots.get(d)).collect();
        c.that(pcie.len() == 1, format!("{pname}'s GPUs and NIC share one PCIe root: {pcie:?}"))?;
        let reserved = claim
            .pointer("/status/reservedFor")
            .and_then(Value::as_array)
            .is_some_and(|r| r.iter().any(|x| x["name"] == pname.as_str()));
        c.that(reserved, format!("claim {claim_name} is reserved for {pname}"))?;
        by_pod.insert(pname, devices);
    }
    Ok(by_pod)
}

async fn scenario(suite: &mut Suite, tag: &str, mode: &str) -> Result<Checks> {
    let mut c = Checks::default();
    let (w, queue) = setup(suite, tag, mode).await?;
    let t = Instant::now();
    w.submit(&[w.trainjob("first", &queue, 6, 0)]).await?;
    w.wait_admitted(&["first".into()], Duration::from_secs(30)).await?;
    let bound = w.wait_bound_as_recorded("first", 6, Duration::from_secs(90)).await?;
    c.done();
    let first = check_claims(&w, "first", &mut c).await?;
    if mode == "allocate" {
        // The devices the pods got are those of the admission record.
        let tj = w.trainjob_now("first").await?;
        let recorded = recorded_devices(&tj);
        let mut got: Vec<String> = first.values().flatten().cloned().collect();
        got.sort();
        c.that(
            !recorded.is_empty() && recorded == got,
            format!("the claims hold the recorded devices (recorded {}, allocated {})", recorded.len(), got.len()),
        )?;
    }
    c.figure(format!("6 pods with GPU+NIC claims bound as recorded {} after creation", secs(t.elapsed())));
    let _ = bound;

    // The gang ends; its claims go with its pods and every device is free for the next gang.
    w.kube().delete("trainer.kubeflow.org/v1alpha1", "TrainJob", Some(&w.ns), "first").await?;
    let t = Instant::now();
    wait_for("the first gang's claims to be gone", Duration::from_secs(60), || async {
        let left = w.kube().list("resource.k8s.io/v1", "ResourceClaim", Some(&w.ns), None).await?;
        if left.is_empty() { Ok(Some(())) } else { Err(anyhow!("{} claims left", left.len())) }
    })
    .await?;
    c.done();
    w.submit(&[w.trainjob("whole", &queue, 16, 0)]).await?;
    w.wait_admitted(&["whole".into()], Duration::from_secs(60)).await?;
    w.wait_bound_as_recorded("whole", 16, Duration::from_secs(120)).await?;
    let all = check_claims(&w, "whole", &mut c).await?;
    let distinct: std::collections::BTreeSet<&String> = all.values().flatten().collect();
    c.that(
        distinct.len() == 48,
        format!("the second gang holds all 32 GPUs and 16 NICs once each ({} devices)", distinct.len()),
    )?;
    c.figure(format!(
        "devices handed over: a gang needing every device bound {} after the first ended",
        secs(t.elapsed())
    ));
    w.teardown().await?;
    Ok(c)
}

/// `--dra-commit delegate`.
pub async fn delegate(suite: &mut Suite, _: &Options) -> Result<Checks> {
    scenario(suite, "drd", "delegate").await
}

/// `--dra-commit allocate`.
pub async fn allocate(suite: &mut Suite, _: &Options) -> Result<Checks> {
    scenario(suite, "dra", "allocate").await
}
