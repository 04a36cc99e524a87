//! Gang lifecycle rules: admissions whose pods do not become ready in time are requeued
//! with exponential backoff, and a gang that has waited too long is never passed.

pub(crate) mod adopt;
pub(crate) mod live_cluster;
pub(crate) mod node_loss;

use crate::gangs::record::GangState;
use crate::{Engine, Error, GangId, PendingReason, PendingStatus, Result};

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
}

impl Engine {
    /// Sets the lifecycle rules.
    pub fn set_lifecycle(&mut self, rules: LifecycleRules) {
        self.lifecycle = rules;
    }

    /// Records that every pod of a running gang is ready.
    pub fn mark_ready(&mut self, id: GangId) -> Result<()> {
        let gang = self.gangs.get_mut(&id).ok_or(Error::UnknownGang(id))?;
        if !matches!(gang.state, GangState::Running { .. }) {
            return Err(Error::NotRunning(id));
        }
        gang.ready = true;
        Ok(())
    }

    /// Running gangs admitted at least the ready timeout ago whose pods are not all ready.
    pub fn overdue(&self, now: u64) -> Vec<GangId> {
        let Some(timeout) = self.lifecycle.ready_timeout_s else { return Vec::new() };
        self.gangs
            .ids()
            .into_iter()
            .filter(|id| {
                let g = &self.gangs[id];
                !g.ready && matches!(g.state, GangState::Running { start, .. } if now >= start + timeout)
            })
            .collect()
    }

    /// Takes back an admission that did not become ready: frees its capacity and quota and
    /// requeues it in its old place, not to be admitted before the returned time.
    pub fn requeue_unready(&mut self, id: GangId, now: u64) -> Result<u64> {
        self.unrun(id, now)?;
        let cycle = self.cycle_number();
        let rules = self.lifecycle;
        let g = self.gangs.get_mut(&id).expect("unrun checked it");
        g.unready_attempts += 1;
        let until = now + rules.backoff(g.unready_attempts);
        let reason = PendingReason::Backoff { until, attempts: g.unready_attempts };
        g.state = GangState::Pending { status: PendingStatus { reason, reserved_at: None }, cycle };
        self.gangs.back_off(id, until);
        Ok(until)
    }

    /// Whether a pending gang has waited long enough that nobody may pass it.
    pub(crate) fn starving(&self, id: GangId, now: u64) -> bool {
        let Some(limit) = self.lifecycle.max_wait_s else { return false };
        self.gangs.get(&id).is_some_and(|g| now.saturating_sub(g.request.submit) >= limit)
    }
}
