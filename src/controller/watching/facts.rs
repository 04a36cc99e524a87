//! Node and Pod objects as the engine needs them, read once into typed values: a node's place in
//! the tree, allocatable capacity, labels, taints and readiness; a pod's node, its requests as
//! kube-scheduler counts them, and the gang it belongs to. Bad input is a [`NodeProblem`] that
//! names the node and the field, never a panic and never a node merged into another's domain.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Node, NodeStatus, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use trainyard_topology::eligibility::{HostAttrs, Taint, TaintEffect};
use trainyard_topology::sources::k8s_nodes::quantity::{parse_mebibytes, parse_millis, parse_whole};
use trainyard_topology::sources::k8s_nodes::tpu::TPU_ACCELERATOR_LABEL;
use trainyard_topology::sources::k8s_nodes::{GPU_PRODUCT_KEY, HOSTNAME_KEY};
use trainyard_topology::{HostSpec, Resources};

use crate::api::TopologySpec;

/// The taint the node lifecycle controller sets for a cordon.
const CORDON_TAINT: &str = "node.kubernetes.io/unschedulable";
/// The taints it sets while a node is not ready or unreachable.
const NOT_READY_TAINTS: [&str; 2] = ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"];

/// How node labels become levels: fixed when the engine is built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Levels {
    /// Label keys of the levels above the NVLink level and the host, outermost first.
    pub upper: Vec<String>,
    /// The NVLink clique label, when the clique level is part of the tree. A node without it is
    /// an NVLink domain of its own (named after the host).
    pub clique: Option<String>,
    /// The host's name comes from `kubernetes.io/hostname` (else from `metadata.name`).
    pub host_from_label: bool,
    /// Extended resource counted as GPUs.
    pub gpu_resource: String,
    /// Only nodes with all of these labels belong to the cluster.
    pub node_selector: BTreeMap<String, String>,
}

impl Levels {
    /// The levels a Topology describes. The NVLink level is there when `nodes` (the nodes seen at
    /// start-up) carry its label, as the offline reader decides it.
    pub fn of(spec: &TopologySpec, nodes: &[&Node]) -> Levels {
        let options = spec.node_list_options();
        let host_from_label = options.level_keys.last().is_some_and(|k| k == HOSTNAME_KEY);
        let upper: Vec<String> = options.level_keys.iter().filter(|k| *k != HOSTNAME_KEY).cloned().collect();
        let clique = options
            .clique_key
            .filter(|k| !upper.contains(k))
            .filter(|k| nodes.iter().any(|n| n.metadata.labels.as_ref().is_some_and(|l| l.contains_key(k.as_str()))));
        Levels {
            upper,
            clique,
            host_from_label,
            gpu_resource: options.gpu_resource,
            node_selector: spec.node_selector.clone(),
        }
    }

    /// The same levels under a fleet's top level, the worker cluster (manager mode).
    pub fn under_clusters(mut self) -> Levels {
        self.upper.retain(|k| k != crate::api::worker_cluster::CLUSTER_LEVEL_LABEL);
        self.upper.insert(0, crate::api::worker_cluster::CLUSTER_LEVEL_LABEL.to_string());
        self
    }

    /// The engine's level names, outermost first (label keys; the host level last).
    pub fn names(&self) -> Vec<String> {
        let mut names = self.upper.clone();
        names.extend(self.clique.clone());
        names.push(HOSTNAME_KEY.to_string());
        names
    }
}

/// A node as the engine sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeFacts {
    /// The Node object's name.
    pub name: String,
    /// Its host in the tree.
    pub host: HostSpec,
    /// Cordoned (`spec.unschedulable`).
    pub cordoned: bool,
    /// Ready is not True.
    pub not_ready: bool,
}

/// What a Node object is to the engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeView {
    /// Part of the cluster.
    Member(NodeFacts),
    /// Outside the Topology's node selector.
    Outside,
    /// Cannot be used as written: the node is left out and the message says why.
    Bad(NodeProblem),
}

/// A node left out, with the field at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeProblem {
    /// The field, e.g. `status.allocatable["cpu"]`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl std::fmt::Display for NodeProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl NodeFacts {
    /// Why the node is not usable now (cordoned, not ready), for messages; `None` when it is.
    pub fn unusable(&self) -> Option<&'static str> {
        match (self.cordoned, self.not_ready) {
            (true, _) => Some("cordoned"),
            (_, true) => Some("not ready"),
            _ => None,
        }
    }
}

/// What a Node held by the live picture keeps: its labels, spec, and of its status the resources
/// and the Ready condition, which is all `read_node` reads (again, when the Topology changes).
/// Image lists, managed fields, annotations, addresses, versions and the other conditions'
/// messages were most of each of thousands of objects.
pub fn slim_node(node: &mut Node) {
    node.metadata.managed_fields = None;
    node.metadata.annotations = None;
    if let Some(s) = node.status.as_mut() {
        *s = NodeStatus {
            allocatable: s.allocatable.take(),
            capacity: s.capacity.take(),
            conditions: s.conditions.take().map(|c| c.into_iter().filter(|c| c.type_ == "Ready").collect()),
            ..Default::default()
        };
    }
}

/// Reads a Node object under `levels`.
pub fn read_node(node: &Node, levels: &Levels) -> NodeView {
    let Some(name) = node.metadata.name.clone().filter(|n| !n.trim().is_empty()) else {
        return NodeView::Bad(NodeProblem { field: "metadata.name".into(), message: "a node needs a name".into() });
    };
    let labels = node.metadata.labels.clone().unwrap_or_default();
    if !levels.node_selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
        return NodeView::Outside;
    }
    match facts(&name, node, labels, levels) {
        Ok(f) => NodeView::Member(f),
        Err(p) => NodeView::Bad(p),
    }
}

fn facts(name: &str, node: &Node, labels: BTreeMap<String, String>, levels: &Levels) -> Result<NodeFacts, NodeProblem> {
    let label = |key: &str| -> Result<String, NodeProblem> {
        match labels.get(key).map(|v| v.trim()) {
            Some(v) if !v.is_empty() => Ok(v.to_string()),
            _ => Err(NodeProblem {
                field: format!("metadata.labels[\"{key}\"]"),
                message: "missing or empty; the node is left out rather than put in another's domain".into(),
            }),
        }
    };
    let host = if levels.host_from_label { label(HOSTNAME_KEY)? } else { name.to_string() };
    let mut path = levels.upper.iter().map(|k| label(k)).collect::<Result<Vec<_>, _>>()?;
    if let Some(key) = &levels.clique {
        // A node without a clique label reaches no other node over NVLink: a domain of its own.
        path.push(
            labels.get(key).map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).unwrap_or_else(|| host.clone()),
        );
    }
    path.push(host);
    let status = node.status.as_ref();
    let allocatable = status.and_then(|s| s.allocatable.as_ref());
    let amount = |key: &str, parse: fn(&str) -> Result<u64, _>| -> Result<u64, NodeProblem> {
        let Some(q) = allocatable.and_then(|a| a.get(key)) else { return Ok(0) };
        parse(&q.0).map_err(|e| NodeProblem {
            field: format!("status.allocatable[\"{key}\"]"),
            message: format!("{:?}: {e}", q.0),
        })
    };
    let capacity = Resources {
        gpus: amount(&levels.gpu_resource, parse_whole)?,
        cpu_milli: amount("cpu", parse_millis)?,
        memory_mib: amount("memory", parse_mebibytes)?,
    };
    let spec = node.spec.as_ref();
    let cordoned = spec.and_then(|s| s.unschedulable) == Some(true);
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    let mut taints = Vec::new();
    for (i, t) in spec.and_then(|s| s.taints.as_ref()).into_iter().flatten().enumerate() {
        // While the condition they stand for holds, these taints are read as the node being
        // unusable (a while), not ineligible; once it is over, a taint left behind still refuses
        // pods, as it does for kube-scheduler until the lifecycle controller removes it.
        if (t.key == CORDON_TAINT && cordoned) || (NOT_READY_TAINTS.contains(&t.key.as_str()) && !ready) {
            continue;
        }
        let effect = TaintEffect::parse(&t.effect).ok_or_else(|| NodeProblem {
            field: format!("spec.taints[{i}].effect"),
            message: format!("{:?} is not NoSchedule, PreferNoSchedule or NoExecute", t.effect),
        })?;
        taints.push(Taint { key: t.key.clone(), value: t.value.clone().unwrap_or_default(), effect });
    }
    taints.sort();
    let flavor = [GPU_PRODUCT_KEY, TPU_ACCELERATOR_LABEL]
        .iter()
        .find_map(|key| labels.get(*key).map(|v| v.trim().to_string()).filter(|v| !v.is_empty()));
    let attrs = HostAttrs { node_name: name.to_string(), labels, taints };
    Ok(NodeFacts {
        name: name.to_string(),
        host: HostSpec { path, capacity, flavor, attrs, ready: ready && !cordoned },
        cordoned,
        not_ready: !ready,
    })
}

/// A pod as the engine sees it: only pods bound to a node and not finished take capacity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodFacts {
    /// Object uid.
    pub uid: String,
    /// The node it is bound to.
    pub node: String,
    /// What it takes there, as kube-scheduler counts it.
    pub requests: Resources,
    /// `namespace/name` of the TrainJob whose gang it belongs to (its gang label), if any.
    pub gang: Option<String>,
    /// Being deleted (it still holds its node until it is gone).
    pub terminating: bool,
}

/// Reads a Pod; `None` for a pod that takes no node capacity (not bound, or Succeeded/Failed).
pub fn read_pod(pod: &Pod, gpu_resource: &str) -> Option<PodFacts> {
    let spec = pod.spec.as_ref()?;
    let node = spec.node_name.clone().filter(|n| !n.is_empty())?;
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return None;
    }
    let uid = pod.metadata.uid.clone()?;
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let gang = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(trainyard_bridges::GANG_LABEL))
        .map(|g| format!("{namespace}/{g}"));
    let terminating = pod.metadata.deletion_timestamp.is_some();
    Some(PodFacts { uid, node, requests: pod_requests(spec, gpu_resource), gang, terminating })
}

/// A pod's requests as kube-scheduler's `computePodResourceRequest` counts them: the containers
/// and restartable (sidecar) init containers summed, at least the largest init container with the
/// sidecars started before it, plus the pod overhead; pod-level requests win where given.
pub fn pod_requests(spec: &k8s_openapi::api::core::v1::PodSpec, gpu_resource: &str) -> Resources {
    let of = |requests: Option<&BTreeMap<String, Quantity>>| -> Resources {
        let get = |key: &str, parse: fn(&str) -> Result<u64, _>| {
            requests.and_then(|r| r.get(key)).and_then(|q| parse(&q.0).ok()).unwrap_or(0)
        };
        Resources {
            gpus: get(gpu_resource, parse_whole),
            cpu_milli: get("cpu", parse_millis),
            memory_mib: get("memory", parse_mebibytes),
        }
    };
    let container = |c: &Container| {
        let r = c.resources.as_ref();
        // Requests default to limits on admission; read a limit only where no request is given.
        let (requests, limits) = (r.and_then(|r| r.requests.as_ref()), r.and_then(|r| r.limits.as_ref()));
        let (req, lim) = (of(requests), of(limits));
        let given = |key: &str| requests.is_some_and(|m| m.contains_key(key));
        Resources {
            gpus: if given(gpu_resource) { req.gpus } else { lim.gpus },
            cpu_milli: if given("cpu") { req.cpu_milli } else { lim.cpu_milli },
            memory_mib: if given("memory") { req.memory_mib } else { lim.memory_mib },
        }
    };
    let mut total = spec.containers.iter().map(container).fold(Resources::ZERO, |a, b| a.saturating_add(&b));
    let mut sidecars = Resources::ZERO;
    let mut init_peak = Resources::ZERO;
    for c in spec.init_containers.iter().flatten() {
        let r = container(c);
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars = sidecars.saturating_add(&r);
            total = total.saturating_add(&r);
        } else {
            let during = r.saturating_add(&sidecars);
            init_peak = Resources {
                gpus: init_peak.gpus.max(during.gpus),
                cpu_milli: init_peak.cpu_milli.max(during.cpu_milli),
                memory_mib: init_peak.memory_mib.max(during.memory_mib),
            };
        }
    }
    let mut effective = Resources {
        gpus: total.gpus.max(init_peak.gpus),
        cpu_milli: total.cpu_milli.max(init_peak.cpu_milli),
        memory_mib: total.memory_mib.max(init_peak.memory_mib),
    };
    if let Some(pod_level) = spec.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        let p = of(Some(pod_level));
        if pod_level.contains_key("cpu") {
            effective.cpu_milli = p.cpu_milli;
        }
        if pod_level.contains_key("memory") {
            effective.memory_mib = p.memory_mib;
        }
    }
    effective.saturating_add(&of(spec.overhead.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_slim_node_reads_as_the_whole_one() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "gpu-1", "labels": {"kubernetes.io/hostname": "gpu-1", "rack": "r1"},
                         "annotations": {"note": "x".repeat(500)}},
            "spec": {"unschedulable": true, "taints": [
                {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
                {"key": "dedicated", "value": "ml", "effect": "NoExecute"}]},
            "status": {
                "capacity": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"},
                "allocatable": {"cpu": "63", "memory": "500Gi", "nvidia.com/gpu": "8"},
                "conditions": [
                    {"type": "MemoryPressure", "status": "False", "message": "kubelet has sufficient memory"},
                    {"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "nodeInfo": {"machineID": "m", "systemUUID": "s", "bootID": "b", "kernelVersion": "6",
                             "osImage": "o", "containerRuntimeVersion": "c", "kubeletVersion": "v1.36.2",
                             "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
                "images": [{"names": ["registry/trainer:latest"], "sizeBytes": 1000}],
            },
        }))
        .expect("a node");
        let levels = Levels::of(&TopologySpec::hosts_only(), &[&node]);
        let mut slim = node.clone();
        slim_node(&mut slim);
        assert_eq!(read_node(&slim, &levels), read_node(&node, &levels));
        let status = slim.status.as_ref().expect("a status");
        assert!(status.images.is_none() && status.node_info.is_none() && status.addresses.is_none());
        assert_eq!(status.conditions.as_ref().map(Vec::len), Some(1), "only Ready is kept");
        assert!(slim.metadata.annotations.is_none());
        let mut not_ready = node;
        not_ready.status.as_mut().unwrap().conditions.as_mut().unwrap()[1].status = "False".into();
        let mut slim_not_ready = not_ready.clone();
        slim_node(&mut slim_not_ready);
        assert_eq!(read_node(&slim_not_ready, &levels), read_node(&not_ready, &levels));
        assert_ne!(read_node(&slim_not_ready, &levels), read_node(&slim, &levels), "readiness is still read");
    }
}
