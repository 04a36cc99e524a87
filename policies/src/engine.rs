//! The engine: one scheduling loop over the cluster snapshot, admitting whole gangs.
//!
//! Each cycle walks the pending gangs in order (priority, then submit time, then arrival)
//! and for each one checks its queue's quota and asks the topology for a placement. A gang
//! that fits is committed at once, so many gangs start in one cycle. The first gang that
//! cannot start either blocks the ones behind it (strict FIFO) or receives a reservation
//! that later gangs must not delay (EASY backfill, see `backfill.rs`).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;
use trainyard_topology::{Cluster, GangShape, HostId, Placement, PlacementFailure, PlacementRequest, Resources};

use crate::backfill::{Candidate, Holds, ReservationPlan};
use crate::lifecycle::LifecycleRules;
use crate::order::Order;
use crate::preemption::PreemptionRules;
use crate::quota_tree::QueueIdx;
use crate::quota_tree::{FairShare, QuotaTree};
use crate::{
    BackfillMode, Error, GangId, GangRequest, PendingReason, PendingStatus, PolicyConfig, Result, Unschedulable,
};

/// What `submit` made of a gang.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// Queued; the next cycle will consider it.
    Queued,
    /// Can never run here; the engine does not keep it.
    Unschedulable(Unschedulable),
}

/// One gang started by a cycle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    /// The gang.
    pub id: GangId,
    /// Where each of its pods goes.
    pub placement: Placement,
    /// Started ahead of a blocked gang that holds a reservation.
    pub backfilled: bool,
}

/// The reservation held at the end of a cycle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Reservation {
    /// The gang it is for.
    pub holder: GangId,
    /// When the gang is due to start, seconds.
    pub at: u64,
    /// Hosts and pod counts set aside for it at that time.
    #[serde(skip)]
    pub hosts: Vec<(HostId, u32)>,
}

/// A running gang sent back to the queue so that another could start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preemption {
    /// The gang preempted; it is pending again, with its original submission time.
    pub victim: GangId,
    /// The gang it made room for (admitted in the same cycle).
    pub by: GangId,
    /// Seconds the victim had run.
    pub ran_s: u64,
    /// Of those, seconds of work lost: the time since its last checkpoint.
    pub lost_s: u64,
}

/// The result of one scheduling cycle.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cycle {
    /// Gangs preempted, before the admissions they made room for.
    pub preempted: Vec<Preemption>,
    /// Gangs started, in the order they were admitted.
    pub admitted: Vec<Admission>,
    /// The reservation for the first gang that could not start, under EASY backfill.
    pub reservation: Option<Reservation>,
}

/// A gang the engine tracks.
#[derive(Clone, Debug)]
pub(crate) struct GangRecord {
    pub(crate) request: GangRequest,
    pub(crate) queue: QueueIdx,
    pub(crate) placement_request: PlacementRequest,
    pub(crate) gpus: u64,
    pub(crate) estimate: u64,
    pub(crate) state: GangState,
    /// Arrival number: the last part of the pending order key, kept to requeue it unchanged.
    pub(crate) arrival: u64,
    /// The gang that last preempted this one: it may never preempt that gang back.
    pub(crate) preempted_by: Option<GangId>,
    /// Whether the running gang reported all its pods ready.
    pub(crate) ready: bool,
    /// Times it was admitted but not ready in time.
    pub(crate) unready_attempts: u32,
    /// It may not be admitted before this time (backoff after an admission that timed out).
    pub(crate) not_before: u64,
}

#[derive(Clone, Debug)]
pub(crate) enum GangState {
    Pending { status: PendingStatus, cycle: u64 },
    Running { placement: Placement, start: u64, expected_end: u64 },
}

/// Weighted dominant-resource fair sharing across queues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FairSharing {
    /// Past usage counts too, decaying by half every this many seconds; `None` counts only
    /// what queues hold now.
    pub half_life_s: Option<u64>,
}

/// Size order of pending gangs: fewest GPUs, smallest pod, higher priority, earlier submission.
type SizeKey = (u64, Resources, Reverse<i32>, u64, GangId);

fn size_key(id: GangId, request: &GangRequest) -> SizeKey {
    (request.shape.total().gpus, request.shape.pod, Reverse(request.priority), request.submit, id)
}

/// Pending order: higher priority first, then earlier submission, then arrival order.
pub(crate) type OrderKey = (Reverse<i32>, u64, u64);

/// What gangs not looked at in the last cycle are waiting for.
#[derive(Clone, Debug)]
enum Blanket {
    QueuedBehind(GangId),
    ClusterFull(Resources),
}

/// The scheduling engine. Sans-IO: time is passed in, nothing is read or written.
#[derive(Debug)]
pub struct Engine {
    pub(crate) cluster: Cluster,
    config: PolicyConfig,
    pub(crate) quotas: QuotaTree,
    /// Flavor index of each queue bound to one (`u16::MAX` for a flavor no node has, which
    /// matches no host, so its gangs are reported as never fitting).
    flavor_of: BTreeMap<String, u16>,
    pub(crate) fair_share: FairShare,
    pub(crate) gangs: BTreeMap<GangId, GangRecord>,
    pub(crate) pending: BTreeMap<OrderKey, GangId>,
    pending_without_gpus: usize,
    /// Pending gangs that ask for GPUs, smallest first (for fragmentation metrics).
    pending_by_size: BTreeSet<SizeKey>,
    pub(crate) running_by_end: BTreeSet<(u64, GangId)>,
    /// Running gangs of each queue by priority, lowest first: the preemption candidates.
    pub(crate) running_by_queue: BTreeMap<QueueIdx, BTreeSet<(i32, GangId)>>,
    pub(crate) preemption: PreemptionRules,
    pub(crate) lifecycle: LifecycleRules,
    pub(crate) fair: Option<FairSharing>,
    never_fits: HashMap<PlacementRequest, Option<PlacementFailure>>,
    arrivals: u64,
    cycle: u64,
    last_now: u64,
    blanket: Option<Blanket>,
}

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
        let flavor_of = config
            .queues
            .iter()
            .filter_map(|q| {
                q.flavor.as_deref().map(|f| (q.name.clone(), cluster.topology().flavor_id(f).unwrap_or(u16::MAX)))
            })
            .collect();
        cluster.set_placement_policy(config.placement);
        let fair = config.fair_sharing.enabled.then_some(FairSharing { half_life_s: config.fair_sharing.half_life_s });
        let preemption = PreemptionRules {
            within_queue: config.preemption.within_queue,
            reclaim: config.preemption.reclaim,
            checkpoint_interval_s: config.preemption.checkpoint_interval_s,
        };
        let timeout = config.admission_timeout;
        let lifecycle = LifecycleRules {
            max_wait_s: config.starvation.max_wait_s,
            ready_timeout_s: timeout.map(|t| t.wait_s),
            backoff_s: timeout.map_or(0, |t| t.backoff_s),
            max_backoff_s: timeout.map_or(0, |t| t.max_backoff_s),
        };
        let fair_share = FairShare::new(fair.and_then(|f| f.half_life_s));
        Engine {
            cluster,
            config,
            quotas,
            flavor_of,
            fair_share,
            gangs: BTreeMap::new(),
            pending: BTreeMap::new(),
            pending_without_gpus: 0,
            pending_by_size: BTreeSet::new(),
            running_by_end: BTreeSet::new(),
            running_by_queue: BTreeMap::new(),
            preemption,
            lifecycle,
            fair,
            never_fits: HashMap::new(),
            arrivals: 0,
            cycle: 0,
            last_now: 0,
            blanket: None,
        }
    }

    /// Gangs submitted so far (the next arrival number).
    pub(crate) fn arrivals(&self) -> u64 {
        self.arrivals
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
        self.pending.len()
    }

    /// Number of gangs running.
    pub fn running_len(&self) -> usize {
        self.running_by_end.len()
    }

    /// Pending gangs in scheduling order.
    pub fn pending(&self) -> impl Iterator<Item = GangId> + '_ {
        self.pending.values().copied()
    }

    /// The smallest pending gang that asks for GPUs: fewest GPUs in total, then the smallest
    /// pod, then higher priority, earlier submission and lower id. Gangs without GPUs are
    /// skipped because no free GPU can be unusable to them. Kept in order as gangs come and
    /// go, so asking after every cycle costs nothing.
    pub fn smallest_pending_gpu_gang(&self) -> Option<&GangShape> {
        self.pending_by_size.first().map(|k| &self.gangs[&k.4].request.shape)
    }

    /// Running gangs with their placement and start time, by id.
    pub fn running(&self) -> impl Iterator<Item = (GangId, &Placement, u64)> + '_ {
        self.gangs.iter().filter_map(|(id, g)| match &g.state {
            GangState::Running { placement, start, .. } => Some((*id, placement, *start)),
            GangState::Pending { .. } => None,
        })
    }

    /// Queue a gang, or say why it can never run.
    pub fn submit(&mut self, request: GangRequest) -> Result<Submitted> {
        if self.gangs.contains_key(&request.id) {
            return Err(Error::DuplicateGang(request.id));
        }
        let shape = &request.shape;
        if shape.pods == 0 || shape.pod.is_zero() {
            return Ok(Submitted::Unschedulable(Unschedulable::EmptyGang));
        }
        let constraint = match self.cluster.topology().resolve(&shape.topology) {
            Ok(c) => c,
            Err(trainyard_topology::Error::UnknownLevel { level, known }) => {
                return Ok(Submitted::Unschedulable(Unschedulable::UnknownLevel { level, known }));
            }
            Err(e) => return Err(e.into()),
        };
        let Some(queue) = self.quotas.resolve(&request.queue) else {
            return Ok(Submitted::Unschedulable(Unschedulable::UnknownQueue { queue: request.queue.clone() }));
        };
        let gpus = shape.total().gpus;
        let ceiling = self.quotas.ceiling(queue);
        if !ceiling.covers(&shape.total()) {
            return Ok(Submitted::Unschedulable(Unschedulable::ExceedsQuota {
                queue: request.queue.clone(),
                requested_gpus: gpus,
                nominal_gpus: ceiling.gpus,
            }));
        }
        // A queue bound to a flavor runs its gangs on that flavor's nodes only; a flavor no
        // node has matches no host, so such gangs are reported as never fitting.
        let flavor = self.flavor_of.get(&request.queue).copied();
        let placement_request = PlacementRequest { pods: shape.pods, pod: shape.pod, constraint, flavor };
        let cluster = &mut self.cluster;
        let never = self
            .never_fits
            .entry(placement_request)
            .or_insert_with(|| cluster.place_on_empty(&placement_request).err())
            .clone();
        if let Some(failure) = never {
            return Ok(Submitted::Unschedulable(Unschedulable::NeverFits(failure.into())));
        }
        let estimate = request.runtime_estimate.unwrap_or(self.config.default_runtime_estimate_s).max(1);
        let arrival = self.arrivals;
        let key = (Reverse(request.priority), request.submit, arrival);
        self.arrivals += 1;
        self.pending.insert(key, request.id);
        if gpus == 0 {
            self.pending_without_gpus += 1;
        } else {
            self.pending_by_size.insert(size_key(request.id, &request));
        }
        let status = PendingStatus { reason: PendingReason::NotYetScheduled, reserved_at: None };
        self.gangs.insert(
            request.id,
            GangRecord {
                request,
                queue,
                placement_request,
                gpus,
                estimate,
                state: GangState::Pending { status, cycle: self.cycle },
                arrival,
                preempted_by: None,
                ready: false,
                unready_attempts: 0,
                not_before: 0,
            },
        );
        Ok(Submitted::Queued)
    }

    /// Why a pending gang is waiting; `None` if it is not pending.
    pub fn pending_status(&self, id: GangId) -> Option<PendingStatus> {
        let gang = self.gangs.get(&id)?;
        let GangState::Pending { status, cycle } = &gang.state else {
            return None;
        };
        if *cycle >= self.cycle {
            return Some(status.clone());
        }
        let reason = match &self.blanket {
            Some(Blanket::QueuedBehind(head)) => PendingReason::QueuedBehind { head: *head },
            Some(Blanket::ClusterFull(free)) => {
                PendingReason::Capacity { requested: gang.request.shape.total(), free: *free }
            }
            None => status.reason.clone(),
        };
        Some(PendingStatus { reason, reserved_at: None })
    }

    /// A gang ended (finished, failed or was cancelled while running): free its resources.
    pub fn finish(&mut self, id: GangId, now: u64) -> Result<()> {
        self.advance(now)?;
        // Usage changes now: account for what it was until now first.
        self.advance_history(now);
        let gang = self.gangs.get(&id).ok_or(Error::UnknownGang(id))?;
        let GangState::Running { placement, expected_end, .. } = &gang.state else {
            return Err(Error::NotRunning(id));
        };
        self.cluster.release_placement(placement, gang.placement_request.pod)?;
        self.quotas.refund(gang.queue, gang.request.shape.total());
        self.running_by_end.remove(&(*expected_end, id));
        if let Some(set) = self.running_by_queue.get_mut(&gang.queue) {
            set.remove(&(gang.request.priority, id));
        }
        self.gangs.remove(&id);
        Ok(())
    }

    /// Withdraw a pending gang.
    pub fn cancel_pending(&mut self, id: GangId) -> Result<()> {
        let gang = self.gangs.get(&id).ok_or(Error::UnknownGang(id))?;
        if !matches!(gang.state, GangState::Pending { .. }) {
            return Err(Error::UnknownGang(id));
        }
        let gpus = gang.gpus;
        let size = size_key(id, &gang.request);
        self.pending.retain(|_, g| *g != id);
        if gpus == 0 {
            self.pending_without_gpus -= 1;
        }
        self.pending_by_size.remove(&size);
        self.gangs.remove(&id);
        Ok(())
    }

    fn advance(&mut self, now: u64) -> Result<()> {
        if now < self.last_now {
            return Err(Error::TimeWentBackwards { now, last: self.last_now });
        }
        self.last_now = now;
        Ok(())
    }

    /// Runs one scheduling cycle at time `now`.
    pub fn schedule(&mut self, now: u64) -> Result<Cycle> {
        self.advance(now)?;
        self.cycle += 1;
        self.blanket = None;
        let mode = self.config.backfill;
        let mut cycle = Cycle::default();
        let mut failed_shapes: HashMap<PlacementRequest, PlacementFailure> = HashMap::new();
        let mut blocked_queues: BTreeMap<QueueIdx, GangId> = BTreeMap::new();
        let mut reservation: Option<ReservationPlan> = None;
        let mut holds = Holds::default();
        self.advance_history(now);
        let gangs = &self.gangs;
        let requeues = self.preemption.within_queue || self.preemption.reclaim;
        let mut order = Order::new(&self.pending, |id| gangs[&id].queue, self.fair.is_some(), requeues);
        while let Some((key, id)) = order.next(&self.pending, |q| self.share(q)) {
            let free = self.cluster.total_free();
            // A full cluster ends the cycle, except that the head of the line may still
            // preempt its way in.
            let may_preempt = (self.preemption.within_queue || self.preemption.reclaim)
                && reservation.is_none()
                && blocked_queues.is_empty();
            if mode == BackfillMode::Easy && free.gpus == 0 && self.pending_without_gpus == 0 && !may_preempt {
                self.blanket = Some(Blanket::ClusterFull(free));
                break;
            }
            let gang = &self.gangs[&id];
            let (queue, gpus) = (gang.queue, gang.gpus);
            if gang.not_before > now {
                let reason = PendingReason::Backoff { until: gang.not_before, attempts: gang.unready_attempts };
                self.set_status(id, reason, None);
                continue;
            }
            if let Some(&head) = blocked_queues.get(&queue) {
                self.set_status(id, PendingReason::QueuedBehind { head }, None);
                continue;
            }
            if let Err(block) = self.quotas.check(queue, gang.request.shape.total()) {
                // The head of the line may take lent quota back from borrowers.
                if reservation.is_none()
                    && blocked_queues.is_empty()
                    && self.start_by_preemption(id, key, now, &mut cycle)?
                {
                    continue;
                }
                let reason = PendingReason::Quota {
                    queue: self.quotas.name(queue).to_string(),
                    requested_gpus: gpus,
                    used_gpus: self.quotas.usage(queue).gpus,
                    available_gpus: self.quotas.available(queue).gpus,
                    limit: self.quotas.describe(&block),
                };
                let mut reserved_at = None;
                match mode {
                    BackfillMode::None => {
                        blocked_queues.insert(queue, id);
                    }
                    BackfillMode::Easy if reservation.is_none() => {
                        reservation = self.plan_reservation(id, now, &mut holds)?;
                        reserved_at = reservation.as_ref().map(|r| r.at);
                    }
                    BackfillMode::Easy => holds.hold_queue(self, queue, id, now),
                }
                self.set_status(id, reason, reserved_at);
                continue;
            }
            let request = gang.placement_request;
            let end = now.saturating_add(gang.estimate);
            if let Some(reason) = reservation.as_ref().and_then(|r| r.refuses(&request, end)) {
                self.set_status(id, reason, None);
                continue;
            }
            let placed = match failed_shapes.get(&request) {
                Some(failure) => Err(failure.clone()),
                None => self.cluster.place(&request),
            };
            let placement = match placed {
                Ok(p) => p,
                Err(failure) => {
                    // Only the head of the line preempts: nobody ahead of it is waiting.
                    if reservation.is_none()
                        && blocked_queues.is_empty()
                        && self.start_by_preemption(id, key, now, &mut cycle)?
                    {
                        continue;
                    }
                    failed_shapes.insert(request, failure.clone());
                    let mut reserved_at = None;
                    match mode {
                        BackfillMode::None => {
                            self.set_status(id, failure.into(), None);
                            self.blanket = Some(Blanket::QueuedBehind(id));
                            break;
                        }
                        BackfillMode::Easy if reservation.is_none() => {
                            reservation = self.plan_reservation(id, now, &mut holds)?;
                            reserved_at = reservation.as_ref().map(|r| r.at);
                        }
                        BackfillMode::Easy => {}
                    }
                    self.set_status(id, failure.into(), reserved_at);
                    if self.starving(id, now) {
                        // Nobody may pass a gang that has waited too long.
                        self.blanket = Some(Blanket::QueuedBehind(id));
                        break;
                    }
                    continue;
                }
            };
            let candidate = Candidate { request, queue, gpus, end };
            let placement = match self.respect_reservations(placement, &candidate, reservation.as_mut(), &mut holds) {
                Ok(p) => p,
                Err(reason) => {
                    self.set_status(id, reason, None);
                    continue;
                }
            };
            let backfilled = reservation.is_some() || holds.holds(queue);
            self.start(id, &placement, now)?;
            // Removed at once (the loop walks a snapshot), so a gang preempted later in this
            // cycle is requeued, not dropped.
            self.pending.remove(&key);
            cycle.admitted.push(Admission { id, placement, backfilled });
        }
        cycle.reservation = reservation.map(|r| Reservation { holder: r.holder, at: r.at, hosts: r.hosts });
        Ok(cycle)
    }

    /// Starts the head of the line on capacity it frees by preemption, if it can.
    fn start_by_preemption(&mut self, id: GangId, key: OrderKey, now: u64, cycle: &mut Cycle) -> Result<bool> {
        let Some(placement) = self.try_preempt(id, now, cycle)? else { return Ok(false) };
        self.start(id, &placement, now)?;
        self.pending.remove(&key);
        cycle.admitted.push(Admission { id, placement, backfilled: false });
        Ok(true)
    }

    /// Stops a running gang without ending it: frees its capacity and quota and puts it back
    /// into the pending order in its old place. Returns when it had started. The caller sets
    /// its pending state.
    pub(crate) fn unrun(&mut self, id: GangId, now: u64) -> Result<u64> {
        // Usage changes now: account for what it was until now first.
        self.advance_history(now);
        let gang = self.gangs.get(&id).ok_or(Error::UnknownGang(id))?;
        let GangState::Running { placement, start, expected_end } = &gang.state else {
            return Err(Error::NotRunning(id));
        };
        let (start, expected_end) = (*start, *expected_end);
        self.cluster.release_placement(placement, gang.placement_request.pod)?;
        self.quotas.refund(gang.queue, gang.request.shape.total());
        self.running_by_end.remove(&(expected_end, id));
        if let Some(set) = self.running_by_queue.get_mut(&gang.queue) {
            set.remove(&(gang.request.priority, id));
        }
        self.pending.insert((Reverse(gang.request.priority), gang.request.submit, gang.arrival), id);
        if gang.gpus == 0 {
            self.pending_without_gpus += 1;
        } else {
            self.pending_by_size.insert(size_key(id, &gang.request));
        }
        Ok(start)
    }

    /// Cycles run so far.
    pub(crate) fn cycle_number(&self) -> u64 {
        self.cycle
    }

    fn set_status(&mut self, id: GangId, reason: PendingReason, reserved_at: Option<u64>) {
        let cycle = self.cycle;
        if let Some(g) = self.gangs.get_mut(&id) {
            g.state = GangState::Pending { status: PendingStatus { reason, reserved_at }, cycle };
        }
    }

    pub(crate) fn start(&mut self, id: GangId, placement: &Placement, now: u64) -> Result<()> {
        let gang = self.gangs.get_mut(&id).ok_or(Error::UnknownGang(id))?;
        self.cluster.allocate_placement(placement, gang.placement_request.pod)?;
        self.quotas.charge(gang.queue, gang.request.shape.total());
        if gang.gpus == 0 {
            self.pending_without_gpus -= 1;
        } else {
            self.pending_by_size.remove(&size_key(id, &gang.request));
        }
        let expected_end = now.saturating_add(gang.estimate);
        gang.state = GangState::Running { placement: placement.clone(), start: now, expected_end };
        gang.ready = false;
        self.running_by_end.insert((expected_end, id));
        self.running_by_queue.entry(gang.queue).or_default().insert((gang.request.priority, id));
        Ok(())
    }
}
