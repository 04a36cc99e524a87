//! The engine's side of the lifecycle rules (`lifecycle/`): admissions whose pods became
//! ready, those overdue, and taking one back to wait out its backoff.

use crate::gangs::record::GangState;
use crate::lifecycle::LifecycleRules;
use crate::{Engine, Error, GangId, Result};

impl Engine {
    /// Sets the lifecycle rules.
    pub fn set_lifecycle(&mut self, rules: LifecycleRules) {
        self.state.lifecycle = rules;
    }

    /// Records that every pod of a running gang is ready.
    pub fn mark_ready(&mut self, id: GangId) -> Result<()> {
        let gang = self.state.gangs.get_mut(&id).ok_or(Error::UnknownGang(id))?;
        if !matches!(gang.state, GangState::Running { .. }) {
            return Err(Error::NotRunning(id));
        }
        gang.ready = true;
        Ok(())
    }

    /// Running gangs admitted at least the ready timeout ago whose pods are not all ready.
    pub fn overdue(&self, now: u64) -> Vec<GangId> {
        self.state.lifecycle.overdue(&self.state.gangs, now)
    }

    /// Takes back an admission that did not become ready: frees its capacity and quota and
    /// requeues it in its old place, not to be admitted before the returned time.
    pub fn requeue_unready(&mut self, id: GangId, now: u64) -> Result<u64> {
        let s = &mut self.state;
        s.unrun(id, now)?;
        let gang = s.gangs.get_mut(&id).expect("unrun checked it");
        let until = s.lifecycle.back_off_unready(gang, now, s.cycle);
        s.gangs.back_off(id, until);
        Ok(until)
    }
}
