//! How the devices the engine chose reach the pods (DRA), in one of two modes chosen per
//! deployment.
//!
//! *Delegate*: trainyard picks hosts only; kube-scheduler's DynamicResources plugin allocates
//! each claim on the pod's pinned host, and the claim's own constraints keep GPUs and NICs
//! aligned. Nothing is written to claims.
//!
//! *Allocate*: before a pod's gate goes, trainyard writes the `status.allocation` of each claim
//! made for it (the devices recorded in the admission, a node selector naming its host) and the
//! allocator's delete-protection finalizer. kube-scheduler then only checks that the allocation's
//! node selector admits the pod's node and reserves the claim for the pod at PreBind; it does not
//! allocate again. The allocation carries its `allocationTimestamp`: kube-scheduler 1.36 (device
//! binding conditions, beta and on) stamps an allocation that lacks one in the same status update
//! that reserves the claim, and the API server refuses that update because an allocation is
//! immutable once written, so the pod would never be bound. trainyard must then be the only allocator of those pools. When the gang stops
//! before its pods were bound (preempted, requeued, suspended, deleted, or timed out starting),
//! the allocations of claims whose pods were never bound are taken back: kube-controller-manager
//! deallocates only claims that were reserved.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use super::Action;
use crate::controller::acting::admission_record::AdmissionRecord;
use crate::controller::deciding::pod_bindings::{GangLayout, PodView, Ungate};

/// The finalizer an allocator puts on claims it allocated.
pub const DELETE_PROTECTION: &str = "resource.kubernetes.io/delete-protection";

/// Who allocates the devices of a gang's claims.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeviceCommit {
    /// kube-scheduler allocates on the hosts trainyard picked.
    #[default]
    Delegate,
    /// trainyard writes the allocations it chose before ungating.
    Allocate,
}

/// The ungates of a gang in allocate mode, each after the allocations of its pod's claims. A pod
/// whose recorded claims kube-controller-manager has not made yet keeps its gate until it has:
/// the pod's update brings the reconcile back.
pub fn allocated_ungates(
    record: &AdmissionRecord,
    layout: &GangLayout,
    pods: &[PodView],
    ungates: Vec<Ungate>,
    now: &Time,
) -> Vec<Action> {
    let at = now.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let by_name: BTreeMap<&str, &PodView> = pods.iter().map(|p| (p.name.as_str(), p)).collect();
    let mut out = Vec::new();
    for u in ungates {
        let Some(pod) = by_name.get(u.pod.as_str()) else { continue };
        let recorded = layout.ordinal(&pod.labels).and_then(|slot| record.devices_of(slot));
        let Some(recorded) = recorded else {
            // Nothing recorded (a pod without claims, or devices left out of a long record).
            out.push(Action::Ungate(u));
            continue;
        };
        let mut writes = Vec::new();
        let mut ready = true;
        for (template, results) in &recorded.claims {
            let name = template.rsplit_once('/').map_or(template.as_str(), |(_, n)| n);
            match pod.claims.iter().find(|c| c.template == name).and_then(|c| c.claim.clone()) {
                Some(claim) => writes.push(Action::AllocateClaim {
                    claim,
                    node: u.node.clone(),
                    results: results.clone(),
                    at: at.clone(),
                }),
                None => ready = false,
            }
        }
        if ready {
            out.extend(writes);
            out.push(Action::Ungate(u));
        }
    }
    out
}

/// Takes back the allocations written for the recorded claims of pods that were never bound.
pub fn releases(record: Option<&AdmissionRecord>, layout: Option<&GangLayout>, pods: &[PodView]) -> Vec<Action> {
    let (Some(record), Some(layout)) = (record, layout) else { return Vec::new() };
    if record.devices.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for pod in pods.iter().filter(|p| p.node_name.is_none()) {
        let Some(recorded) = layout.ordinal(&pod.labels).and_then(|slot| record.devices_of(slot)) else { continue };
        for (template, _) in &recorded.claims {
            let name = template.rsplit_once('/').map_or(template.as_str(), |(_, n)| n);
            if let Some(claim) = pod.claims.iter().find(|c| c.template == name).and_then(|c| c.claim.clone()) {
                out.push(Action::ReleaseClaim { claim });
            }
        }
    }
    out.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    out
}

/// The server-side apply body of a claim's `status.allocation`: the devices request by request,
/// the pools being node-local a node selector naming the node by `metadata.name` (the form
/// kube-scheduler writes), and when (`at`, RFC 3339).
pub fn allocation_status(namespace: &str, claim: &str, node: &str, results: &[[String; 4]], at: &str) -> Value {
    let results: Vec<Value> = results
        .iter()
        .map(|[request, driver, pool, device]| json!({"request": request, "driver": driver, "pool": pool, "device": device}))
        .collect();
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": claim, "namespace": namespace},
        "status": {
            "allocation": {
                "devices": {"results": results},
                "allocationTimestamp": at,
                "nodeSelector": {
                    "nodeSelectorTerms": [{
                        "matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}],
                    }],
                },
            },
        },
    })
}

/// The server-side apply body of a claim's metadata as trainyard owns it: the delete-protection
/// finalizer while it holds an allocation, nothing once it gives the allocation back (which
/// removes the finalizer it added).
pub fn claim_metadata(namespace: &str, claim: &str, protect: bool) -> Value {
    let mut body = json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": claim, "namespace": namespace},
    });
    if protect {
        body["metadata"]["finalizers"] = json!([DELETE_PROTECTION]);
    }
    body
}

/// The server-side apply body of a claim's status with nothing of trainyard's in it: the
/// allocation trainyard wrote goes.
pub fn released_status(namespace: &str, claim: &str) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": claim, "namespace": namespace},
    })
}
