//! Taking back running gangs: a restarted scheduler rebuilds its engine from what it admitted before.

use std::cmp::Reverse;

use trainyard_topology::HostId;

use crate::engine::Engine;
use crate::{Error, GangRequest, Result, Submitted};

impl Engine {
    /// Records `request` as running since `start` on `hosts` (one entry per pod), charging its
    /// queue and the hosts as an admission would, without placing it again. A gang the engine
    /// could not take now (unknown queue, over its quota ceiling, a level the cluster lacks) is
    /// returned as [`Submitted::Unschedulable`] and not recorded; a host list that does not match
    /// the gang's pod count, or hosts without room for its pods, is an error and changes nothing.
    pub fn adopt(&mut self, request: GangRequest, hosts: Vec<HostId>, start: u64) -> Result<Submitted> {
        let id = request.id;
        if hosts.len() != request.shape.pods as usize {
            let message = format!("{} recorded hosts for {} pods", hosts.len(), request.shape.pods);
            return Err(Error::BadRecord { id, message });
        }
        let (pod, order) = (request.shape.pod, (Reverse(request.priority), request.submit));
        let submitted = self.submit(request)?;
        if submitted != Submitted::Queued {
            return Ok(submitted);
        }
        let Some(placement) = self.cluster.recorded_placement(pod, hosts) else {
            return Err(Error::BadRecord { id, message: "no hosts recorded".to_string() });
        };
        // `submit` queued it under this key, with the arrival number it just handed out.
        self.pending.remove(&(order.0, order.1, self.arrivals() - 1));
        if let Err(e) = self.start(id, &placement, start) {
            self.gangs.remove(&id);
            return Err(e);
        }
        Ok(Submitted::Queued)
    }
}
