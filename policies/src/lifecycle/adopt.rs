//! Taking back running gangs: a restarted scheduler rebuilds its engine from what it admitted before.

use trainyard_topology::devices::PodAllocation;
use trainyard_topology::{HostId, PlacedSet};

use crate::engine::Engine;
use crate::{Error, GangRequest, Result, Submitted};

impl Engine {
    /// Records `request` as running since `start` on `hosts` (one entry per pod), charging its
    /// queue and the hosts as an admission would, without placing it again. Its pods are there,
    /// so the hosts are charged even where other usage arrived meanwhile (they then show as
    /// over-committed) and even while a host is not usable. A gang the engine could not take
    /// now (unknown queue, over its quota ceiling, a level the cluster lacks) is returned as
    /// [`Submitted::Unschedulable`] and not recorded; a host list that does not match the gang's
    /// pod count is an error and changes nothing.
    pub fn adopt(&mut self, request: GangRequest, hosts: Vec<HostId>, start: u64) -> Result<Submitted> {
        self.adopt_at(request, hosts, start, start)
    }

    /// [`Engine::adopt`] at `now`: a host it holds that is lost now counts as lost from `now`
    /// (not from when the gang started).
    pub fn adopt_at(&mut self, request: GangRequest, hosts: Vec<HostId>, start: u64, now: u64) -> Result<Submitted> {
        self.adopt_with_devices(request, hosts, Vec::new(), start, now)
    }

    /// [`Engine::adopt_at`] for a gang whose pods hold recorded DRA devices (`devices`: one
    /// entry per pod in the order of `hosts`, or none): the gang holds those devices again, so
    /// that no other gang is given them. A device another holder has too stays held until both
    /// let go.
    pub fn adopt_with_devices(
        &mut self,
        request: GangRequest,
        hosts: Vec<HostId>,
        devices: Vec<Option<PodAllocation>>,
        start: u64,
        now: u64,
    ) -> Result<Submitted> {
        let id = request.id;
        if !devices.is_empty() && devices.len() != hosts.len() {
            let message = format!("devices recorded for {} pods of {}", devices.len(), hosts.len());
            return Err(Error::BadRecord { id, message });
        }
        if hosts.len() != request.shape.pods() as usize {
            let message = format!("{} recorded hosts for {} pods", hosts.len(), request.shape.pods());
            return Err(Error::BadRecord { id, message });
        }
        if let Some(h) = hosts.iter().find(|h| !self.cluster.topology().is_host(**h)) {
            return Err(Error::BadRecord { id, message: format!("host #{} is not part of the cluster", h.0) });
        }
        let sets: Vec<PlacedSet> = request.shape.sets.iter().map(|s| PlacedSet { pods: s.pods, pod: s.pod }).collect();
        let submitted = self.enter(request, false)?;
        if submitted != Submitted::Queued {
            return Ok(submitted);
        }
        let Some(mut placement) = self.cluster.recorded_placement(&sets, hosts) else {
            return Err(Error::BadRecord { id, message: "no hosts recorded".to_string() });
        };
        placement.devices = devices;
        self.cluster.charge_placement(&placement);
        self.run(id, &placement, start);
        self.refresh_lost(id, now.max(start));
        Ok(Submitted::Queued)
    }
}
