//! One pending gang's turn in a cycle's walk: the stages it goes through in turn: readiness
//! (backoff, a queue blocked behind its head), quota, placement (or preemption, or a
//! reservation), and admission. What the walk carries from gang to gang is `cycle/carried.rs`.

use std::sync::Arc;

use trainyard_topology::{Demand, Placement, PlacementFailure};

use crate::backfill;
use crate::backfill::Candidate;
use crate::cycle::blanket::Blanket;
use crate::cycle::carried::{Step, Walk};
use crate::cycle::early_stop;
use crate::cycle::inferred_failures;
use crate::gangs::record::GangRecord;
use crate::preemption;
use crate::quota::QuotaBlock;
use crate::state::State;
use crate::{Admission, BackfillMode, Cycle, Error, GangId, PendingReason, Result};

/// One pending gang's turn in the walk.
pub(crate) fn visit(s: &mut State, walk: &mut Walk, id: GangId, now: u64) -> Result<Step> {
    let free = s.cluster.total_free();
    // A full cluster ends the cycle, except that the head of the line may still
    // preempt its way in.
    let may_preempt = (s.preemption.within_queue || s.preemption.reclaim)
        && walk.reservation.is_none()
        && walk.blocked_queues.is_empty();
    if walk.mode == BackfillMode::Easy && free.gpus == 0 && s.gangs.pending_without_gpus() == 0 && !may_preempt {
        s.blanket = Some(Blanket::ClusterFull(free));
        return Ok(Step::Stop);
    }
    let gang = &s.gangs[&id];
    let (queue, gpus) = (gang.queue, gang.gpus);
    if gang.not_before > now {
        // Without a timed-out admission it is a hold (a requeue this instant), not a backoff.
        if gang.unready_attempts > 0 {
            let reason = PendingReason::Backoff { until: gang.not_before, attempts: gang.unready_attempts };
            s.set_status(id, reason, None);
        }
        return Ok(Step::Next);
    }
    if let Some(&head) = walk.blocked_queues.get(&queue) {
        s.set_status(id, PendingReason::QueuedBehind { head }, None);
        return Ok(Step::Next);
    }
    if let Err(block) = s.quotas.check(queue, gang.total) {
        return quota_blocked(s, walk, id, block, now);
    }
    let request = gang.demand.clone();
    // What this visit finds (a failure, a refusal, a start) may change the request's look.
    walk.stop.pass.touch(&request);
    let end = now.saturating_add(gang.estimate);
    if let Some(reason) = walk.reservation.as_ref().and_then(|r| r.refuses(&request, end)) {
        s.set_status(id, reason, None);
        walk.settled_visit = true;
        return Ok(Step::Next);
    }
    // A known failure is shared, not copied: most gangs a cycle visits meet one.
    let known = walk.failed_shapes.get(&request).or_else(|| s.failure_known_now(&request)).map(Arc::clone);
    let was_known = known.is_some();
    let placed = match known {
        Some(failure) => Err(failure),
        None => match inferred_failures::inferred_failure(s, &walk.searched, &request) {
            Some(failure) => {
                // Tests check every inferred failure against a search.
                debug_assert!(s.cluster.place_demand(&request).is_err(), "an inferred failure finds room");
                Err(failure)
            }
            None if inferred_failures::inferred_refusal(s, walk.reservation.as_ref(), &request, end) => {
                return refused_without_search(s, walk, id, &request);
            }
            None => s.take_placement(&request).map_err(|failure| {
                let failure = Arc::new(failure);
                inferred_failures::note_failure(s, &mut walk.searched, &request, &failure);
                failure
            }),
        },
    };
    let mut placement = match placed {
        Ok(p) => p,
        Err(failure) => return placement_failed(s, walk, id, &request, &failure, was_known, now),
    };
    let candidate = Candidate { request, queue, gpus, end };
    let refused_before = walk.reservation.as_ref().map_or(0, |r| r.refused.len());
    if let Err(reason) =
        backfill::respect_reservations(s, &mut placement, &candidate, walk.reservation.as_mut(), &mut walk.holds)
    {
        // Found at this state and not used: the next gang of the request takes it.
        s.keep_placement(&candidate.request, placement);
        s.set_status(id, reason, None);
        let newly_refused = walk.reservation.as_ref().is_some_and(|r| r.refused.len() > refused_before);
        // A what-if copy checks only when the reservation is made (see `placement_failed`).
        if newly_refused && !s.decisions_only && early_stop::nothing_left_starts(s, walk, now) {
            return Ok(early_stop::stop_nothing_starts(s, walk));
        }
        return Ok(Step::Next);
    }
    let backfilled = walk.reservation.is_some() || walk.holds.holds(queue);
    // It leaves the pending order at once, so a gang preempted later in this cycle is
    // requeued (and waits for the next), not dropped.
    if !start_or_wait(s, id, &mut placement, now)? {
        return Ok(Step::Next);
    }
    walk.stop.pass.started();
    walk.cycle.admitted.push(Admission { id, placement, backfilled });
    Ok(Step::Next)
}

/// Starts the gang, unless some pod's device claims find no devices on the host the count
/// of whole pods per host let placement choose (a pod asking no GPUs, `All` requests): then
/// it waits, saying which claim.
fn start_or_wait(s: &mut State, id: GangId, placement: &mut Placement, now: u64) -> Result<bool> {
    match s.start(id, placement, now) {
        Ok(()) => Ok(true),
        Err(Error::Topology(trainyard_topology::Error::Devices { pod, node, reason })) => {
            let message = format!("pod {pod} on node {node}: {reason}");
            s.set_status(id, PendingReason::Devices { message }, None);
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// A what-if copy refuses a gang around the reservation without a search (`cycle/inferred_failures.rs`): as
/// the refusal after the searches would.
fn refused_without_search(s: &mut State, walk: &mut Walk, id: GangId, request: &Demand) -> Result<Step> {
    let Some(res) = walk.reservation.as_mut() else { return Ok(Step::Next) };
    // Tests check every inferred refusal against a search around the reservation.
    debug_assert!(backfill::place_around(s, request, res).is_none(), "an inferred refusal finds room");
    res.refuse(request, backfill::at_plan_state(s, res));
    s.set_status(id, PendingReason::Reservation { holder: res.holder, at: res.at }, None);
    Ok(Step::Next)
}

/// Quota stage: the gang's queue (or a pool above it) has no room for it now. The head of
/// the line may take lent quota back; otherwise the gang blocks its queue (strict FIFO),
/// takes the reservation, or holds quota for it (EASY), and says which limit blocks.
fn quota_blocked(s: &mut State, walk: &mut Walk, id: GangId, block: QuotaBlock, now: u64) -> Result<Step> {
    let (queue, gpus) = (s.gangs[&id].queue, s.gangs[&id].gpus);
    // The head of the line may take lent quota back from borrowers.
    if walk.reservation.is_none() && walk.blocked_queues.is_empty() && start_by_preemption(s, id, now, &mut walk.cycle)?
    {
        return Ok(Step::Next);
    }
    let mut reserved_at = None;
    match walk.mode {
        BackfillMode::None => {
            walk.blocked_queues.insert(queue, id);
        }
        BackfillMode::Easy if walk.reservation.is_none() => {
            walk.reservation = backfill::plan_reservation(s, id, now, &mut walk.holds)?;
            reserved_at = walk.reservation.as_ref().map(|r| r.at);
        }
        BackfillMode::Easy => walk.holds.hold_queue(&s.gangs, &mut s.quotas, queue, id, now),
    }
    // The same limit as last time: the reason stands, and no new one is built.
    let limit = (block.queue, block.kind);
    let same =
        |g: &GangRecord, r: &PendingReason| g.quota_limit == Some(limit) && matches!(r, PendingReason::Quota { .. });
    if reserved_at.is_some() || !s.keep_status(id, same) {
        let kept = s.gangs.get_mut(&id).filter(|g| g.quota_limit == Some(limit)).and_then(|g| g.quota_reason.take());
        let reason = s.quotas.blocked_reason(queue, gpus, &block, kept.map(|r| *r));
        s.set_status(id, reason, reserved_at);
        if let Some(g) = s.gangs.get_mut(&id) {
            g.quota_limit = Some(limit);
        }
    }
    if reserved_at.is_some() && early_stop::nothing_left_starts(s, walk, now) {
        return Ok(early_stop::stop_nothing_starts(s, walk));
    }
    Ok(Step::Next)
}

/// Placement stage, when the gang does not fit now: the head of the line may preempt its way
/// in; otherwise the failure is remembered for the shape, the gang blocks the line (strict
/// FIFO) or takes the reservation (EASY), and a starving gang lets nobody pass.
fn placement_failed(
    s: &mut State,
    walk: &mut Walk,
    id: GangId,
    request: &Demand,
    failure: &Arc<PlacementFailure>,
    was_known: bool,
    now: u64,
) -> Result<Step> {
    // Only the head of the line preempts: nobody ahead of it is waiting.
    if walk.reservation.is_none() && walk.blocked_queues.is_empty() && start_by_preemption(s, id, now, &mut walk.cycle)?
    {
        return Ok(Step::Next);
    }
    if !was_known {
        walk.failed_shapes.insert(request.clone(), Arc::clone(failure));
        s.failed_at.insert(request.clone(), (s.cluster.epoch(), Arc::clone(failure)));
    }
    let mut reserved_at = None;
    match walk.mode {
        BackfillMode::None => {
            let reason = fresh_reason(s, failure, request);
            s.set_status(id, reason, None);
            s.blanket = Some(Blanket::QueuedBehind(id));
            return Ok(Step::Stop);
        }
        BackfillMode::Easy if walk.reservation.is_none() => {
            walk.reservation = backfill::plan_reservation(s, id, now, &mut walk.holds)?;
            reserved_at = walk.reservation.as_ref().map(|r| r.at);
        }
        BackfillMode::Easy => {}
    }
    let same = |_: &GangRecord, r: &PendingReason| r.steady_eq_failure(failure);
    if reserved_at.is_some() || !s.keep_status(id, same) {
        let reason = fresh_reason(s, failure, request);
        s.set_status(id, reason, reserved_at);
    }
    if s.lifecycle.starving(s.gangs.get(&id), now) {
        // Nobody may pass a gang that has waited too long.
        s.blanket = Some(Blanket::QueuedBehind(id));
        return Ok(Step::Stop);
    }
    // The check after every new failure ends a cycle as early as possible; a what-if copy
    // checks only when the reservation is made: most of its checks found something still
    // open, and the walk passes over settled gangs anyway, to the same decisions.
    if ((!was_known && !s.decisions_only) || reserved_at.is_some()) && early_stop::nothing_left_starts(s, walk, now) {
        return Ok(early_stop::stop_nothing_starts(s, walk));
    }
    walk.settled_visit = was_known && walk.reservation.is_some();
    Ok(Step::Next)
}

/// The reason a placement failure gives now: a capacity failure with today's free amount (a
/// known one was found when more or less was free).
fn fresh_reason(s: &State, failure: &PlacementFailure, request: &Demand) -> PendingReason {
    match failure {
        PlacementFailure::Capacity { requested, .. } => PendingReason::Capacity {
            requested: *requested,
            free: s.cluster.free_for(request.hosts(), trainyard_topology::DomainId::ROOT),
        },
        other => other.clone().into(),
    }
}

/// Starts the head of the line on capacity it frees by preemption, if it can.
fn start_by_preemption(s: &mut State, id: GangId, now: u64, cycle: &mut Cycle) -> Result<bool> {
    let Some(mut placement) = preemption::try_preempt(s, id, now, cycle)? else { return Ok(false) };
    if !start_or_wait(s, id, &mut placement, now)? {
        return Ok(false);
    }
    cycle.admitted.push(Admission { id, placement, backfilled: false });
    Ok(true)
}
