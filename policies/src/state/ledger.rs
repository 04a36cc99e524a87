//! How gangs enter, start, stop and leave the state: each step checks what the engine needs
//! (shape, queue, quota ceiling, a fit on the empty cluster), charges or frees the cluster and
//! the quotas, and moves the gang through the table (`gangs/table.rs`), which keeps every index
//! over the gangs in step.

use trainyard_topology::{Demand, Placement};

use crate::gangs::record::{GangRecord, GangState};
use crate::state::State;
use crate::{Error, GangId, GangRequest, PendingReason, PendingStatus, Result, Submitted, Unschedulable};

impl State {
    /// Takes a gang into the table as pending; `fit` checks that it fits the empty cluster (a
    /// gang taken back where it already runs is not asked that).
    pub(crate) fn enter(&mut self, mut request: GangRequest, fit: bool) -> Result<Submitted> {
        if self.gangs.contains_key(&request.id) {
            return Err(Error::DuplicateGang(request.id));
        }
        let shape = &request.shape;
        if shape.pods() == 0 || shape.sets.iter().any(|s| s.pods == 0 || (s.pod.is_zero() && s.claims.is_empty())) {
            return Ok(Submitted::Unschedulable(Unschedulable::EmptyGang));
        }
        if let Err(e) = shape.validate() {
            return Ok(Submitted::Unschedulable(Unschedulable::InvalidShape { set: e.set, message: e.message }));
        }
        // Claims resolve first: pods that get their GPUs through claims count them from here on.
        let claims_set = request.shape.sets.iter().find(|s| !s.claims.is_empty()).map(|s| s.name.clone());
        let devices = match self.cluster.device_fit(&mut request.shape) {
            Ok(devices) => devices,
            Err(e @ trainyard_topology::Error::DeviceClaim { .. }) => {
                return Ok(Submitted::Unschedulable(Unschedulable::InvalidShape {
                    set: claims_set,
                    message: e.to_string(),
                }));
            }
            Err(e) => return Err(e.into()),
        };
        let shape = &request.shape;
        if shape.sets.iter().any(|s| s.pod.is_zero()) {
            return Ok(Submitted::Unschedulable(Unschedulable::EmptyGang));
        }
        // The GPUs the claims gave may make a set with claims look like one without.
        if let Some(e) = devices.and_then(|_| shape.validate().err()) {
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
        let total = shape.total();
        let gpus = total.gpus;
        let ceiling = self.quotas.ceiling(queue);
        if !ceiling.covers(&total) {
            return Ok(Submitted::Unschedulable(Unschedulable::ExceedsQuota {
                queue: request.queue.clone(),
                requested_gpus: gpus,
                nominal_gpus: ceiling.gpus,
            }));
        }
        let layout = shape.layout_need();
        let hosts =
            self.cluster.class_for(&request.hosts, layout, devices).ok_or(Error::TooManyHostFilters(request.id))?;
        let demand = demand.with_hosts(hosts);
        if let Some(failure) = self.never_fits(&demand).filter(|_| fit) {
            let refusal = devices.is_some().then(|| self.cluster.device_refusal(hosts, shape.pods()));
            self.cluster.release_class(hosts);
            if let Some(why) = layout.and_then(|need| self.layout_alone_refuses(&request, &demand, need)) {
                return Ok(Submitted::Unschedulable(why));
            }
            if let Some(refusal) = refusal
                && self.fits_without_devices(&request, &demand)
            {
                let message =
                    format!("claims {}: {refusal}", request.shape.claims().map_or(String::new(), |(t, _)| t.join("+")));
                return Ok(Submitted::Unschedulable(Unschedulable::NeverFits(PendingReason::Devices { message })));
            }
            return Ok(Submitted::Unschedulable(Unschedulable::NeverFits(failure.into())));
        }
        let estimate = request.runtime_estimate.unwrap_or(self.config.default_runtime_estimate_s).max(1);
        let arrival = self.arrivals;
        self.arrivals += 1;
        let status = PendingStatus { reason: PendingReason::NotYetScheduled, reserved_at: None };
        let id = request.id;
        self.gangs.enqueue(GangRecord {
            request: std::sync::Arc::new(request),
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
        });
        self.touch(id);
        self.dirty = true;
        Ok(Submitted::Queued)
    }

    /// The reason for a gang that never fits because of its GPU layout alone: it would fit the
    /// empty cluster without it. `None` when it would not fit either way.
    fn layout_alone_refuses(
        &mut self,
        request: &GangRequest,
        demand: &Demand,
        need: trainyard_topology::LayoutNeed,
    ) -> Option<Unschedulable> {
        let plain = self.cluster.class_of(&request.hosts)?;
        let fits = self.never_fits(&demand.clone().with_hosts(plain)).is_none();
        self.cluster.release_class(plain);
        let set = request.shape.sets.iter().find(|s| s.gpu_layout.is_some()).map(|s| s.name.clone());
        fits.then(|| Unschedulable::InvalidShape {
            set,
            message: format!(
                "its pods ask for {} GPUs within one {}, which no node's known GPU layout holds \
                 (nodes without an `intra_node` layout never qualify)",
                need.gpus, need.within
            ),
        })
    }

    /// Whether the gang would fit the empty cluster if its pods carried no device claims: then
    /// the claims are why it never fits.
    fn fits_without_devices(&mut self, request: &GangRequest, demand: &Demand) -> bool {
        let Some(plain) = self.cluster.class_for(&request.hosts, request.shape.layout_need(), None) else {
            return false;
        };
        let fits = self.never_fits(&demand.clone().with_hosts(plain)).is_none();
        self.cluster.release_class(plain);
        fits
    }

    /// Withdraw a pending gang.
    pub(crate) fn cancel_pending(&mut self, id: GangId) -> Result<()> {
        let gang = self.gangs.get(&id).ok_or(Error::UnknownGang(id))?;
        if !matches!(gang.state, GangState::Pending { .. }) {
            return Err(Error::UnknownGang(id));
        }
        let gang = self.gangs.remove(id).expect("checked above");
        self.cluster.release_class(gang.demand.hosts());
        self.dirty = true;
        Ok(())
    }

    /// Releases a running gang's hosts and quota and takes it out of the running indices;
    /// the caller requeues or removes it. Returns its placement and start.
    fn stop_running(&mut self, id: GangId) -> Result<(std::sync::Arc<Placement>, u64)> {
        let gang = self.gangs.get(&id).ok_or(Error::UnknownGang(id))?;
        let GangState::Running { placement, expected_end, .. } = &gang.state else {
            return Err(Error::NotRunning(id));
        };
        let (end, versions, epoch) = (*expected_end, self.plan_versions(), self.cluster.epoch());
        let first = self.gangs.running_by_end().first() == Some(&(end, id));
        self.cluster.release_placement(placement)?;
        self.quotas.refund(gang.queue, gang.total);
        self.lost.remove(&id);
        let stopped = self.gangs.stop(id).expect("running, checked above");
        let after = self.plan_versions();
        if self.plan_memo.as_mut().is_some_and(|memo| !memo.stands_after_stop(versions, after, first, end)) {
            self.plan_memo = None;
        }
        if self.decisions_only {
            self.carry_failures(epoch, &stopped.0);
        }
        Ok(stopped)
    }

    /// A running gang ended (finished, failed or was cancelled): frees its resources and
    /// forgets it.
    pub(crate) fn end(&mut self, id: GangId, now: u64) -> Result<()> {
        // Usage changes now: account for what it was until now first.
        self.advance_history(now);
        self.stop_running(id)?;
        let gang = self.gangs.remove(id).expect("stopped above");
        self.cluster.release_class(gang.demand.hosts());
        self.cluster.reap();
        self.dirty = true;
        Ok(())
    }

    /// Stops a running gang without ending it: frees its capacity and quota and puts it back
    /// into the pending order in its old place, not yet scheduled. Returns when it had started.
    pub(crate) fn unrun(&mut self, id: GangId, now: u64) -> Result<u64> {
        // Usage changes now: account for what it was until now first.
        self.advance_history(now);
        let (_, start) = self.stop_running(id)?;
        let status = PendingStatus { reason: PendingReason::NotYetScheduled, reserved_at: None };
        self.gangs.requeue(id, status, self.cycle);
        self.touch(id);
        self.dirty = true;
        Ok(start)
    }

    /// Starts a pending gang on `placement`, which gets its pods' GPU indices.
    pub(crate) fn start(&mut self, id: GangId, placement: &mut Placement, now: u64) -> Result<()> {
        if !self.gangs.get(&id).is_some_and(|g| matches!(g.state, GangState::Pending { .. })) {
            return Err(Error::UnknownGang(id));
        }
        self.cluster.allocate_placement(placement)?;
        self.run(id, placement, now);
        self.refresh_lost(id, now);
        Ok(())
    }

    /// Books a pending gang as running on `placement` (already charged to the cluster).
    pub(crate) fn run(&mut self, id: GangId, placement: &Placement, now: u64) {
        if self.gangs.start(id, placement, now).is_none() {
            return;
        }
        let gang = &self.gangs[&id];
        self.quotas.charge(gang.queue, gang.total);
        self.touch(id);
    }
}
