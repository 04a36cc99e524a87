//! Gang lifecycle rules: admissions whose pods do not become ready in time are requeued
//! with exponential backoff, and a gang that has waited too long is never passed.

pub(crate) mod adopt;
pub(crate) mod live_cluster;
pub(crate) mod node_loss;

use crate::gangs::record::{GangRecord, GangState};
use crate::gangs::table::GangTable;
use crate::{GangId, PendingReason, PendingStatus};

/// Timeouts and limits of a gang's life in the engine. All off by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LifecycleRules {
    /// A capacity-blocked gang waiting at least this long stops being passed by backfill.
    pub max_wait_s: Option<u64>,
    /// An admitted gang whose pods are not all ready after this long is requeued.
    pub ready_timeout_s: Option<u64>,
    /// First backoff after a timed-out admission; it doubles with each further one.
    pub backoff_s: u64,
    /// Longest backoff.
    pub max_backoff_s: u64,
}

impl LifecycleRules {
    /// Backoff after the `attempts`-th timed-out admission (1-based).
    pub fn backoff(&self, attempts: u32) -> u64 {
        let doubled = self.backoff_s.saturating_mul(1u64 << attempts.saturating_sub(1).min(32));
        if self.max_backoff_s > 0 { doubled.min(self.max_backoff_s) } else { doubled }
    }

    /// Running gangs admitted at least the ready timeout ago whose pods are not all ready.
    pub(crate) fn overdue(&self, gangs: &GangTable, now: u64) -> Vec<GangId> {
        let Some(timeout) = self.ready_timeout_s else { return Vec::new() };
        gangs
            .ids()
            .into_iter()
            .filter(|id| {
                let g = &gangs[id];
                !g.ready && matches!(g.state, GangState::Running { start, .. } if now >= start + timeout)
            })
            .collect()
    }

    /// Sends a gang whose admission did not become ready (already taken off its hosts) back to
    /// pending, backing off: returns the time it may not be admitted before.
    pub(crate) fn back_off_unready(&self, gang: &mut GangRecord, now: u64, cycle: u64) -> u64 {
        gang.unready_attempts += 1;
        let until = now + self.backoff(gang.unready_attempts);
        let reason = PendingReason::Backoff { until, attempts: gang.unready_attempts };
        gang.state = GangState::Pending { status: PendingStatus { reason, reserved_at: None }, cycle };
        until
    }

    /// Whether a pending gang has waited long enough that nobody may pass it.
    pub(crate) fn starving(&self, gang: Option<&GangRecord>, now: u64) -> bool {
        let Some(limit) = self.max_wait_s else { return false };
        gang.is_some_and(|g| now.saturating_sub(g.request.submit) >= limit)
    }
}
