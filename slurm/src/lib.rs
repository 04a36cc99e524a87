//! Runs trainyard gangs on Slurm and reads a Slurm cluster's shape.
//!
//! The pure part reads Slurm's JSON (slurmrestd responses and `squeue --json` / `sinfo --json`,
//! which share the shapes) into job and node views, maps job states onto a gang's lifecycle, and
//! imports nodes plus `topology.conf` into trainyard's topology model. With the `client` feature,
//! [`rest::RestClient`] talks to slurmrestd (JWT, API version found at start-up) and
//! [`cli::CliClient`] to `sbatch`/`squeue`/`scancel`/`sinfo`; [`bridge::Bridge`] submits gangs
//! idempotently on either, with retries.

pub mod error;
pub mod import;
pub mod jobs;
pub mod nodes;

#[cfg(feature = "client")]
pub mod bridge;
#[cfg(feature = "client")]
pub mod cli;
#[cfg(feature = "client")]
pub mod rest;

pub use error::SlurmError;
pub use jobs::{ArrayPart, ArrayView, JobInfo, find_array, parse_jobs};
pub use nodes::{NodeInfo, parse_nodes};
