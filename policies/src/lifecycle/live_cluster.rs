//! The engine follows a live cluster: hosts come, change and go, other pods take and give back
//! capacity, and the quota tree is replaced, each change applied in place (O(depth) per host
//! change, O(gangs) for a new quota tree) while every gang, the fair-share history, backoffs
//! and lost-host times stay. Nothing here rebuilds the engine.

use trainyard_topology::{HostId, HostSpec, Placement, Removal, Resources};

use crate::gangs::record::GangState;
use crate::quota::{FairShare, QuotaTree};
use crate::{Engine, GangId, PolicyConfig, Result, Unschedulable};

impl Engine {
    /// Adds a host (a node joined, or a removed one that gangs still held came back).
    pub fn add_host(&mut self, spec: HostSpec, now: u64) -> Result<HostId> {
        let had_flavors = self.cluster.topology().flavors().len();
        let h = self.cluster.add_host(spec)?;
        if self.cluster.topology().flavors().len() != had_flavors {
            self.refresh_flavors();
        }
        self.refresh_host(h, now);
        self.dirty = true;
        Ok(h)
    }

    /// Brings a host to `spec` (labels, taints, capacity, readiness); its gangs stay on it.
    pub fn update_host(&mut self, host: HostId, spec: HostSpec, now: u64) -> Result<()> {
        let had_flavors = self.cluster.topology().flavors().len();
        self.cluster.update_host(host, spec)?;
        if self.cluster.topology().flavors().len() != had_flavors {
            self.refresh_flavors();
        }
        self.refresh_host(host, now);
        self.dirty = true;
        Ok(())
    }

    /// Makes domain `d` a TPU torus of `spec`, or no longer one.
    pub fn set_torus(
        &mut self,
        d: trainyard_topology::DomainId,
        spec: Option<trainyard_topology::torus::TorusSpec>,
    ) -> Result<()> {
        if self.cluster.topology().torus(d) != spec.as_ref() {
            self.cluster.set_torus(d, spec)?;
            self.dirty = true;
        }
        Ok(())
    }

    /// Marks a host schedulable and ready, or not.
    pub fn set_host_ready(&mut self, host: HostId, ready: bool, now: u64) -> Result<()> {
        self.cluster.set_ready(host, ready)?;
        self.refresh_host(host, now);
        self.dirty = true;
        Ok(())
    }

    /// Removes a host. Gangs on it keep it charged (and it is offered to nobody) until they end
    /// or move off it; it is lost to them from `now`.
    pub fn remove_host(&mut self, host: HostId, now: u64) -> Result<Removal> {
        let removal = self.cluster.remove_host(host)?;
        self.refresh_host(host, now);
        self.dirty = true;
        Ok(removal)
    }

    /// Replaces the cluster's DRA objects while gangs hold devices
    /// ([`trainyard_topology::Cluster::replace_devices`]); returns what was left out. Gangs the
    /// old devices refused are looked at again.
    pub fn replace_devices(
        &mut self,
        objects: trainyard_topology::devices::DraObjects,
    ) -> Result<Vec<trainyard_topology::devices::PoolReport>> {
        let reports = self.cluster.replace_devices(objects)?;
        self.dirty = true;
        Ok(reports)
    }

    /// Puts node-local pools at what their slices publish now
    /// ([`trainyard_topology::Cluster::replace_pools`]); `None` when the devices must be replaced
    /// whole instead.
    pub fn replace_pools(
        &mut self,
        keys: &[trainyard_topology::devices::PoolKey],
        slices: &[trainyard_topology::devices::objects::ResourceSlice],
    ) -> Option<(std::collections::BTreeSet<String>, Vec<trainyard_topology::devices::PoolReport>)> {
        let done = self.cluster.replace_pools(keys, slices)?;
        self.dirty = true;
        Some(done)
    }

    /// Sets the devices the cluster's own claims hold
    /// ([`trainyard_topology::Cluster::set_observed_devices`]).
    pub fn set_observed_devices(&mut self, ids: std::collections::HashSet<trainyard_topology::devices::DeviceId>) {
        self.cluster.set_observed_devices(ids);
        self.dirty = true;
    }

    /// Whole GPUs each node's devices give ([`trainyard_topology::Cluster::gpu_devices`]).
    pub fn gpu_devices(
        &mut self,
        only: Option<&std::collections::BTreeSet<String>>,
    ) -> std::collections::BTreeMap<String, u64> {
        self.cluster.gpu_devices_of(only)
    }

    /// Charges usage of pods trainyard does not place on a host.
    pub fn charge_foreign(&mut self, host: HostId, amount: Resources) -> Result<()> {
        self.cluster.charge_foreign(host, amount)?;
        self.dirty = true;
        Ok(())
    }

    /// Releases usage charged by [`Engine::charge_foreign`].
    pub fn release_foreign(&mut self, host: HostId, amount: Resources) -> Result<()> {
        self.cluster.release_foreign(host, amount)?;
        self.dirty = true;
        Ok(())
    }

    /// Hosts dropped from the cluster since the last call (removed hosts their gangs released).
    pub fn take_reaped_hosts(&mut self) -> Vec<HostId> {
        self.cluster.take_reaped()
    }

    /// Replaces the policy (queues, quotas and every setting) in place. Running gangs stay and
    /// are charged to their queues in the new tree (a queue that went keeps its running gangs
    /// in an unlimited leaf of its name); the fair-share history of queues that stay is kept.
    /// Pending gangs whose queue went or whose gang now exceeds its queue's ceiling leave the
    /// engine and are returned with the reason.
    pub fn replace_policy(&mut self, mut config: PolicyConfig) -> Result<Vec<(GangId, Unschedulable)>> {
        config.resolve_topology(self.cluster.topology())?;
        let old_tree = std::mem::replace(&mut self.quotas, QuotaTree::new(&config));
        // A new tree starts its versions anew: a kept reservation plan could not tell. Its
        // ceilings are new too.
        self.plan_memo = None;
        self.unlimited_queues.clear();
        let now = self.fair_share.last().unwrap_or(0);
        let mut history =
            FairShare::new(config.fair_sharing.enabled.then_some(config.fair_sharing.half_life_s).flatten());
        history.carry_over(&self.fair_share, &old_tree, &self.quotas, now);
        self.fair_share = history;
        self.fair =
            config.fair_sharing.enabled.then_some(crate::FairSharing { half_life_s: config.fair_sharing.half_life_s });
        self.apply_settings(&config);
        self.config = config;
        self.flavor_of = crate::engine::flavors_of(&self.config, self.cluster.topology());
        let mut dropped = Vec::new();
        // In id order: a queue kept for running gangs only gets its index in a fixed order.
        let mut queue_of: std::collections::HashMap<GangId, crate::quota::QueueIdx> = Default::default();
        for id in self.gangs.ids() {
            let gang = &self.gangs[&id];
            let (name, total) = (gang.request.queue.clone(), gang.total);
            match gang.state {
                GangState::Running { .. } => {
                    let q = self.quotas.keep(&name);
                    self.quotas.charge(q, total);
                    queue_of.insert(id, q);
                }
                GangState::Pending { .. } => match self.quotas.resolve(&name) {
                    None => dropped.push((id, Unschedulable::UnknownQueue { queue: name })),
                    Some(q) if !self.quotas.ceiling(q).covers(&total) => {
                        let nominal_gpus = self.quotas.ceiling(q).gpus;
                        dropped.push((
                            id,
                            Unschedulable::ExceedsQuota { queue: name, requested_gpus: total.gpus, nominal_gpus },
                        ));
                    }
                    Some(q) => {
                        queue_of.insert(id, q);
                    }
                },
            }
        }
        let flavor_of = &self.flavor_of;
        self.gangs.refile(|g| {
            let flavor = flavor_of.get(&g.request.queue).copied();
            (queue_of.get(&g.request.id).copied().unwrap_or(g.queue), g.demand.with_flavor(flavor))
        });
        for (id, _) in &dropped {
            self.cancel_pending(*id)?;
        }
        self.never_fits.clear();
        self.failed_at.clear();
        self.dirty = true;
        if self.follows_changes {
            self.changed.extend(self.gangs.pending().ids());
        }
        Ok(dropped)
    }

    /// The flavor each queue is bound to, looked up again (a node brought a new flavor), and
    /// the pending gangs' requests with it.
    fn refresh_flavors(&mut self) {
        self.flavor_of = crate::engine::flavors_of(&self.config, self.cluster.topology());
        let flavor_of = &self.flavor_of;
        self.gangs.refile(|g| (g.queue, g.demand.with_flavor(flavor_of.get(&g.request.queue).copied())));
    }

    /// A running gang moved `from` one host to its new `placement` (the cluster is charged already).
    pub(crate) fn move_running(&mut self, id: GangId, from: HostId, placement: &Placement) {
        if let Some(lost) = self.lost.get_mut(&id) {
            lost.remove(&from);
            if lost.is_empty() {
                self.lost.remove(&id);
            }
        }
        self.gangs.moved(id, from, placement);
        self.touch(id);
        self.dirty = true;
    }
}
