//! Why a gang waits, or why it can never run: values, not errors.

use std::fmt;

use serde::Serialize;
use trainyard_topology::{PlacementFailure, Resources};

use crate::GangId;

/// The reason a pending gang did not start in the last cycle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum PendingReason {
    /// Submitted after the last cycle; not looked at yet.
    NotYetScheduled,
    /// A quota on its queue's path to the root is used up by running gangs.
    Quota {
        /// The gang's queue.
        queue: String,
        /// GPUs the gang needs.
        requested_gpus: u64,
        /// GPUs the queue's running gangs hold.
        used_gpus: u64,
        /// GPUs the blocking limit leaves for this queue now.
        available_gpus: u64,
        /// Which limit blocks, in words (the queue's own quota, a borrowing limit, a pool).
        limit: String,
        /// The same limit without amounts (see [`PendingReason::steady_eq`]).
        #[serde(skip)]
        blocked_by: String,
    },
    /// The cluster does not have room for the gang now.
    Capacity {
        /// What the gang needs in total.
        requested: Resources,
        /// What the cluster has free in total (possibly in pieces too small).
        free: Resources,
    },
    /// The cluster has room, but not inside one domain of the required level.
    Topology {
        /// Required level.
        level: String,
        /// Pods of the gang.
        pods: u32,
        /// Most pods one domain of that level could take now.
        best_domain_fit: u64,
    },
    /// It would fit now, but starting it would delay the gang holding a reservation.
    Reservation {
        /// The gang holding the reservation.
        holder: GangId,
        /// When that gang is due to start.
        at: u64,
    },
    /// Strict FIFO: it waits behind a blocked gang ahead of it.
    QueuedBehind {
        /// The blocked gang at the head.
        head: GangId,
    },
    /// Its last admission timed out before all pods were ready; it waits out a backoff.
    Backoff {
        /// When it may be admitted again.
        until: u64,
        /// Admissions that timed out so far.
        attempts: u32,
    },
    /// It ran, and was sent back to the queue because nodes under it were lost (cordoned, not
    /// ready or removed) for longer than the policy's grace.
    NodeLost {
        /// The lost hosts.
        hosts: Vec<String>,
    },
    /// The gang's pod count is not a multiple of its slice size.
    BadSlice {
        /// Pods in the gang.
        pods: u32,
        /// Pods per slice asked for.
        size: u32,
    },
    /// Not every TPU slice finds a free contiguous box on the tori now.
    TpuSlices {
        /// The slice shape, e.g. `2x2x4`.
        shape: String,
        /// Slices the gang asks for.
        slices: u32,
        /// Most slices that fit now.
        placed: u32,
        /// Most free chips on the candidate tori.
        free_chips: u64,
    },
    /// The hosts placement chose have room, but some pod's device claims find no free devices
    /// meeting them there.
    Devices {
        /// The pod's claim and request, and why, in numbers.
        message: String,
    },
}

impl PendingReason {
    /// Whether two reasons say the same thing once the amounts that move while a gang waits are
    /// left out (free capacity, quota left, the best domain's room, the reservation's time): what
    /// a caller reporting the reason needs to say again only when this is false.
    pub fn steady_eq(&self, other: &PendingReason) -> bool {
        use PendingReason as R;
        match (self, other) {
            (R::NotYetScheduled, R::NotYetScheduled) => true,
            (
                R::Quota { queue: a, requested_gpus: x, blocked_by: p, .. },
                R::Quota { queue: b, requested_gpus: y, blocked_by: q, .. },
            ) => a == b && x == y && p == q,
            (R::Capacity { requested: a, .. }, R::Capacity { requested: b, .. }) => a == b,
            (R::Topology { level: a, pods: x, .. }, R::Topology { level: b, pods: y, .. }) => a == b && x == y,
            (R::Reservation { holder: a, .. }, R::Reservation { holder: b, .. }) => a == b,
            (R::TpuSlices { shape: a, slices: x, .. }, R::TpuSlices { shape: b, slices: y, .. }) => a == b && x == y,
            (a, b) => a == b,
        }
    }
}

impl PendingReason {
    /// [`PendingReason::steady_eq`] against the reason `failure` would become, without building it.
    pub fn steady_eq_failure(&self, failure: &PlacementFailure) -> bool {
        match (self, failure) {
            (PendingReason::Capacity { requested: a, .. }, PlacementFailure::Capacity { requested: b, .. }) => a == b,
            (
                PendingReason::Topology { level: a, pods: x, .. },
                PlacementFailure::Topology { level: b, pods: y, .. },
            ) => a == b && x == y,
            (PendingReason::BadSlice { pods: a, size: x }, PlacementFailure::BadSlice { pods: b, size: y }) => {
                a == b && x == y
            }
            (
                PendingReason::TpuSlices { shape: a, slices: x, .. },
                PlacementFailure::Slices { shape: b, slices: y, .. },
            ) => a == b && x == y,
            _ => false,
        }
    }
}

/// A pending gang's reason plus its reservation, if it holds one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PendingStatus {
    /// Why it did not start.
    #[serde(flatten)]
    pub reason: PendingReason,
    /// When it is reserved to start, if it holds the reservation.
    pub reserved_at: Option<u64>,
}

impl From<PlacementFailure> for PendingReason {
    fn from(f: PlacementFailure) -> Self {
        match f {
            PlacementFailure::Capacity { requested, free } => PendingReason::Capacity { requested, free },
            PlacementFailure::Topology { level, pods, best_domain_fit } => {
                PendingReason::Topology { level, pods, best_domain_fit }
            }
            PlacementFailure::BadSlice { pods, size } => PendingReason::BadSlice { pods, size },
            PlacementFailure::Slices { shape, slices, placed, free_chips } => {
                PendingReason::TpuSlices { shape, slices, placed, free_chips }
            }
        }
    }
}

impl fmt::Display for PendingReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PendingReason::NotYetScheduled => f.write_str("not yet considered by a scheduling cycle"),
            PendingReason::Quota { limit, .. } => write!(f, "quota: {limit}"),
            PendingReason::Capacity { requested, free } => {
                write!(f, "capacity: needs {requested} in total, the cluster has {free} free")
            }
            PendingReason::Topology { level, pods, best_domain_fit } => {
                write!(f, "topology: needs {pods} pods in one {level}, the best {level} fits {best_domain_fit} now")
            }
            PendingReason::Reservation { holder, at } => {
                write!(f, "reservation: starting now would delay gang {holder}, reserved to start at t={at}s")
            }
            PendingReason::QueuedBehind { head } => write!(f, "queued behind gang {head} (strict FIFO)"),
            PendingReason::Backoff { until, attempts } => {
                write!(
                    f,
                    "backoff: {attempts} admission(s) timed out before the pods were ready; next try at t={until}s"
                )
            }
            PendingReason::NodeLost { hosts } => {
                write!(f, "requeued: its node(s) {} were lost while it ran", hosts.join(", "))
            }
            PendingReason::BadSlice { pods, size } => {
                write!(f, "slices: {pods} pods cannot be cut into slices of {size}")
            }
            PendingReason::TpuSlices { shape, slices, placed, free_chips } => write!(
                f,
                "tpu: needs {slices} free {shape} slice(s) on the tori, {placed} fit now ({free_chips} chips free)"
            ),
            PendingReason::Devices { message } => write!(f, "devices: {message}"),
        }
    }
}

/// Why a gang can never run under this cluster and policy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum Unschedulable {
    /// Zero pods, or pods that ask for nothing.
    EmptyGang,
    /// The topology request names a level the cluster does not have.
    UnknownLevel {
        /// The level named.
        level: String,
        /// Levels the cluster has.
        known: String,
    },
    /// The queue is not declared and the policy rejects undeclared queues.
    UnknownQueue {
        /// Queue named by the gang.
        queue: String,
    },
    /// The gang alone needs more GPUs than its queue's quota.
    ExceedsQuota {
        /// Queue name.
        queue: String,
        /// GPUs the gang needs.
        requested_gpus: u64,
        /// The queue's quota.
        nominal_gpus: u64,
    },
    /// Even the empty cluster cannot hold the gang.
    NeverFits(PendingReason),
    /// The gang's pod sets cannot be scheduled as written (two with one name, a slice size that
    /// does not divide its set).
    InvalidShape {
        /// The pod set at fault, when one is.
        set: Option<String>,
        /// What is wrong.
        message: String,
    },
}

impl fmt::Display for Unschedulable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unschedulable::EmptyGang => f.write_str("the gang has no pods or its pods ask for no resources"),
            Unschedulable::InvalidShape { set: Some(set), message } => write!(f, "pod set `{set}`: {message}"),
            Unschedulable::InvalidShape { set: None, message } => f.write_str(message),
            Unschedulable::UnknownLevel { level, known } => {
                write!(f, "topology level `{level}` does not exist; the cluster has {known}")
            }
            Unschedulable::UnknownQueue { queue } => write!(f, "queue `{queue}` is not declared in the policy"),
            Unschedulable::ExceedsQuota { queue, requested_gpus, nominal_gpus } => {
                write!(f, "needs {requested_gpus} GPUs but queue `{queue}` has a quota of {nominal_gpus}")
            }
            Unschedulable::NeverFits(PendingReason::Capacity { requested, .. }) => {
                write!(f, "needs {requested}, more than the empty cluster can hold")
            }
            Unschedulable::NeverFits(reason) => write!(f, "does not fit even on the empty cluster: {reason}"),
        }
    }
}
