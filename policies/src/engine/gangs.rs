//! The engine's gangs as callers see them: submitting, ending and withdrawing one, why one
//! waits and what would change that, the gangs whose decision changed, and which run where
//! (`state/` keeps the books).

use trainyard_topology::HostId;

use crate::{Engine, Explanation, GangId, GangRequest, PendingStatus, Result, Submitted};

impl Engine {
    /// Queue a gang, or say why it can never run.
    pub fn submit(&mut self, request: GangRequest) -> Result<Submitted> {
        self.state.enter(request, true)
    }

    /// A gang ended (finished, failed or was cancelled while running): free its resources.
    pub fn finish(&mut self, id: GangId, now: u64) -> Result<()> {
        self.state.advance(now)?;
        self.state.end(id, now)
    }

    /// Withdraw a pending gang.
    pub fn cancel_pending(&mut self, id: GangId) -> Result<()> {
        self.state.cancel_pending(id)
    }

    /// Why a pending gang is waiting; `None` if it is not pending.
    pub fn pending_status(&self, id: GangId) -> Option<PendingStatus> {
        self.state.pending_status(id)
    }

    /// The gangs whose decision may have changed since the last call: submitted, started,
    /// stopped, or pending for another reason. Lets a caller follow the engine in O(changes).
    pub fn take_changed(&mut self) -> Vec<GangId> {
        self.state.take_changed()
    }

    /// For a caller that never takes the changed gangs (a replay): they are not kept, so the set
    /// does not grow with every gang that ever came; [`Engine::take_changed`] then lists none.
    pub fn ignore_changes(&mut self) {
        self.state.ignore_changes();
    }

    /// Running gangs with pods on `host`, by id.
    pub fn gangs_on(&self, host: HostId) -> impl Iterator<Item = GangId> + '_ {
        self.state.gangs.on_host(host)
    }

    /// Whether the running gangs are filed by host (on by default). A caller that never loses
    /// hosts (a replay without host failures) turns it off: filing costs every start and stop,
    /// and [`Engine::gangs_on`] then scans the running gangs instead.
    pub fn file_gangs_by_host(&mut self, on: bool) {
        self.state.gangs.keep_host_index(on);
    }

    /// Hosts a running gang has lost, with the time each was lost (none for a healthy gang).
    pub fn lost_hosts(&self, id: GangId) -> Vec<(HostId, u64)> {
        self.state.lost.get(&id).map(|m| m.iter().map(|(h, t)| (*h, *t)).collect()).unwrap_or_default()
    }

    /// Running gangs that have lost hosts, by id.
    pub fn gangs_with_lost_hosts(&self) -> impl Iterator<Item = GangId> + '_ {
        self.state.lost.keys().copied()
    }

    /// Explains a pending gang; `None` when it is not pending.
    pub fn explain(&self, id: GangId) -> Option<Explanation> {
        crate::estimates::explain::explain(&self.state, id)
    }
}
