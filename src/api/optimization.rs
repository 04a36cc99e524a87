//! Kubeflow Trainer's `OptimizationJob` as a kube resource over the bridges' serde type.

use std::borrow::Cow;

use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use trainyard_bridges::trainer::optimization as bridge;

use super::schema;

/// A hyperparameter search whose trials are TrainJobs; trainyard runs it in standalone mode.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "trainer.kubeflow.org",
    version = "v1alpha1",
    kind = "OptimizationJob",
    plural = "optimizationjobs",
    namespaced,
    status = "serde_json::Value",
    schema = "manual",
    printcolumn = r#"{"name":"Trials","type":"integer","jsonPath":".spec.numTrials"}"#,
    printcolumn = r#"{"name":"Best","type":"string","jsonPath":".status.result.trainJobName"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(transparent)]
pub struct OptimizationJobSpec(pub bridge::OptimizationJobSpec);

impl JsonSchema for OptimizationJob {
    fn schema_name() -> Cow<'static, str> {
        "OptimizationJob".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        schema::optimization_job()
    }
}

impl OptimizationJob {
    /// The search as the pure search code takes it (same JSON, so nothing is lost).
    pub fn to_bridge(&self) -> Result<bridge::OptimizationJob, serde_json::Error> {
        super::trainer::convert(self)
    }
}
