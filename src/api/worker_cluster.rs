//! trainyard's cluster-scoped `WorkerCluster`: a cluster a manager trainyard places gangs in.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A worker cluster of the fleet, reached through a kubeconfig kept in a Secret of the manager's
/// namespace (as Kueue's `MultiKueueCluster`). Adding or deleting one adds or removes its nodes
/// while the manager runs.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "trainyard.io",
    version = "v1alpha1",
    kind = "WorkerCluster",
    doc = "A worker cluster a manager trainyard places gangs in.",
    plural = "workerclusters",
    status = "WorkerClusterStatus",
    printcolumn = r#"{"name":"Connected","type":"string","jsonPath":".status.conditions[?(@.type==\"Connected\")].status"}"#,
    printcolumn = r#"{"name":"Nodes","type":"integer","jsonPath":".status.nodes"}"#,
    printcolumn = r#"{"name":"Gangs","type":"integer","jsonPath":".status.gangs"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct WorkerClusterSpec {
    /// The Secret holding the worker's kubeconfig, in the namespace the manager runs in.
    pub kubeconfig_secret: SecretKey,
}

/// A key of a Secret.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKey {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key whose value is the kubeconfig; `kubeconfig` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl SecretKey {
    /// The key read.
    pub fn key(&self) -> &str {
        self.key.as_deref().filter(|k| !k.is_empty()).unwrap_or(DEFAULT_KUBECONFIG_KEY)
    }
}

/// The Secret key read when none is named.
pub const DEFAULT_KUBECONFIG_KEY: &str = "kubeconfig";

/// What the manager last saw of the worker.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerClusterStatus {
    /// `Connected`: True while the manager reaches the worker and places gangs there; False with
    /// the reason (`SecretNotFound`, `KeyNotFound`, `InvalidKubeconfig`, `CredentialsRefused`,
    /// `Unreachable`) and the field at fault.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The worker's nodes the manager places on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
    /// Gangs placed there and not finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gangs: Option<u32>,
}

/// `spec.managedBy` of a TrainJob a manager trainyard places in its fleet: the value Kubeflow
/// Trainer's CRD allows besides its own, which Trainer's controller (and trainyard in standalone or
/// companion mode) leaves alone.
pub const FLEET_MANAGED_BY: &str = "kueue.x-k8s.io/multikueue";
/// Label on a worker's copy of a TrainJob: the uid of the manager's TrainJob it copies.
pub const ORIGIN_LABEL: &str = "trainyard.io/fleet-origin";
/// Annotation on a worker's copy: the worker cluster's name as the manager knows it.
pub const CLUSTER_ANNOTATION: &str = "trainyard.io/fleet-cluster";
/// Annotation on a worker's copy: the admission time (`at`) of the manager's record it was
/// written for, which tells a copy of an earlier placement from the current one.
pub const ADMITTED_AT_ANNOTATION: &str = "trainyard.io/fleet-admitted-at";
/// The node label key of the fleet's top level: the worker cluster a node belongs to.
pub const CLUSTER_LEVEL_LABEL: &str = "trainyard.io/cluster";
/// On a manager's TrainJob: the worker cluster it must run in (a WorkerCluster's name).
pub const WORKER_CLUSTER_ANNOTATION: &str = "trainyard.io/worker-cluster";
