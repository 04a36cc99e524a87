//! Pure renderers that turn an admitted trainyard gang into Kubernetes workload objects.
//!
//! The first bridge renders a Kubeflow Trainer `TrainJob` plus its `TrainingRuntime` into the
//! `jobset.x-k8s.io/v1alpha2` `JobSet` that the Trainer controller would create, with trainyard's
//! placement (scheduling gates or a domain node selector) added. Runtimes annotated
//! `trainyard.io/workload: LeaderWorkerSet` render instead to a one-group `leaderworkerset.x-k8s.io/v1`
//! LeaderWorkerSet folded from that JobSet. Nothing here does I/O.

pub mod error;
pub mod jobset;
pub mod lws;
pub mod meta;
pub mod pod;
pub mod render;
pub mod search;
pub mod slurm;
pub mod trainer;

mod merge;

pub use error::RenderError;
pub use jobset::{JobSet, apply_webhook_defaults};
pub use lws::{LeaderWorkerSet, apply_lws_webhook_defaults};
pub use render::flux::render_flux_objects;
pub use render::lws::{WorkloadKind, render_leader_worker_set, render_lws_mpi_hostfile, workload_kind};
pub use render::{GANG_LABEL, Placement, RenderOptions, TOPOLOGY_GATE, render_jobset, render_mpi_hostfile};
pub use trainer::{TrainJob, TrainingRuntime, TrainingRuntimeSpec};
