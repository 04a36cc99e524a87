//! The `TrainJob` kind, accepting the v2.0/v2.1 override fields next to the v2.2+ shape.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::meta::{ObjectMeta, StringMap};
use crate::pod::EnvVar;

/// A `TrainJob`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainJob {
    /// `trainer.kubeflow.org/v1alpha1`.
    pub api_version: String,
    /// `TrainJob`.
    pub kind: String,
    /// Object metadata.
    pub metadata: ObjectMeta,
    /// Desired state.
    pub spec: TrainJobSpec,
    /// Status, untouched by the renderer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
}

/// `TrainJob.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainJobSpec {
    /// The runtime to build from.
    pub runtime_ref: RuntimeRef,
    /// Dataset and model initializers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initializer: Option<Initializer>,
    /// Trainer overrides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trainer: Option<TrainerSpec>,
    /// v2.0/v2.1 only: labels for the JobSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<StringMap>,
    /// v2.0/v2.1 only: annotations for the JobSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<StringMap>,
    /// v2.0 only: pod overrides per target job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_spec_overrides: Vec<Value>,
    /// v2.1 only: pod template overrides per target job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_template_overrides: Vec<Value>,
    /// v2.2+: strategic-merge patches onto the runtime, applied in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtime_patches: Vec<RuntimePatch>,
    /// Suspends the JobSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// Deadline in seconds (handled by the lifecycle reconciler, not here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    /// Which controller owns the TrainJob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
    /// Other fields, preserved.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `spec.runtimeRef`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeRef {
    /// Runtime name.
    #[serde(default)]
    pub name: String,
    /// API group; `trainer.kubeflow.org` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    /// `ClusterTrainingRuntime` (default) or `TrainingRuntime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

/// `spec.initializer`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Initializer {
    /// Dataset initializer input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<DatasetOrModel>,
    /// Model initializer input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<DatasetOrModel>,
}

/// `spec.initializer.dataset` / `.model`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DatasetOrModel {
    /// Where to fetch from; becomes `STORAGE_URI`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_uri: Option<String>,
    /// Extra environment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Secret with credentials (`{name}`), added as `envFrom`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<Value>,
}

/// `spec.trainer`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainerSpec {
    /// Replaces the `node` container image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Replaces the `node` container command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Replaces the `node` container args.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    /// Merged into the `node` container env.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Overrides `mlPolicy.numNodes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_nodes: Option<i32>,
    /// Processes per node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_proc_per_node: Option<NumProcPerNode>,
    /// Merged into the `node` container resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_per_node: Option<Value>,
    /// DRA claims of every training node (Trainer v2.4, KEP-2782).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_claims_per_node: Vec<TrainerResourceClaim>,
    /// Other fields, preserved.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// One `spec.trainer.resourceClaimsPerNode[]` entry: a claim made from a template for every node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainerResourceClaim {
    /// The pod-level claim name the `node` container refers to.
    pub name: String,
    /// The ResourceClaimTemplate in the TrainJob's namespace.
    pub resource_claim_template_name: String,
}

/// `numProcPerNode`: an int32 since v2.2, IntOrString (`auto`/`cpu`/`gpu`/n) before.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum NumProcPerNode {
    /// A count.
    Count(i64),
    /// A v2.0/v2.1 keyword or a number written as a string.
    Text(String),
}

impl NumProcPerNode {
    /// The value as the `PET_NPROC_PER_NODE` string.
    pub fn as_env(&self) -> String {
        match self {
            NumProcPerNode::Count(n) => n.to_string(),
            NumProcPerNode::Text(s) => s.clone(),
        }
    }

    /// The value as a count, when it is one.
    pub fn count(&self) -> Option<i64> {
        match self {
            NumProcPerNode::Count(n) => Some(*n),
            NumProcPerNode::Text(s) => s.parse().ok(),
        }
    }
}

/// One `spec.runtimePatches[]` entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimePatch {
    /// Domain-prefixed owner of the patch.
    #[serde(default)]
    pub manager: String,
    /// Set by the webhook; informational.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// The patch itself (`{template: {metadata, spec: {replicatedJobs}}}`), kept as JSON for the merge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub training_runtime_spec: Option<Value>,
}
