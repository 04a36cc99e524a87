//! Topology readers: Kubernetes Node lists and Slurm topology.conf, on fixtures and random input.

mod k8s_nodes;
mod slurm_block;
mod slurm_common;
mod slurm_props;
mod slurm_tree;
