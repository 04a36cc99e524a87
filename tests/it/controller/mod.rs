//! The Kubernetes controller: lifecycle plans by value, crash safety, and exact API requests.

mod api;
mod api_cli;
mod api_world;
mod binders;
mod cluster;
mod common;
mod dra;
mod dra_commit;
mod fleet_live;
mod fleet_props;
mod live;
mod live_props;
mod live_tpu;
mod mock;
mod mock_live;
mod plan;
mod plan_fleet;
mod render;
mod replay;
mod scheduler;
mod slurm;
mod slurm_live;
mod writes;
