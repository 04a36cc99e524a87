//! The engine follows a live cluster (`lifecycle/live_cluster.rs`) and takes back the gangs a
//! restarted scheduler had admitted (`lifecycle/adopt.rs`).

use trainyard_topology::devices::PodAllocation;
use trainyard_topology::{HostId, HostSpec, Removal, Resources};

use crate::{Engine, GangId, GangRequest, PolicyConfig, Result, Submitted, Unschedulable};

impl Engine {
    /// Adds a host (a node joined, or a removed one that gangs still held came back).
    pub fn add_host(&mut self, spec: HostSpec, now: u64) -> Result<HostId> {
        crate::lifecycle::live_cluster::add_host(&mut self.state, spec, now)
    }

    /// Brings a host to `spec` (labels, taints, capacity, readiness); its gangs stay on it.
    pub fn update_host(&mut self, host: HostId, spec: HostSpec, now: u64) -> Result<()> {
        crate::lifecycle::live_cluster::update_host(&mut self.state, host, spec, now)
    }

    /// Makes domain `d` a TPU torus of `spec`, or no longer one.
    pub fn set_torus(
        &mut self,
        d: trainyard_topology::DomainId,
        spec: Option<trainyard_topology::torus::TorusSpec>,
    ) -> Result<()> {
        crate::lifecycle::live_cluster::set_torus(&mut self.state, d, spec)
    }

    /// Marks a host schedulable and ready, or not.
    pub fn set_host_ready(&mut self, host: HostId, ready: bool, now: u64) -> Result<()> {
        crate::lifecycle::live_cluster::set_host_ready(&mut self.state, host, ready, now)
    }

    /// Removes a host. Gangs on it keep it charged (and it is offered to nobody) until they end
    /// or move off it; it is lost to them from `now`.
    pub fn remove_host(&mut self, host: HostId, now: u64) -> Result<Removal> {
        crate::lifecycle::live_cluster::remove_host(&mut self.state, host, now)
    }

    /// Replaces the cluster's DRA objects while gangs hold devices
    /// ([`trainyard_topology::Cluster::replace_devices`]); returns what was left out. Gangs the
    /// old devices refused are looked at again.
    pub fn replace_devices(
        &mut self,
        objects: trainyard_topology::devices::DraObjects,
    ) -> Result<Vec<trainyard_topology::devices::PoolReport>> {
        crate::lifecycle::live_cluster::replace_devices(&mut self.state, objects)
    }

    /// Puts node-local pools at what their slices publish now
    /// ([`trainyard_topology::Cluster::replace_pools`]); `None` when the devices must be replaced
    /// whole instead.
    pub fn replace_pools(
        &mut self,
        keys: &[trainyard_topology::devices::PoolKey],
        slices: &[trainyard_topology::devices::objects::ResourceSlice],
    ) -> Option<(std::collections::BTreeSet<String>, Vec<trainyard_topology::devices::PoolReport>)> {
        crate::lifecycle::live_cluster::replace_pools(&mut self.state, keys, slices)
    }

    /// Sets the devices the cluster's own claims hold
    /// ([`trainyard_topology::Cluster::set_observed_devices`]).
    pub fn set_observed_devices(&mut self, ids: std::collections::HashSet<trainyard_topology::devices::DeviceId>) {
        crate::lifecycle::live_cluster::set_observed_devices(&mut self.state, ids)
    }

    /// Whole GPUs each node's devices give ([`trainyard_topology::Cluster::gpu_devices`]).
    pub fn gpu_devices(
        &mut self,
        only: Option<&std::collections::BTreeSet<String>>,
    ) -> std::collections::BTreeMap<String, u64> {
        crate::lifecycle::live_cluster::gpu_devices(&mut self.state, only)
    }

    /// Charges usage of pods trainyard does not place on a host.
    pub fn charge_foreign(&mut self, host: HostId, amount: Resources) -> Result<()> {
        crate::lifecycle::live_cluster::charge_foreign(&mut self.state, host, amount)
    }

    /// Releases usage charged by [`Engine::charge_foreign`].
    pub fn release_foreign(&mut self, host: HostId, amount: Resources) -> Result<()> {
        crate::lifecycle::live_cluster::release_foreign(&mut self.state, host, amount)
    }

    /// Hosts dropped from the cluster since the last call (removed hosts their gangs released).
    pub fn take_reaped_hosts(&mut self) -> Vec<HostId> {
        crate::lifecycle::live_cluster::take_reaped_hosts(&mut self.state)
    }

    /// Replaces the policy (queues, quotas and every setting) in place. Running gangs stay and
    /// are charged to their queues in the new tree (a queue that went keeps its running gangs
    /// in an unlimited leaf of its name); the fair-share history of queues that stay is kept.
    /// Pending gangs whose queue went or whose gang now exceeds its queue's ceiling leave the
    /// engine and are returned with the reason.
    pub fn replace_policy(&mut self, config: PolicyConfig) -> Result<Vec<(GangId, Unschedulable)>> {
        crate::lifecycle::live_cluster::replace_policy(&mut self.state, config)
    }

    /// Records `request` as running since `start` on `hosts` (one entry per pod), charging its
    /// queue and the hosts as an admission would, without placing it again. Its pods are there,
    /// so the hosts are charged even where other usage arrived meanwhile (they then show as
    /// over-committed) and even while a host is not usable. A gang the engine could not take
    /// now (unknown queue, over its quota ceiling, a level the cluster lacks) is returned as
    /// [`Submitted::Unschedulable`] and not recorded; a host list that does not match the gang's
    /// pod count is an error and changes nothing.
    pub fn adopt(&mut self, request: GangRequest, hosts: Vec<HostId>, start: u64) -> Result<Submitted> {
        self.adopt_at(request, hosts, start, start)
    }

    /// [`Engine::adopt`] at `now`: a host it holds that is lost now counts as lost from `now`
    /// (not from when the gang started).
    pub fn adopt_at(&mut self, request: GangRequest, hosts: Vec<HostId>, start: u64, now: u64) -> Result<Submitted> {
        self.adopt_with_devices(request, hosts, Vec::new(), start, now)
    }

    /// [`Engine::adopt_at`] for a gang whose pods hold recorded DRA devices (`devices`: one
    /// entry per pod in the order of `hosts`, or none): the gang holds those devices again, so
    /// that no other gang is given them. A device another holder has too stays held until both
    /// let go.
    pub fn adopt_with_devices(
        &mut self,
        request: GangRequest,
        hosts: Vec<HostId>,
        devices: Vec<Option<PodAllocation>>,
        start: u64,
        now: u64,
    ) -> Result<Submitted> {
        crate::lifecycle::adopt::adopt_with_devices(&mut self.state, request, hosts, devices, start, now)
    }
}
