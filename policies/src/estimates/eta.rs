//! Start-time estimates: when will a pending gang start? Answered by running a copy of the
//! engine forward on a virtual clock, so the answer is whatever the policy itself would do
//! (order, quotas, backfill, reservations, preemption), not a second model of it.
//!
//! The copy ends its running gangs at their expected ends (one already past its expected end
//! ends at once) and runs a cycle after each; gangs it starts end after their estimate. An
//! estimate is the gang's own, else what its queue's finished gangs ran ([`RuntimeHistory`],
//! once the queue has enough of them; for a running gang, what those that ran longer than it
//! has so far ran), else the policy's default: every gang of the copy, running or pending, gets
//! the same rule, so the reservations the copy plans read the ends it plays.
//! Nothing arrives in the copy: gangs submitted later, higher priority ones included, are not
//! foreseen, and neither are ends earlier or later than estimated. On a large cluster, a gang
//! deep in the line would cost thousands of the engine's own cycles: past a budget the run
//! takes ends that fall close together in one cycle ([`EtaLimits::exact_host_cycles`]), and
//! the answer says whether it did ([`Eta::exact`]).
//!
//! The copy decides as the engine would, at a fraction of the cost:
//! - it is cheap to make: gang records and running gangs' placements are shared with the
//!   engine and copied only when the run changes them, and the indices nobody reads in a run
//!   (running gangs by host, pending gangs by size) are not kept (`State::what_if_copy`);
//! - it reads when gangs start, never why they wait (`decisions_only`): a placement failure or
//!   a refusal around the reservation that follows from another request's is not searched,
//!   and a failure outlives ends that free no room for it (`cycle/inferred_failures.rs`). Every such inference
//!   gives the decision a search would; only the reasons differ, so a run that stalls runs one
//!   more cycle with every search made to say why the gang waits. Its cycles check whether
//!   anything left can start only when the reservation is made, not after every failure;
//! - who was pending ahead or running when asked is read off the engine asked, not kept in
//!   sets as long as the line.
//!
//! The gangs behind the target in the pending order are left out of the copy as soon as they
//! can no longer change its start, so that the cost follows the work ahead of it:
//! - strict FIFO (no fair sharing): a gang behind is visited only after the target's own visit,
//!   which starts it or stops the cycle, unless the target can be passed (its queue has a quota
//!   that can block it, it waits out a backoff, or its device claims may refuse a start);
//! - EASY backfill: once the target is the first gang in line it holds the reservation, which
//!   no later gang may delay (as far as EASY itself guarantees that). Before, a later gang may
//!   backfill onto capacity the target will want while another gang holds the reservation, so
//!   they stay;
//! - fair sharing reorders queues as usage changes: every gang stays.

use std::collections::{HashSet, VecDeque};

use serde::Serialize;

use crate::estimates::explain::fit_after_ends;
use crate::gangs::by_id::FastHash;
use crate::gangs::record::{GangState, OrderKey};
use crate::state::State;
use crate::{BackfillMode, GangId, RuntimeHistory, Unschedulable};

/// How far ahead a start-time estimate looks by default, simulated seconds (30 days).
pub const DEFAULT_ETA_HORIZON_S: u64 = 30 * 86_400;

/// Cycles a start-time estimate runs at most by default.
pub const DEFAULT_ETA_MAX_CYCLES: u32 = 100_000;

/// Cycles times hosts a start-time estimate runs by default at every instant a gang ends,
/// before it takes ends together (see [`EtaLimits::exact_host_cycles`]): 200 cycles on 10,000
/// hosts, 31,000 on 64. The earlier default, 500 cycles on 10,000 hosts, took most of the 50 ms
/// an answer may take there under EASY backfill, for answers about as close to the exact run's;
/// on the small clusters of the accuracy replays no answer changed (BENCHMARKS.md, "Start-time
/// estimates").
pub const DEFAULT_ETA_EXACT_HOST_CYCLES: u64 = 2_000_000;

/// By default, once past the exact cycles, ends within 1/32 of the time run so far are taken
/// together (see [`EtaLimits::coarse_divisor`]). Steps of 1/64 (the earlier default) took a
/// fifth more cycles for answers no closer to the exact run's in the latency benchmark.
pub const DEFAULT_ETA_COARSE_DIVISOR: u64 = 32;

/// Gangs an estimate names in [`Eta::waits_for`] at most (it counts them all).
pub const ETA_WAITS_FOR_SHOWN: usize = 32;

/// How far a start-time estimate runs the engine forward, and how finely.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EtaLimits {
    /// Simulated seconds after `now`; a gang not started by then is [`EtaAnswer::BeyondHorizon`].
    pub horizon_s: u64,
    /// Scheduling cycles at most, likewise.
    pub max_cycles: u32,
    /// Cycles run one per instant a gang ends, as the engine would, while the cycles run times
    /// the cluster's hosts stay below this. A cycle costs what the engine's own costs, which
    /// grows with the cluster and the gangs it looks at (around a hundred microseconds on
    /// 10,000 hosts under EASY backfill with a deep line), and a gang deep in the line may wait
    /// for thousands of ends. Past it, the run takes the ends within `1 / coarse_divisor` of
    /// the time it has run so far together, at the middle of that step: a start found then may
    /// come up to half a step early or late (1.6% of the time ahead by default; the errors
    /// partly cancel along the line, and under EASY backfill a start moved may change which
    /// gangs backfill), and the steps bound the cycles left to fewer than `coarse_divisor` per
    /// doubling of the time ahead. `u64::MAX`: exact.
    pub exact_host_cycles: u64,
    /// See `exact_host_cycles`; at least 1.
    pub coarse_divisor: u64,
}

impl EtaLimits {
    /// Limits that never take ends together: every cycle the engine would run.
    pub fn exact() -> EtaLimits {
        EtaLimits { exact_host_cycles: u64::MAX, ..EtaLimits::default() }
    }
}

impl Default for EtaLimits {
    fn default() -> EtaLimits {
        EtaLimits {
            horizon_s: DEFAULT_ETA_HORIZON_S,
            max_cycles: DEFAULT_ETA_MAX_CYCLES,
            exact_host_cycles: DEFAULT_ETA_EXACT_HOST_CYCLES,
            coarse_divisor: DEFAULT_ETA_COARSE_DIVISOR,
        }
    }
}

/// When a pending gang is expected to start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Eta {
    /// The start if no gang waited ahead of it: running gangs end at their expected ends until
    /// it fits and its queue's quota admits it (the `WaitingFor` counterfactual of
    /// [`crate::Engine::explain`], with quota). A lower bound: never after `likely`.
    pub earliest: u64,
    /// When the copy of the engine run forward started it, seconds.
    pub likely: u64,
    /// Gangs it waited for in that run: running gangs that ended before it started, and gangs
    /// ahead of it in line that started before it; the last [`ETA_WAITS_FOR_SHOWN`] of them
    /// (closest to its start), by id.
    pub waits_for: Vec<GangId>,
    /// How many gangs it waited for in all.
    pub waits_for_total: usize,
    /// Pending gangs ahead of it in the pending order (priority, submission, arrival).
    pub ahead: usize,
    /// Gangs behind it left out of the run, as they could no longer change its start.
    pub left_out_behind: usize,
    /// Scheduling cycles the run took.
    pub cycles: u32,
    /// Whether every cycle ran at the instant a gang ended, as the engine would (no ends taken
    /// together, see [`EtaLimits::exact_host_cycles`]).
    pub exact: bool,
}

/// The answer to "when will this gang start?".
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "answer")]
pub enum EtaAnswer {
    /// The engine does not know the gang (never submitted, finished, or withdrawn).
    Unknown,
    /// It already runs, since `start`.
    Running {
        /// When it started, seconds.
        start: u64,
    },
    /// It can never start here (its queue's quota or the cluster is too small for it).
    Unschedulable {
        /// Why.
        reason: String,
    },
    /// It is expected to start.
    Estimated(Eta),
    /// It did not start within the limits of the run.
    BeyondHorizon {
        /// Simulated time the run reached, seconds.
        searched_until: u64,
        /// Cycles run.
        cycles: u32,
        /// Pending gangs ahead of it.
        ahead: usize,
    },
    /// The run came to a state where nothing else will end and it still waits: it needs
    /// capacity that only the cluster changing (hosts repaired or added, other workloads
    /// leaving) can give.
    Stalled {
        /// When the run stopped, seconds.
        at: u64,
        /// Why it waits then.
        reason: String,
    },
}

/// An engine a start-time estimate runs forward: its state of record, a what-if copy of it,
/// and its cycle. The engine (`engine/what_if.rs`) is the one there is; the estimate never
/// reaches past these.
pub(crate) trait WhatIf: Sized {
    fn state(&self) -> &State;
    fn state_mut(&mut self) -> &mut State;
    /// A copy that decides only and follows no changes (`State::what_if_copy`).
    fn what_if_copy(&self) -> Self;
    /// One scheduling cycle at `now`.
    fn schedule(&mut self, now: u64) -> crate::Result<crate::Cycle>;
}

/// When pending gang `id` of `asked` is expected to start (see the module documentation), on
/// a copy that infers what follows from other searches (`decisions_only`, see
/// `cycle/inferred_failures.rs`) or not.
pub(crate) fn eta<E: WhatIf>(
    asked: &E,
    id: GangId,
    now: u64,
    history: Option<&RuntimeHistory>,
    limits: EtaLimits,
    decisions_only: bool,
) -> EtaAnswer {
    let s = asked.state();
    let Some(gang) = s.gangs.get(&id) else { return EtaAnswer::Unknown };
    let key = match &gang.state {
        GangState::Running { start, .. } => return EtaAnswer::Running { start: *start },
        GangState::Pending { .. } => s.gangs.order_key(id).expect("a known gang"),
    };
    let ceiling = s.quotas.ceiling(gang.queue);
    if !ceiling.covers(&gang.total) {
        let why = Unschedulable::ExceedsQuota {
            queue: gang.request.queue.clone(),
            requested_gpus: gang.gpus,
            nominal_gpus: ceiling.gpus,
        };
        return EtaAnswer::Unschedulable { reason: why.to_string() };
    }
    let now = now.max(s.last_now);
    let ahead = s.gangs.pending().ids_before(&key).count();
    // The run reads when gangs start, not why they wait (until it stalls, see below).
    let mut copy = asked.what_if_copy();
    let c = copy.state_mut();
    c.decisions_only = decisions_only;
    if let Some(failure) = c.never_fits(&gang.demand) {
        return EtaAnswer::Unschedulable { reason: Unschedulable::NeverFits(failure.into()).to_string() };
    }
    if let Some(history) = history {
        let default = c.config.default_runtime_estimate_s;
        c.gangs.re_estimate_all(|g| {
            // A running gang is one that has run so long already: it is expected to run
            // as long as the queue's gangs that ran longer than that.
            let elapsed = match g.state {
                GangState::Running { start, .. } => now.saturating_sub(start),
                GangState::Pending { .. } => 0,
            };
            let learned = || history.estimate_after(&g.request.queue, elapsed);
            g.request.runtime_estimate.or_else(learned).unwrap_or(default).max(1)
        });
    }
    let earliest = earliest_start(c, id, now);
    let run = Forward { target: id, key, now, limits, ahead, asked: s };
    run.run(copy, earliest)
}

/// The start of `id` if nobody waited ahead of it (see [`Eta::earliest`]); `None` when it
/// would not fit even once every running gang has ended.
fn earliest_start(s: &mut State, id: GangId, now: u64) -> Option<u64> {
    let gang = &s.gangs[&id];
    let (request, total, queue) = (gang.demand.clone(), gang.total, gang.queue);
    // Running gangs past their expected end end now; the order by expected end stands.
    let placed = if s.cluster.place_demand(&request).is_ok() {
        now
    } else {
        fit_after_ends(&mut s.cluster, &s.gangs, &request, total)?.end.max(now)
    };
    let quota = if s.quotas.check(queue, total).is_ok() {
        now
    } else {
        let (gangs, ends) = (&s.gangs, s.gangs.running_by_end());
        let refunds = ends.iter().map(|&(_, g)| (gangs[&g].queue, gangs[&g].total));
        let (i, ()) = s.quotas.replay_refunds(refunds, |q| q.check(queue, total).is_ok().then_some(()))?;
        ends.iter().nth(i).map_or(now, |&(end, _)| end.max(now))
    };
    Some(placed.max(quota))
}

/// Whether the gangs behind `target` in the pending order can no longer change when it
/// starts (see the module documentation).
fn behind_cannot_delay(s: &State, target: GangId, now: u64) -> bool {
    if s.fair.is_some() {
        return false;
    }
    let g = &s.gangs[&target];
    if g.not_before > now || g.request.shape.claims().is_some() {
        return false;
    }
    match s.config.backfill {
        BackfillMode::None => s.quotas.ceiling(g.queue) == crate::quota::UNLIMITED_CEILING,
        BackfillMode::Easy => s.gangs.pending().first() == Some(target),
    }
}

/// Why `target` waits once the forward run of `copy` stalled: the run inferred failures
/// without searching them (`cycle/inferred_failures.rs`), whose words may be another
/// request's, so one more cycle with every failure searched says it. Nothing changed since the
/// last cycle, so it decides the same.
fn stalled_reason<E: WhatIf>(copy: &mut E, target: GangId, t: u64) -> String {
    let s = copy.state_mut();
    s.decisions_only = false;
    s.failed_at.clear();
    s.dirty = true;
    let _ = copy.schedule(t);
    copy.state().pending_status(target).map_or_else(String::new, |s| s.reason.to_string())
}

/// Withdraws the pending gangs behind `key` from the copy; returns how many.
fn leave_out_behind(s: &mut State, key: &OrderKey) -> usize {
    let behind: Vec<GangId> = s.gangs.pending().ids_after(key).collect();
    for &id in &behind {
        // Pending, listed just above.
        let _ = s.cancel_pending(id);
    }
    behind.len()
}

/// One forward run of a copy of the engine until the target starts.
struct Forward<'a> {
    target: GangId,
    key: OrderKey,
    now: u64,
    limits: EtaLimits,
    /// How many gangs were pending ahead of the target when asked.
    ahead: usize,
    /// The state asked about (the copy's original): who was pending or running when asked is
    /// read off it, rather than off sets as large as the line.
    asked: &'a State,
}

/// What the target waited for (see [`Eta::waits_for`]), gang by gang as it happened.
struct Waited {
    /// The last gangs, oldest first.
    last: VecDeque<GangId>,
    total: usize,
    /// Every gang counted, kept only when one may come twice (a gang preempted or requeued in
    /// the run starts again): it counts once.
    counted: Option<HashSet<GangId, FastHash>>,
}

impl Waited {
    fn push(&mut self, id: GangId) {
        if let Some(counted) = &mut self.counted
            && !counted.insert(id)
        {
            return;
        }
        self.total += 1;
        if self.last.len() == ETA_WAITS_FOR_SHOWN {
            self.last.pop_front();
        }
        self.last.push_back(id);
    }
}

impl Forward<'_> {
    /// Whether `id` was pending ahead of the target when asked.
    fn was_ahead(&self, id: GangId) -> bool {
        let Some(g) = self.asked.gangs.get(&id) else { return false };
        matches!(g.state, GangState::Pending { .. }) && self.asked.gangs.order_key(id).is_some_and(|k| k < self.key)
    }

    /// Whether `id` was running when asked.
    fn was_running(&self, id: GangId) -> bool {
        self.asked.gangs.get(&id).is_some_and(|g| matches!(g.state, GangState::Running { .. }))
    }

    fn run<E: WhatIf>(self, mut copy: E, earliest: Option<u64>) -> EtaAnswer {
        let (target, key, now, limits, ahead) = (self.target, self.key, self.now, self.limits, self.ahead);
        let (mut t, mut cycles, mut left_out, mut exact) = (now, 0u32, None, true);
        let hosts = copy.state().cluster.topology().host_count().max(1) as u64;
        // A gang may start twice only if the run preempts or requeues it.
        let c = copy.state();
        let restarts = c.preemption.within_queue || c.preemption.reclaim || !c.lost.is_empty();
        let mut waited = Waited { last: VecDeque::new(), total: 0, counted: restarts.then(HashSet::default) };
        // Gangs running when asked that started again in the run (preempted or requeued first):
        // their end is not waited for, as that of every gang started in the run.
        let mut restarted: HashSet<GangId, FastHash> = HashSet::default();
        let likely = loop {
            if left_out.is_none() && behind_cannot_delay(copy.state(), target, t) {
                left_out = Some(leave_out_behind(copy.state_mut(), &key));
            }
            let cycle = match copy.schedule(t) {
                Ok(cycle) => cycle,
                Err(e) => return EtaAnswer::Stalled { at: t, reason: format!("the forward run failed: {e}") },
            };
            cycles += 1;
            if let Some((_, why)) = cycle.rejected.iter().find(|(g, _)| *g == target) {
                return EtaAnswer::Unschedulable { reason: why.to_string() };
            }
            for admission in &cycle.admitted {
                if self.was_ahead(admission.id) {
                    waited.push(admission.id);
                } else if restarts && self.was_running(admission.id) {
                    restarted.insert(admission.id);
                }
            }
            let c = copy.state();
            match c.gangs.get(&target).map(|g| &g.state) {
                Some(GangState::Running { start, .. }) => break *start,
                Some(GangState::Pending { .. }) => {}
                None => return EtaAnswer::Unknown,
            }
            // The next instant anything changes: a running gang's end (now, if it is past
            // it), a backoff running out, or a lost host's grace.
            let end = c.gangs.running_by_end().first().map(|&(end, _)| end.max(t));
            let due = [c.gangs.next_backoff(), c.lost_due()].into_iter().flatten().filter(|&d| d > t).min();
            let Some(next) = end.into_iter().chain(due).min() else {
                return EtaAnswer::Stalled { at: t, reason: stalled_reason(&mut copy, target, t) };
            };
            if next > now.saturating_add(limits.horizon_s) || cycles >= limits.max_cycles {
                return EtaAnswer::BeyondHorizon { searched_until: t, cycles, ahead };
            }
            // Past the exact cycles, the ends of a step are taken together at its middle (see
            // `EtaLimits`), but never past a backoff or grace running out.
            let (mut until, mut at) = (next, next);
            if u64::from(cycles).saturating_mul(hosts) >= limits.exact_host_cycles {
                let step = next.saturating_sub(now) / limits.coarse_divisor.max(1);
                until = due.map_or(next.saturating_add(step), |d| next.saturating_add(step).min(d.max(next)));
                at = next + (until - next) / 2;
            }
            while let Some(&(end, id)) = copy.state().gangs.running_by_end().first()
                && end <= until
            {
                // A gang ending at another instant than the cycle's: a cycle the engine would
                // have run is not run, or runs early.
                exact &= end.max(t) == at;
                if let Err(e) = copy.state_mut().advance(at).and_then(|()| copy.state_mut().end(id, at)) {
                    return EtaAnswer::Stalled { at, reason: format!("the forward run failed: {e}") };
                }
                if self.was_running(id) && !restarted.contains(&id) {
                    waited.push(id);
                }
            }
            t = at;
        };
        let waits_for_total = waited.total;
        let mut waits_for: Vec<GangId> = waited.last.into_iter().collect();
        waits_for.sort_unstable();
        EtaAnswer::Estimated(Eta {
            // Preemption can start a gang before the gangs it needs room from end.
            earliest: earliest.unwrap_or(likely).min(likely),
            likely,
            waits_for,
            waits_for_total,
            ahead,
            left_out_behind: left_out.unwrap_or(0),
            cycles,
            exact,
        })
    }
}
