//! A cluster's live free capacity over its topology, with transactions for tentative work.
//!
//! Each host keeps what gangs use on it, what pods trainyard does not place use on it
//! ("foreign" usage), whether it is usable (schedulable, ready, not removed) and the labels and
//! taints eligibility is decided on. A host's free capacity is its capacity less both usages
//! (never below zero); every domain sums the free capacity of the usable hosts below it, so a
//! change to one host costs O(depth) per view. Besides that base view, each eligibility class
//! (one per distinct [`HostFilter`]) that excludes some usable host keeps its own sums.
//! While a transaction is open, gang allocations are journaled; rolling back replays the journal
//! backwards, so a gang that does not fully fit leaves no trace.

mod classes;
mod device_counts;
mod device_sync;
mod devices;
mod free_index;
mod gpus;
mod live;
mod search;

pub use classes::HostClass;
pub use devices::{DeviceFit, DeviceNeed, MAX_DEVICE_PODS_PER_HOST};
pub use live::{CanonicalHost, HostSpec, Removal};

use classes::Classes;
use devices::DeviceStore;
use devices::devices_per_host;
use gpus::per_host_with_gpus;

use std::sync::Arc;

use crate::eligibility::{HostAttrs, HostFilter};
use crate::intra_node::{GpuGroups, HostLayout};
use crate::placement::{self, CostModel, Placement, PlacementPolicy};
use crate::{ClusterSpec, DomainId, Error, HostId, LayoutNeed, Resources, Result, Topology};

/// A mark in the journal; pass it back to [`Cluster::rollback`] or [`Cluster::commit`].
#[derive(Debug)]
#[must_use = "a transaction must be committed or rolled back"]
pub struct Txn {
    journal_len: usize,
    /// The free-capacity epoch when it opened: tentative releases rolled back move nothing.
    epoch: u64,
    /// The state version and the count of unjournaled changes when it opened: a rollback
    /// after journaled changes only gives the state back, and its version with it.
    version: u64,
    unjournaled: u64,
}

/// A journaled change: the host, the amount, and the GPU indices (a mask) it concerned; or DRA
/// devices of pods on a host, taken (`true`) or given back.
#[derive(Clone, Debug)]
enum Change {
    Allocated(HostId, Resources, u64),
    Released(HostId, Resources, u64),
    Devices(HostId, Box<[crate::devices::DeviceId]>, bool),
}

/// What the cluster knows of one host besides its place in the tree.
#[derive(Clone, Debug, Default)]
pub(crate) struct HostState {
    /// Taken by gangs.
    pub(crate) used: Resources,
    /// Taken by pods trainyard did not place.
    pub(crate) foreign: Resources,
    /// Schedulable and ready.
    pub(crate) ready: bool,
    /// Removed from the cluster, but kept while gangs still hold it.
    pub(crate) gone: bool,
    /// What eligibility is decided on.
    pub(crate) attrs: HostAttrs,
    /// The host's GPU layout, when known: pods placed here get GPU indices.
    pub(crate) gpus: Option<Arc<GpuGroups>>,
    /// GPU indices gangs hold here (bit `i` = GPU `i`).
    pub(crate) gpus_taken: u64,
    /// Moves whenever DRA devices this host reaches are taken or given back.
    pub(crate) devices_version: u32,
}

impl HostState {
    fn usable(&self) -> bool {
        self.ready && !self.gone
    }
}

/// Topology plus free capacity per domain.
#[derive(Clone, Debug)]
pub struct Cluster {
    topo: Topology,
    hosts: Vec<HostState>,
    /// Free capacity of the usable hosts below each domain.
    free: Vec<Resources>,
    classes: Classes,
    journal: Vec<Change>,
    open_txns: usize,
    scratch: placement::Scratch,
    policy: PlacementPolicy,
    model: CostModel,
    /// Bumped whenever free capacity may have grown for some gang (a release, a host added or
    /// usable again, foreign usage released, capacity raised): a gang that did not fit at the
    /// same epoch still does not.
    epoch: u64,
    /// Bumped whenever what could ever fit changes (hosts, capacities, labels, taints).
    generation: u64,
    /// Removed hosts that gangs held, now free of them and dropped (drained by [`Cluster::take_reaped`]).
    reaped: Vec<HostId>,
    /// Removed hosts still held by gangs (the only ones [`Cluster::reap`] looks at).
    held: std::collections::BTreeSet<HostId>,
    /// DRA devices, when the cluster publishes any.
    devices: Option<Box<DeviceStore>>,
    /// Usable hosts by free GPUs (base view): one-pod gangs find their host without a walk.
    free_index: free_index::FreeGpuIndex,
    /// Moves with every change a search could see (see [`Cluster::version`]).
    version: u64,
    /// The highest version handed out, rolled back or not: a change after a rollback takes a
    /// number no earlier state had.
    last_version: u64,
    /// Changes the journal does not record (a rollback cannot undo them).
    unjournaled: u64,
    /// A journaled change (or a rollback's undoing of one) is being applied.
    journaling: bool,
}

impl Cluster {
    /// An empty cluster (everything free and usable) over a topology.
    pub fn new(topo: Topology) -> Cluster {
        let free = topo.capacities().to_vec();
        let scratch = placement::Scratch::new(topo.domain_count(), topo.host_depth());
        let hosts = (0..topo.host_slots()).map(|_| HostState { ready: true, ..HostState::default() }).collect();
        let classes = Classes::new(topo.host_slots());
        let mut free_index = free_index::FreeGpuIndex::default();
        for h in topo.hosts() {
            free_index.moved(topo.host_domain(h).0, 0, topo.host_capacity(h).gpus);
        }
        Cluster {
            topo,
            hosts,
            free,
            classes,
            journal: Vec::new(),
            open_txns: 0,
            scratch,
            policy: PlacementPolicy::default(),
            model: CostModel::default(),
            epoch: 0,
            generation: 0,
            reaped: Vec::new(),
            held: std::collections::BTreeSet::new(),
            devices: None,
            free_index,
            version: 0,
            last_version: 0,
            unjournaled: 0,
            journaling: false,
        }
    }

    /// Chooses how [`Cluster::place`] maps gangs onto hosts.
    pub fn set_placement_policy(&mut self, policy: PlacementPolicy) {
        self.policy = policy;
        self.changed_unjournaled();
    }

    /// The state version: equal versions mean every search over the cluster answers the same
    /// (same hosts, usage, devices, classes and policy). It moves with every change, and a
    /// rollback of journaled changes only takes it back to where its transaction began, so
    /// that what-ifs (a reservation's replay) do not count as changes. A version is never
    /// handed out twice: the what-if's states and the states after a rollback differ in it.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// A change the journal does not record happened.
    pub(super) fn changed_unjournaled(&mut self) {
        self.bump_version();
        self.unjournaled += 1;
    }

    /// A new state: a version no state had before.
    pub(super) fn bump_version(&mut self) {
        self.last_version += 1;
        self.version = self.last_version;
    }

    /// The policy [`Cluster::place`] uses.
    pub fn placement_policy(&self) -> PlacementPolicy {
        self.policy
    }

    /// The cost model placements are judged by.
    pub fn cost_model(&self) -> &CostModel {
        &self.model
    }

    /// Free capacity of every domain (usable hosts), indexed by domain.
    pub fn free_all(&self) -> &[Resources] {
        &self.free
    }

    /// Parses, validates and builds a cluster from YAML; `intra_node` names must be built-in
    /// layouts (see [`Cluster::from_yaml_with`] for layouts read from files).
    pub fn from_yaml(text: &str, source_name: &str) -> Result<Cluster> {
        Cluster::from_yaml_with(text, source_name, |_| None)
    }

    /// [`Cluster::from_yaml`], with `layout` resolving an `intra_node` name that is no built-in
    /// layout (the caller reads the NCCL topology file it names); `None` for an unknown name.
    pub fn from_yaml_with(
        text: &str,
        source_name: &str,
        layout: impl Fn(&str) -> Option<std::result::Result<HostLayout, String>>,
    ) -> Result<Cluster> {
        let written = ClusterSpec::from_yaml(text, source_name)?;
        let spec = written.resolve(source_name)?;
        let mut cluster = Cluster::new(Topology::build(&spec)?);
        // No class exists yet, so the labels are set in place, before any filter reads them.
        for (path, labels) in written.node_labels() {
            if let Some(h) = cluster.topo.find_host(&path) {
                let attrs = &mut cluster.hosts[h.0 as usize].attrs;
                attrs.node_name = path.last().cloned().unwrap_or_default();
                attrs.labels = labels;
            }
        }
        let layouts = written.node_layouts().into_iter().map(|l| (l, source_name.to_string())).collect();
        cluster.set_layouts(layouts, layout)?;
        Ok(cluster)
    }

    /// A fleet as one cluster: its members under a `cluster` level, no gang spanning two.
    pub fn from_fleet(
        fleet: &crate::fleet::ResolvedFleet,
        layout: impl Fn(&str) -> Option<std::result::Result<HostLayout, String>>,
    ) -> Result<Cluster> {
        let mut topo = Topology::build(&fleet.spec)?;
        topo.set_span_ceiling(1);
        let mut cluster = Cluster::new(topo);
        for (path, labels) in &fleet.labels {
            if let Some(h) = cluster.topo.find_host(path) {
                let attrs = &mut cluster.hosts[h.0 as usize].attrs;
                attrs.node_name = path.last().cloned().unwrap_or_default();
                attrs.labels = labels.clone();
            }
        }
        cluster.set_layouts(fleet.layouts.clone(), layout)?;
        Ok(cluster)
    }

    /// The tree.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// Free capacity of any domain, over its usable hosts.
    pub fn free(&self, d: DomainId) -> Resources {
        self.free[d.0 as usize]
    }

    /// Free capacity of a domain for gangs of `class`: its usable hosts the class admits.
    pub fn free_for(&self, class: HostClass, d: DomainId) -> Resources {
        self.classes.free(class, &self.free)[d.0 as usize]
    }

    /// Free capacity of one host (zero while it is not usable).
    pub fn host_free(&self, host: HostId) -> Resources {
        self.free(self.topo.host_domain(host))
    }

    /// Free capacity of the whole cluster.
    pub fn total_free(&self) -> Resources {
        self.free[0]
    }

    /// Capacity of the whole cluster (every host, usable or not).
    pub fn total_capacity(&self) -> Resources {
        self.topo.capacity(DomainId::ROOT)
    }

    /// How many pods of this shape the free capacity holds, host by host, cluster wide.
    pub fn fit_count(&self, pod: &Resources) -> u64 {
        if pod.is_zero() {
            return self.topo.hosts().fold(0u64, |acc, h| acc.saturating_add(self.host_free(h).fit_count(pod)));
        }
        // A domain whose free sum does not cover one pod holds no host that does: a busy
        // cluster is counted in the few subtrees with room, not host by host.
        let mut count = 0u64;
        let mut stack = vec![DomainId::ROOT];
        while let Some(d) = stack.pop() {
            let free = self.free(d);
            if !free.covers(pod) {
                continue;
            }
            match self.topo.as_host(d) {
                Some(_) => count = count.saturating_add(free.fit_count(pod)),
                None => stack.extend(self.topo.children(d).iter().map(|&c| DomainId(c))),
            }
        }
        count
    }

    /// What gangs hold on a host.
    pub fn host_used(&self, host: HostId) -> Resources {
        self.hosts[host.0 as usize].used
    }

    /// The free-capacity epoch: it moves whenever some gang might fit that did not before.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The structure generation: it moves whenever what could ever fit may have changed.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Takes `amount` from a host for a gang; it must be free.
    pub fn allocate(&mut self, host: HostId, amount: Resources) -> Result<()> {
        self.allocate_gpus(host, amount, 0)
    }

    /// Takes `amount` and the GPU indices of `gpus` (a mask) from a host; both must be free.
    fn allocate_gpus(&mut self, host: HostId, amount: Resources, gpus: u64) -> Result<()> {
        let gpus = self.known_gpus(host, gpus);
        let free = self.host_free(host);
        if !free.covers(&amount) || self.hosts[host.0 as usize].gpus_taken & gpus != 0 {
            return Err(Error::Overcommit { host: self.topo.host_name(host).to_string(), free, asked: amount });
        }
        self.journaling = self.open_txns > 0;
        self.shift_used(host, amount, gpus, true);
        self.journaling = false;
        if self.open_txns > 0 {
            self.journal.push(Change::Allocated(host, amount, gpus));
        }
        Ok(())
    }

    /// Gives back `amount` a gang held on a host.
    pub fn release(&mut self, host: HostId, amount: Resources) -> Result<()> {
        self.release_pods(host, amount, 0)
    }

    /// Gives back `amount` and the GPU indices of `gpus` (a mask) that a gang held on a host.
    pub fn release_pods(&mut self, host: HostId, amount: Resources, gpus: u64) -> Result<()> {
        let gpus = self.known_gpus(host, gpus);
        let state = &self.hosts[host.0 as usize];
        if !state.used.covers(&amount) || state.gpus_taken & gpus != gpus {
            let capacity = self.topo.host_capacity(host);
            return Err(Error::OverRelease { host: self.topo.host_name(host).to_string(), capacity, released: amount });
        }
        self.journaling = self.open_txns > 0;
        self.shift_used(host, amount, gpus, false);
        self.journaling = false;
        if self.open_txns > 0 {
            self.journal.push(Change::Released(host, amount, gpus));
        }
        Ok(())
    }

    /// GPU indices mean something only on a host with a known layout (a cluster mirroring
    /// another, or a host whose layout went, has none).
    fn known_gpus(&self, host: HostId, gpus: u64) -> u64 {
        if self.hosts[host.0 as usize].gpus.is_some() { gpus } else { 0 }
    }

    fn shift_used(&mut self, host: HostId, amount: Resources, gpus: u64, take: bool) {
        self.modify_host(host, |s| {
            if take {
                s.used = s.used.checked_add(&amount).expect("usage fits in u64");
                s.gpus_taken |= gpus;
            } else {
                s.used = s.used.checked_sub(&amount).expect("checked by the caller");
                s.gpus_taken &= !gpus;
            }
        });
    }

    /// Allocates every pod of a placement, all or nothing, and gives each pod on a host whose
    /// GPU layout is known its GPU indices ([`Placement::gpus`]): the pods of the gang's layout
    /// first, each inside one group as it asks, then the others by the locality rule of
    /// [`GpuGroups::pick`]. Pods carrying device claims get their devices
    /// ([`Placement::devices`]); when one pod's claims cannot be met on its host, nothing is
    /// allocated and the error names the pod.
    pub fn allocate_placement(&mut self, placement: &mut Placement) -> Result<()> {
        let gpus = self.assign_gpus(placement)?;
        let devices = self.assign_devices(placement)?;
        let txn = self.begin();
        for &(host, amount, mask) in per_host_with_gpus(placement, &gpus).as_slice() {
            if let Err(e) = self.allocate_gpus(host, amount, mask) {
                self.rollback(txn);
                return Err(e);
            }
        }
        for (host, ids) in devices_per_host(placement, &devices) {
            self.shift_devices(host, &ids, true);
        }
        self.commit(txn);
        placement.gpus = gpus;
        placement.devices = devices;
        Ok(())
    }

    /// Charges every pod of a placement whether or not it fits: pods that already run there (a
    /// restarted scheduler taking back its gangs) hold their hosts even when other usage arrived
    /// meanwhile. Hosts whose usage then exceeds their capacity are listed by
    /// [`Cluster::overcommitted`].
    pub fn charge_placement(&mut self, placement: &Placement) {
        for &(host, amount, mask) in per_host_with_gpus(placement, &placement.gpus).as_slice() {
            let mask = self.known_gpus(host, mask);
            self.shift_used(host, amount, mask, true);
        }
        for (host, ids) in devices_per_host(placement, &placement.devices) {
            self.move_devices(host, &ids, true);
        }
    }

    /// Releases every pod of a placement (and the GPU indices and devices it was given), all or
    /// nothing.
    pub fn release_placement(&mut self, placement: &Placement) -> Result<()> {
        let txn = self.begin();
        for &(host, amount, mask) in per_host_with_gpus(placement, &placement.gpus).as_slice() {
            if let Err(e) = self.release_pods(host, amount, mask) {
                self.rollback(txn);
                return Err(e);
            }
        }
        for (host, ids) in devices_per_host(placement, &placement.devices) {
            self.shift_devices(host, &ids, false);
        }
        self.commit(txn);
        Ok(())
    }

    /// Opens a (possibly nested) transaction.
    pub fn begin(&mut self) -> Txn {
        self.open_txns += 1;
        Txn { journal_len: self.journal.len(), epoch: self.epoch, version: self.version, unjournaled: self.unjournaled }
    }

    /// Undoes every change since `txn` was opened.
    pub fn rollback(&mut self, txn: Txn) {
        self.journaling = true;
        while self.journal.len() > txn.journal_len {
            match self.journal.pop().expect("length checked") {
                Change::Allocated(h, r, g) => self.shift_used(h, r, g, false),
                Change::Released(h, r, g) => self.shift_used(h, r, g, true),
                Change::Devices(h, ids, taken) => self.move_devices(h, &ids, !taken),
            }
        }
        self.journaling = false;
        self.epoch = txn.epoch;
        if self.unjournaled == txn.unjournaled {
            // Only journaled changes happened since `begin`, all undone: the state is as it was.
            self.version = txn.version;
        }
        self.close(txn);
    }

    /// Keeps every change since `txn` was opened.
    pub fn commit(&mut self, txn: Txn) {
        self.close(txn);
    }

    fn close(&mut self, _txn: Txn) {
        self.open_txns = self.open_txns.checked_sub(1).expect("more transactions closed than opened");
        if self.open_txns == 0 {
            self.journal.clear();
        }
    }

    /// The eligibility class of gangs whose pods carry `filter`, registered once per distinct
    /// filter and kept while some gang holds it ([`Cluster::release_class`] gives it back).
    /// Costs O(hosts) the first time a filter is seen.
    /// `None` when 65,535 distinct filters are held already.
    pub fn class_of(&mut self, filter: &HostFilter) -> Option<HostClass> {
        self.class_for(filter, None, None)
    }

    /// The class of gangs whose pods carry `filter` and whose GPU layout asks `layout` of each
    /// host: its hosts offer only the GPUs such pods can use ([`GpuGroups::packable`]), so every
    /// placement search sees exactly how many of those pods a host holds. Likewise, hosts of a
    /// class of `devices` offer GPUs only for as many pods as their free devices give claims to
    /// (costing one device search per pod per host the first time).
    pub fn class_for(
        &mut self,
        filter: &HostFilter,
        layout: Option<LayoutNeed>,
        devices: Option<DeviceFit>,
    ) -> Option<HostClass> {
        let store = self.devices.as_deref_mut();
        let (class, new) = self.classes.acquire(filter, layout, devices, &self.topo, &self.hosts, &self.free, store)?;
        if new {
            // Answers cached by request (which names the class by index) are about another filter.
            self.generation += 1;
            self.epoch += 1;
            self.changed_unjournaled();
        }
        Some(class)
    }

    /// One holder of `class` is done with it; the class goes when the last one is.
    pub fn release_class(&mut self, class: HostClass) {
        self.classes.release(class);
    }

    /// Whether gangs of `class` may be placed on `host` (by its labels and taints; usability aside).
    pub fn admits(&self, class: HostClass, host: HostId) -> bool {
        self.classes.admits(class, host)
    }

    /// The filter of a class.
    pub fn class_filter(&self, class: HostClass) -> &HostFilter {
        self.classes.filter(class)
    }

    /// The device claims gangs of `class` carry.
    pub fn class_device_fit(&self, class: HostClass) -> Option<DeviceFit> {
        self.classes.device_fit(class)
    }

    /// The GPU layout gangs of `class` ask of each host.
    pub fn class_layout(&self, class: HostClass) -> Option<LayoutNeed> {
        self.classes.layout(class)
    }

    /// The labels and taints a host was last given, if it is part of the cluster.
    pub fn host_attrs(&self, host: HostId) -> Option<&HostAttrs> {
        self.topo.is_host(host).then(|| &self.hosts[host.0 as usize].attrs)
    }
}

#[cfg(test)]
mod tests;
