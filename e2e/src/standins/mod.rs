//! Stand-ins for what a real cluster has and the control plane lacks: the kubelet's nodes and
//! its pod deletions and completions, the JobSet and LeaderWorkerSet controllers, and the CRDs of
//! binders that are not here. Each controller runs as a task of the harness, with the harness's
//! client, and rides out API server restarts as any watch-based controller does.

pub mod binder_crds;
pub mod jobset;
pub mod kubelet;
pub mod lws;
pub mod nodes;
