//! The engine: one scheduling loop over the cluster snapshot, admitting whole gangs.
//!
//! Each cycle walks the pending gangs in order (priority, then submit time, then arrival)
//! and for each one checks its queue's quota and asks the topology for a placement. A gang
//! that fits is committed at once, so many gangs start in one cycle. The first gang that
//! cannot start either blocks the ones behind it (strict FIFO) or receives a reservation
//! that later gangs must not delay (EASY backfill, see `backfill/mod.rs`).

mod fairness;
mod readiness;

use crate::gangs::by_id::FastHash;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use trainyard_topology::{Cluster, Demand, GangShape, HostId, Placement, PlacementFailure};

pub use crate::decisions::outcome::{Admission, Cycle, NodeLoss, Preemption, Replacement, Reservation};

use crate::cycle::order::Order;
use crate::cycle::walk::{Step, Walk};
use crate::gangs::record::GangState;
use crate::lifecycle::LifecycleRules;
use crate::preemption::PreemptionRules;
use crate::quota::{FairShare, QuotaTree};
use crate::{Error, GangId, PolicyConfig, Result, Unschedulable};

/// What `submit` made of a gang.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// Queued; the next cycle will consider it.
    Queued,
    /// Can never run here; the engine does not keep it.
    Unschedulable(Unschedulable),
}

/// Weighted dominant-resource fair sharing across queues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FairSharing {
    /// Past usage counts too, decaying by half every this many seconds; `None` counts only
    /// what queues hold now.
    pub half_life_s: Option<u64>,
}

/// The scheduling engine. Sans-IO: time is passed in, nothing is read or written.
///
/// `Clone` gives an independent copy (cluster, gangs, quotas, kept plans and placements): what a
/// what-if such as [`Engine::eta`] runs forward without touching the engine it asks about. Gang
/// records are shared between copies until one changes them (`gangs/by_id.rs`), so a copy costs
/// little more than the cluster's.
#[derive(Clone, Debug)]
pub struct Engine {
    pub(crate) cluster: Cluster,
    pub(crate) config: PolicyConfig,
    pub(crate) quotas: QuotaTree,
    /// Flavor index of each queue bound to one (`u16::MAX` for a flavor no node has, which
    /// matches no host, so its gangs are reported as never fitting).
    pub(crate) flavor_of: BTreeMap<String, u16>,
    pub(crate) fair_share: FairShare,
    /// The gangs, and every index over them.
    pub(crate) gangs: crate::gangs::table::GangTable,
    pub(crate) preemption: PreemptionRules,
    pub(crate) lifecycle: LifecycleRules,
    pub(crate) fair: Option<FairSharing>,
    pub(crate) never_fits: HashMap<Demand, Option<PlacementFailure>, FastHash>,
    /// The cluster generation `never_fits` was computed for.
    pub(crate) never_fits_generation: u64,
    /// Placement failures by request with the free-capacity epoch they were found at: valid
    /// while nothing was freed since (free capacity only shrank), so they are not searched again.
    pub(crate) failed_at: HashMap<Demand, (u64, Arc<PlacementFailure>), FastHash>,
    pub(crate) arrivals: u64,
    pub(crate) cycle: u64,
    /// Pending gangs looked at by all cycles so far.
    visits: u64,
    pub(crate) last_now: u64,
    pub(crate) blanket: Option<crate::cycle::blanket::Blanket>,
    /// Something changed that a cycle must look at (a gang came, went or stopped, capacity or
    /// quota changed); without it, and before `due`, a cycle has nothing to do.
    pub(crate) dirty: bool,
    /// When the last full cycle ran.
    last_full: Option<u64>,
    /// The last call to `schedule` ran a full cycle.
    ran: bool,
    /// Gangs whose decision may have changed since the caller last asked (sorted when taken).
    pub(crate) changed: crate::gangs::by_id::GangSet,
    /// Whether anybody takes the changed gangs (see [`Engine::ignore_changes`]).
    pub(crate) follows_changes: bool,
    /// The blanket reason of gangs a cycle did not reach moved since the caller last asked.
    pub(crate) blanket_moved: bool,
    /// Running gangs with lost hosts, each with when it was lost.
    pub(crate) lost: BTreeMap<GangId, BTreeMap<HostId, u64>>,
    /// The cluster generation pending gangs were last checked against the empty cluster for.
    pruned_generation: u64,
    /// The last reservation plan, kept while nothing it was built from changed.
    pub(crate) plan_memo: Option<crate::backfill::PlanMemo>,
    /// Whether each queue's quota is unlimited (its ceiling is), by queue index, so that passing
    /// over its gangs needs no quota check. A ceiling counts nothing running, so it changes only
    /// with the policy: kept across cycles, cleared when the policy is replaced.
    pub(crate) unlimited_queues: Vec<Option<bool>>,
    /// Placements found at the cluster's current version, across cycles (`gangs/kept_placements.rs`).
    pub(crate) placed: crate::gangs::kept_placements::Placed,
    /// A what-if copy (`estimates/eta.rs`): only what the engine decides is read, never why gangs wait, so
    /// placement failures that follow from others are not searched (`cycle/inferred_failures.rs`).
    pub(crate) decisions_only: bool,
}

/// The flavor index of each queue bound to one (`u16::MAX` for a flavor no node has).
pub(crate) fn flavors_of(config: &PolicyConfig, topo: &trainyard_topology::Topology) -> BTreeMap<String, u16> {
    config
        .queues
        .iter()
        .filter_map(|q| q.flavor.as_deref().map(|f| (q.name.clone(), topo.flavor_id(f).unwrap_or(u16::MAX))))
        .collect()
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
    pub fn new(mut cluster: Cluster, mut config: PolicyConfig) -> Engine {
        if config.resolve_topology(cluster.topology()).is_err() {
            for q in config.queues.iter_mut().filter(|q| q.nominal_domains.is_some()) {
                q.nominal.gpus = Some(0);
                q.nominal_domains = None;
            }
        }
        let quotas = QuotaTree::new(&config);
        let fair = config.fair_sharing.enabled.then_some(FairSharing { half_life_s: config.fair_sharing.half_life_s });
        let fair_share = FairShare::new(fair.and_then(|f| f.half_life_s));
        cluster.set_placement_policy(config.placement);
        let mut engine = Engine {
            cluster,
            config: config.clone(),
            quotas,
            flavor_of: BTreeMap::new(),
            fair_share,
            gangs: crate::gangs::table::GangTable::default(),
            preemption: PreemptionRules::default(),
            lifecycle: LifecycleRules::default(),
            fair,
            never_fits: HashMap::default(),
            never_fits_generation: 0,
            failed_at: HashMap::default(),
            arrivals: 0,
            cycle: 0,
            visits: 0,
            last_now: 0,
            blanket: None,
            dirty: true,
            last_full: None,
            ran: false,
            changed: crate::gangs::by_id::GangSet::default(),
            follows_changes: true,
            blanket_moved: false,
            lost: BTreeMap::new(),
            pruned_generation: 0,
            plan_memo: None,
            unlimited_queues: Vec::new(),
            placed: Default::default(),
            decisions_only: false,
        };
        engine.pruned_generation = engine.cluster.generation();
        engine.apply_settings(&config);
        engine.flavor_of = flavors_of(&config, engine.cluster.topology());
        engine
    }

    /// A copy to run forward as a what-if (`estimates/eta.rs`): what [`Clone`] gives, except that it
    /// decides only (`decisions_only`), follows no changes, and files no running gang by host
    /// (see [`crate::gangs::table::GangTable::what_if_copy`]). Every field is listed, so that a new
    /// one is copied on purpose.
    pub(crate) fn what_if_copy(&self) -> Engine {
        Engine {
            cluster: self.cluster.clone(),
            config: self.config.clone(),
            quotas: self.quotas.clone(),
            flavor_of: self.flavor_of.clone(),
            fair_share: self.fair_share.clone(),
            gangs: self.gangs.what_if_copy(),
            preemption: self.preemption,
            lifecycle: self.lifecycle,
            fair: self.fair,
            never_fits: self.never_fits.clone(),
            never_fits_generation: self.never_fits_generation,
            failed_at: self.failed_at.clone(),
            arrivals: self.arrivals,
            cycle: self.cycle,
            visits: self.visits,
            last_now: self.last_now,
            blanket: self.blanket.clone(),
            dirty: self.dirty,
            last_full: self.last_full,
            ran: self.ran,
            changed: Default::default(),
            follows_changes: false,
            blanket_moved: self.blanket_moved,
            lost: self.lost.clone(),
            pruned_generation: self.pruned_generation,
            plan_memo: self.plan_memo.clone(),
            unlimited_queues: self.unlimited_queues.clone(),
            placed: self.placed.clone(),
            decisions_only: true,
        }
    }

    /// The settings of a policy besides its queues: placement, preemption and lifecycle rules.
    pub(crate) fn apply_settings(&mut self, config: &PolicyConfig) {
        self.cluster.set_placement_policy(config.placement);
        self.preemption = PreemptionRules {
            within_queue: config.preemption.within_queue,
            reclaim: config.preemption.reclaim,
            checkpoint_interval_s: config.preemption.checkpoint_interval_s,
        };
        self.gangs.keep_queue_index(self.preemption.within_queue || self.preemption.reclaim);
        let timeout = config.admission_timeout;
        self.lifecycle = LifecycleRules {
            max_wait_s: config.starvation.max_wait_s,
            ready_timeout_s: timeout.map(|t| t.wait_s),
            backoff_s: timeout.map_or(0, |t| t.backoff_s),
            max_backoff_s: timeout.map_or(0, |t| t.max_backoff_s),
        };
    }

    /// The cluster with its current free capacity.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The policy in force.
    pub fn config(&self) -> &PolicyConfig {
        &self.config
    }

    /// Queues, their quotas and usage.
    pub fn quotas(&self) -> &QuotaTree {
        &self.quotas
    }

    /// Number of gangs waiting.
    pub fn pending_len(&self) -> usize {
        self.gangs.pending().len()
    }

    /// Number of gangs running.
    pub fn running_len(&self) -> usize {
        self.gangs.running_by_end().len()
    }

    /// Pending gangs in scheduling order.
    pub fn pending(&self) -> impl Iterator<Item = GangId> + '_ {
        self.gangs.pending().ids()
    }

    /// The smallest pending gang that asks for GPUs: fewest GPUs in total, then the smallest
    /// pod, then higher priority, earlier submission and lower id. Gangs without GPUs are
    /// skipped because no free GPU can be unusable to them. Kept in order as gangs come and
    /// go, so asking after every cycle costs nothing.
    pub fn smallest_pending_gpu_gang(&self) -> Option<&GangShape> {
        self.gangs.smallest_pending().map(|id| &self.gangs[&id].request.shape)
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
        match &self.gangs.get(&id)?.state {
            GangState::Running { placement, .. } => Some(placement),
            GangState::Pending { .. } => None,
        }
    }

    /// Running gangs with their placement and start time, by id.
    pub fn running(&self) -> impl Iterator<Item = (GangId, &Placement, u64)> + '_ {
        self.gangs.ids().into_iter().filter_map(|id| match &self.gangs[&id].state {
            GangState::Running { placement, start, .. } => Some((id, &**placement, *start)),
            GangState::Pending { .. } => None,
        })
    }

    pub(crate) fn advance(&mut self, now: u64) -> Result<()> {
        if now < self.last_now {
            return Err(Error::TimeWentBackwards { now, last: self.last_now });
        }
        self.last_now = now;
        Ok(())
    }

    /// Runs one scheduling cycle at time `now`.
    ///
    /// A cycle costs next to nothing when nothing changed since the last one (no gang came, went
    /// or stopped; no capacity, quota or host changed) and no backoff or node-loss grace ran out:
    /// the last cycle's decisions stand.
    pub fn schedule(&mut self, now: u64) -> Result<Cycle> {
        self.advance(now)?;
        let mut cycle = Cycle::default();
        self.act_on_lost_hosts(now, &mut cycle)?;
        self.ran = false;
        if !self.dirty && self.due().is_none_or(|due| now < due) {
            return Ok(cycle);
        }
        self.dirty = false;
        self.ran = true;
        self.last_full = Some(now);
        self.gangs.expire_backoffs(now);
        let epoch = self.cluster.epoch();
        self.failed_at.retain(|_, (e, _)| *e == epoch);
        if self.cluster.generation() != self.pruned_generation {
            self.pruned_generation = self.cluster.generation();
            cycle.rejected = self.prune_never_fits()?;
        }
        self.cycle += 1;
        let blanket_before = self.blanket.take();
        let mut walk = Walk::new(self.config.backfill, cycle);
        self.advance_history(now);
        self.gangs.pending_cycle().keep_per_queue(self.fair.is_some());
        self.gangs.pending_cycle().open_cycle();
        let mut order = Order::new(self.gangs.pending(), self.fair.is_some());
        let may_skip = order.may_skip() && self.lifecycle.max_wait_s.is_none();
        while let Some((key, id)) = order.next(self.gangs.pending(), |q| self.share(q)) {
            self.visits += 1;
            if self.visit(&mut walk, id, now)? == Step::Stop {
                break;
            }
            if may_skip && std::mem::take(&mut walk.settled_visit) && walk.reservation.is_some() {
                walk.passed = true;
                match self.next_open(&mut walk, key, now) {
                    Some(next) => order.skip_to(next),
                    None => {
                        self.stop_nothing_starts(&mut walk);
                        break;
                    }
                }
            }
        }
        if walk.passed && self.blanket.is_none() {
            // The walk reached the end of the line: the gangs it passed over read why they wait.
            self.stop_nothing_starts(&mut walk);
        }
        self.gangs.pending_cycle().close_cycle();
        let Walk { mut cycle, mut reservation, .. } = walk;
        if let Some(plan) = &mut reservation {
            self.keep_refusals(plan);
        }
        cycle.reservation = reservation.map(|r| Reservation { holder: r.holder, at: r.at, hosts: r.hosts });
        if !crate::cycle::blanket::steady_eq(self.blanket.as_ref(), blanket_before.as_ref()) {
            // Gangs the cycle did not reach now read another blanket reason. They are listed
            // when a caller takes the changed gangs, not here: a replay never asks, and a
            // cycle's cost must not follow the length of the queue.
            self.blanket_moved = true;
        }
        self.cluster.reap();
        Ok(cycle)
    }

    /// When a cycle next has something to do though nothing changed: a backoff ends, a lost
    /// host's grace runs out, or (with a decaying fair-share history) the periodic resync.
    fn due(&self) -> Option<u64> {
        let backoff = self.gangs.next_backoff();
        let resync = self.fair.and_then(|f| f.half_life_s).and(self.last_full).map(|t| t + RESYNC_S);
        [backoff, resync, self.lost_due()].into_iter().flatten().min()
    }

    /// Takes out the pending gangs that the cluster as it stands cannot hold even empty: one
    /// look per distinct request, so the cost follows the kinds of gangs waiting, not their number.
    fn prune_never_fits(&mut self) -> Result<Vec<(GangId, crate::Unschedulable)>> {
        let requests: Vec<Demand> = self.gangs.by_request().requests().map(|(d, _)| d.clone()).collect();
        let mut out: BTreeMap<GangId, crate::Unschedulable> = BTreeMap::new();
        for request in requests {
            if let Some(failure) = self.never_fits(&request) {
                for id in self.gangs.by_request().ids(&request) {
                    out.insert(id, crate::Unschedulable::NeverFits(failure.clone().into()));
                }
            }
        }
        for id in out.keys() {
            self.cancel_pending(*id)?;
        }
        Ok(out.into_iter().collect())
    }
}
