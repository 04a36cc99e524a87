//! The `TrainingRuntime` / `ClusterTrainingRuntime` kinds and their shared spec.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::NumProcPerNode;
use crate::jobset::JobSetSpec;
use crate::meta::{ObjectMeta, TemplateMeta};

/// A `TrainingRuntime` or `ClusterTrainingRuntime` (same shape; `kind` tells them apart).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainingRuntime {
    /// `trainer.kubeflow.org/v1alpha1`.
    pub api_version: String,
    /// `TrainingRuntime` or `ClusterTrainingRuntime`.
    pub kind: String,
    /// Object metadata.
    pub metadata: ObjectMeta,
    /// The runtime.
    pub spec: TrainingRuntimeSpec,
}

/// `TrainingRuntimeSpec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainingRuntimeSpec {
    /// Framework policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ml_policy: Option<MlPolicy>,
    /// Gang-scheduling backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_group_policy: Option<PodGroupPolicy>,
    /// The JobSet template.
    #[serde(default)]
    pub template: JobSetTemplate,
    /// Other fields, preserved.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `spec.template`: metadata copied to the JobSet plus a full JobSet spec.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSetTemplate {
    /// Labels and annotations for the JobSet object.
    #[serde(default, skip_serializing_if = "TemplateMeta::is_empty")]
    pub metadata: TemplateMeta,
    /// The JobSet spec.
    #[serde(default)]
    pub spec: JobSetSpec,
}

/// `spec.mlPolicy`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MlPolicy {
    /// Default node count (1 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_nodes: Option<i32>,
    /// Torch plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch: Option<TorchPolicy>,
    /// MPI plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpi: Option<MpiPolicy>,
    /// JAX plugin (`jax: {}`; kept as JSON because only its presence matters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jax: Option<Value>,
    /// XGBoost plugin (`xgboost: {}`; kept as JSON because only its presence matters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xgboost: Option<Value>,
    /// Flux Framework plugin (Trainer v2.2): a Flux broker in every node pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flux: Option<FluxPolicy>,
    /// Other policies, preserved.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `mlPolicy.flux`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FluxPolicy {
    /// Flux tasks per node (default 1); the TrainJob's `trainer.numProcPerNode` wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_proc_per_node: Option<i32>,
}

/// `mlPolicy.torch`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TorchPolicy {
    /// v2.0/v2.1 only: processes per node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_proc_per_node: Option<NumProcPerNode>,
    /// Extra containers that receive the PET_* variables: `{targets: [{jobName, containerNames}]}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_injection: Option<Value>,
    /// Other fields (v2.1 `elasticPolicy`), preserved.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `mlPolicy.mpi`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MpiPolicy {
    /// Slots per node (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_proc_per_node: Option<i32>,
    /// Only `OpenMPI` is supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpi_implementation: Option<String>,
    /// Where the SSH secret is mounted (default `/root/.ssh`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_auth_mount_path: Option<String>,
    /// Whether the launcher also counts as a node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_launcher_as_node: Option<bool>,
}

/// `spec.podGroupPolicy`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupPolicy {
    /// scheduler-plugins coscheduling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coscheduling: Option<Coscheduling>,
    /// Volcano (kept as JSON: only its presence matters here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volcano: Option<Value>,
}

/// `podGroupPolicy.coscheduling`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Coscheduling {
    /// PodGroup timeout (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_timeout_seconds: Option<i32>,
}
