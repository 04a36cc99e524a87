//! Preemption inside the scheduling loop: which running gangs a blocked gang may displace,
//! and committing the displacement together with the preemptor's start.
//!
//! Only the head of the line preempts (the first gang that cannot start, before any
//! reservation exists), so preemption never jumps the queue. Within its queue a gang may
//! displace gangs of strictly lower priority; it never displaces the gang that last
//! displaced it, so two gangs cannot take turns. Victims are whole gangs chosen by
//! `preempt.rs` inside one topology domain; the preemptor starts in the same cycle on
//! exactly the capacity they free.

use trainyard_topology::Placement;

use crate::engine::{Cycle, GangState, Preemption};
use crate::preempt::{self, Candidate};
use crate::{Engine, GangId, PendingReason, PendingStatus, Result};

/// When running gangs may be displaced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PreemptionRules {
    /// A gang may preempt lower-priority gangs of its own queue.
    pub within_queue: bool,
    /// Work is saved this often; a victim loses the time since its last checkpoint (all of
    /// its run when `None`).
    pub checkpoint_interval_s: Option<u64>,
}

impl PreemptionRules {
    /// Seconds of work lost by a gang that ran `ran_s` seconds.
    pub fn lost(&self, ran_s: u64) -> u64 {
        match self.checkpoint_interval_s {
            Some(every) if every > 0 => ran_s % every,
            _ => ran_s,
        }
    }
}

impl Engine {
    /// Sets the preemption rules (off by default).
    pub fn set_preemption(&mut self, rules: PreemptionRules) {
        self.preemption = rules;
    }

    /// Tries to start `id` by preempting lower-priority gangs of its queue. Returns the
    /// placement it started on.
    pub(crate) fn try_preempt(&mut self, id: GangId, now: u64, cycle: &mut Cycle) -> Result<Option<Placement>> {
        if !self.preemption.within_queue {
            return Ok(None);
        }
        let gang = &self.gangs[&id];
        let (queue, priority, request, barred) =
            (gang.queue, gang.request.priority, gang.placement_request, gang.preempted_by);
        let Some(running) = self.running_by_queue.get(&queue) else { return Ok(None) };
        let rules = self.preemption;
        let candidates: Vec<Candidate> = running
            .range(..(priority, GangId(0)))
            .filter(|&&(_, victim)| Some(victim) != barred)
            .filter_map(|&(p, victim)| match &self.gangs[&victim].state {
                GangState::Running { placement, start, .. } => Some(Candidate {
                    id: victim,
                    placement: placement.clone(),
                    pod: self.gangs[&victim].placement_request.pod,
                    priority: p,
                    lost_work: rules.lost(now - start) * self.gangs[&victim].gpus,
                }),
                GangState::Pending { .. } => None,
            })
            .collect();
        if candidates.is_empty() {
            return Ok(None);
        }
        let Some(set) = preempt::choose_victims(&mut self.cluster, &request, &candidates, &|_| true) else {
            return Ok(None);
        };
        for &victim in &set.victims {
            let (ran_s, lost_s) = self.preempt(victim, id, now)?;
            cycle.preempted.push(Preemption { victim, by: id, ran_s, lost_s });
        }
        Ok(Some(set.placement))
    }

    /// Sends a running gang back to the queue with its original place in the order.
    fn preempt(&mut self, victim: GangId, by: GangId, now: u64) -> Result<(u64, u64)> {
        let gang = self.gangs.get(&victim).ok_or(crate::Error::UnknownGang(victim))?;
        let GangState::Running { placement, start, expected_end } = &gang.state else {
            return Err(crate::Error::NotRunning(victim));
        };
        let (start, expected_end) = (*start, *expected_end);
        self.cluster.release_placement(placement, gang.placement_request.pod)?;
        self.quotas.refund(gang.queue, gang.request.shape.total());
        self.running_by_end.remove(&(expected_end, victim));
        if let Some(set) = self.running_by_queue.get_mut(&gang.queue) {
            set.remove(&(gang.request.priority, victim));
        }
        let key = (std::cmp::Reverse(gang.request.priority), gang.request.submit, gang.arrival);
        let gpus = gang.gpus;
        self.requeue(key, victim, gpus);
        let cycle = self.cycle_number();
        let g = self.gangs.get_mut(&victim).expect("looked up above");
        g.preempted_by = Some(by);
        let status = PendingStatus { reason: PendingReason::NotYetScheduled, reserved_at: None };
        g.state = GangState::Pending { status, cycle };
        let ran = now - start;
        Ok((ran, self.preemption.lost(ran)))
    }
}
