//! EASY backfill: a reservation for the first blocked gang, and the checks that keep it.
//!
//! The reservation is found by replaying the expected ends of running gangs (start plus
//! runtime estimate) on a transaction over the live cluster: release them in order of
//! expected end until the blocked gang's quota and placement both fit, note the time and the
//! hosts, then roll everything back. A later gang may start now only if it is expected to
//! end by then, or if what it takes on the reserved hosts (and from the holder's queue
//! quota) leaves the reservation intact. Queues whose first gang is blocked on quota get a
//! quota-only hold of the same kind, so small gangs of one team cannot starve its big one.

pub(crate) mod plan_memo;
#[cfg(test)]
mod plan_memo_tests;

use std::collections::{BTreeMap, HashSet};

use trainyard_topology::{Demand, HostId, Placement, Resources};

use crate::backfill::plan_memo::{Found, PlanKey, PlanMemo};
use crate::gangs::by_id::FastHash;
use crate::gangs::record::GangState;
use crate::gangs::table::GangTable;
use crate::quota::{QueueIdx, QuotaTree};
use crate::state::State;
use crate::{GangId, PendingReason, Result};

/// A gang about to start, as the reservation checks see it.
#[derive(Clone, Debug)]
pub(crate) struct Candidate {
    pub(crate) request: Demand,
    pub(crate) queue: QueueIdx,
    pub(crate) gpus: u64,
    /// Expected end: now plus the runtime estimate.
    pub(crate) end: u64,
}

/// The reservation of the first blocked gang in a cycle.
#[derive(Clone, Debug)]
pub(crate) struct ReservationPlan {
    pub(crate) holder: GangId,
    pub(crate) at: u64,
    pub(crate) hosts: Vec<(HostId, u32)>,
    /// For each reserved host, what gangs still running at `at` may use there, sorted by host.
    slack: Vec<(HostId, Resources)>,
    /// Shapes that found no room around the reservation this cycle. Free capacity and slack
    /// only shrink within a cycle, so they will not find any later in it either.
    pub(crate) refused: HashSet<Demand, FastHash>,
    /// The state the plan was made for, and whether the walk took any slack since.
    key: PlanKey,
    slack_used: bool,
    /// The refused shapes found at that very state (nothing started, no slack taken): the next
    /// cycle that plans at the same state refuses them without a search (`PlanMemo::refused`).
    at_plan_state: HashSet<Demand, FastHash>,
}

impl ReservationPlan {
    /// Whether a gang of this shape running past the reservation was already refused.
    pub(crate) fn refuses(&self, request: &Demand, end: u64) -> Option<PendingReason> {
        (end > self.at && self.refused.contains(request))
            .then_some(PendingReason::Reservation { holder: self.holder, at: self.at })
    }

    /// No gang of `request` running past the reservation finds room around it; kept with the
    /// plan as well when found at the plan's own state (see `at_plan_state`).
    pub(crate) fn refuse(&mut self, request: &Demand, at_plan_state: bool) {
        self.refused.insert(request.clone());
        if at_plan_state {
            self.at_plan_state.insert(request.clone());
        }
    }

    fn allows(&self, placement: &Placement) -> bool {
        self.uses(placement).all(|(i, need)| self.slack[i].1.covers(&need))
    }

    fn consume(&mut self, placement: &Placement) {
        let uses: Vec<(usize, Resources)> = self.uses(placement).collect();
        self.slack_used |= !uses.is_empty();
        for (i, need) in uses {
            self.slack[i].1 = self.slack[i].1.checked_sub(&need).unwrap_or(Resources::ZERO);
        }
    }

    /// `(index into slack, amount)` for every reserved host the placement touches.
    fn uses<'a>(&'a self, placement: &Placement) -> impl Iterator<Item = (usize, Resources)> + 'a {
        placement.per_host_usage().into_iter().filter_map(move |(h, need)| {
            let i = self.slack.binary_search_by_key(&h, |&(host, _)| host).ok()?;
            Some((i, need))
        })
    }
}

#[derive(Clone, Copy, Debug)]
struct QuotaHold {
    holder: GangId,
    at: u64,
    slack_gpus: u64,
}

/// Quota holds of this cycle, per queue.
#[derive(Debug, Default)]
pub(crate) struct Holds {
    by_queue: BTreeMap<QueueIdx, QuotaHold>,
}

impl Holds {
    /// Whether a gang of `queue` starting now passes a blocked gang of the same queue.
    pub(crate) fn holds(&self, queue: QueueIdx) -> bool {
        self.by_queue.contains_key(&queue)
    }

    /// Gives the first quota-blocked gang of a queue a hold on the queue's future quota.
    pub(crate) fn hold_queue(
        &mut self,
        gangs: &GangTable,
        quotas: &mut QuotaTree,
        queue: QueueIdx,
        holder: GangId,
        now: u64,
    ) {
        if self.by_queue.contains_key(&queue) {
            return;
        }
        let want = gangs[&holder].total;
        // Replays expected ends on the quota tree (undone after) until the holder's quota admits it.
        let ends = gangs.running_by_end();
        let refunds = ends.iter().map(|&(_, id)| (gangs[&id].queue, gangs[&id].total));
        let hold = quotas.replay_refunds(refunds, |quota| {
            quota.check(queue, want).is_ok().then(|| quota.available(queue).gpus.saturating_sub(want.gpus))
        });
        if let Some((i, slack_gpus)) = hold {
            let at = ends.iter().nth(i).map_or(now, |&(end, _)| end);
            self.by_queue.insert(queue, QuotaHold { holder, at: at.max(now), slack_gpus });
        }
    }
}

/// Finds when and where `holder` could start if running gangs end as estimated. The
/// replay is kept (`plan_memo`) and reused while the holder, the cluster, the running gangs
/// and the quotas all keep their versions: it would find the same again.
pub(crate) fn plan_reservation(
    s: &mut State,
    holder: GangId,
    now: u64,
    holds: &mut Holds,
) -> Result<Option<ReservationPlan>> {
    let key = plan_key(s, holder);
    let (found, refused) = match &s.plan_memo {
        Some(memo) if memo.key == key => {
            let (kept, refused) = (memo.found.clone(), memo.refused.clone());
            #[cfg(debug_assertions)]
            {
                // Tests check every kept plan against a new replay.
                let fresh = replay_ends(s, holder)?;
                assert_eq!(fresh, kept, "a kept reservation plan differs from a new one");
            }
            (kept, refused)
        }
        _ => {
            let found = replay_ends(s, holder)?;
            // The replay undid all it did, so these are the versions it started from.
            let refused = HashSet::default();
            s.plan_memo = Some(PlanMemo { key: plan_key(s, holder), found: found.clone(), refused });
            (found, HashSet::default())
        }
    };
    let Some(Found { end, hosts, slack, slack_gpus }) = found else { return Ok(None) };
    let at = end.max(now);
    let queue = s.gangs[&holder].queue;
    holds.by_queue.insert(queue, QuotaHold { holder, at, slack_gpus });
    let plan = ReservationPlan {
        holder,
        at,
        hosts,
        slack,
        refused: refused.clone(),
        key,
        slack_used: false,
        at_plan_state: refused,
    };
    #[cfg(debug_assertions)]
    for request in &plan.at_plan_state {
        // Tests check every refusal taken from the last cycle against a new search.
        assert!(place_around(s, request, &plan).is_none(), "a kept refusal finds room now");
    }
    Ok(Some(plan))
}

/// The walk ends with `plan`: the shapes it refused at the plan's own state are kept with
/// the plan, for the next cycle that plans at that state.
pub(crate) fn keep_refusals(s: &mut State, plan: &mut ReservationPlan) {
    if let Some(memo) = &mut s.plan_memo
        && memo.key == plan.key
    {
        memo.refused = std::mem::take(&mut plan.at_plan_state);
    }
}

/// What a reservation plan for `holder` is built from, by version.
fn plan_key(s: &State, holder: GangId) -> PlanKey {
    let (cluster, running, quotas) = s.plan_versions();
    PlanKey { holder, cluster, running, quotas }
}

/// Replays expected ends on a transaction over the live cluster (and on the quota tree),
/// releasing running gangs in order of expected end until the holder's quota and placement
/// both fit; everything is undone before returning.
fn replay_ends(s: &mut State, holder: GangId) -> Result<Option<Found>> {
    let head = &s.gangs[&holder];
    let (queue, request) = (head.queue, head.demand.clone());
    let total = head.total;
    let quota_version = s.quotas.version();
    // Expected ends are refunded on the quota tree itself and charged back before returning.
    let mut refunded: Vec<(QueueIdx, Resources)> = Vec::new();
    // Pods of the head's shape that fit host by host: a placement anywhere needs at least
    // `pods` of them, so the (costly) placement search only runs once that many exist. A
    // gang of several pod shapes skips this bound.
    let fit_pod = request.uniform_pod();
    let fit_count = |cluster: &trainyard_topology::Cluster, h: HostId| {
        fit_pod.map_or(0, |pod| cluster.host_free(h).fit_count(&pod))
    };
    let mut fits = fit_pod.map_or(u64::MAX, |pod| s.cluster.fit_count(&pod));
    let txn = s.cluster.begin();
    let mut found = None;
    let mut ends = s.gangs.running_by_end().iter().peekable();
    while let Some(&(end, id)) = ends.next() {
        let gang = &s.gangs[&id];
        if let GangState::Running { placement, .. } = &gang.state {
            let hosts = placement.per_host();
            let before: u64 = hosts.iter().map(|&(h, _)| fit_count(&s.cluster, h)).sum();
            if let Err(e) = s.cluster.release_placement(placement) {
                s.cluster.rollback(txn);
                s.quotas.recharge(refunded);
                s.quotas.restore_version(quota_version);
                return Err(e.into());
            }
            let after: u64 = hosts.iter().map(|&(h, _)| fit_count(&s.cluster, h)).sum();
            fits = fits.saturating_add(after).saturating_sub(before);
        }
        s.quotas.refund(gang.queue, gang.total);
        refunded.push((gang.queue, gang.total));
        // Gangs expected to end at the same second are released together.
        if ends.peek().is_some_and(|next| next.0 == end) {
            continue;
        }
        if s.quotas.check(queue, total).is_err()
            || !s.cluster.total_free().covers(&total)
            || fits < u64::from(request.pods())
        {
            continue;
        }
        if let Ok(placement) = s.cluster.place_demand(&request) {
            let hosts = placement.per_host();
            let slack = placement
                .per_host_usage()
                .into_iter()
                .map(|(h, reserved)| (h, s.cluster.host_free(h).checked_sub(&reserved).unwrap_or(Resources::ZERO)))
                .collect();
            let slack_gpus = s.quotas.available(queue).gpus.saturating_sub(total.gpus);
            found = Some(Found { end, hosts, slack, slack_gpus });
            break;
        }
    }
    s.cluster.rollback(txn);
    s.quotas.recharge(refunded);
    // Every refund was charged back: the tree is as it was.
    s.quotas.restore_version(quota_version);
    Ok(found)
}

/// Checks that a gang about to start (expected to end at `end`) delays no reservation or
/// quota hold; may move it off reserved hosts (replacing `placement`). On success the holds
/// are charged; a refusal says why and leaves `placement` as it was.
pub(crate) fn respect_reservations(
    s: &mut State,
    placement: &mut Placement,
    candidate: &Candidate,
    reservation: Option<&mut ReservationPlan>,
    holds: &mut Holds,
) -> std::result::Result<(), PendingReason> {
    let Candidate { ref request, queue, gpus, end } = *candidate;
    if let Some(hold) = holds.by_queue.get(&queue)
        && end > hold.at
        && hold.slack_gpus < gpus
    {
        return Err(PendingReason::Reservation { holder: hold.holder, at: hold.at });
    }
    if let Some(res) = reservation
        && end > res.at
    {
        if !res.allows(placement) {
            let Some(around) = place_around(s, request, res) else {
                res.refuse(request, at_plan_state(s, res));
                return Err(PendingReason::Reservation { holder: res.holder, at: res.at });
            };
            *placement = around;
        }
        res.consume(placement);
    }
    if let Some(hold) = holds.by_queue.get_mut(&queue)
        && end > hold.at
    {
        hold.slack_gpus -= gpus;
    }
    Ok(())
}

/// Whether the walk is still at the state `res` was planned at: no slack taken, nothing
/// started or changed since.
pub(crate) fn at_plan_state(s: &State, res: &ReservationPlan) -> bool {
    !res.slack_used && plan_key(s, res.holder) == res.key
}

/// Places a gang with every reserved host shrunk to its slack.
pub(crate) fn place_around(s: &mut State, request: &Demand, res: &ReservationPlan) -> Option<Placement> {
    let txn = s.cluster.begin();
    for &(host, slack) in &res.slack {
        let free = s.cluster.host_free(host);
        let hidden = free.checked_sub(&free.component_min(&slack)).unwrap_or(Resources::ZERO);
        if !hidden.is_zero() && s.cluster.allocate(host, hidden).is_err() {
            s.cluster.rollback(txn);
            return None;
        }
    }
    let placement = s.cluster.place_demand(request).ok();
    s.cluster.rollback(txn);
    placement
}

#[cfg(test)]
/// For tests: when the kept plan still counts as current (its versions are today's and its
/// holder waits), whether a new replay finds exactly what it kept; `None` otherwise.
pub(crate) fn kept_plan_is_fresh(s: &mut State) -> Option<bool> {
    let memo = s.plan_memo.clone()?;
    let holder = memo.key.holder;
    let waits = s.gangs.get(&holder).is_some_and(|g| matches!(g.state, GangState::Pending { .. }));
    if !waits || memo.key != plan_key(s, holder) {
        return None;
    }
    Some(replay_ends(s, holder).ok() == Some(memo.found))
}
