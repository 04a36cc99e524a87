//! The `OptimizationJob` kind (Trainer v2.4): a hyperparameter search whose trials are TrainJobs.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::TrainJobSpec;
use crate::meta::{ObjectMeta, TemplateMeta};

/// An `OptimizationJob`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OptimizationJob {
    /// `trainer.kubeflow.org/v1alpha1`.
    pub api_version: String,
    /// `OptimizationJob`.
    pub kind: String,
    /// Object metadata.
    pub metadata: ObjectMeta,
    /// The search.
    pub spec: OptimizationJobSpec,
    /// What the search found so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
}

/// `OptimizationJob.spec` (immutable once created).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OptimizationJobSpec {
    /// Exactly one objective.
    #[serde(default)]
    pub objectives: Vec<Objective>,
    /// `random` (the default) or `grid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search_algorithm: Option<SearchAlgorithm>,
    /// The parameters searched over.
    #[serde(default)]
    pub parameters: Vec<Parameter>,
    /// Trials in all (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_trials: Option<i32>,
    /// Trials at once (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_trials: Option<i32>,
    /// What every trial is made from.
    #[serde(default)]
    pub train_job_template: TrainJobTemplate,
    /// Other fields, preserved.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `spec.objectives[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Objective {
    /// The metric name a trial reports in `status.trainerStatus.metrics`.
    #[serde(default)]
    pub metric: String,
    /// `Minimize` (default) or `Maximize`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<String>,
}

/// `spec.searchAlgorithm`: exactly one of its fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchAlgorithm {
    /// Random search.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub random: Option<RandomSearch>,
    /// Grid search over categorical parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grid: Option<Value>,
}

/// `searchAlgorithm.random`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RandomSearch {
    /// Seed; without one the search's uid seeds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
}

/// `spec.parameters[]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Parameter {
    /// The parameter's name.
    #[serde(default)]
    pub name: String,
    /// Exactly one kind of space.
    #[serde(default)]
    pub search_space: SearchSpace,
}

/// `parameters[].searchSpace`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchSpace {
    /// Uniform over `[min, max]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uniform: Option<Range>,
    /// Uniform in the logarithm over `[min, max]`, `min > 0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_uniform: Option<Range>,
    /// One of the choices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub categorical: Option<Categorical>,
}

/// A numeric range; bounds are decimal strings, as the CRD keeps them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Range {
    /// Lower bound.
    #[serde(default)]
    pub min: String,
    /// Upper bound.
    #[serde(default)]
    pub max: String,
    /// `Float` (default) or `Int`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

/// `searchSpace.categorical`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Categorical {
    /// The values, each at most 64 characters.
    #[serde(default)]
    pub choices: Vec<String>,
}

/// `spec.trainJobTemplate`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainJobTemplate {
    /// Labels and annotations of every trial (no name or namespace).
    #[serde(default, skip_serializing_if = "TemplateMeta::is_empty")]
    pub metadata: TemplateMeta,
    /// The trial's spec, before the parameters are added.
    #[serde(default)]
    pub spec: TrainJobSpec,
}
