//! What the pending gangs a cycle did not reach read as their reason: the blanket a cycle
//! that stopped early leaves over the rest of the line.

use std::collections::HashSet;
use std::sync::Arc;

use trainyard_topology::{Demand, PlacementFailure, Resources};

use crate::gangs::by_id::FastHash;
use crate::gangs::record::GangRecord;
use crate::quota::QuotaTree;
use crate::{GangId, PendingReason, PendingStatus};

/// What gangs not looked at in the last cycle are waiting for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Blanket {
    /// A gang nobody may pass (strict FIFO, or one that starved).
    QueuedBehind(GangId),
    /// No GPU was left.
    ClusterFull(Resources),
    /// No gang left in the cycle could start: each reads why its own request could not.
    NothingStarts(Arc<Unstartable>),
}

/// Placement failures of one cycle, by what was asked.
pub(crate) type ShapeFailures = std::collections::HashMap<Demand, Arc<PlacementFailure>, FastHash>;

/// Why the requests still waiting when a cycle stopped early could not start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Unstartable {
    /// Requests that did not fit what was free.
    pub(crate) failures: ShapeFailures,
    /// Requests that found no room around the reservation.
    pub(crate) refused: HashSet<Demand, FastHash>,
    /// Requests none of whose gangs' queues had quota for them.
    pub(crate) quota: HashSet<Demand, FastHash>,
    /// The reservation's holder and time.
    pub(crate) reservation: (GangId, u64),
}

impl Unstartable {
    /// Why a gang of `demand` could not start, if the blanket covers it. A quota block is
    /// described with the quota as it stands when asked.
    fn reason(&self, quotas: &QuotaTree, gang: &GangRecord) -> Option<PendingReason> {
        let demand = &gang.demand;
        if let Some(failure) = self.failures.get(demand) {
            return Some(PendingReason::from((**failure).clone()));
        }
        let (holder, at) = self.reservation;
        if self.refused.contains(demand) {
            return Some(PendingReason::Reservation { holder, at });
        }
        if self.quota.contains(demand) {
            let block = quotas.check(gang.queue, gang.total).err()?;
            return Some(quotas.blocked_reason(gang.queue, gang.gpus, &block, None));
        }
        None
    }

    /// The same reasons for every request, whatever the amounts in them.
    fn steady_eq(&self, other: &Unstartable) -> bool {
        self.reservation == other.reservation
            && self.refused == other.refused
            && self.quota == other.quota
            && self.failures.len() == other.failures.len()
            && self.failures.iter().all(|(demand, failure)| {
                other
                    .failures
                    .get(demand)
                    .is_some_and(|f| PendingReason::from((**f).clone()).steady_eq_failure(failure))
            })
    }
}

/// Whether two blankets read the same to someone asking why a gang waits: the same kind of
/// reason for every gang, whatever the amounts in it (they drift every cycle; a reader is told
/// of new kinds of reason, as for gangs a cycle did reach).
pub(crate) fn steady_eq(a: Option<&Blanket>, b: Option<&Blanket>) -> bool {
    match (a, b) {
        (Some(Blanket::NothingStarts(a)), Some(Blanket::NothingStarts(b))) => a.steady_eq(b),
        (a, b) => a == b,
    }
}

/// The status a pending gang the last cycle did not reach reads under `blanket`, if it covers
/// the gang; `now` is the engine's latest time, `quotas` the quota as it stands.
pub(crate) fn status(blanket: &Blanket, quotas: &QuotaTree, now: u64, gang: &GangRecord) -> Option<PendingStatus> {
    if gang.unready_attempts > 0 && gang.not_before > now {
        // Its own backoff, which a visit would have said too.
        let reason = PendingReason::Backoff { until: gang.not_before, attempts: gang.unready_attempts };
        return Some(PendingStatus { reason, reserved_at: None });
    }
    let reason = match blanket {
        Blanket::QueuedBehind(head) => PendingReason::QueuedBehind { head: *head },
        Blanket::ClusterFull(free) => PendingReason::Capacity { requested: gang.total, free: *free },
        // A gang that came after the cycle is not covered: its own status stands.
        Blanket::NothingStarts(why) => why.reason(quotas, gang)?,
    };
    Some(PendingStatus { reason, reserved_at: None })
}
