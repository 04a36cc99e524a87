//! Kubernetes API types trainyard reads and writes: Kubeflow Trainer's kinds, trainyard's own `Queue`, `Topology` and `WorkerCluster`.
//!
//! The Trainer kinds wrap the pure serde types of `trainyard-bridges`, so that the object the
//! controller reads from the API server is exactly what the renderer takes. trainyard's own kinds
//! are cluster-scoped and derive their schemas.

pub mod optimization;
pub mod queue;
mod schema;
pub mod topology;
pub mod trainer;
pub mod worker_cluster;

pub use optimization::OptimizationJob;
pub use queue::{Queue, QueueSpec, QueueStatus, SlurmTarget};
pub use topology::{Topology, TopologySpec};
pub use trainer::{ClusterTrainingRuntime, TrainJob, TrainJobSpec, TrainJobStatus, TrainingRuntime};
pub use worker_cluster::{WorkerCluster, WorkerClusterSpec, WorkerClusterStatus};

/// API group of trainyard's own kinds.
pub const GROUP: &str = "trainyard.io";
/// Field manager of every server-side apply and patch trainyard sends.
pub const FIELD_MANAGER: &str = "trainyard";
/// Label on a TrainJob naming the trainyard queue it is charged to.
pub const QUEUE_LABEL: &str = "trainyard.io/queue";
/// Label on a TrainJob naming a priority class of the policy.
pub const PRIORITY_CLASS_LABEL: &str = "trainyard.io/priority-class";
/// Annotation recording the admission (placement) trainyard decided for a TrainJob.
pub const ADMISSION_ANNOTATION: &str = "trainyard.io/admission";
/// Finalizer that keeps a TrainJob until trainyard has released its quota.
pub const FINALIZER: &str = "trainyard.io/finalizer";
/// Annotation with the order in which trainyard first saw a TrainJob: FIFO ties between TrainJobs
/// created in the same second go by it, across restarts.
pub const ARRIVAL_ANNOTATION: &str = "trainyard.io/arrival";

/// Annotation with how long a TrainJob will run (`90m`, `4h`, `1h30m` or seconds): backfill plans
/// with it, and start-time estimates run the queue forward with it.
pub const RUNTIME_ESTIMATE_ANNOTATION: &str = "trainyard.io/runtime-estimate";

/// Kueue's annotation for a required topology level (a node label key), read from the TrainJob.
pub const REQUIRED_TOPOLOGY: &str = "kueue.x-k8s.io/podset-required-topology";
/// Kueue's annotation for a preferred topology level.
pub const PREFERRED_TOPOLOGY: &str = "kueue.x-k8s.io/podset-preferred-topology";
/// Kueue's annotation for the level each slice of the gang must sit in.
pub const SLICE_REQUIRED_TOPOLOGY: &str = "kueue.x-k8s.io/podset-slice-required-topology";
/// Kueue's annotation for the pods per slice.
pub const SLICE_SIZE: &str = "kueue.x-k8s.io/podset-slice-size";
/// Kueue's annotation asking for no topology constraint at all.
pub const UNCONSTRAINED_TOPOLOGY: &str = "kueue.x-k8s.io/podset-unconstrained-topology";
/// GKE's node label (and pod nodeSelector) with the chip topology of a TPU slice, e.g. `2x2x4`.
pub use trainyard_topology::sources::k8s_nodes::tpu::TPU_TOPOLOGY_LABEL;
