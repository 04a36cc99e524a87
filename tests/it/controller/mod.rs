//! The Kubernetes controller: lifecycle plans by value, crash safety, and exact API requests.

mod cluster;
mod common;
mod mock;
mod live;
mod plan;
mod render;
mod replay;
mod scheduler;
mod slurm;
mod slurm_live;
