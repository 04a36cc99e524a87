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

use std::sync::Arc;

use trainyard_topology::Demand;

use crate::cycle::blanket::{Blanket, Unstartable};
use crate::cycle::carried::{Step, Walk};
use crate::cycle::inferred_failures;
use crate::state::State;

/// Requests probed per check (each probe is one placement search at most).
const MAX_PROBES: usize = 64;

/// Queues whose quota is looked at for one request; a request waiting in more is probed by
/// placement only (one quota check per queue and request would cost more than it saves).
const MAX_QUOTA_PROBES: usize = 8;

/// Whether no gang left in this cycle can start (see the module documentation). Requests no
/// gang has tried yet are probed: their queues' quota first (when they are few), then a
/// placement.
pub(crate) fn nothing_left_starts(s: &mut State, walk: &mut Walk, now: u64) -> bool {
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
        && let Some(group) = s.gangs.by_request().group(w)
        && !settled(w, group)
    {
        return false;
    }
    // The list is kept between checks (cleared), so that a check allocates nothing.
    let mut untried = std::mem::take(&mut walk.stop.untried);
    untried.clear();
    for (demand, group) in s.gangs.by_request().requests() {
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
        let group = s.gangs.by_request().group(&demand).expect("listed from the requests above");
        if group.queue_count() <= MAX_QUOTA_PROBES && !group.queues().any(|q| s.quotas.check(q, total).is_ok()) {
            walk.stop.quota_settled.insert(demand);
            continue;
        }
        // The visit path takes a known failure the same way, without a search.
        if let Some(failure) = s.failure_known_now(&demand) {
            walk.stop.pass.touch(&demand);
            walk.failed_shapes.insert(demand, Arc::clone(failure));
            continue;
        }
        if let Some(failure) = inferred_failures::inferred_failure(s, &walk.searched, &demand) {
            // Tests check every inferred failure against a search.
            debug_assert!(s.cluster.place_demand(&demand).is_err(), "an inferred failure finds room");
            s.failed_at.insert(demand.clone(), (s.cluster.epoch(), Arc::clone(&failure)));
            walk.stop.pass.touch(&demand);
            walk.failed_shapes.insert(demand, failure);
            continue;
        }
        match s.probe_placement(&demand) {
            Ok(()) => {
                walk.stop.open.insert(demand.clone(), admitted);
                walk.stop.witness = Some(demand);
                answer = false;
                break;
            }
            Err(failure) => {
                let failure = Arc::new(failure);
                inferred_failures::note_failure(s, &mut walk.searched, &demand, &failure);
                s.failed_at.insert(demand.clone(), (s.cluster.epoch(), Arc::clone(&failure)));
                walk.stop.pass.touch(&demand);
                walk.failed_shapes.insert(demand, failure);
            }
        }
    }
    untried.clear();
    walk.stop.untried = untried;
    answer
}

/// Ends the walk because nothing left starts; the gangs it did not reach read why.
pub(crate) fn stop_nothing_starts(s: &mut State, walk: &mut Walk) -> Step {
    let Some(reservation) = &walk.reservation else { return Step::Stop };
    let why = Unstartable {
        failures: std::mem::take(&mut walk.failed_shapes),
        refused: reservation.refused.clone(),
        quota: std::mem::take(&mut walk.stop.quota_settled),
        reservation: (reservation.holder, reservation.at),
    };
    s.blanket = Some(Blanket::NothingStarts(Arc::new(why)));
    Step::Stop
}
