//! A gang's record in the table: what it asks, where it stands (pending with its reason, or
//! running where and since when), and the key that orders the pending gangs.

use std::cmp::Reverse;
use std::sync::Arc;

use trainyard_topology::{Demand, Placement, Resources};

use crate::quota::QueueIdx;
use crate::{GangId, GangRequest, PendingReason, PendingStatus};

/// A gang the engine tracks.
///
/// Laid out in declaration order, what a cycle's visit reads first: a visit to a gang that stays
/// pending (most of them: blocked by quota, a known failure or the reservation) reads the
/// fields up to `state` only, so they share the cache lines next to the table's key
/// instead of being spread over the record's eight.
#[derive(Clone, Debug)]
#[repr(C)]
pub(crate) struct GangRecord {
    pub(crate) queue: QueueIdx,
    /// Times it was admitted but not ready in time.
    pub(crate) unready_attempts: u32,
    /// It may not be admitted before this time (backoff after an admission that timed out).
    pub(crate) not_before: u64,
    pub(crate) gpus: u64,
    pub(crate) estimate: u64,
    /// Everything its pods ask for, all sets together.
    pub(crate) total: Resources,
    /// The quota limit its last `Quota` reason named.
    pub(crate) quota_limit: Option<(QueueIdx, crate::quota::QuotaLimit)>,
    pub(crate) state: GangState,
    /// What it asks of the cluster, resolved against the cluster's levels.
    pub(crate) demand: Demand,
    /// Shared, never changed once the gang is in: a copy of the engine (`estimates/eta.rs`) copies a
    /// pointer, not the shape's names and lists.
    pub(crate) request: Arc<GangRequest>,
    /// Arrival number: the last part of the pending order key, kept to requeue it unchanged.
    pub(crate) arrival: u64,
    /// The gang that last preempted this one: it may never preempt that gang back.
    pub(crate) preempted_by: Option<GangId>,
    /// Whether the running gang reported all its pods ready.
    pub(crate) ready: bool,
    /// That `Quota` reason, kept while another reason stands, so that a gang blocked by the same
    /// limit again takes it back instead of building its words anew.
    pub(crate) quota_reason: Option<Box<PendingReason>>,
}

#[derive(Clone, Debug)]
pub(crate) enum GangState {
    Pending {
        status: PendingStatus,
        cycle: u64,
    },
    /// The placement is shared: a copy of the engine (`estimates/eta.rs`) copies a pointer per running
    /// gang, not its hosts.
    Running {
        placement: Arc<Placement>,
        start: u64,
        expected_end: u64,
    },
}

/// Pending order: higher priority first, then earlier submission, then the caller's tie-breaker,
/// then arrival order.
pub(crate) type OrderKey = (Reverse<i32>, u64, u64, u64);
