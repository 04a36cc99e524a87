//! Fake nodes: Node objects made as a kubelet registers them (labels at creation; capacity,
//! allocatable and the Ready condition through the `status` subresource), their Leases in
//! `kube-node-lease` renewed every 10 s, and the ways a node goes bad (cordon, NotReady, taint,
//! deletion).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::kube_util::Kube;

/// One node to make.
#[derive(Clone, Debug)]
pub struct FakeNode {
    /// Its name (also its `kubernetes.io/hostname` label).
    pub name: String,
    /// Its labels besides the hostname.
    pub labels: BTreeMap<String, String>,
    /// `nvidia.com/gpu` allocatable.
    pub gpus: u32,
    /// Whole CPUs.
    pub cpus: u32,
    /// Memory in GiB.
    pub memory_gib: u32,
}

impl FakeNode {
    /// An 8-GPU host with 96 CPUs and 1 TiB.
    pub fn gpu_host(name: &str, labels: &[(&str, &str)]) -> FakeNode {
        FakeNode {
            name: name.to_string(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            gpus: 8,
            cpus: 96,
            memory_gib: 1024,
        }
    }
}

/// The nodes whose Leases are renewed.
#[derive(Clone, Default)]
pub struct Nodes {
    alive: Arc<Mutex<BTreeSet<String>>>,
}

fn now() -> String {
    Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

impl Nodes {
    /// Starts renewing Leases every 10 s (as a kubelet does) for as long as the suite runs.
    pub fn start(kube: Kube) -> Nodes {
        let nodes = Nodes::default();
        let alive = nodes.alive.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                let names: Vec<String> = alive.lock().expect("lock").iter().cloned().collect();
                for name in names {
                    // A renewal that fails (the API server away) is simply tried again next time.
                    let _ = renew_lease(&kube, &name).await;
                }
            }
        });
        nodes
    }

    /// Registers the nodes (16 at a time) and marks them Ready.
    pub async fn create(&self, kube: &Kube, nodes: &[FakeNode]) -> Result<()> {
        futures::stream::iter(nodes.iter().map(|n| register(kube, n)))
            .buffer_unordered(16)
            .try_collect::<Vec<()>>()
            .await?;
        self.alive.lock().expect("lock").extend(nodes.iter().map(|n| n.name.clone()));
        Ok(())
    }

    /// Deletes nodes and stops renewing their Leases (16 at a time).
    pub async fn delete(&self, kube: &Kube, names: &[String]) -> Result<()> {
        self.alive.lock().expect("lock").retain(|n| !names.contains(n));
        futures::stream::iter(names.iter().map(|name| async move {
            kube.delete("v1", "Node", None, name).await?;
            kube.delete("coordination.k8s.io/v1", "Lease", Some("kube-node-lease"), name).await
        }))
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
        Ok(())
    }
}

/// Registers nodes with their status in the one request that creates each (as a kubelet does),
/// 32 at a time, and no Lease.
pub async fn register_quietly(kube: &Kube, nodes: &[FakeNode]) -> Result<()> {
    futures::stream::iter(nodes.iter().map(|node| async move {
        let mut object = node_object(node);
        object["status"] = status_of(node, true)["status"].clone();
        let made = kube.create(&object).await?;
        // A server that drops the status on create gets it the usual way.
        if made.pointer("/status/allocatable").is_none() {
            set_ready(kube, node, true).await?;
        }
        anyhow::Ok(())
    }))
    .buffer_unordered(32)
    .try_collect::<Vec<()>>()
    .await?;
    Ok(())
}

fn node_object(node: &FakeNode) -> Value {
    let mut labels: BTreeMap<String, String> = node.labels.clone();
    labels.insert("kubernetes.io/hostname".into(), node.name.clone());
    labels.insert("kubernetes.io/os".into(), "linux".into());
    labels.insert("kubernetes.io/arch".into(), "amd64".into());
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": labels},
        "spec": {},
    })
}

async fn register(kube: &Kube, node: &FakeNode) -> Result<()> {
    kube.apply(&node_object(node)).await?;
    set_ready(kube, node, true).await?;
    renew_lease(kube, &node.name).await
}

/// Writes the node's status: capacity and allocatable, and the Ready condition.
pub async fn set_ready(kube: &Kube, node: &FakeNode, ready: bool) -> Result<()> {
    kube.merge_status("v1", "Node", None, &node.name, &status_of(node, ready)).await
}

/// The status patch of a node: capacity and allocatable, and the Ready condition.
fn status_of(node: &FakeNode, ready: bool) -> Value {
    let resources = json!({
        "cpu": node.cpus.to_string(),
        "memory": format!("{}Gi", node.memory_gib),
        "pods": "110",
        "nvidia.com/gpu": node.gpus.to_string(),
    });
    let (status, reason) = if ready { ("True", "KubeletReady") } else { ("False", "KubeletNotReady") };
    json!({
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{
                "type": "Ready", "status": status, "reason": reason,
                "message": "set by the trainyard e2e suite",
                "lastHeartbeatTime": now(), "lastTransitionTime": now(),
            }],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": node.name}],
            "nodeInfo": {
                "kubeletVersion": "v1.36.2", "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64",
                "containerRuntimeVersion": "fake://1", "kernelVersion": "", "osImage": "", "machineID": "",
                "systemUUID": "", "bootID": "",
            },
        },
    })
}

/// Only the Ready condition, as a kubelet reports NotReady or Ready again.
pub async fn set_ready_condition(kube: &Kube, name: &str, ready: bool) -> Result<()> {
    let Some(node) = kube.get("v1", "Node", None, name).await? else { return Ok(()) };
    let mut conditions: Vec<Value> =
        node.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    conditions.retain(|c| c["type"] != "Ready");
    let (status, reason) = if ready { ("True", "KubeletReady") } else { ("False", "KubeletNotReady") };
    conditions.push(json!({
        "type": "Ready", "status": status, "reason": reason, "message": "set by the trainyard e2e suite",
        "lastHeartbeatTime": now(), "lastTransitionTime": now(),
    }));
    kube.merge_status("v1", "Node", None, name, &json!({"status": {"conditions": conditions}})).await
}

/// Cordons (or uncordons) a node, as `kubectl cordon` does.
pub async fn cordon(kube: &Kube, name: &str, cordoned: bool) -> Result<()> {
    kube.merge("v1", "Node", None, name, &json!({"spec": {"unschedulable": cordoned}})).await
}

/// Replaces a node's taints.
pub async fn taint(kube: &Kube, name: &str, taints: Value) -> Result<()> {
    kube.merge("v1", "Node", None, name, &json!({"spec": {"taints": taints}})).await
}

async fn renew_lease(kube: &Kube, name: &str) -> Result<()> {
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()},
    });
    kube.apply_as("kubelet", &lease).await.map(|_| ())
}
