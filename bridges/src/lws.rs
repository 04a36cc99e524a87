//! Typed `leaderworkerset.x-k8s.io/v1` LeaderWorkerSet (the slice trainyard emits) and its webhook defaults.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::meta::ObjectMeta;
use crate::pod::PodTemplate;

/// LeaderWorkerSet API version.
pub const API_VERSION: &str = "leaderworkerset.x-k8s.io/v1";
/// LeaderWorkerSet kind.
pub const KIND: &str = "LeaderWorkerSet";
/// `restartPolicy` that recreates the whole group when any of its pods or containers restarts.
pub const RECREATE_GROUP_ON_POD_RESTART: &str = "RecreateGroupOnPodRestart";
/// The deprecated `restartPolicy` spelling the webhook rewrites to `None`.
const DEPRECATED_DEFAULT_RESTART: &str = "Default";

/// A LeaderWorkerSet object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaderWorkerSet {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// Always [`KIND`].
    pub kind: String,
    /// Object metadata.
    pub metadata: ObjectMeta,
    /// Desired state.
    pub spec: LeaderWorkerSetSpec,
}

/// `LeaderWorkerSet.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaderWorkerSetSpec {
    /// Number of groups (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// What one group looks like.
    #[serde(default)]
    pub leader_worker_template: LeaderWorkerTemplate,
    /// How template changes roll out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_strategy: Option<RolloutStrategy>,
    /// `LeaderCreated` or `LeaderReady`: when the workers of a group are created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_policy: Option<String>,
    /// Headless-service layout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_config: Option<NetworkConfig>,
    /// Every other spec field, preserved.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `spec.leaderWorkerTemplate`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaderWorkerTemplate {
    /// Leader pod template; the worker template is used when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_template: Option<PodTemplate>,
    /// Worker pod template (required).
    #[serde(default)]
    pub worker_template: PodTemplate,
    /// Pods per group, leader included (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i32>,
    /// `RecreateGroupOnPodRestart`, `RecreateGroupAfterStart` or `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
    /// Splits a group into subgroups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_group_policy: Option<SubGroupPolicy>,
    /// Other fields (`volumeClaimTemplates`, ...), preserved.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `leaderWorkerTemplate.subGroupPolicy`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubGroupPolicy {
    /// `LeaderWorker` or `LeaderExcluded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_group_policy_type: Option<String>,
    /// Pods per subgroup; must divide `size` or `size - 1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_group_size: Option<i32>,
}

/// `spec.rolloutStrategy`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStrategy {
    /// Only `RollingUpdate` exists.
    #[serde(rename = "type", default)]
    pub strategy_type: String,
    /// Rolling-update knobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update_configuration: Option<RollingUpdateConfiguration>,
}

/// `rolloutStrategy.rollingUpdateConfiguration`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdateConfiguration {
    /// Groups below this index are not updated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<i32>,
    /// Groups that may be unavailable during an update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// Extra groups allowed during an update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrString>,
}

/// A Kubernetes `IntOrString` (a count or a percentage such as `"25%"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum IntOrString {
    /// A count.
    Int(i32),
    /// A percentage or other string form.
    String(String),
}

/// `spec.networkConfig`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkConfig {
    /// `Shared` (one headless Service) or `UniquePerReplica`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subdomain_policy: Option<String>,
}

/// Applies the defaults the LWS webhook and CRD would add, because with only the CRD installed (or before
/// a server sees the object) nothing else does: one group of one pod, restart policy
/// `RecreateGroupOnPodRestart` (the deprecated `Default` becomes `None`), startup `LeaderCreated`,
/// rolling updates with partition 0, maxUnavailable 1 and maxSurge 0, subdomain policy `Shared`, and
/// subgroup type `LeaderWorker` when subgroups are used. Fields already set are left alone, so applying
/// twice changes nothing.
pub fn apply_lws_webhook_defaults(spec: &mut LeaderWorkerSetSpec) {
    spec.replicas.get_or_insert(1);
    let template = &mut spec.leader_worker_template;
    template.size.get_or_insert(1);
    match template.restart_policy.as_deref() {
        None | Some("") => template.restart_policy = Some(RECREATE_GROUP_ON_POD_RESTART.into()),
        Some(DEPRECATED_DEFAULT_RESTART) => template.restart_policy = Some("None".into()),
        Some(_) => {}
    }
    if let Some(sub) = &mut template.sub_group_policy {
        sub.sub_group_policy_type.get_or_insert_with(|| "LeaderWorker".into());
    }
    let rollout = spec.rollout_strategy.get_or_insert_with(RolloutStrategy::default);
    if rollout.strategy_type.is_empty() {
        rollout.strategy_type = "RollingUpdate".into();
    }
    if rollout.strategy_type == "RollingUpdate" {
        let config = rollout.rolling_update_configuration.get_or_insert_with(RollingUpdateConfiguration::default);
        config.partition.get_or_insert(0);
        config.max_unavailable.get_or_insert(IntOrString::Int(1));
        config.max_surge.get_or_insert(IntOrString::Int(0));
    }
    if spec.startup_policy.as_deref().unwrap_or("").is_empty() {
        spec.startup_policy = Some("LeaderCreated".into());
    }
    spec.network_config
        .get_or_insert_with(NetworkConfig::default)
        .subdomain_policy
        .get_or_insert_with(|| "Shared".into());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_fill_gaps_and_are_idempotent() {
        let mut spec: LeaderWorkerSetSpec = serde_json::from_value(json!({
            "leaderWorkerTemplate": {
                "workerTemplate": {"spec": {"containers": [{"name": "w"}]}},
                "subGroupPolicy": {"subGroupSize": 2}
            },
            "rolloutStrategy": {"rollingUpdateConfiguration": {"maxSurge": "25%"}},
            "networkConfig": {}
        }))
        .unwrap();
        apply_lws_webhook_defaults(&mut spec);
        assert_eq!(spec.replicas, Some(1));
        let template = &spec.leader_worker_template;
        assert_eq!(template.size, Some(1));
        assert_eq!(template.restart_policy.as_deref(), Some(RECREATE_GROUP_ON_POD_RESTART));
        assert_eq!(template.sub_group_policy.as_ref().unwrap().sub_group_policy_type.as_deref(), Some("LeaderWorker"));
        let rollout = spec.rollout_strategy.as_ref().unwrap();
        assert_eq!(rollout.strategy_type, "RollingUpdate");
        let config = rollout.rolling_update_configuration.as_ref().unwrap();
        assert_eq!(config.partition, Some(0));
        assert_eq!(config.max_unavailable, Some(IntOrString::Int(1)));
        assert_eq!(config.max_surge, Some(IntOrString::String("25%".into())));
        assert_eq!(spec.startup_policy.as_deref(), Some("LeaderCreated"));
        assert_eq!(spec.network_config.as_ref().unwrap().subdomain_policy.as_deref(), Some("Shared"));
        let once = spec.clone();
        apply_lws_webhook_defaults(&mut spec);
        assert_eq!(spec, once);
    }

    #[test]
    fn deprecated_restart_policy_becomes_none_and_explicit_values_stay() {
        let mut spec = LeaderWorkerSetSpec::default();
        spec.leader_worker_template.restart_policy = Some("Default".into());
        spec.startup_policy = Some("LeaderReady".into());
        spec.replicas = Some(0);
        apply_lws_webhook_defaults(&mut spec);
        assert_eq!(spec.leader_worker_template.restart_policy.as_deref(), Some("None"));
        assert_eq!(spec.startup_policy.as_deref(), Some("LeaderReady"));
        assert_eq!(spec.replicas, Some(0));
        assert!(spec.leader_worker_template.sub_group_policy.is_none());
    }

    #[test]
    fn unknown_fields_round_trip() {
        let input = json!({
            "apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "x"},
            "spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": []}},
                     "volumeClaimTemplates": [{"metadata": {"name": "c"}}]}, "extra": true}
        });
        let lws: LeaderWorkerSet = serde_json::from_value(input.clone()).unwrap();
        assert_eq!(serde_json::to_value(&lws).unwrap(), input);
    }
}
