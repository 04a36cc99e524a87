//! Typed render errors; each names the TrainJob and the field at fault.

use thiserror::Error;

/// Why a TrainJob could not be rendered. `job` is `<namespace>/<name>` of the TrainJob.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RenderError {
    /// A required field is absent or empty.
    #[error("TrainJob {job}: {field} is required")]
    MissingField {
        /// The TrainJob.
        job: String,
        /// The missing field.
        field: String,
    },
    /// `runtimeRef` points at a kind or group this renderer does not build from.
    #[error(
        "TrainJob {job}: {field} = {value:?} is not a Trainer runtime (want ClusterTrainingRuntime or TrainingRuntime in trainer.kubeflow.org)"
    )]
    UnsupportedRuntime {
        /// The TrainJob.
        job: String,
        /// `spec.runtimeRef.kind` or `spec.runtimeRef.apiGroup`.
        field: String,
        /// The value found.
        value: String,
    },
    /// The node count resolved to zero (or less).
    #[error("TrainJob {job}: {field} = {value} but at least 1 node is needed to render")]
    ZeroNodes {
        /// The TrainJob.
        job: String,
        /// `spec.trainer.numNodes` or the runtime's `spec.mlPolicy.numNodes`.
        field: String,
        /// The value found.
        value: i32,
    },
    /// No replicated job of the runtime carries the `trainer` ancestor label.
    #[error(
        "TrainJob {job}: runtime {runtime:?} (spec.runtimeRef.name) has no replicated job labelled trainer.kubeflow.org/trainjob-ancestor-step=trainer"
    )]
    NoTrainerJob {
        /// The TrainJob.
        job: String,
        /// The runtime name.
        runtime: String,
    },
    /// A replicated job the policy needs has no container named `node`.
    #[error(
        "TrainJob {job}: replicated job {replicated_job:?} of runtime {runtime:?} (spec.runtimeRef.name) has no container named \"node\""
    )]
    MissingNodeContainer {
        /// The TrainJob.
        job: String,
        /// The runtime name.
        runtime: String,
        /// The replicated job.
        replicated_job: String,
    },
    /// The runtime lacks a replicated job the ML policy requires.
    #[error(
        "TrainJob {job}: runtime {runtime:?} (spec.runtimeRef.name) needs a replicated job named {replicated_job:?}"
    )]
    MissingReplicatedJob {
        /// The TrainJob.
        job: String,
        /// The runtime name.
        runtime: String,
        /// The replicated job it needs.
        replicated_job: String,
    },
    /// Two entries of a list the API server keys by name carry the same name.
    #[error("TrainJob {job}: runtime {runtime:?}: {field} = {name:?} is named twice (the list is keyed by name)")]
    DuplicateName {
        /// The TrainJob.
        job: String,
        /// The runtime name.
        runtime: String,
        /// Path of the second entry's name, e.g. `spec.template.spec.replicatedJobs[2].name`.
        field: String,
        /// The name.
        name: String,
    },
    /// A patch or override names a replicated job or container that the runtime does not have.
    #[error("TrainJob {job}: {field} = {name:?} does not exist in the runtime")]
    UnknownPatchTarget {
        /// The TrainJob.
        job: String,
        /// Path of the offending name, e.g. `spec.runtimePatches[0]...replicatedJobs[1].name`.
        field: String,
        /// The name.
        name: String,
    },
    /// The trainer job has several replicas (one per TPU slice, Trainer v2.4) and the node count
    /// does not split evenly over them.
    #[error(
        "TrainJob {job}: {field} = {num_nodes} does not split evenly over the {replicas} replicas of replicated job {replicated_job:?} (one per slice)"
    )]
    UnevenReplicas {
        /// The TrainJob.
        job: String,
        /// `spec.trainer.numNodes` or the runtime's `spec.mlPolicy.numNodes`.
        field: String,
        /// The node count.
        num_nodes: i32,
        /// The trainer job's replicas.
        replicas: i32,
        /// The trainer job.
        replicated_job: String,
    },
    /// A patch or `trainer.env` tries to set what only the controller may set.
    #[error("TrainJob {job}: {field}: {message}")]
    Forbidden {
        /// The TrainJob.
        job: String,
        /// The offending field.
        field: String,
        /// Why.
        message: String,
    },
    /// The runtime asks for a workload kind this renderer cannot produce.
    #[error(
        "runtime {runtime:?}: {field} = {value:?} is not a workload trainyard renders (want JobSet or LeaderWorkerSet)"
    )]
    UnsupportedWorkload {
        /// The runtime name.
        runtime: String,
        /// The annotation path, `metadata.annotations["trainyard.io/workload"]`.
        field: String,
        /// The value found.
        value: String,
    },
    /// A replicated job of the rendered JobSet has no place in a LeaderWorkerSet.
    #[error("TrainJob {job}: replicated job {replicated_job:?} cannot run inside a LeaderWorkerSet: {message}")]
    NotFoldable {
        /// The TrainJob.
        job: String,
        /// The replicated job at fault.
        replicated_job: String,
        /// Why it does not fit.
        message: String,
    },
    /// A patch or override does not have the expected shape.
    #[error("TrainJob {job}: {field}: {message}")]
    InvalidPatch {
        /// The TrainJob.
        job: String,
        /// The offending field.
        field: String,
        /// What is wrong.
        message: String,
    },
}

impl RenderError {
    /// The field at fault, as a path a user can look up in their object.
    pub fn field(&self) -> &str {
        match self {
            RenderError::MissingField { field, .. }
            | RenderError::UnsupportedRuntime { field, .. }
            | RenderError::ZeroNodes { field, .. }
            | RenderError::UnevenReplicas { field, .. }
            | RenderError::UnknownPatchTarget { field, .. }
            | RenderError::Forbidden { field, .. }
            | RenderError::UnsupportedWorkload { field, .. }
            | RenderError::InvalidPatch { field, .. }
            | RenderError::DuplicateName { field, .. } => field,
            RenderError::NoTrainerJob { .. }
            | RenderError::MissingNodeContainer { .. }
            | RenderError::MissingReplicatedJob { .. } => "spec.runtimeRef.name",
            RenderError::NotFoldable { .. } => "spec.runtimeRef.name",
        }
    }
}
