//! What the controller does to the API server, one request per step of a plan: the actor, the
//! one status writer, the objects an admitted gang is launched as (JobSet or LeaderWorkerSet,
//! kube-scheduler's gang objects or the cluster's own binder's, the MPI SSH key Secret), the admission record, the commit
//! point of a decision, and in manager mode a gang's copy written to its worker cluster.

pub mod actor;
pub mod admission_record;
pub mod binders;
pub mod gang_api;
pub mod mpi_ssh_key;
pub mod pod_request;
pub mod recent_applies;
pub mod status_writer;
pub mod worker_writes;
pub mod workload_objects;
