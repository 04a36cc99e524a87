//! Dynamic Resource Allocation (DRA) devices and a per-host claim allocator, pure.
//!
//! ```text
//!  YAML/JSON ──parse_objects──> DeviceClass, ResourceSlice, ResourceClaimTemplate
//!  slices ──PoolView::build──> pools (highest generation, complete or reported) ──host()──> HostDevices
//!  claim specs + classes ──resolve_claim──> Claim (CEL compiled once in Selectors)
//!  HostDevices + InUse + one pod's Claims ──allocate_pod──> PodAllocation | AllocationError
//!  a gang's pods on their hosts ──allocate_gang──> every pod's devices, or nothing
//! ```
//! Follows the upstream structured allocator (kube-scheduler's `DynamicResources`), except that
//! among the solutions found within the search budget it prefers devices on fewer PCIe roots.

pub mod allocate;
pub mod cel;
mod cel_library;
pub mod claims;
mod node_selector;
pub mod objects;
pub mod pools;
pub mod read;
mod search;
pub mod synth;

pub use allocate::{
    AllocationError, DeviceResult, GangAllocationError, IMPROVE_BUDGET, InUse, PodAllocation, PodClaims, SEARCH_BUDGET,
    allocate_gang, allocate_on, allocate_pod,
};
pub use cel::{CelError, ExprId, MAX_COST, MAX_EXPRESSION_BYTES, SelectorOwner, Selectors};
pub use claims::{
    Alternative, Claim, ClaimError, Constraint, ConstraintKind, MAX_DEVICES_PER_CLAIM, Request, resolve_claim,
};
pub use pools::{Device, DeviceId, HostDevices, Pool, PoolKey, PoolReport, PoolView, Reach};
pub use read::{DraObjects, parse_objects, read_object};
