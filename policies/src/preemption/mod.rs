//! Preemption inside the scheduling loop: which running gangs a blocked gang may displace,
//! and committing the displacement together with the preemptor's start.
//!
//! Only the head of the line preempts (the first gang that cannot start, before any
//! reservation exists), so preemption never jumps the queue. Two kinds:
//! - **within its queue**, a gang may displace gangs of strictly lower priority;
//! - **reclaim**: a gang that stays within its queue's own quota may displace gangs of
//!   queues that are borrowing (using more than their subtree quota), at any priority, to
//!   take lent capacity back.
//!
//! It never displaces the gang that last displaced it, so two gangs cannot take turns, nor
//! a gang admitted at the same instant, so no admission is undone in the cycle that made it.
//! Victims are whole gangs chosen by `preemption/victims.rs` inside one topology domain, such that the
//! preemptor's quota admits it once they are gone; it starts in the same cycle on exactly
//! the capacity they free.

pub(crate) mod rules;
pub(crate) mod victims;

pub use rules::PreemptionRules;

use trainyard_topology::{Placement, Resources};

use crate::gangs::record::GangState;
use crate::state::State;
use crate::{Cycle, Preemption};
use crate::{GangId, PendingReason, PendingStatus, Result};
use victims::Candidate;

/// Tries to start `id` by preempting lower-priority gangs of its queue or, to reclaim
/// lent quota, gangs of borrowing queues. Returns the placement it started on.
pub(crate) fn try_preempt(s: &mut State, id: GangId, now: u64, cycle: &mut Cycle) -> Result<Option<Placement>> {
    let rules = s.preemption;
    if !rules.within_queue && !rules.reclaim {
        return Ok(None);
    }
    let gang = &s.gangs[&id];
    let (queue, priority, request, barred) =
        (gang.queue, gang.request.priority, gang.demand.clone(), gang.preempted_by);
    let total = gang.total;
    let mut victims: Vec<(i32, GangId)> = Vec::new();
    if rules.within_queue {
        victims.extend(s.gangs.running_in(queue).take_while(|&(p, _)| p < priority));
    }
    if rules.reclaim && within_own_quota(s, queue, total) {
        for leaf in s.quotas.leaves().filter(|&l| l != queue && s.quotas.over_nominal(l)) {
            victims.extend(s.gangs.running_in(leaf));
        }
    }
    let candidates: Vec<Candidate> = victims
        .into_iter()
        .filter(|&(_, victim)| Some(victim) != barred)
        .filter_map(|(p, victim)| {
            let v = &s.gangs[&victim];
            match &v.state {
                // A gang started at this very time is not displaced again at once.
                GangState::Running { start, .. } if *start == now => None,
                GangState::Running { placement, start, .. } => Some(Candidate {
                    id: victim,
                    queue: v.queue,
                    total: v.total,
                    placement,
                    priority: p,
                    lost_work: rules.lost(now - start) * v.gpus,
                }),
                GangState::Pending { .. } => None,
            }
        })
        .collect();
    if candidates.is_empty() {
        return Ok(None);
    }
    // The victims' quota is refunded on the tree itself while the search runs, which reads
    // the tree only through this check. A search grows its set one gang at a time, so a
    // check refunds only what its set adds to the last one's (charging back what it drops);
    // everything is charged back when the search ends. Usage adds up exactly, so the tree
    // then reads as if each check had refunded its whole set.
    // Tests check every answer, and the tree after the search, against the tree as it was.
    #[cfg(debug_assertions)]
    let pristine = s.quotas.clone();
    let version = s.quotas.version();
    let quotas = std::cell::RefCell::new(&mut s.quotas);
    let refunded: std::cell::RefCell<Vec<(GangId, crate::QueueIdx, Resources)>> = Default::default();
    let quota_ok = |gone: &[&Candidate]| {
        let (mut q, mut now) = (quotas.borrow_mut(), refunded.borrow_mut());
        let kept = now.iter().zip(gone).take_while(|(a, b)| a.0 == b.id).count();
        for (_, leaf, amount) in now.drain(kept..).rev() {
            q.charge(leaf, amount);
        }
        for c in &gone[kept..] {
            q.refund(c.queue, c.total);
            now.push((c.id, c.queue, c.total));
        }
        let ok = q.check(queue, total).is_ok();
        #[cfg(debug_assertions)]
        {
            let mut whole = pristine.clone();
            gone.iter().for_each(|c| whole.refund(c.queue, c.total));
            debug_assert_eq!(whole.check(queue, total).is_ok(), ok, "a check on a set refunded in steps");
        }
        ok
    };
    let chosen = victims::choose_victims(&mut s.cluster, &request, &candidates, &quota_ok);
    let q = quotas.into_inner();
    for (_, leaf, amount) in refunded.into_inner().into_iter().rev() {
        q.charge(leaf, amount);
    }
    // Everything refunded was charged back: the what-if counts as no change.
    q.restore_version(version);
    #[cfg(debug_assertions)]
    debug_assert_eq!(format!("{q:?}"), format!("{pristine:?}"), "the search left the quota tree as it was");
    let Some(set) = chosen else {
        return Ok(None);
    };
    if set.placement.device_fit.is_some() && !devices_follow(s, &set.victims, &set.placement)? {
        return Ok(None);
    }
    for &victim in &set.victims {
        let (ran_s, lost_s) = preempt(s, victim, id, now)?;
        cycle.preempted.push(Preemption { victim, by: id, ran_s, lost_s });
    }
    Ok(Some(set.placement))
}

/// Whether the preemptor's pods get their devices once the victims are gone. The count of
/// pods per host is exact for a pod's own host, not across hosts that share a pool
/// (`allNodes`): the devices are tried before any victim is stopped for nothing.
fn devices_follow(s: &mut State, victims: &[GangId], placement: &Placement) -> Result<bool> {
    let released: Vec<Placement> = victims
        .iter()
        .filter_map(|v| match &s.gangs[v].state {
            GangState::Running { placement, .. } => Some(Placement::clone(placement)),
            GangState::Pending { .. } => None,
        })
        .collect();
    let txn = s.cluster.begin();
    for p in &released {
        if let Err(e) = s.cluster.release_placement(p) {
            s.cluster.rollback(txn);
            return Err(e.into());
        }
    }
    let fits = s.cluster.allocate_placement(&mut placement.clone()).is_ok();
    s.cluster.rollback(txn);
    Ok(fits)
}

/// Whether `total` more keeps `queue` within its own subtree quota (no borrowing).
fn within_own_quota(s: &State, queue: crate::QueueIdx, total: trainyard_topology::Resources) -> bool {
    s.quotas.usage(queue).checked_add(&total).is_some_and(|after| s.quotas.subtree_quota(queue).covers(&after))
}

/// Sends a running gang back to the queue with its original place in the order.
fn preempt(s: &mut State, victim: GangId, by: GangId, now: u64) -> Result<(u64, u64)> {
    let start = s.unrun(victim, now)?;
    let cycle = s.cycle;
    let g = s.gangs.get_mut(&victim).expect("unrun checked it");
    g.preempted_by = Some(by);
    let status = PendingStatus { reason: PendingReason::NotYetScheduled, reserved_at: None };
    g.state = GangState::Pending { status, cycle };
    let ran = now - start;
    Ok((ran, s.preemption.lost(ran)))
}
