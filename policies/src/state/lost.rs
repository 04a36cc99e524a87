//! Hosts lost under running gangs: which gangs lost which hosts since when. A host is lost to
//! a gang when it is no longer usable (cordoned, not ready, removed) or when it carries a
//! `NoExecute` taint the gang does not tolerate (its pods are being evicted). The gang keeps
//! the host charged either way until it ends, is requeued, or moves off it; what the policy
//! does once the grace runs out is `lifecycle/node_loss.rs`.

use trainyard_topology::{HostId, Placement};

use crate::gangs::record::GangState;
use crate::state::State;
use crate::{GangId, NodeLossAction};

impl State {
    /// Whether `host` is lost to running gang `id`.
    fn lost_to(&self, id: GangId, host: HostId) -> bool {
        if !self.cluster.topology().is_host(host) || !self.cluster.usable(host) {
            return true;
        }
        let class = self.gangs[&id].demand.hosts();
        let filter = self.cluster.class_filter(class);
        self.cluster.host_attrs(host).is_some_and(|attrs| filter.evicted_from(attrs).is_some())
    }

    /// Looks again at a running gang's hosts at `now`.
    pub(crate) fn refresh_lost(&mut self, id: GangId, now: u64) {
        let Some(GangState::Running { placement, .. }) = self.gangs.get(&id).map(|g| &g.state) else { return };
        let mut hosts: Vec<HostId> = placement.hosts.clone();
        hosts.sort_unstable();
        hosts.dedup();
        for h in hosts {
            self.refresh_lost_host(id, h, now);
        }
    }

    /// Looks again at every running gang on `host` at `now`.
    pub(crate) fn refresh_host(&mut self, host: HostId, now: u64) {
        let gangs: Vec<GangId> = self.gangs.on_host(host).collect();
        for id in gangs {
            self.refresh_lost_host(id, host, now);
        }
    }

    fn refresh_lost_host(&mut self, id: GangId, host: HostId, now: u64) {
        let lost = self.lost_to(id, host);
        let changed = match (lost, self.lost.get_mut(&id)) {
            // A host that stays lost keeps the time it was first lost.
            (true, Some(hosts)) => hosts.insert(host, now).map(|since| hosts.insert(host, since)).is_none(),
            (true, None) => {
                self.lost.insert(id, [(host, now)].into());
                true
            }
            (false, Some(hosts)) => {
                let was = hosts.remove(&host).is_some();
                if hosts.is_empty() {
                    self.lost.remove(&id);
                }
                was
            }
            (false, None) => false,
        };
        if changed {
            self.touch(id);
            self.dirty = true;
        }
    }

    /// The earliest time a lost host's grace runs out, when the policy acts on lost hosts.
    pub(crate) fn lost_due(&self) -> Option<u64> {
        if self.config.node_loss.action == NodeLossAction::Wait {
            return None;
        }
        let grace = self.config.node_loss.grace_s;
        self.lost.values().flat_map(|m| m.values()).min().map(|&t| t.saturating_add(grace))
    }

    /// A running gang moved `from` one host to its new `placement` (the cluster is charged already).
    pub(crate) fn move_running(&mut self, id: GangId, from: HostId, placement: &Placement) {
        if let Some(lost) = self.lost.get_mut(&id) {
            lost.remove(&from);
            if lost.is_empty() {
                self.lost.remove(&id);
            }
        }
        self.gangs.moved(id, from, placement);
        self.touch(id);
        self.dirty = true;
    }
}
