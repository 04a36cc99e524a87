//! The engine's gang table: gangs enter (submit), start, stop and leave, and every index over
//! them (pending order, sizes, running by end and by queue, gangs per host, eligibility classes)
//! changes in the same call, so the indexes never disagree with the table.

use std::cmp::Reverse;

use trainyard_topology::{Demand, HostId, Placement};

use crate::engine::{GangRecord, GangState, OrderKey, size_key};
use crate::{Engine, Error, GangId, GangRequest, PendingReason, PendingStatus, Result, Submitted, Unschedulable};

impl Engine {
    /// Queue a gang, or say why it can never run.
    pub fn submit(&mut self, request: GangRequest) -> Result<Submitted> {
        self.enter(request, true)
    }

    /// Takes a gang into the table as pending; `fit` checks that it fits the empty cluster (a
    /// gang taken back where it already runs is not asked that).
    pub(crate) fn enter(&mut self, request: GangRequest, fit: bool) -> Result<Submitted> {
        if self.gangs.contains_key(&request.id) {
            return Err(Error::DuplicateGang(request.id));
        }
        let shape = &request.shape;
        if shape.pods() == 0 || shape.sets.iter().any(|s| s.pods == 0 || s.pod.is_zero()) {
            return Ok(Submitted::Unschedulable(Unschedulable::EmptyGang));
        }
        if let Err(e) = shape.validate() {
            return Ok(Submitted::Unschedulable(Unschedulable::InvalidShape { set: e.set, message: e.message }));
        }
        // A queue bound to a flavor runs its gangs on that flavor's nodes only; a flavor no
        // node has matches no host, so such gangs are reported as never fitting.
        let flavor = self.flavor_of.get(&request.queue).copied();
        let demand = match self.cluster.topology().demand(shape, flavor, trainyard_topology::HostClass::DEFAULT) {
            Ok(d) => d,
            Err(trainyard_topology::Error::UnknownLevel { level, known }) => {
                return Ok(Submitted::Unschedulable(Unschedulable::UnknownLevel { level, known }));
            }
            Err(trainyard_topology::Error::Shape(e)) => {
                return Ok(Submitted::Unschedulable(Unschedulable::InvalidShape { set: e.set, message: e.message }));
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
        let hosts = self.cluster.class_of(&request.hosts).ok_or(Error::TooManyHostFilters(request.id))?;
        let demand = demand.with_hosts(hosts);
        if let Some(failure) = self.never_fits(&demand).filter(|_| fit) {
            self.cluster.release_class(hosts);
            return Ok(Submitted::Unschedulable(Unschedulable::NeverFits(failure.into())));
        }
        let total = shape.total();
        let estimate = request.runtime_estimate.unwrap_or(self.config.default_runtime_estimate_s).max(1);
        let arrival = self.arrivals;
        let key = (Reverse(request.priority), request.submit, request.order, arrival);
        self.arrivals += 1;
        self.pending.insert(key, request.id, queue);
        if gpus == 0 {
            self.pending_without_gpus += 1;
        } else {
            self.pending_by_size.insert(size_key(request.id, &request));
        }
        let status = PendingStatus { reason: PendingReason::NotYetScheduled, reserved_at: None };
        let id = request.id;
        self.pending_by_request.insert(&demand, id, estimate);
        self.gangs.insert(
            id,
            GangRecord {
                request,
                queue,
                demand,
                total,
                gpus,
                estimate,
                state: GangState::Pending { status, cycle: self.cycle },
                arrival,
                preempted_by: None,
                ready: false,
                unready_attempts: 0,
                not_before: 0,
                quota_limit: None,
                quota_reason: None,
            },
        );
        self.touch(id);
        self.dirty = true;
        Ok(Submitted::Queued)
    }

    /// Whether a placement request cannot fit even the empty cluster as it stands (cached until
    /// the cluster's structure changes).
    pub(crate) fn never_fits(&mut self, request: &Demand) -> Option<trainyard_topology::PlacementFailure> {
        let generation = self.cluster.generation();
        if self.never_fits_generation != generation {
            self.never_fits.clear();
            self.never_fits_generation = generation;
        }
        let cluster = &mut self.cluster;
        if let Some(known) = self.never_fits.get(request) {
            return known.clone();
        }
        let answer = cluster.place_demand_on_empty(request).err();
        self.never_fits.insert(request.clone(), answer.clone());
        answer
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
        Some(self.blanket_status(gang).unwrap_or_else(|| status.clone()))
    }

    /// A gang ended (finished, failed or was cancelled while running): free its resources.
    pub fn finish(&mut self, id: GangId, now: u64) -> Result<()> {
        self.advance(now)?;
        // Usage changes now: account for what it was until now first.
        self.advance_history(now);
        let gang = self.gangs.get(&id).ok_or(Error::UnknownGang(id))?;
        let GangState::Running { placement, .. } = &gang.state else {
            return Err(Error::NotRunning(id));
        };
        let placement = placement.clone();
        self.stop_running(id, &placement)?;
        let gang = self.gangs.remove(&id).expect("checked above");
        self.cluster.release_class(gang.demand.hosts());
        self.cluster.reap();
        self.dirty = true;
        Ok(())
    }

    /// Withdraw a pending gang.
    pub fn cancel_pending(&mut self, id: GangId) -> Result<()> {
        let gang = self.gangs.get(&id).ok_or(Error::UnknownGang(id))?;
        if !matches!(gang.state, GangState::Pending { .. }) {
            return Err(Error::UnknownGang(id));
        }
        let key = self.order_key(id);
        self.pending.remove(&key);
        self.leave_pending(id);
        let gang = self.gangs.remove(&id).expect("checked above");
        self.cluster.release_class(gang.demand.hosts());
        self.dirty = true;
        Ok(())
    }

    /// The pending-order key of a gang (whether or not it is pending now).
    pub(crate) fn order_key(&self, id: GangId) -> OrderKey {
        let g = &self.gangs[&id];
        (Reverse(g.request.priority), g.request.submit, g.request.order, g.arrival)
    }

    /// Drops a gang that leaves the pending state from the size indexes.
    fn leave_pending(&mut self, id: GangId) {
        let gang = &self.gangs[&id];
        if gang.gpus == 0 {
            self.pending_without_gpus -= 1;
        } else {
            self.pending_by_size.remove(&size_key(id, &gang.request));
        }
        self.backoffs.remove(&(gang.not_before, id));
        self.pending_by_request.remove(&gang.demand, id, gang.estimate);
    }

    /// Releases a running gang's hosts and quota and drops it from the running indexes; the
    /// caller decides what becomes of it.
    fn stop_running(&mut self, id: GangId, placement: &Placement) -> Result<()> {
        let gang = &self.gangs[&id];
        let (queue, total, priority) = (gang.queue, gang.total, gang.request.priority);
        let GangState::Running { expected_end, .. } = gang.state else { return Err(Error::NotRunning(id)) };
        self.cluster.release_placement(placement)?;
        self.quotas.refund(queue, total);
        self.running_by_end.remove(&(expected_end, id));
        if let Some(set) = self.running_by_queue.get_mut(&queue) {
            set.remove(&(priority, id));
        }
        self.index_hosts(id, placement, false);
        self.lost.remove(&id);
        Ok(())
    }

    /// Stops a running gang without ending it: frees its capacity and quota and puts it back
    /// into the pending order in its old place. Returns when it had started. The caller sets
    /// its pending state.
    pub(crate) fn unrun(&mut self, id: GangId, now: u64) -> Result<u64> {
        // Usage changes now: account for what it was until now first.
        self.advance_history(now);
        let gang = self.gangs.get(&id).ok_or(Error::UnknownGang(id))?;
        let GangState::Running { placement, start, .. } = &gang.state else {
            return Err(Error::NotRunning(id));
        };
        let (placement, start) = (placement.clone(), *start);
        self.stop_running(id, &placement)?;
        let key = self.order_key(id);
        self.pending.insert(key, id, self.gangs[&id].queue);
        let gang = &self.gangs[&id];
        self.pending_by_request.insert(&gang.demand, id, gang.estimate);
        if gang.gpus == 0 {
            self.pending_without_gpus += 1;
        } else {
            self.pending_by_size.insert(size_key(id, &gang.request));
        }
        self.touch(id);
        self.dirty = true;
        Ok(start)
    }

    /// Cycles run so far.
    pub(crate) fn cycle_number(&self) -> u64 {
        self.cycle
    }

    pub(crate) fn set_status(&mut self, id: GangId, reason: PendingReason, reserved_at: Option<u64>) {
        let cycle = self.cycle;
        let Some(g) = self.gangs.get_mut(&id) else { return };
        let status = PendingStatus { reason, reserved_at };
        // Only a change a caller would report again counts (not the amounts that move meanwhile).
        let before = match &g.state {
            GangState::Pending { status: s, cycle: c } if *c >= cycle.saturating_sub(1) => {
                Some(s.reason.steady_eq(&status.reason) && s.reserved_at.is_some() == status.reserved_at.is_some())
            }
            _ => None,
        };
        let old = std::mem::replace(&mut g.state, GangState::Pending { status, cycle });
        // A quota reason giving way to another is kept for the next time the same limit blocks.
        if let GangState::Pending { status: old, .. } = old
            && matches!(old.reason, PendingReason::Quota { .. })
            && !matches!(&g.state, GangState::Pending { status, .. } if matches!(status.reason, PendingReason::Quota { .. }))
        {
            g.quota_reason = Some(Box::new(old.reason));
        }
        if before != Some(true) {
            self.touch(id);
        }
    }

    /// Marks a pending gang as looked at in this cycle with its reason unchanged, when `same`
    /// says its reason (with no reservation) is the one it would be given now; the amounts in it
    /// stay those of when it was built. Building a reason allocates; most gangs keep theirs cycle
    /// after cycle.
    pub(crate) fn keep_status(&mut self, id: GangId, same: impl FnOnce(&GangRecord, &PendingReason) -> bool) -> bool {
        let cycle = self.cycle;
        let Some(g) = self.gangs.get_mut(&id) else { return false };
        let kept = match &g.state {
            GangState::Pending { status, .. } => status.reserved_at.is_none() && same(g, &status.reason),
            GangState::Running { .. } => false,
        };
        let GangState::Pending { cycle: seen, .. } = &mut g.state else { return false };
        if !kept {
            return false;
        }
        // Not looked at in the last cycle: a caller was shown another (blanket) reason since, so
        // it hears of this one again, though the reason itself is kept.
        let stale = *seen < cycle.saturating_sub(1);
        *seen = cycle;
        if stale {
            self.touch(id);
        }
        true
    }

    /// Records that what the caller should say about `id` may have changed.
    pub(crate) fn touch(&mut self, id: GangId) {
        self.changed.insert(id);
    }

    /// The gangs whose decision may have changed since the last call: submitted, started,
    /// stopped, or pending for another reason. Lets a caller follow the engine in O(changes).
    pub fn take_changed(&mut self) -> Vec<GangId> {
        let mut ids: Vec<GangId> = std::mem::take(&mut self.changed).into_iter().collect();
        ids.sort_unstable();
        ids
    }

    pub(crate) fn start(&mut self, id: GangId, placement: &Placement, now: u64) -> Result<()> {
        if !self.gangs.contains_key(&id) {
            return Err(Error::UnknownGang(id));
        }
        self.cluster.allocate_placement(placement)?;
        self.run(id, placement, now);
        self.refresh_lost(id, now);
        Ok(())
    }

    /// Books a gang as running on `placement` (already charged to the cluster).
    pub(crate) fn run(&mut self, id: GangId, placement: &Placement, now: u64) {
        self.leave_pending(id);
        let gang = self.gangs.get_mut(&id).expect("the caller checked it");
        self.quotas.charge(gang.queue, gang.total);
        let expected_end = now.saturating_add(gang.estimate);
        gang.state = GangState::Running { placement: placement.clone(), start: now, expected_end };
        gang.ready = false;
        self.running_by_end.insert((expected_end, id));
        self.running_by_queue.entry(gang.queue).or_default().insert((gang.request.priority, id));
        self.index_hosts(id, placement, true);
        self.touch(id);
    }

    /// Adds or drops a running gang in the per-host index.
    fn index_hosts(&mut self, id: GangId, placement: &Placement, add: bool) {
        for (host, _) in placement.per_host() {
            if add {
                self.on_host.entry(host).or_default().insert(id);
            } else if let Some(set) = self.on_host.get_mut(&host) {
                set.remove(&id);
                if set.is_empty() {
                    self.on_host.remove(&host);
                }
            }
        }
    }

    /// Running gangs with pods on `host`, by id.
    pub fn gangs_on(&self, host: HostId) -> impl Iterator<Item = GangId> + '_ {
        self.on_host.get(&host).into_iter().flatten().copied()
    }
}
