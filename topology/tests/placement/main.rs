//! Placement tests: greedy, exact and joint search against brute force, the baselines, TPU slices.

mod common;
mod exact;
mod gpu_layout;
mod greedy;
mod joint;
mod torus;
mod tpu_slices;
