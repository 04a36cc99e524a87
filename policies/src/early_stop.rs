//! When a cycle may stop early: once a reservation stands, nothing is freed before the cycle
//! ends (no preemption past the head of the line), so free capacity and quota only shrink. A
//! request then settled for good if it does not fit, if the reservation refused it and all its
//! gangs would run past it, or if none of the queues its gangs wait in has quota for it. When
//! every request still waiting is settled, the rest of the walk would admit nothing: the cycle
//! stops, and its cost follows the kinds of gangs waiting, not their number.
//!
//! The check runs when something it depends on changed (a request failed or was refused, or
//! the reservation was made), not per gang.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use trainyard_topology::Demand;

use crate::Engine;
use crate::blanket::{Blanket, Unstartable};
use crate::gang_map::FastHash;
use crate::walk::{Step, Walk};

/// Requests probed per check (each probe is one placement search at most).
const MAX_PROBES: usize = 64;

/// Queues whose quota is looked at for one request; a request waiting in more is probed by
/// placement only (one quota check per queue and request would cost more than it saves).
const MAX_QUOTA_PROBES: usize = 8;

/// What a cycle's walk learnt about whether anything left in it can start.
#[derive(Debug, Default)]
pub(crate) struct StopCheck {
    /// Requests for which none of the queues of their gangs has quota left.
    quota_settled: HashSet<Demand, FastHash>,
    /// Requests found to fit (room and some queue's quota), with the gangs admitted then:
    /// while none more is admitted, they still fit.
    open: HashMap<Demand, usize, FastHash>,
}

impl Engine {
    /// Whether no gang left in this cycle can start (see the module documentation). Requests no
    /// gang has tried yet are probed: their queues' quota first (when they are few), then a
    /// placement.
    pub(crate) fn nothing_left_starts(&mut self, walk: &mut Walk, now: u64) -> bool {
        let Some(reservation) = &walk.reservation else { return false };
        let admitted = walk.cycle.admitted.len();
        let mut untried: Vec<(Demand, Vec<crate::quota_tree::QueueIdx>)> = Vec::new();
        for (demand, group) in self.gangs.by_request().requests() {
            let settled = walk.failed_shapes.contains_key(demand)
                || (reservation.refused.contains(demand) && now.saturating_add(group.shortest()) > reservation.at)
                || walk.stop.quota_settled.contains(demand);
            if settled {
                continue;
            }
            if walk.stop.open.get(demand) == Some(&admitted) || untried.len() == MAX_PROBES {
                return false;
            }
            untried.push((demand.clone(), group.queues().collect()));
        }
        for (demand, queues) in untried {
            let total = demand.total();
            if queues.len() <= MAX_QUOTA_PROBES && !queues.iter().any(|&q| self.quotas.check(q, total).is_ok()) {
                walk.stop.quota_settled.insert(demand);
                continue;
            }
            match self.place_in_walk(walk, &demand) {
                Ok(_) => {
                    walk.stop.open.insert(demand, admitted);
                    return false;
                }
                Err(failure) => {
                    let failure = Arc::new(failure);
                    self.failed_at.insert(demand.clone(), (self.cluster.epoch(), Arc::clone(&failure)));
                    walk.failed_shapes.insert(demand, failure);
                }
            }
        }
        true
    }

    /// Ends the walk because nothing left starts; the gangs it did not reach read why.
    pub(crate) fn stop_nothing_starts(&mut self, walk: &mut Walk) -> Step {
        let Some(reservation) = &walk.reservation else { return Step::Stop };
        let why = Unstartable {
            failures: std::mem::take(&mut walk.failed_shapes),
            refused: reservation.refused.clone(),
            quota: std::mem::take(&mut walk.stop.quota_settled),
            reservation: (reservation.holder, reservation.at),
        };
        self.blanket = Some(Blanket::NothingStarts(Arc::new(why)));
        Step::Stop
    }
}
