//! One cycle's walk over the pending gangs: what the walk carries from gang to gang (the
//! reservation, quota holds, queues blocked behind their head, shapes known not to fit, what
//! the cycle did), and the stages each gang goes through in turn: readiness (backoff, a queue
//! blocked behind its head), quota, placement (or preemption, or a reservation), and admission.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use trainyard_topology::{Demand, Placement, PlacementFailure};

use crate::backfill::{Candidate, Holds, ReservationPlan};
use crate::cycle::blanket::{Blanket, ShapeFailures};
use crate::gangs::record::GangRecord;
use crate::quota::{QueueIdx, QuotaBlock};
use crate::{Admission, BackfillMode, Cycle, Engine, Error, GangId, PendingReason, Result};

/// What the walk carries from one gang to the next within a cycle.
pub(crate) struct Walk {
    pub(crate) mode: BackfillMode,
    /// Shapes that did not fit earlier in this cycle.
    pub(crate) failed_shapes: ShapeFailures,
    /// Strict FIFO: queues whose head could not start, with that head.
    pub(crate) blocked_queues: BTreeMap<QueueIdx, GangId>,
    /// EASY backfill: the first gang that could not start, and when and where it will.
    pub(crate) reservation: Option<ReservationPlan>,
    /// Quota set aside for gangs blocked by quota while a reservation stands.
    pub(crate) holds: Holds,
    /// What the walk learnt about whether anything left in it can start.
    pub(crate) stop: crate::cycle::early_stop::StopCheck,
    /// The last gang visited only heard again why it waits (its request failed or was refused):
    /// the gangs after it may be passed over up to the next one that could start.
    pub(crate) settled_visit: bool,
    /// Gangs were passed over: they read their reason from the blanket.
    pub(crate) passed: bool,
    /// Failures found by search, for a what-if copy to infer others from (`cycle/inferred_failures.rs`).
    pub(crate) searched: crate::cycle::inferred_failures::Searched,
    /// What the cycle did so far.
    pub(crate) cycle: Cycle,
}

impl Walk {
    pub(crate) fn new(mode: BackfillMode, cycle: Cycle) -> Walk {
        Walk {
            mode,
            failed_shapes: HashMap::default(),
            blocked_queues: BTreeMap::new(),
            reservation: None,
            holds: Holds::default(),
            stop: Default::default(),
            settled_visit: false,
            passed: false,
            searched: Default::default(),
            cycle,
        }
    }
}

/// Whether the walk goes on to the next gang.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    Next,
    Stop,
}

impl Engine {
    /// One pending gang's turn in the walk.
    pub(crate) fn visit(&mut self, walk: &mut Walk, id: GangId, now: u64) -> Result<Step> {
        let free = self.cluster.total_free();
        // A full cluster ends the cycle, except that the head of the line may still
        // preempt its way in.
        let may_preempt = (self.preemption.within_queue || self.preemption.reclaim)
            && walk.reservation.is_none()
            && walk.blocked_queues.is_empty();
        if walk.mode == BackfillMode::Easy && free.gpus == 0 && self.gangs.pending_without_gpus() == 0 && !may_preempt {
            self.blanket = Some(Blanket::ClusterFull(free));
            return Ok(Step::Stop);
        }
        let gang = &self.gangs[&id];
        let (queue, gpus) = (gang.queue, gang.gpus);
        if gang.not_before > now {
            // Without a timed-out admission it is a hold (a requeue this instant), not a backoff.
            if gang.unready_attempts > 0 {
                let reason = PendingReason::Backoff { until: gang.not_before, attempts: gang.unready_attempts };
                self.set_status(id, reason, None);
            }
            return Ok(Step::Next);
        }
        if let Some(&head) = walk.blocked_queues.get(&queue) {
            self.set_status(id, PendingReason::QueuedBehind { head }, None);
            return Ok(Step::Next);
        }
        if let Err(block) = self.quotas.check(queue, gang.total) {
            return self.quota_blocked(walk, id, block, now);
        }
        let request = gang.demand.clone();
        // What this visit finds (a failure, a refusal, a start) may change the request's look.
        walk.stop.pass.touch(&request);
        let end = now.saturating_add(gang.estimate);
        if let Some(reason) = walk.reservation.as_ref().and_then(|r| r.refuses(&request, end)) {
            self.set_status(id, reason, None);
            walk.settled_visit = true;
            return Ok(Step::Next);
        }
        // A known failure is shared, not copied: most gangs a cycle visits meet one.
        let known = walk.failed_shapes.get(&request).or_else(|| self.failure_known_now(&request)).map(Arc::clone);
        let was_known = known.is_some();
        let placed = match known {
            Some(failure) => Err(failure),
            None => match self.inferred_failure(walk, &request) {
                Some(failure) => {
                    // Tests check every inferred failure against a search.
                    debug_assert!(self.cluster.place_demand(&request).is_err(), "an inferred failure finds room");
                    Err(failure)
                }
                None if self.inferred_refusal(walk, &request, end) => {
                    return self.refused_without_search(walk, id, &request);
                }
                None => self.take_placement(&request).map_err(|failure| {
                    let failure = Arc::new(failure);
                    self.note_failure(walk, &request, &failure);
                    failure
                }),
            },
        };
        let mut placement = match placed {
            Ok(p) => p,
            Err(failure) => return self.placement_failed(walk, id, &request, &failure, was_known, now),
        };
        let candidate = Candidate { request, queue, gpus, end };
        let refused_before = walk.reservation.as_ref().map_or(0, |r| r.refused.len());
        if let Err(reason) =
            self.respect_reservations(&mut placement, &candidate, walk.reservation.as_mut(), &mut walk.holds)
        {
            // Found at this state and not used: the next gang of the request takes it.
            self.keep_placement(&candidate.request, placement);
            self.set_status(id, reason, None);
            let newly_refused = walk.reservation.as_ref().is_some_and(|r| r.refused.len() > refused_before);
            // A what-if copy checks only when the reservation is made (see `placement_failed`).
            if newly_refused && !self.decisions_only && self.nothing_left_starts(walk, now) {
                return Ok(self.stop_nothing_starts(walk));
            }
            return Ok(Step::Next);
        }
        let backfilled = walk.reservation.is_some() || walk.holds.holds(queue);
        // It leaves the pending order at once, so a gang preempted later in this cycle is
        // requeued (and waits for the next), not dropped.
        if !self.start_or_wait(id, &mut placement, now)? {
            return Ok(Step::Next);
        }
        walk.stop.pass.started();
        walk.cycle.admitted.push(Admission { id, placement, backfilled });
        Ok(Step::Next)
    }

    /// Starts the gang, unless some pod's device claims find no devices on the host the count
    /// of whole pods per host let placement choose (a pod asking no GPUs, `All` requests): then
    /// it waits, saying which claim.
    fn start_or_wait(&mut self, id: GangId, placement: &mut Placement, now: u64) -> Result<bool> {
        match self.start(id, placement, now) {
            Ok(()) => Ok(true),
            Err(Error::Topology(trainyard_topology::Error::Devices { pod, node, reason })) => {
                let message = format!("pod {pod} on node {node}: {reason}");
                self.set_status(id, PendingReason::Devices { message }, None);
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// A what-if copy refuses a gang around the reservation without a search (`cycle/inferred_failures.rs`): as
    /// the refusal after the searches would.
    fn refused_without_search(&mut self, walk: &mut Walk, id: GangId, request: &Demand) -> Result<Step> {
        let Some(res) = walk.reservation.as_mut() else { return Ok(Step::Next) };
        // Tests check every inferred refusal against a search around the reservation.
        debug_assert!(self.place_around(request, res).is_none(), "an inferred refusal finds room");
        res.refuse(request, self.at_plan_state(res));
        self.set_status(id, PendingReason::Reservation { holder: res.holder, at: res.at }, None);
        Ok(Step::Next)
    }

    /// Quota stage: the gang's queue (or a pool above it) has no room for it now. The head of
    /// the line may take lent quota back; otherwise the gang blocks its queue (strict FIFO),
    /// takes the reservation, or holds quota for it (EASY), and says which limit blocks.
    fn quota_blocked(&mut self, walk: &mut Walk, id: GangId, block: QuotaBlock, now: u64) -> Result<Step> {
        let (queue, gpus) = (self.gangs[&id].queue, self.gangs[&id].gpus);
        // The head of the line may take lent quota back from borrowers.
        if walk.reservation.is_none()
            && walk.blocked_queues.is_empty()
            && self.start_by_preemption(id, now, &mut walk.cycle)?
        {
            return Ok(Step::Next);
        }
        let mut reserved_at = None;
        match walk.mode {
            BackfillMode::None => {
                walk.blocked_queues.insert(queue, id);
            }
            BackfillMode::Easy if walk.reservation.is_none() => {
                walk.reservation = self.plan_reservation(id, now, &mut walk.holds)?;
                reserved_at = walk.reservation.as_ref().map(|r| r.at);
            }
            BackfillMode::Easy => walk.holds.hold_queue(self, queue, id, now),
        }
        // The same limit as last time: the reason stands, and no new one is built.
        let limit = (block.queue, block.kind);
        let same = |g: &GangRecord, r: &PendingReason| {
            g.quota_limit == Some(limit) && matches!(r, PendingReason::Quota { .. })
        };
        if reserved_at.is_some() || !self.keep_status(id, same) {
            let kept =
                self.gangs.get_mut(&id).filter(|g| g.quota_limit == Some(limit)).and_then(|g| g.quota_reason.take());
            let reason = self.quota_reason(queue, gpus, &block, kept.map(|r| *r));
            self.set_status(id, reason, reserved_at);
            if let Some(g) = self.gangs.get_mut(&id) {
                g.quota_limit = Some(limit);
            }
        }
        if reserved_at.is_some() && self.nothing_left_starts(walk, now) {
            return Ok(self.stop_nothing_starts(walk));
        }
        Ok(Step::Next)
    }

    /// Placement stage, when the gang does not fit now: the head of the line may preempt its way
    /// in; otherwise the failure is remembered for the shape, the gang blocks the line (strict
    /// FIFO) or takes the reservation (EASY), and a starving gang lets nobody pass.
    fn placement_failed(
        &mut self,
        walk: &mut Walk,
        id: GangId,
        request: &Demand,
        failure: &Arc<PlacementFailure>,
        was_known: bool,
        now: u64,
    ) -> Result<Step> {
        // Only the head of the line preempts: nobody ahead of it is waiting.
        if walk.reservation.is_none()
            && walk.blocked_queues.is_empty()
            && self.start_by_preemption(id, now, &mut walk.cycle)?
        {
            return Ok(Step::Next);
        }
        if !was_known {
            walk.failed_shapes.insert(request.clone(), Arc::clone(failure));
            self.failed_at.insert(request.clone(), (self.cluster.epoch(), Arc::clone(failure)));
        }
        let mut reserved_at = None;
        match walk.mode {
            BackfillMode::None => {
                let reason = self.fresh_reason(failure, request);
                self.set_status(id, reason, None);
                self.blanket = Some(Blanket::QueuedBehind(id));
                return Ok(Step::Stop);
            }
            BackfillMode::Easy if walk.reservation.is_none() => {
                walk.reservation = self.plan_reservation(id, now, &mut walk.holds)?;
                reserved_at = walk.reservation.as_ref().map(|r| r.at);
            }
            BackfillMode::Easy => {}
        }
        let same = |_: &GangRecord, r: &PendingReason| r.steady_eq_failure(failure);
        if reserved_at.is_some() || !self.keep_status(id, same) {
            let reason = self.fresh_reason(failure, request);
            self.set_status(id, reason, reserved_at);
        }
        if self.lifecycle.starving(self.gangs.get(&id), now) {
            // Nobody may pass a gang that has waited too long.
            self.blanket = Some(Blanket::QueuedBehind(id));
            return Ok(Step::Stop);
        }
        // The check after every new failure ends a cycle as early as possible; a what-if copy
        // checks only when the reservation is made: most of its checks found something still
        // open, and the walk passes over settled gangs anyway, to the same decisions.
        if ((!was_known && !self.decisions_only) || reserved_at.is_some()) && self.nothing_left_starts(walk, now) {
            return Ok(self.stop_nothing_starts(walk));
        }
        walk.settled_visit = was_known && walk.reservation.is_some();
        Ok(Step::Next)
    }

    /// The reason a quota block gives now, reusing the words of `kept` (the same limit's last
    /// reason) when there is one.
    pub(crate) fn quota_reason(
        &self,
        queue: QueueIdx,
        gpus: u64,
        block: &QuotaBlock,
        kept: Option<PendingReason>,
    ) -> PendingReason {
        let (used, available) = (self.quotas.usage(queue).gpus, self.quotas.available(queue).gpus);
        match kept {
            Some(PendingReason::Quota { queue, requested_gpus, limit, blocked_by, .. }) => PendingReason::Quota {
                queue,
                requested_gpus,
                used_gpus: used,
                available_gpus: available,
                limit,
                blocked_by,
            },
            _ => PendingReason::Quota {
                queue: self.quotas.name(queue).to_string(),
                requested_gpus: gpus,
                used_gpus: used,
                available_gpus: available,
                limit: self.quotas.describe(block),
                blocked_by: self.quotas.limit_name(block),
            },
        }
    }

    /// The reason a placement failure gives now: a capacity failure with today's free amount (a
    /// known one was found when more or less was free).
    fn fresh_reason(&self, failure: &PlacementFailure, request: &Demand) -> PendingReason {
        match failure {
            PlacementFailure::Capacity { requested, .. } => PendingReason::Capacity {
                requested: *requested,
                free: self.cluster.free_for(request.hosts(), trainyard_topology::DomainId::ROOT),
            },
            other => other.clone().into(),
        }
    }

    /// Where a gang of `request` would go now: the placement kept from the cluster's state
    /// (taken out), or a new search. Hand it back with [`Engine::keep_placement`] unless a gang
    /// starts on it.
    pub(crate) fn take_placement(
        &mut self,
        request: &Demand,
    ) -> std::result::Result<trainyard_topology::Placement, PlacementFailure> {
        if let Some(found) = self.placed.take(self.cluster.version(), request) {
            // Tests check every answer taken from the memo against a new search.
            debug_assert_eq!(self.cluster.place_demand(request).as_ref(), Ok(&found), "a stale placement");
            return Ok(found);
        }
        self.cluster.place_demand(request)
    }

    /// Whether a gang of `request` would find a place now (a kept placement says so without a
    /// search; a new one is kept for the gang that will take it).
    pub(crate) fn probe_placement(&mut self, request: &Demand) -> std::result::Result<(), PlacementFailure> {
        if self.placed.holds(self.cluster.version(), request) {
            // Tests check every answer taken from the memo against a new search.
            debug_assert!(self.cluster.place_demand(request).is_ok(), "a stale placement");
            return Ok(());
        }
        let placement = self.cluster.place_demand(request)?;
        self.keep_placement(request, placement);
        Ok(())
    }

    /// Keeps a placement of `request` found at the cluster's state and not used, for the next
    /// gang of the request while that state stands.
    pub(crate) fn keep_placement(&mut self, request: &Demand, placement: trainyard_topology::Placement) {
        self.placed.insert(self.cluster.version(), request, placement);
    }

    /// Starts the head of the line on capacity it frees by preemption, if it can.
    fn start_by_preemption(&mut self, id: GangId, now: u64, cycle: &mut Cycle) -> Result<bool> {
        let Some(mut placement) = self.try_preempt(id, now, cycle)? else { return Ok(false) };
        if !self.start_or_wait(id, &mut placement, now)? {
            return Ok(false);
        }
        cycle.admitted.push(Admission { id, placement, backfilled: false });
        Ok(true)
    }
}
