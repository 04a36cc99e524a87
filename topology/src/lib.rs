//! trainyard-topology: cluster model, capacity accounting and gang placement.
//!
//! ```text
//!  cluster YAML ──> ClusterSpec ──resolve──> ResolvedSpec ──build──> Topology (petgraph tree)
//!                                                                        │
//!                      PlacementRequest ──> Cluster::place ──> Placement | PlacementFailure
//!                                               │ free capacity per domain, O(depth) updates,
//!                                               │ transactions (begin / commit / rollback)
//! ```
//! No I/O and no clock: callers hand in text and get values back.

mod cluster;
pub mod devices;
pub mod eligibility;
mod error;
pub mod input_text;
pub mod intra_node;
mod model;
mod placement;
mod request;
mod resources;
pub mod rng;
pub mod sources;
mod spec;
pub mod torus;

pub use cluster::{
    CanonicalHost, Cluster, DeviceFit, DeviceNeed, HostClass, HostSpec, MAX_DEVICE_PODS_PER_HOST, Removal, Txn,
};
pub use error::{Error, InputError, Result};
pub use model::{Domain, DomainId, HostId, LevelConstraint, SliceConstraint, Topology};
pub use placement::{
    CostBreakdown, CostModel, Demand, Explanation, JointOptions, JointPlacement, JointRequest, LevelVerdict,
    ParsePlacementPolicyError, PlacedSet, Placement, PlacementFailure, PlacementPolicy, PlacementRequest, PodSet,
    Rival, SearchPath, Spans, TpuRequest,
};
pub use request::{
    GangShape, GangShapeError, GpuLayout, LayoutNeed, ParseGpuLayoutError, ParseTopologyRequestError, PodSetShape,
    SliceRequest, TopologyRequest,
};
pub use resources::Resources;
pub use spec::fleet;
pub use spec::{
    ClusterSpec, GenerateSpec, NodeEntry, NodeLayout, NodeResources, NodeSpec, ResolvedSpec, ToriSpec, TorusEntry,
};
