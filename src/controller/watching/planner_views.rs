//! Reading cached objects into the planner's views: workloads and pods.

use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use serde_json::Value;
use trainyard_bridges::WorkloadKind;

use crate::api::trainer::JobStatus;
use crate::controller::deciding::plan::WorkloadView;
use crate::controller::deciding::pod_bindings::{PodClaim, PodView};

/// The planner's view of a JobSet or LeaderWorkerSet given as JSON.
pub fn workload_view(kind: WorkloadKind, object: &Value) -> WorkloadView {
    let spec = &object["spec"];
    let status = &object["status"];
    let suspended = match kind {
        WorkloadKind::JobSet => spec["suspend"].as_bool().unwrap_or(false),
        WorkloadKind::LeaderWorkerSet => spec["replicas"].as_i64() == Some(0),
    };
    let condition = |type_: &str| {
        status["conditions"].as_array()?.iter().find_map(|c| {
            (c["type"] == type_ && c["status"] == "True").then(|| {
                let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
                (text("reason"), text("message"))
            })
        })
    };
    let count = |v: &Value, k: &str| v[k].as_i64().and_then(|n| i32::try_from(n).ok()).unwrap_or(0);
    let jobs_status = status["replicatedJobsStatus"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|r| JobStatus {
                    name: r["name"].as_str().unwrap_or_default().to_string(),
                    ready: count(r, "ready"),
                    succeeded: count(r, "succeeded"),
                    failed: count(r, "failed"),
                    active: count(r, "active"),
                    suspended: count(r, "suspended"),
                })
                .collect()
        })
        .unwrap_or_default();
    WorkloadView { suspended, completed: condition("Completed"), failed: condition("Failed"), jobs_status }
}

/// The planner's view of a pod.
pub fn pod_view(pod: &Pod) -> PodView {
    let spec = pod.spec.as_ref();
    PodView {
        name: pod.metadata.name.clone().unwrap_or_default(),
        labels: pod.metadata.labels.clone().unwrap_or_default(),
        gates: spec
            .and_then(|s| s.scheduling_gates.as_ref())
            .map(|g| g.iter().map(|g| g.name.clone()).collect())
            .unwrap_or_default(),
        has_node_selector: spec.is_some_and(|s| s.node_selector.is_some()),
        node_name: spec.and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty()),
        created: pod.metadata.creation_timestamp.as_ref().map(|t| t.0.as_second()),
        claims: pod_claims(pod),
    }
}

/// What the reconcilers' cache keeps of a gang pod: its metadata (no managed fields), and of its
/// spec and status only what [`pod_view`] reads. Containers, volumes and conditions of
/// thousands of pods were held for nothing.
pub fn slim_pod(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
    if let Some(spec) = pod.spec.as_mut() {
        *spec = PodSpec {
            scheduling_gates: spec.scheduling_gates.take(),
            node_selector: spec.node_selector.take(),
            node_name: spec.node_name.take(),
            resource_claims: spec.resource_claims.take(),
            ..Default::default()
        };
    }
    if let Some(status) = pod.status.as_mut() {
        *status = PodStatus { resource_claim_statuses: status.resource_claim_statuses.take(), ..Default::default() };
    }
}

fn pod_claims(pod: &Pod) -> Vec<PodClaim> {
    let made = pod.status.as_ref().and_then(|s| s.resource_claim_statuses.as_ref());
    let spec = pod.spec.as_ref().and_then(|s| s.resource_claims.as_ref());
    spec.into_iter()
        .flatten()
        .filter_map(|c| {
            let template = c.resource_claim_template_name.clone()?;
            let claim =
                made.into_iter().flatten().find(|m| m.name == c.name).and_then(|m| m.resource_claim_name.clone());
            Some(PodClaim { name: c.name.clone(), template, claim })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_finished_jobset_reports_its_condition_and_counts() {
        let js = json!({
            "spec": {"suspend": false},
            "status": {
                "conditions": [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted", "message": "done"}],
                "replicatedJobsStatus": [{"name": "node", "succeeded": 1}],
            },
        });
        let v = workload_view(WorkloadKind::JobSet, &js);
        assert_eq!(v.completed, Some(("AllJobsCompleted".into(), "done".into())));
        assert_eq!(v.failed, None);
        assert_eq!(v.jobs_status[0].succeeded, 1);
        let lws = json!({"spec": {"replicas": 0}});
        assert!(workload_view(WorkloadKind::LeaderWorkerSet, &lws).suspended);
    }

    #[test]
    fn a_slim_pod_reads_as_the_whole_one() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "tj-node-0-0", "namespace": "ml", "labels": {"trainyard.dev/gang": "tj"},
                         "creationTimestamp": "2026-12-07T06:00:00Z",
                         "managedFields": [{"manager": "kube-controller-manager", "operation": "Update"}]},
            "spec": {
                "containers": [{"name": "node", "image": "trainer", "env": [{"name": "PET_NNODES", "value": "4"}]}],
                "volumes": [{"name": "data", "emptyDir": {}}],
                "schedulingGates": [{"name": "trainyard.dev/topology"}],
                "nodeSelector": {"rack": "r1"},
                "nodeName": "gpu-1",
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}],
            },
            "status": {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "message": "gated"}],
                "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "tj-node-0-0-gpu-x"}],
            },
        }))
        .expect("a pod");
        let mut slim = pod.clone();
        slim_pod(&mut slim);
        assert_eq!(pod_view(&slim), pod_view(&pod));
        assert_eq!(pod_view(&slim).claims[0].claim.as_deref(), Some("tj-node-0-0-gpu-x"));
        let spec = slim.spec.as_ref().expect("a spec");
        assert!(spec.containers.is_empty() && spec.volumes.is_none() && spec.tolerations.is_none());
        assert!(slim.metadata.managed_fields.is_none());
        assert_eq!(slim.metadata.labels, pod.metadata.labels);
    }
}
