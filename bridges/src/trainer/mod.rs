//! Serde types for Kubeflow Trainer `trainer.kubeflow.org/v1alpha1` objects.

mod job;
pub mod optimization;
mod runtime;

pub use job::{
    DatasetOrModel, Initializer, NumProcPerNode, RuntimePatch, RuntimeRef, TrainJob, TrainJobSpec,
    TrainerResourceClaim, TrainerSpec,
};
pub use optimization::OptimizationJob;
pub use runtime::{
    Coscheduling, FluxPolicy, JobSetTemplate, MlPolicy, MpiPolicy, PodGroupPolicy, TorchPolicy, TrainingRuntime,
    TrainingRuntimeSpec,
};

/// Trainer API group.
pub const GROUP: &str = "trainer.kubeflow.org";
/// Trainer API version string.
pub const API_VERSION: &str = "trainer.kubeflow.org/v1alpha1";
/// Default `runtimeRef.kind`.
pub const CLUSTER_TRAINING_RUNTIME: &str = "ClusterTrainingRuntime";
/// Namespaced runtime kind.
pub const TRAINING_RUNTIME: &str = "TrainingRuntime";
/// Job-level label naming which TrainJob part a replicated job receives.
pub const ANCESTOR_LABEL: &str = "trainer.kubeflow.org/trainjob-ancestor-step";
/// Fixed name of the trainer container (and of the worker replicated job).
pub const NODE: &str = "node";
/// Fixed name of the MPI launcher replicated job.
pub const LAUNCHER: &str = "launcher";
/// Fixed name of the dataset initializer (ancestor value, replicated job and container).
pub const DATASET_INITIALIZER: &str = "dataset-initializer";
/// Fixed name of the model initializer (ancestor value, replicated job and container).
pub const MODEL_INITIALIZER: &str = "model-initializer";
/// Ancestor value of the trainer replicated job.
pub const TRAINER_ANCESTOR: &str = "trainer";
