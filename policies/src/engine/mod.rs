//! The engine: one scheduling loop over the cluster snapshot, admitting whole gangs.
//!
//! Each cycle walks the pending gangs in order (priority, then submit time, then arrival)
//! and for each one checks its queue's quota and asks the topology for a placement. A gang
//! that fits is committed at once, so many gangs start in one cycle. The first gang that
//! cannot start either blocks the ones behind it (strict FIFO) or receives a reservation
//! that later gangs must not delay (EASY backfill, see `backfill/mod.rs`).

mod fairness;
mod gangs;
mod live;
mod readiness;
mod what_if;

use std::collections::BTreeMap;

use trainyard_topology::{Cluster, Demand, GangShape, Placement};

use crate::decisions::outcome::{Cycle, Reservation};

use crate::backfill;
use crate::cycle::carried::{Step, Walk};
use crate::cycle::order::{Order, scaled_share};
use crate::cycle::walk;
use crate::cycle::{early_stop, pass_over};
use crate::gangs::record::GangState;
use crate::lifecycle::node_loss;
use crate::preemption::PreemptionRules;
use crate::quota::QuotaTree;
use crate::state::State;
use crate::{GangId, PolicyConfig, Result};

/// The scheduling engine. Sans-IO: time is passed in, nothing is read or written.
///
/// It holds the state of record (`state/`) and runs the stages over it in order; no stage
/// calls back into it. `Clone` gives an independent copy (cluster, gangs, quotas, kept plans
/// and placements): what a what-if such as [`Engine::eta`] runs forward without touching the
/// engine it asks about. Gang records are shared between copies until one changes them
/// (`gangs/by_id.rs`), so a copy costs little more than the cluster's.
#[derive(Clone, Debug)]
pub struct Engine {
    pub(crate) state: State,
    /// Pending gangs looked at by all cycles so far.
    visits: u64,
    /// When the last full cycle ran.
    last_full: Option<u64>,
    /// The last call to `schedule` ran a full cycle.
    ran: bool,
    /// The cluster generation pending gangs were last checked against the empty cluster for.
    pruned_generation: u64,
}

/// With fair sharing over a decaying history the visiting order drifts as time passes alone, so
/// an otherwise idle engine still runs a full cycle this often.
const RESYNC_S: u64 = 10;

impl Engine {
    /// An engine over a cluster with a policy whose topology-unit quotas
    /// (`nominal_domains`) must fit this cluster: an error names the queue otherwise.
    pub fn try_new(cluster: Cluster, mut config: PolicyConfig) -> Result<Engine> {
        config.resolve_topology(cluster.topology())?;
        Ok(Engine::new(cluster, config))
    }

    /// An engine over an (empty or partly used) cluster with a policy. A quota in topology
    /// units that does not fit the cluster counts as 0 GPUs (the queue can only borrow); use
    /// [`Engine::try_new`] to be told instead.
    pub fn new(cluster: Cluster, mut config: PolicyConfig) -> Engine {
        if config.resolve_topology(cluster.topology()).is_err() {
            for q in config.queues.iter_mut().filter(|q| q.nominal_domains.is_some()) {
                q.nominal.gpus = Some(0);
                q.nominal_domains = None;
            }
        }
        let state = State::new(cluster, config);
        let pruned_generation = state.cluster.generation();
        Engine { state, visits: 0, last_full: None, ran: false, pruned_generation }
    }

    /// A copy to run forward as a what-if (`estimates/eta.rs`): the state's what-if copy
    /// (`State::what_if_copy`) with the engine's own counters.
    pub(crate) fn what_if_copy(&self) -> Engine {
        Engine {
            state: self.state.what_if_copy(),
            visits: self.visits,
            last_full: self.last_full,
            ran: self.ran,
            pruned_generation: self.pruned_generation,
        }
    }

    /// The cluster with its current free capacity.
    pub fn cluster(&self) -> &Cluster {
        &self.state.cluster
    }

    /// Sets the preemption rules (off by default).
    pub fn set_preemption(&mut self, rules: PreemptionRules) {
        self.state.preemption = rules;
        self.state.gangs.keep_queue_index(rules.within_queue || rules.reclaim);
    }

    /// The policy in force.
    pub fn config(&self) -> &PolicyConfig {
        &self.state.config
    }

    /// Queues, their quotas and usage.
    pub fn quotas(&self) -> &QuotaTree {
        &self.state.quotas
    }

    /// Number of gangs waiting.
    pub fn pending_len(&self) -> usize {
        self.state.gangs.pending().len()
    }

    /// Number of gangs running.
    pub fn running_len(&self) -> usize {
        self.state.gangs.running_by_end().len()
    }

    /// Pending gangs in scheduling order.
    pub fn pending(&self) -> impl Iterator<Item = GangId> + '_ {
        self.state.gangs.pending().ids()
    }

    /// The smallest pending gang that asks for GPUs: fewest GPUs in total, then the smallest
    /// pod, then higher priority, earlier submission and lower id. Gangs without GPUs are
    /// skipped because no free GPU can be unusable to them. Kept in order as gangs come and
    /// go, so asking after every cycle costs nothing.
    pub fn smallest_pending_gpu_gang(&self) -> Option<&GangShape> {
        self.state.gangs.smallest_pending().map(|id| &self.state.gangs[&id].request.shape)
    }

    /// Pending gangs looked at by all cycles so far: what the decide step's cost follows
    /// (a cycle stops once nothing left in it could start).
    pub fn visits(&self) -> u64 {
        self.visits
    }

    /// Whether the last [`Engine::schedule`] ran a full cycle (something had changed or was due).
    pub fn cycle_ran(&self) -> bool {
        self.ran
    }

    /// Where a running gang runs.
    pub fn running_placement(&self, id: GangId) -> Option<&Placement> {
        match &self.state.gangs.get(&id)?.state {
            GangState::Running { placement, .. } => Some(placement),
            GangState::Pending { .. } => None,
        }
    }

    /// Running gangs with their placement and start time, by id.
    pub fn running(&self) -> impl Iterator<Item = (GangId, &Placement, u64)> + '_ {
        self.state.gangs.ids().into_iter().filter_map(|id| match &self.state.gangs[&id].state {
            GangState::Running { placement, start, .. } => Some((id, &**placement, *start)),
            GangState::Pending { .. } => None,
        })
    }

    /// Runs one scheduling cycle at time `now`.
    ///
    /// A cycle costs next to nothing when nothing changed since the last one (no gang came, went
    /// or stopped; no capacity, quota or host changed) and no backoff or node-loss grace ran out:
    /// the last cycle's decisions stand.
    pub fn schedule(&mut self, now: u64) -> Result<Cycle> {
        self.state.advance(now)?;
        let mut cycle = Cycle::default();
        node_loss::act_on_lost_hosts(&mut self.state, now, &mut cycle)?;
        self.ran = false;
        if !self.state.dirty && self.due().is_none_or(|due| now < due) {
            return Ok(cycle);
        }
        self.state.dirty = false;
        self.ran = true;
        self.last_full = Some(now);
        self.state.gangs.expire_backoffs(now);
        let epoch = self.state.cluster.epoch();
        self.state.failed_at.retain(|_, (e, _)| *e == epoch);
        if self.state.cluster.generation() != self.pruned_generation {
            self.pruned_generation = self.state.cluster.generation();
            cycle.rejected = self.prune_never_fits()?;
        }
        let s = &mut self.state;
        s.cycle += 1;
        let blanket_before = s.blanket.take();
        let mut walk = Walk::new(s.config.backfill, cycle);
        s.advance_history(now);
        s.gangs.pending_cycle().keep_per_queue(s.fair.is_some());
        s.gangs.pending_cycle().open_cycle();
        let mut order = Order::new(s.gangs.pending(), s.fair.is_some());
        let may_skip = order.may_skip() && s.lifecycle.max_wait_s.is_none();
        let capacity = s.cluster.total_capacity();
        while let Some((key, id)) =
            order.next(s.gangs.pending(), |q| scaled_share(&s.fair_share, &s.quotas, capacity, q))
        {
            self.visits += 1;
            if walk::visit(s, &mut walk, id, now)? == Step::Stop {
                break;
            }
            if may_skip && std::mem::take(&mut walk.settled_visit) && walk.reservation.is_some() {
                walk.passed = true;
                match pass_over::next_open(
                    s,
                    &mut walk.stop.pass,
                    walk.reservation.as_ref(),
                    &mut walk.failed_shapes,
                    key,
                    now,
                ) {
                    Some(next) => order.skip_to(next),
                    None => {
                        early_stop::stop_nothing_starts(s, &mut walk);
                        break;
                    }
                }
            }
        }
        if walk.passed && s.blanket.is_none() {
            // The walk reached the end of the line: the gangs it passed over read why they wait.
            early_stop::stop_nothing_starts(s, &mut walk);
        }
        s.gangs.pending_cycle().close_cycle();
        let Walk { mut cycle, mut reservation, .. } = walk;
        if let Some(plan) = &mut reservation {
            backfill::keep_refusals(s, plan);
        }
        cycle.reservation = reservation.map(|r| Reservation { holder: r.holder, at: r.at, hosts: r.hosts });
        if !crate::cycle::blanket::steady_eq(s.blanket.as_ref(), blanket_before.as_ref()) {
            // Gangs the cycle did not reach now read another blanket reason. They are listed
            // when a caller takes the changed gangs, not here: a replay never asks, and a
            // cycle's cost must not follow the length of the queue.
            s.blanket_moved = true;
        }
        s.cluster.reap();
        Ok(cycle)
    }

    /// When a cycle next has something to do though nothing changed: a backoff ends, a lost
    /// host's grace runs out, or (with a decaying fair-share history) the periodic resync.
    fn due(&self) -> Option<u64> {
        let backoff = self.state.gangs.next_backoff();
        let resync = self.state.fair.and_then(|f| f.half_life_s).and(self.last_full).map(|t| t + RESYNC_S);
        [backoff, resync, self.state.lost_due()].into_iter().flatten().min()
    }

    /// Takes out the pending gangs that the cluster as it stands cannot hold even empty: one
    /// look per distinct request, so the cost follows the kinds of gangs waiting, not their number.
    fn prune_never_fits(&mut self) -> Result<Vec<(GangId, crate::Unschedulable)>> {
        let requests: Vec<Demand> = self.state.gangs.by_request().requests().map(|(d, _)| d.clone()).collect();
        let mut out: BTreeMap<GangId, crate::Unschedulable> = BTreeMap::new();
        for request in requests {
            if let Some(failure) = self.state.never_fits(&request) {
                for id in self.state.gangs.by_request().ids(&request) {
                    out.insert(id, crate::Unschedulable::NeverFits(failure.clone().into()));
                }
            }
        }
        for id in out.keys() {
            self.state.cancel_pending(*id)?;
        }
        Ok(out.into_iter().collect())
    }
}
