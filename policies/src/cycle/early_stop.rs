//! When a cycle may stop early: once a reservation stands, nothing is freed before the cycle
//! ends (no preemption past the head of the line), so free capacity and quota only shrink. A
//! request then settled for good if it does not fit, if the reservation refused it and all its
//! gangs would run past it, or if none of the queues its gangs wait in has quota for it. When
//! every request still waiting is settled, the rest of the walk would admit nothing: the cycle
//! stops, and its cost follows the kinds of gangs waiting, not their number.
//!
//! The check runs when something it depends on changed (a request failed or was refused, or
//! the reservation was made), not per gang.
//!
//! When some requests are still open, the walk passes over the gangs of settled ones in
//! between (`next_open`, in `cycle/pass_over.rs`): a visit to such a gang would only say again why it waits, so the
//! gangs it passes read that reason from the blanket, and a cycle's cost follows the gangs that
//! could start, not the length of the line. Only gangs whose visit would change nothing else
//! are passed: their request failed or was refused (every gang of it running past the
//! reservation), every queue they wait in has quota for them (a quota block would set a hold),
//! and no starvation limit is set (a starving gang stops the walk).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use trainyard_topology::{Demand, Resources};

/// A ceiling without any limit.
pub(crate) const UNLIMITED: Resources = Resources { gpus: u64::MAX, cpu_milli: u64::MAX, memory_mib: u64::MAX };

use crate::Engine;
use crate::cycle::blanket::{Blanket, Unstartable};
use crate::cycle::walk::{Step, Walk};
use crate::gangs::by_id::FastHash;

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
    /// The open request the last check stopped at: while it is still open and not settled, the
    /// check answers at once, as its walk over every request would (see `nothing_left_starts`).
    witness: Option<Demand>,
    /// The requests a check is about to probe (kept only for its buffer).
    untried: Vec<Demand>,
    /// What `next_open` found, for its next call in the cycle (`cycle/pass_over.rs`).
    pub(crate) pass: crate::cycle::pass_over::PassMemo,
}

impl Engine {
    /// Whether no gang left in this cycle can start (see the module documentation). Requests no
    /// gang has tried yet are probed: their queues' quota first (when they are few), then a
    /// placement.
    pub(crate) fn nothing_left_starts(&mut self, walk: &mut Walk, now: u64) -> bool {
        let Some(reservation) = &walk.reservation else { return false };
        let admitted = walk.cycle.admitted.len();
        let settled = |demand: &Demand, group: &crate::gangs::by_request::Group| {
            walk.failed_shapes.contains_key(demand)
                || (reservation.refused.contains(demand) && now.saturating_add(group.shortest()) > reservation.at)
                || walk.stop.quota_settled.contains(demand)
        };
        // The walk below returns `false`, probing nothing, once it meets an open request that is
        // not settled; when the last one it met still is, it would meet it again: answer now.
        if let Some(w) = &walk.stop.witness
            && walk.stop.open.get(w) == Some(&admitted)
            && let Some(group) = self.gangs.by_request().group(w)
            && !settled(w, group)
        {
            return false;
        }
        // The list is kept between checks (cleared), so that a check allocates nothing.
        let mut untried = std::mem::take(&mut walk.stop.untried);
        untried.clear();
        for (demand, group) in self.gangs.by_request().requests() {
            if settled(demand, group) {
                continue;
            }
            if walk.stop.open.get(demand) == Some(&admitted) {
                walk.stop.witness = Some(demand.clone());
                walk.stop.untried = untried;
                return false;
            }
            if untried.len() == MAX_PROBES {
                walk.stop.untried = untried;
                return false;
            }
            untried.push(demand.clone());
        }
        let mut answer = true;
        for demand in untried.drain(..) {
            let total = demand.total();
            let group = self.gangs.by_request().group(&demand).expect("listed from the requests above");
            if group.queue_count() <= MAX_QUOTA_PROBES && !group.queues().any(|q| self.quotas.check(q, total).is_ok()) {
                walk.stop.quota_settled.insert(demand);
                continue;
            }
            // The visit path takes a known failure the same way, without a search.
            if let Some(failure) = self.failure_known_now(&demand) {
                walk.stop.pass.touch(&demand);
                walk.failed_shapes.insert(demand, Arc::clone(failure));
                continue;
            }
            if let Some(failure) = self.inferred_failure(walk, &demand) {
                // Tests check every inferred failure against a search.
                debug_assert!(self.cluster.place_demand(&demand).is_err(), "an inferred failure finds room");
                self.failed_at.insert(demand.clone(), (self.cluster.epoch(), Arc::clone(&failure)));
                walk.stop.pass.touch(&demand);
                walk.failed_shapes.insert(demand, failure);
                continue;
            }
            match self.probe_placement(&demand) {
                Ok(()) => {
                    walk.stop.open.insert(demand.clone(), admitted);
                    walk.stop.witness = Some(demand);
                    answer = false;
                    break;
                }
                Err(failure) => {
                    let failure = Arc::new(failure);
                    self.note_failure(walk, &demand, &failure);
                    self.failed_at.insert(demand.clone(), (self.cluster.epoch(), Arc::clone(&failure)));
                    walk.stop.pass.touch(&demand);
                    walk.failed_shapes.insert(demand, failure);
                }
            }
        }
        untried.clear();
        walk.stop.untried = untried;
        answer
    }

    /// The failure a search for `demand` met at today's free-capacity epoch: it stands, since
    /// capacity only shrank since (a search that finds no room finds none on less).
    pub(crate) fn failure_known_now(&self, demand: &Demand) -> Option<&Arc<trainyard_topology::PlacementFailure>> {
        self.failed_at.get(demand).filter(|(e, _)| *e == self.cluster.epoch()).map(|(_, f)| f)
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
