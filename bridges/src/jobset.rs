//! Typed `jobset.x-k8s.io/v1alpha2` JobSet (the object trainyard emits) and its webhook defaults.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::meta::{ObjectMeta, TemplateMeta};
use crate::pod::PodTemplate;

/// JobSet API version.
pub const API_VERSION: &str = "jobset.x-k8s.io/v1alpha2";
/// JobSet kind.
pub const KIND: &str = "JobSet";

/// A JobSet object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSet {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// Always [`KIND`].
    pub kind: String,
    /// Object metadata.
    pub metadata: ObjectMeta,
    /// Desired state.
    pub spec: JobSetSpec,
}

/// `JobSet.spec`; also the `template.spec` of a TrainingRuntime.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSetSpec {
    /// Replicated jobs, in order.
    #[serde(default)]
    pub replicated_jobs: Vec<ReplicatedJob>,
    /// Headless-service networking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
    /// When the JobSet counts as completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_policy: Option<SuccessPolicy>,
    /// Restart and failure handling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<FailurePolicy>,
    /// Deprecated startup ordering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_policy: Option<StartupPolicy>,
    /// Suspends every child Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// Shared PVC templates (v0.11+).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_claim_policies: Vec<VolumeClaimPolicy>,
    /// Every other spec field (coordinator, managedBy, ttlSecondsAfterFinished, ...), preserved.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// One `replicatedJobs[]` entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicatedJob {
    /// Name, used in child Job names `<js>-<name>-<idx>`.
    pub name: String,
    /// Group for the `group-*` labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_name: Option<String>,
    /// Number of Jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Job template.
    #[serde(default)]
    pub template: JobTemplate,
    /// Every other field (`dependsOn`, ...), preserved.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// A `batch/v1` `JobTemplateSpec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobTemplate {
    /// Job labels and annotations.
    #[serde(default, skip_serializing_if = "TemplateMeta::is_empty")]
    pub metadata: TemplateMeta,
    /// Job spec.
    #[serde(default)]
    pub spec: JobSpec,
}

/// A `batch/v1` `JobSpec`, typed where the renderer writes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSpec {
    /// Pods running at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<i32>,
    /// Successful pods needed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completions: Option<i32>,
    /// `Indexed` or `NonIndexed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_mode: Option<String>,
    /// Pod template.
    #[serde(default)]
    pub template: PodTemplate,
    /// Every other Job field, preserved.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `spec.network`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Network {
    /// Gives pods stable DNS names.
    #[serde(rename = "enableDNSHostnames", default, skip_serializing_if = "Option::is_none")]
    pub enable_dns_hostnames: Option<bool>,
    /// Headless Service name; defaults to the JobSet name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subdomain: Option<String>,
    /// Publishes not-ready pods in DNS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish_not_ready_addresses: Option<bool>,
    /// Other fields, preserved.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `spec.successPolicy`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SuccessPolicy {
    /// `All` or `Any`.
    #[serde(default)]
    pub operator: String,
    /// Replicated jobs that count (empty = all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_replicated_jobs: Vec<String>,
}

/// `spec.failurePolicy`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailurePolicy {
    /// Restarts allowed before the JobSet fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_restarts: Option<i32>,
    /// `Recreate`, `BlockingRecreate` or `InPlaceRestart`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_strategy: Option<String>,
    /// Rules; the first match wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<FailurePolicyRule>,
}

/// One `failurePolicy.rules[]` entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailurePolicyRule {
    /// Rule name; defaulted to `failurePolicyRule<N>`.
    #[serde(default)]
    pub name: String,
    /// Other fields (action, reasons, patterns, targets), preserved.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `spec.startupPolicy`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartupPolicy {
    /// `AnyOrder` or `InOrder`.
    #[serde(default)]
    pub startup_policy_order: String,
}

/// One `volumeClaimPolicies[]` entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeClaimPolicy {
    /// PVC templates, kept as JSON.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub templates: Vec<Value>,
    /// What happens to the PVCs when the JobSet goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_policy: Option<RetentionPolicy>,
}

/// `volumeClaimPolicies[].retentionPolicy`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetentionPolicy {
    /// `Delete` or `Retain`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_deleted: Option<String>,
}

/// Applies the defaults the JobSet webhook would add, because with only the CRD installed nothing else
/// does: success `All`, startup `AnyOrder`, DNS hostnames and not-ready publishing on, `replicas: 1`,
/// group `default`, indexed Jobs, pod restart `OnFailure`, named failure rules and `Delete` retention.
/// Fields already set are left alone, so applying twice changes nothing.
pub fn apply_webhook_defaults(spec: &mut JobSetSpec) {
    spec.success_policy.get_or_insert_with(|| SuccessPolicy { operator: "All".into(), target_replicated_jobs: vec![] });
    spec.startup_policy.get_or_insert_with(|| StartupPolicy { startup_policy_order: "AnyOrder".into() });
    let network = spec.network.get_or_insert_with(Network::default);
    network.enable_dns_hostnames.get_or_insert(true);
    network.publish_not_ready_addresses.get_or_insert(true);
    for rjob in &mut spec.replicated_jobs {
        rjob.replicas.get_or_insert(1);
        rjob.group_name.get_or_insert_with(|| "default".into());
        let job = &mut rjob.template.spec;
        job.completion_mode.get_or_insert_with(|| "Indexed".into());
        let pod = &mut job.template.spec;
        if pod.restart_policy.as_deref().unwrap_or("").is_empty() {
            pod.restart_policy = Some("OnFailure".into());
        }
    }
    if let Some(policy) = &mut spec.failure_policy {
        for (index, rule) in policy.rules.iter_mut().enumerate() {
            if rule.name.is_empty() {
                rule.name = format!("failurePolicyRule{index}");
            }
        }
    }
    for claim in &mut spec.volume_claim_policies {
        claim
            .retention_policy
            .get_or_insert_with(RetentionPolicy::default)
            .when_deleted
            .get_or_insert_with(|| "Delete".into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_gaps_and_are_idempotent() {
        let mut spec: JobSetSpec = serde_json::from_value(serde_json::json!({
            "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {"containers": []}}}}}],
            "failurePolicy": {"rules": [{"action": "FailJobSet"}, {"name": "keep", "action": "RestartJobSet"}]},
            "network": {"publishNotReadyAddresses": false},
            "volumeClaimPolicies": [{"templates": []}]
        }))
        .unwrap();
        apply_webhook_defaults(&mut spec);
        assert_eq!(spec.success_policy.as_ref().unwrap().operator, "All");
        assert_eq!(spec.startup_policy.as_ref().unwrap().startup_policy_order, "AnyOrder");
        let net = spec.network.as_ref().unwrap();
        assert_eq!((net.enable_dns_hostnames, net.publish_not_ready_addresses), (Some(true), Some(false)));
        let rjob = &spec.replicated_jobs[0];
        assert_eq!((rjob.replicas, rjob.group_name.as_deref()), (Some(1), Some("default")));
        assert_eq!(rjob.template.spec.completion_mode.as_deref(), Some("Indexed"));
        assert_eq!(rjob.template.spec.template.spec.restart_policy.as_deref(), Some("OnFailure"));
        let rules = &spec.failure_policy.as_ref().unwrap().rules;
        assert_eq!((rules[0].name.as_str(), rules[1].name.as_str()), ("failurePolicyRule0", "keep"));
        let retention = spec.volume_claim_policies[0].retention_policy.as_ref().unwrap();
        assert_eq!(retention.when_deleted.as_deref(), Some("Delete"));
        let once = spec.clone();
        apply_webhook_defaults(&mut spec);
        assert_eq!(spec, once);
    }
}
