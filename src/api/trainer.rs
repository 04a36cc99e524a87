//! Kubeflow Trainer `trainer.kubeflow.org/v1alpha1` kinds as kube resources over the bridges' serde types.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use trainyard_bridges::trainer as bridge;

use super::schema;

/// The TrainJob spec, exactly as Kubeflow Trainer defines it (older override fields included).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "trainer.kubeflow.org",
    version = "v1alpha1",
    kind = "TrainJob",
    plural = "trainjobs",
    namespaced,
    status = "TrainJobStatus",
    schema = "manual",
    printcolumn = r#"{"name":"State","type":"string","jsonPath":".status.conditions[-1:].type"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(transparent)]
pub struct TrainJobSpec(pub bridge::TrainJobSpec);

/// What Trainer and trainyard report on a TrainJob.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainJobStatus {
    /// `Suspended`, `Complete`, `Failed` as Kubeflow sets them, plus trainyard's `Queued` and `Admitted`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// One entry per replicated job, copied from the JobSet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs_status: Vec<JobStatus>,
    /// Fields trainyard does not interpret (`trainerStatus`, newer additions), kept as they are.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// Pod counts of one replicated job.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobStatus {
    /// Replicated job name.
    pub name: String,
    /// Jobs ready.
    #[serde(default)]
    pub ready: i32,
    /// Jobs succeeded.
    #[serde(default)]
    pub succeeded: i32,
    /// Jobs failed.
    #[serde(default)]
    pub failed: i32,
    /// Jobs active.
    #[serde(default)]
    pub active: i32,
    /// Jobs suspended.
    #[serde(default)]
    pub suspended: i32,
}

/// A namespaced runtime: only TrainJobs of its own namespace may use it.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "trainer.kubeflow.org",
    version = "v1alpha1",
    kind = "TrainingRuntime",
    plural = "trainingruntimes",
    namespaced,
    schema = "manual",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(transparent)]
pub struct TrainingRuntimeSpec(pub bridge::TrainingRuntimeSpec);

/// A cluster-wide runtime, the default kind of `runtimeRef`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "trainer.kubeflow.org",
    version = "v1alpha1",
    kind = "ClusterTrainingRuntime",
    plural = "clustertrainingruntimes",
    schema = "manual",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(transparent)]
pub struct ClusterTrainingRuntimeSpec(pub bridge::TrainingRuntimeSpec);

impl JsonSchema for TrainJob {
    fn schema_name() -> Cow<'static, str> {
        "TrainJob".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        schema::train_job()
    }
}

impl JsonSchema for TrainingRuntime {
    fn schema_name() -> Cow<'static, str> {
        "TrainingRuntime".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        schema::training_runtime()
    }
}

impl JsonSchema for ClusterTrainingRuntime {
    fn schema_name() -> Cow<'static, str> {
        "ClusterTrainingRuntime".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        schema::training_runtime()
    }
}

/// The object in the renderer's own types (same JSON, so the conversion cannot lose a field).
pub(super) fn convert<T: Serialize, U: serde::de::DeserializeOwned>(object: &T) -> Result<U, serde_json::Error> {
    serde_json::to_value(object).and_then(serde_json::from_value)
}

impl TrainJob {
    /// The TrainJob as the renderer takes it.
    pub fn to_bridge(&self) -> Result<bridge::TrainJob, serde_json::Error> {
        convert(self)
    }

    /// `namespace/name`, the key the controller uses for it.
    pub fn key(&self) -> String {
        format!("{}/{}", self.metadata.namespace.as_deref().unwrap_or(""), self.metadata.name.as_deref().unwrap_or(""))
    }

    /// The condition of `type_`, if set.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Whether the condition of `type_` is `True`.
    pub fn has_true(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(|c| c.status == "True")
    }
}

impl TrainingRuntime {
    /// The runtime as the renderer takes it.
    pub fn to_bridge(&self) -> Result<bridge::TrainingRuntime, serde_json::Error> {
        convert(self)
    }
}

impl ClusterTrainingRuntime {
    /// The runtime as the renderer takes it.
    pub fn to_bridge(&self) -> Result<bridge::TrainingRuntime, serde_json::Error> {
        convert(self)
    }
}
