//! Stand-ins for what a real cluster has and the control plane lacks: the kubelet's nodes and
//! its pod deletions and completions, and the JobSet and LeaderWorkerSet controllers. Each runs
//! as a task of the harness, with the harness's client, and rides out API server restarts as any
//! watch-based controller does.

pub mod jobset;
pub mod kubelet;
pub mod lws;
pub mod nodes;
