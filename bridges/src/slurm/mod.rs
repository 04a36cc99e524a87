//! The Slurm bridge's pure half: a gang description, its `sbatch` script and REST body, and states.
//!
//! A [`SlurmGang`] (the file format of `trainyard slurm submit job.yaml`, parsed by
//! [`parse_gang`]) becomes one Slurm batch job: [`render_sbatch`] writes the script for
//! `sbatch`, [`render_rest_body`] the same job for slurmrestd's v0.0.38 `job/submit`. Every job
//! carries `--comment=trainyard-gang=<gang>` so a restarted bridge finds its jobs again, and
//! [`slurm_state`] maps what squeue, sacct or slurmrestd report onto a [`GangState`]. A gang with
//! an `array` is a Slurm job array: one copy per index (`--array=0,3,5-9`).
//! Nothing here does I/O.

mod array;
mod check;
mod rest;
mod script;
mod spec;
mod state;

pub use array::{format_array_indices, parse_array_indices};
pub use check::{RESERVED_ENV, RESERVED_ENV_PREFIXES};
pub use rest::{DEFAULT_JOB_PATH, render_rest_body};
pub use script::{GANG_COMMENT_PREFIX, render_sbatch, shell_quote};
pub use spec::{
    DEFAULT_RENDEZVOUS_PORT, DEFAULT_TASKS_PER_NODE, SlurmGang, SlurmPlacement, SlurmSpecError, SwitchPlacement,
    parse_gang,
};
pub use state::{GangState, slurm_state};
