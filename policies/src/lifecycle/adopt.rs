//! Taking back running gangs: a restarted scheduler rebuilds its engine from what it admitted before.

use trainyard_topology::devices::PodAllocation;
use trainyard_topology::{HostId, PlacedSet};

use crate::state::State;
use crate::{Error, GangRequest, Result, Submitted};

/// [`crate::Engine::adopt_at`] for a gang whose pods hold recorded DRA devices (`devices`: one
/// entry per pod in the order of `hosts`, or none): the gang holds those devices again, so
/// that no other gang is given them. A device another holder has too stays held until both
/// let go.
pub(crate) fn adopt_with_devices(
    s: &mut State,
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
    if let Some(h) = hosts.iter().find(|h| !s.cluster.topology().is_host(**h)) {
        return Err(Error::BadRecord { id, message: format!("host #{} is not part of the cluster", h.0) });
    }
    let sets: Vec<PlacedSet> = request.shape.sets.iter().map(|s| PlacedSet { pods: s.pods, pod: s.pod }).collect();
    let submitted = s.enter(request, false)?;
    if submitted != Submitted::Queued {
        return Ok(submitted);
    }
    let Some(mut placement) = s.cluster.recorded_placement(&sets, hosts) else {
        return Err(Error::BadRecord { id, message: "no hosts recorded".to_string() });
    };
    placement.devices = devices;
    s.cluster.charge_placement(&placement);
    s.run(id, &placement, start);
    s.refresh_lost(id, now.max(start));
    Ok(Submitted::Queued)
}
