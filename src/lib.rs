//! trainyard's Kubernetes side: API types, CRD generation, offline rendering and the controller.
//!
//! The scheduling core (topology, policies, simulator, bridges) lives in its own sans-IO crates;
//! this library adds what needs kube-rs and tokio. The `trainyard` binary is a thin CLI over both.

pub mod api;
pub mod controller;
pub mod crds;
pub mod grpc;
pub mod kueue_import;
