//! The Kubernetes controller: caches, one scheduling loop, and per-TrainJob lifecycle reconcilers.
//!
//! Everything that decides is pure and tested by value: [`intent`] (what a TrainJob asks),
//! [`scheduler`] (the engine over a snapshot), [`plan`] (the lifecycle steps of one TrainJob) and
//! [`pods`] (which gated pod goes to which node). The I/O modules only carry out plans.

pub mod act;
pub mod admission;
pub mod api_events;
pub mod caches;
pub mod conditions;
pub mod facts;
pub mod feed;
pub mod gang_api;
pub mod host_filter;
pub mod http;
pub mod intent;
pub mod leader;
pub mod lease;
pub mod live;
pub mod metrics;
pub mod plan;
pub mod pod_sets;
pub mod pods;
pub mod queries;
pub mod queue_status;
pub mod retry;
pub mod run;
pub mod scheduler;
pub mod scheduling;
pub mod slurm_gang;
pub mod slurm_run;
pub mod slurm_side;
pub mod snapshot;
pub mod ssh_key;
pub mod status_writer;
pub mod views;
pub mod workload;
