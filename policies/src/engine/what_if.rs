//! Start-time estimates (`estimates/eta.rs`) run a what-if copy of the engine forward; this is
//! the engine's side of it: what a copy is, and the questions callers ask.

use crate::estimates::eta::{self, WhatIf};
use crate::state::State;
use crate::{Cycle, Engine, EtaAnswer, EtaLimits, GangId, Result, RuntimeHistory};

impl WhatIf for Engine {
    fn state(&self) -> &State {
        &self.state
    }

    fn state_mut(&mut self) -> &mut State {
        &mut self.state
    }

    fn what_if_copy(&self) -> Engine {
        Engine::what_if_copy(self)
    }

    fn schedule(&mut self, now: u64) -> Result<Cycle> {
        Engine::schedule(self, now)
    }
}

impl Engine {
    /// When pending gang `id` is expected to start, asked at `now` (the engine's last time if
    /// later), with learned runtimes from `history` for gangs without an estimate of their own;
    /// within [`EtaLimits::default`]. See the module documentation of `estimates/eta.rs` for the
    /// method. Runs on a copy: the engine is not changed.
    pub fn eta(&self, id: GangId, now: u64, history: Option<&RuntimeHistory>) -> EtaAnswer {
        self.eta_within(id, now, history, EtaLimits::default())
    }

    /// [`Engine::eta`] with other limits on the run.
    pub fn eta_within(&self, id: GangId, now: u64, history: Option<&RuntimeHistory>, limits: EtaLimits) -> EtaAnswer {
        eta::eta(self, id, now, history, limits, true)
    }

    /// [`Engine::eta_within`] with a copy that searches every placement, as the engine does, to
    /// say why gangs wait; tests hold its answers equal to the what-if copy's.
    #[cfg(test)]
    pub(crate) fn eta_searching_all(
        &self,
        id: GangId,
        now: u64,
        history: Option<&RuntimeHistory>,
        limits: EtaLimits,
    ) -> EtaAnswer {
        eta::eta(self, id, now, history, limits, false)
    }
}
