//! Placement tests: the greedy search, the exact search against brute force, the baselines.

mod common;
mod exact;
mod greedy;
mod joint;
