//! Queues whose gangs run on a Slurm cluster: the cluster as the controller sees it, the poller
//! that keeps it current, and an admitted TrainJob rendered as a Slurm job.

pub mod cluster_view;
pub mod gang_job;
pub mod poller;
