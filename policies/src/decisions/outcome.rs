//! What submitting a gang made of it, and what one scheduling cycle did: gangs preempted, admitted, requeued or moved off lost hosts,
//! the reservation it left, and pending gangs it found the cluster can no longer hold.

use serde::Serialize;
use trainyard_topology::{HostId, Placement};

use crate::{GangId, Unschedulable};

/// One gang started by a cycle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    /// The gang.
    pub id: GangId,
    /// Where each of its pods goes.
    pub placement: Placement,
    /// Started ahead of a blocked gang that holds a reservation.
    pub backfilled: bool,
}

/// The reservation held at the end of a cycle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Reservation {
    /// The gang it is for.
    pub holder: GangId,
    /// When the gang is due to start, seconds.
    pub at: u64,
    /// Hosts and pod counts set aside for it at that time.
    #[serde(skip)]
    pub hosts: Vec<(HostId, u32)>,
}

/// A running gang sent back to the queue so that another could start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preemption {
    /// The gang preempted; it is pending again, with its original submission time.
    pub victim: GangId,
    /// The gang it made room for (admitted in the same cycle).
    pub by: GangId,
    /// Seconds the victim had run.
    pub ran_s: u64,
    /// Of those, seconds of work lost: the time since its last checkpoint.
    pub lost_s: u64,
}

/// The result of one scheduling cycle.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cycle {
    /// Gangs preempted, before the admissions they made room for.
    pub preempted: Vec<Preemption>,
    /// Gangs started, in the order they were admitted.
    pub admitted: Vec<Admission>,
    /// The reservation for the first gang that could not start, under EASY backfill.
    pub reservation: Option<Reservation>,
    /// Running gangs sent back to the queue because hosts under them were lost.
    pub requeued: Vec<NodeLoss>,
    /// Running gangs moved off lost hosts onto free ones in the same domain.
    pub replaced: Vec<Replacement>,
    /// Pending gangs that the cluster, as it changed, can no longer hold even empty; they left
    /// the engine (a caller may submit them again when the cluster grows).
    pub rejected: Vec<(GangId, crate::Unschedulable)>,
}

/// A running gang requeued because hosts under it were lost (policy `node_loss: requeue`, or
/// `replace` without a replacement).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeLoss {
    /// The gang; pending again in its old place.
    pub gang: GangId,
    /// The hosts it lost.
    pub hosts: Vec<HostId>,
}

/// A lost host of a running gang replaced by free hosts inside the gang's domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replacement {
    /// The gang.
    pub gang: GangId,
    /// The host it lost.
    pub lost: HostId,
    /// The hosts that took the lost host's pods, one per pod, in the order of those pods.
    pub with: Vec<HostId>,
    /// Its placement now (pod `i` on `placement.hosts[i]`, the lost host's pods moved).
    pub placement: Placement,
}

/// What `submit` made of a gang.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// Queued; the next cycle will consider it.
    Queued,
    /// Can never run here; the engine does not keep it.
    Unschedulable(Unschedulable),
}
