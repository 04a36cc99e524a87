//! The engine's state of record: the cluster with its free capacity, the gang table, the
//! quotas with their usage and fair-share history, the rules in force, the hosts lost under
//! running gangs, and the memos that follow them (placement failures and placements found at
//! the cluster's current version, the last reservation plan, the blanket reason).
//!
//! Every stage (`cycle/`, `backfill/`, `preemption/`, `lifecycle/`, `estimates/`) reads and
//! changes this state, as Volcano's actions work on one session. Only bookkeeping lives here:
//! a gang entering, starting, stopping or leaving with its capacity and quota charged or freed
//! (`ledger.rs`), the reason a pending gang reads and the changes a caller has yet to take
//! (`status.rs`), placements kept at the cluster's version (`placements.rs`), and hosts lost
//! under running gangs (`lost.rs`). No decision is made here, and nothing here imports a stage
//! or the engine.

pub(crate) mod ledger;
pub(crate) mod lost;
pub(crate) mod placements;
pub(crate) mod status;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use trainyard_topology::{Cluster, Demand, HostId, PlacementFailure};

use crate::backfill::plan_memo::PlanMemo;
use crate::cycle::blanket::Blanket;
use crate::gangs::by_id::{FastHash, GangSet};
use crate::gangs::kept_placements::Placed;
use crate::gangs::table::GangTable;
use crate::lifecycle::LifecycleRules;
use crate::preemption::rules::PreemptionRules;
use crate::quota::{FairShare, QuotaTree};
use crate::{Error, FairSharing, GangId, PolicyConfig, Result};

/// The engine's state of record (see the module documentation).
///
/// `Clone` gives an independent copy; gang records are shared between copies until one
/// changes them (`gangs/by_id.rs`), so a copy costs little more than the cluster's.
#[derive(Clone, Debug)]
pub(crate) struct State {
    pub(crate) cluster: Cluster,
    pub(crate) config: PolicyConfig,
    pub(crate) quotas: QuotaTree,
    /// Flavor index of each queue bound to one (`u16::MAX` for a flavor no node has, which
    /// matches no host, so its gangs are reported as never fitting).
    pub(crate) flavor_of: BTreeMap<String, u16>,
    pub(crate) fair_share: FairShare,
    /// The gangs, and every index over them.
    pub(crate) gangs: GangTable,
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
    /// Cycles run so far.
    pub(crate) cycle: u64,
    /// The latest time the engine was told of.
    pub(crate) last_now: u64,
    pub(crate) blanket: Option<Blanket>,
    /// Something changed that a cycle must look at (a gang came, went or stopped, capacity or
    /// quota changed); without it, and before a timer is due, a cycle has nothing to do.
    pub(crate) dirty: bool,
    /// Gangs whose decision may have changed since the caller last asked (sorted when taken).
    pub(crate) changed: GangSet,
    /// Whether anybody takes the changed gangs (see `Engine::ignore_changes`).
    pub(crate) follows_changes: bool,
    /// The blanket reason of gangs a cycle did not reach moved since the caller last asked.
    pub(crate) blanket_moved: bool,
    /// Running gangs with lost hosts, each with when it was lost.
    pub(crate) lost: BTreeMap<GangId, BTreeMap<HostId, u64>>,
    /// The last reservation plan, kept while nothing it was built from changed.
    pub(crate) plan_memo: Option<PlanMemo>,
    /// Whether each queue's quota is unlimited (its ceiling is), by queue index, so that passing
    /// over its gangs needs no quota check. A ceiling counts nothing running, so it changes only
    /// with the policy: kept across cycles, cleared when the policy is replaced.
    pub(crate) unlimited_queues: Vec<Option<bool>>,
    /// Placements found at the cluster's current version, across cycles (`gangs/kept_placements.rs`).
    pub(crate) placed: Placed,
    /// A what-if copy (`estimates/eta.rs`): only what the engine decides is read, never why gangs
    /// wait, so placement failures that follow from others are not searched
    /// (`cycle/inferred_failures.rs`).
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

impl State {
    /// The state of an engine over a cluster with a policy whose topology-unit quotas already
    /// resolved against it.
    pub(crate) fn new(mut cluster: Cluster, config: PolicyConfig) -> State {
        let quotas = QuotaTree::new(&config);
        let fair = config.fair_sharing.enabled.then_some(FairSharing { half_life_s: config.fair_sharing.half_life_s });
        let fair_share = FairShare::new(fair.and_then(|f| f.half_life_s));
        cluster.set_placement_policy(config.placement);
        let mut state = State {
            cluster,
            config: config.clone(),
            quotas,
            flavor_of: BTreeMap::new(),
            fair_share,
            gangs: GangTable::default(),
            preemption: PreemptionRules::default(),
            lifecycle: LifecycleRules::default(),
            fair,
            never_fits: HashMap::default(),
            never_fits_generation: 0,
            failed_at: HashMap::default(),
            arrivals: 0,
            cycle: 0,
            last_now: 0,
            blanket: None,
            dirty: true,
            changed: GangSet::default(),
            follows_changes: true,
            blanket_moved: false,
            lost: BTreeMap::new(),
            plan_memo: None,
            unlimited_queues: Vec::new(),
            placed: Default::default(),
            decisions_only: false,
        };
        state.apply_settings(&config);
        state.flavor_of = flavors_of(&config, state.cluster.topology());
        state
    }

    /// A copy to run forward as a what-if (`estimates/eta.rs`): what [`Clone`] gives, except that
    /// it decides only (`decisions_only`), follows no changes, and files no running gang by host
    /// (see [`GangTable::what_if_copy`]). Every field is listed, so that a new one is copied on
    /// purpose.
    pub(crate) fn what_if_copy(&self) -> State {
        State {
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
            last_now: self.last_now,
            blanket: self.blanket.clone(),
            dirty: self.dirty,
            changed: Default::default(),
            follows_changes: false,
            blanket_moved: self.blanket_moved,
            lost: self.lost.clone(),
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

    /// Moves time forward to `now`; time never goes back.
    pub(crate) fn advance(&mut self, now: u64) -> Result<()> {
        if now < self.last_now {
            return Err(Error::TimeWentBackwards { now, last: self.last_now });
        }
        self.last_now = now;
        Ok(())
    }

    /// Accounts every queue's usage up to `now` into the fair-share history; called before
    /// any change of usage.
    pub(crate) fn advance_history(&mut self, now: u64) {
        self.fair_share.advance(&self.quotas, now);
    }

    /// The versions of what a reservation plan reads: the cluster, the running gangs, the quotas.
    pub(crate) fn plan_versions(&self) -> (u64, u64, u64) {
        (self.cluster.version(), self.gangs.running_version(), self.quotas.version())
    }
}
