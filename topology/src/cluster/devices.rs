//! The cluster's DRA devices: the pools its nodes publish, the devices gangs hold, and how many
//! pods of one device need each host holds, which is what an eligibility class of that need
//! offers (see `classes.rs`). Allocation hands each pod of a placement its devices, all or none.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::Cluster;
use super::device_counts::DeviceCounts;
use crate::devices::objects::{ClaimTemplate, DeviceClass};
use crate::devices::{
    self, Claim, DeviceId, DraObjects, InUse, PodAllocation, PoolKey, PoolReport, PoolView, Reach, Selectors,
};
use crate::{Error, GangShape, HostClass, HostId, Placement, Resources, Result};

/// Pods of one need counted on one host at most: enough for any real node, and a bound on the
/// work of counting a host whose pods ask no GPUs.
pub const MAX_DEVICE_PODS_PER_HOST: u32 = 64;

/// The claims of a gang's pods, resolved once per distinct list of templates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DeviceNeed(u16);

impl DeviceNeed {
    /// Its index among the cluster's needs.
    pub(super) fn index(self) -> u16 {
        self.0
    }
}

/// What an eligibility class asks of each host's devices: room for pods of `pod` with the claims
/// of `need`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DeviceFit {
    /// The pods' claims.
    pub need: DeviceNeed,
    /// The pods carrying them; other pods of the gang get no devices.
    pub pod: Resources,
}

#[derive(Clone, Debug)]
pub(super) struct Need {
    pub(super) claims: Vec<Claim>,
    /// Set when the need's templates stopped resolving after the devices were replaced (a
    /// template or class deleted): no host holds such pods until they resolve again.
    pub(super) broken: Option<String>,
}

/// Devices of a cluster and what gangs hold of them.
pub(crate) struct DeviceStore {
    pub(super) view: PoolView,
    pub(super) classes: Vec<DeviceClass>,
    templates: BTreeMap<String, ClaimTemplate>,
    pub(super) selectors: Selectors,
    pub(super) in_use: InUse,
    /// Holders beyond the first of devices in use (gangs' pods, and the cluster's own claims,
    /// [`DeviceStore::observed`]); a device is free again when its last holder lets go. Nearly
    /// always empty, so the common take and give back cost what they did without it.
    pub(super) extra_holders: HashMap<DeviceId, u32>,
    /// Devices the cluster shows allocated to claims the engine does not place.
    pub(super) observed: std::collections::HashSet<DeviceId>,
    /// Node-local pools per node.
    pub(super) by_node: BTreeMap<String, Vec<PoolKey>>,
    /// `allNodes` pools: a device taken there changes what every host offers.
    pub(super) shared: Vec<PoolKey>,
    pub(super) needs: Vec<Need>,
    pub(super) by_templates: HashMap<Vec<String>, DeviceNeed>,
    /// Counts made, per host and state of its devices.
    pub(super) counts: DeviceCounts,
}

impl Clone for DeviceStore {
    /// Compiled selectors cannot be copied: the copy resolves its needs again on a fresh cache.
    fn clone(&self) -> DeviceStore {
        let mut copy = DeviceStore::new(
            self.view.clone(),
            self.classes.clone(),
            self.templates.values().cloned().collect::<Vec<_>>(),
        );
        copy.in_use = self.in_use.clone();
        copy.extra_holders = self.extra_holders.clone();
        copy.observed = self.observed.clone();
        copy.counts = self.counts.clone();
        let mut lists: Vec<(&Vec<String>, DeviceNeed)> = self.by_templates.iter().map(|(k, v)| (k, *v)).collect();
        lists.sort_by_key(|(_, n)| *n);
        for (templates, _) in lists {
            copy.need(templates).expect("resolved once already, against the same classes");
        }
        copy
    }
}

impl std::fmt::Debug for DeviceStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceStore")
            .field("pools", &self.view.pools.len())
            .field("in_use", &self.in_use.devices.len())
            .field("needs", &self.needs.len())
            .finish()
    }
}

impl DeviceStore {
    pub(super) fn new(view: PoolView, classes: Vec<DeviceClass>, templates: Vec<ClaimTemplate>) -> DeviceStore {
        let Reach { by_node, shared, selected } = view.reach();
        let counts = DeviceCounts::new(&view, &by_node, !shared.is_empty(), &selected);
        DeviceStore {
            view,
            classes,
            templates: templates.into_iter().map(|t| (t.name.clone(), t)).collect(),
            selectors: Selectors::new(),
            in_use: InUse::default(),
            extra_holders: HashMap::new(),
            observed: std::collections::HashSet::new(),
            by_node,
            shared,
            needs: Vec::new(),
            by_templates: HashMap::new(),
            counts,
        }
    }

    /// The need of pods carrying one claim of each template, resolved the first time it is seen.
    pub(super) fn need(&mut self, templates: &[String]) -> Result<DeviceNeed> {
        if let Some(&need) = self.by_templates.get(templates) {
            if self.needs[usize::from(need.0)].broken.is_some() {
                // Resolved again in place: gangs hold the need by index.
                let claims = self.resolve(templates)?;
                self.needs[usize::from(need.0)] = Need { claims, broken: None };
            }
            return Ok(need);
        }
        let claims = self.resolve(templates)?;
        let index = u16::try_from(self.needs.len()).map_err(|_| Error::DeviceClaim {
            template: templates.join("+"),
            message: "more than 65,535 distinct lists of claim templates".into(),
        })?;
        self.needs.push(Need { claims, broken: None });
        self.by_templates.insert(templates.to_vec(), DeviceNeed(index));
        Ok(DeviceNeed(index))
    }

    /// One claim per template, resolved against the classes.
    pub(super) fn resolve(&mut self, templates: &[String]) -> Result<Vec<Claim>> {
        let mut claims = Vec::with_capacity(templates.len());
        for name in templates {
            let template = self.templates.get(name).ok_or_else(|| Error::DeviceClaim {
                template: name.clone(),
                message: "no such ResourceClaimTemplate".into(),
            })?;
            let claim = devices::resolve_claim(name, &template.spec, &self.classes, &mut self.selectors)
                .map_err(|e| Error::DeviceClaim { template: name.clone(), message: e.to_string() })?;
            claims.push(claim);
        }
        Ok(claims)
    }

    /// Whole GPUs one pod's claims get: the devices of the preferred alternative of every
    /// request whose DeviceClass counts GPUs ([`counts_gpus`]), for exact counts (an `All`
    /// request's count depends on the host and is not counted).
    fn claim_gpus(&self, need: DeviceNeed) -> u64 {
        let counts = |class: &str| self.classes.iter().any(|c| c.name == class && counts_gpus(c));
        self.needs[usize::from(need.0)]
            .claims
            .iter()
            .flat_map(|c| &c.requests)
            .filter_map(|r| r.alternatives.first())
            .filter(|a| counts(&a.class))
            .map(|a| a.count.unwrap_or(0) as u64)
            .sum()
    }

    /// Whether `other` holds the same ResourceClaimTemplates.
    pub(super) fn same_templates(&self, other: &DeviceStore) -> bool {
        self.templates == other.templates
    }

    /// The pools several nodes share (`allNodes`, and `nodeSelector` ones), in key order.
    pub(super) fn shared_pools(&self) -> Vec<PoolKey> {
        let mut keys: Vec<PoolKey> = self.shared.clone();
        keys.extend(self.view.pools.iter().filter(|(_, p)| p.selector.is_some()).map(|(k, _)| k.clone()));
        keys.sort();
        keys.dedup();
        keys
    }

    /// Whether `node` reaches any device at all.
    pub(crate) fn reaches(&self, node: &str) -> bool {
        self.by_node.contains_key(node) || !self.shared.is_empty()
    }

    /// How many pods of `need` the devices of `node` hold, one after another as allocation would
    /// give them, up to `cap`; on no devices in use when `empty`.
    pub(crate) fn fits(&mut self, node: &str, need: DeviceNeed, cap: u32, empty: bool) -> u32 {
        if !self.reaches(node) || cap == 0 || self.needs[usize::from(need.0)].broken.is_some() {
            return 0;
        }
        if let Some(pods) = self.counts.get(node, need, cap, empty) {
            return pods;
        }
        let pods = self.count(node, need, cap, empty);
        self.counts.put(node, need, cap, empty, pods);
        pods
    }

    fn count(&mut self, node: &str, need: DeviceNeed, cap: u32, empty: bool) -> u32 {
        let mut scratch = InUse::default();
        let DeviceStore { view, selectors, in_use, needs, by_node, shared, .. } = self;
        let host = host_of(view, by_node, shared, node);
        let in_use = if empty { &mut scratch } else { in_use };
        let claims = &needs[usize::from(need.0)].claims;
        let mut taken: Vec<&devices::Device> = Vec::new();
        let mut pods = 0;
        while pods < cap {
            let Ok(allocation) = devices::allocate_on(&host, view, claims, in_use, selectors) else { break };
            for result in allocation.claims.iter().flat_map(|c| &c.results) {
                if let Some(device) = host.devices.iter().copied().find(|d| d.id == result.device) {
                    in_use.take(device);
                    taken.push(device);
                }
            }
            pods += 1;
        }
        taken.iter().for_each(|d| in_use.give_back(d));
        pods
    }

    /// Why one pod of `need` finds no devices on the empty host `node`, naming claim and request;
    /// `None` when it finds them.
    fn refusal(&mut self, need: DeviceNeed, node: &str) -> Option<String> {
        if let Some(why) = &self.needs[usize::from(need.0)].broken {
            return Some(why.clone());
        }
        let empty = InUse::default();
        let DeviceStore { view, selectors, needs, by_node, shared, .. } = self;
        let claims = &needs[usize::from(need.0)].claims;
        let host = host_of(view, by_node, shared, node);
        if host.devices.is_empty() && host.incomplete.is_empty() {
            return Some("it publishes no devices".into());
        }
        devices::allocate_on(&host, view, claims, &empty, selectors).err().map(|e| e.to_string())
    }

    fn device(&self, id: &DeviceId) -> Option<&devices::Device> {
        find_device(&self.view, id)
    }

    /// Takes (or gives back) devices by id; whether one of them is in an `allNodes` pool.
    pub(crate) fn shift(&mut self, ids: &[DeviceId], take: bool) -> bool {
        let DeviceStore { view, in_use, counts, extra_holders, .. } = self;
        let mut shared = false;
        for id in ids {
            let Some(device) = find_device(view, id) else { continue };
            shared |= device.node.is_none();
            // A device moves only with its first holder and its last.
            let moved = if take {
                let first = in_use.take_first(device);
                if !first {
                    *extra_holders.entry(id.clone()).or_default() += 1;
                }
                first
            } else if !extra_holders.is_empty()
                && let Some(extra) = extra_holders.get_mut(id)
            {
                *extra -= 1;
                if *extra == 0 {
                    extra_holders.remove(id);
                }
                false
            } else {
                in_use.give_back_held(device)
            };
            if moved && let Some(node) = &device.node {
                counts.shift(node, id, take);
            }
        }
        shared
    }

    /// Every pod's devices for the pods `(pod index, node)` of a placement, all or none;
    /// nothing is taken.
    fn assign(
        &mut self,
        need: DeviceNeed,
        pods: &[(usize, String)],
    ) -> std::result::Result<Vec<(usize, PodAllocation)>, Error> {
        if let Some(why) = &self.needs[usize::from(need.0)].broken {
            let (pod, node) = pods.first().cloned().unwrap_or_default();
            return Err(Error::Devices { pod, node, reason: why.clone() });
        }
        let DeviceStore { view, selectors, in_use, needs, by_node, shared, .. } = self;
        let claims = &needs[usize::from(need.0)].claims;
        let mut taken: Vec<devices::Device> = Vec::new();
        let mut out = Vec::with_capacity(pods.len());
        let mut failure = None;
        for (pod, node) in pods {
            let host = host_of(view, by_node, shared, node);
            match devices::allocate_on(&host, view, claims, in_use, selectors) {
                Ok(allocation) => {
                    for result in allocation.claims.iter().flat_map(|c| &c.results) {
                        if let Some(device) = host.devices.iter().copied().find(|d| d.id == result.device) {
                            in_use.take(device);
                            taken.push(device.clone());
                        }
                    }
                    out.push((*pod, allocation));
                }
                Err(e) => {
                    failure = Some(Error::Devices { pod: *pod, node: node.clone(), reason: e.to_string() });
                    break;
                }
            }
        }
        taken.iter().for_each(|d| in_use.give_back(d));
        match failure {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// Devices in use, for checks.
    pub(crate) fn in_use(&self) -> &InUse {
        &self.in_use
    }

    /// Selector results asked for and evaluated (the cache's hit rate is `1 - evaluated/asked`).
    pub(crate) fn selector_counts(&self) -> (u64, u64) {
        (self.selectors.lookups(), self.selectors.evaluations())
    }
}

/// The devices `node` reaches: its own pools, the `nodeSelector` pools it matches, and every
/// `allNodes` pool.
pub(super) fn host_of<'v>(
    view: &'v PoolView,
    by_node: &BTreeMap<String, Vec<PoolKey>>,
    shared: &[PoolKey],
    node: &str,
) -> devices::HostDevices<'v> {
    view.host_in(node, by_node.get(node).into_iter().flatten().chain(shared))
}

pub(super) fn find_device<'v>(view: &'v PoolView, id: &DeviceId) -> Option<&'v devices::Device> {
    let pool = view.pools.get(&(id.driver.clone(), id.pool.clone()))?;
    pool.devices.binary_search_by(|d| d.id.cmp(id)).ok().map(|i| &pool.devices[i])
}

/// Whether devices of a class are whole GPUs, for quota and placement counts: its
/// `extendedResourceName` is a GPU resource (`nvidia.com/gpu`, `amd.com/gpu`), or a label of its
/// name is `gpu` (`gpu.nvidia.com`, `h200.gpu.example.com`; not `mig.nvidia.com`).
pub fn counts_gpus(class: &DeviceClass) -> bool {
    class.extended_resource_name.as_deref().is_some_and(|r| r.ends_with("/gpu"))
        || class.name.split('.').any(|l| l == "gpu")
}

/// Device ids of one allocation.
pub(crate) fn ids_of(allocation: &PodAllocation) -> Vec<DeviceId> {
    allocation.claims.iter().flat_map(|c| &c.results).map(|r| r.device.clone()).collect()
}

impl Cluster {
    /// Gives the cluster its DRA devices: ResourceSlices (pools at their newest generation,
    /// incomplete ones left out), DeviceClasses and ResourceClaimTemplates. Returns what was
    /// left out. Devices given before are replaced (see [`Cluster::replace_devices`]).
    pub fn set_devices(&mut self, objects: DraObjects) -> Result<Vec<PoolReport>> {
        self.replace_devices(objects)
    }

    /// Whether the cluster has DRA devices.
    pub fn has_devices(&self) -> bool {
        self.devices.is_some()
    }

    /// What the gang's device claims ask of each host, resolved against the cluster's devices:
    /// `None` for a gang without claims; an error naming the template that is missing, or whose
    /// claim does not resolve (a missing DeviceClass, a selector that does not compile or costs
    /// too much). Pods whose claims get whole GPUs ([`counts_gpus`]) count those GPUs: a pod
    /// that asks for none is given them (quota and placement then count them), a pod that asks
    /// for another number is refused, naming both.
    pub fn device_fit(&mut self, shape: &mut GangShape) -> Result<Option<DeviceFit>> {
        let Some((templates, _)) = shape.claims() else { return Ok(None) };
        let templates = templates.to_vec();
        let Some(store) = self.devices.as_mut() else {
            return Err(Error::DeviceClaim {
                template: templates.join("+"),
                message: "the cluster publishes no devices (no ResourceSlices were given)".into(),
            });
        };
        let need = store.need(&templates)?;
        let gpus = store.claim_gpus(need);
        for set in shape.sets.iter_mut().filter(|s| !s.claims.is_empty()) {
            if set.pod.gpus == 0 {
                set.pod.gpus = gpus;
            } else if gpus > 0 && set.pod.gpus != gpus {
                return Err(Error::DeviceClaim {
                    template: templates.join("+"),
                    message: format!(
                        "pod set {:?} asks for {} GPUs per pod but its claims get {gpus}",
                        set.name, set.pod.gpus
                    ),
                });
            }
        }
        let pod = shape.claims().map(|(_, pod)| pod).expect("claims seen above");
        Ok(Some(DeviceFit { need, pod }))
    }

    /// Why the hosts of `class` (a class of a device need) cannot hold a gang of `pods` such pods
    /// even when empty: how many pods their devices hold in all, and why the first node in name
    /// order that holds none refuses, naming claim and request.
    pub fn device_refusal(&mut self, class: HostClass, pods: u32) -> String {
        let Some(fit) = self.classes.device_fit(class) else { return String::new() };
        // The empty counts are made as the class's capacity is.
        let generation = self.generation;
        let _ = self.classes.capacity(class, &self.topo, &self.hosts, generation, self.devices.as_deref_mut());
        let fits = self.classes.fits(class);
        let mut hosts: Vec<HostId> = self.topo.hosts().filter(|&h| self.classes.admits(class, h)).collect();
        hosts.sort_by(|a, b| self.topo.host_name(*a).cmp(self.topo.host_name(*b)));
        let holding: Vec<u32> = hosts.iter().map(|h| fits[h.0 as usize].empty().unwrap_or(0)).collect();
        let total: u32 = holding.iter().sum();
        let some = holding.iter().filter(|&&n| n > 0).count();
        let mut message = format!(
            "the devices of {some} of {} nodes hold {total} of the gang's {pods} pods even with nothing running",
            hosts.len()
        );
        let refusing =
            hosts.iter().zip(&holding).find(|(_, n)| **n == 0).map(|(h, _)| self.topo.host_name(*h).to_string());
        if let (Some(node), Some(store)) = (refusing, self.devices.as_mut())
            && let Some(why) = store.refusal(fit.need, &node)
        {
            message.push_str(&format!("; node {node}: {why}"));
        }
        message
    }

    /// Counts again, from scratch, how many pods of its need every host of every class of a
    /// device need holds, and says where the kept count differs (for tests).
    pub fn audit_devices(&mut self) -> std::result::Result<(), String> {
        let Some(store) = self.devices.as_mut() else { return Ok(()) };
        for c in self.classes.in_use() {
            let Some(fit) = self.classes.device_fit(c) else { continue };
            for h in self.topo.hosts() {
                let node = self.topo.host_name(h);
                let cap = super::classes::pods_cap(self.topo.host_capacity(h), fit.pod);
                let want = store.fits(node, fit.need, cap, false);
                let have = self.classes.fits(c)[h.0 as usize].now;
                if want != have {
                    return Err(format!("class {c:?}, node {node}: {have} pods kept but {want} counted"));
                }
            }
        }
        Ok(())
    }

    /// A device of the cluster's complete pools, by id.
    pub fn device(&self, id: &DeviceId) -> Option<&devices::Device> {
        self.devices.as_deref()?.device(id)
    }

    /// Gives back the devices of pods a gang held on `host` (a lost host whose pods moved).
    pub fn release_devices(&mut self, host: HostId, pods: &[PodAllocation]) {
        let ids: Vec<DeviceId> = pods.iter().flat_map(ids_of).collect();
        self.shift_devices(host, &ids, false);
    }

    /// Devices gangs hold, for checks and reports.
    pub fn devices_in_use(&self) -> Option<&InUse> {
        self.devices.as_deref().map(DeviceStore::in_use)
    }

    /// How many selector results were asked for and how many were evaluated (the rest came
    /// from the cache).
    pub fn selector_counts(&self) -> (u64, u64) {
        self.devices.as_deref().map_or((0, 0), DeviceStore::selector_counts)
    }

    /// The devices of every pod of `placement` that carries claims, or the pod whose claims no
    /// devices of its host meet.
    pub(super) fn assign_devices(&mut self, placement: &Placement) -> Result<Vec<Option<PodAllocation>>> {
        let Some(fit) = placement.device_fit else { return Ok(Vec::new()) };
        let pods: Vec<(usize, String)> = placement
            .pods()
            .enumerate()
            .filter(|(_, (_, pod))| *pod == fit.pod)
            .map(|(i, (h, _))| (i, self.topo.host_name(h).to_string()))
            .collect();
        let store = self.devices.as_mut().ok_or_else(|| Error::Devices {
            pod: pods.first().map_or(0, |p| p.0),
            node: String::new(),
            reason: "the cluster publishes no devices".into(),
        })?;
        let mut out = vec![None; placement.hosts.len()];
        for (i, allocation) in store.assign(fit.need, &pods)? {
            out[i] = Some(allocation);
        }
        Ok(out)
    }

    /// Takes or gives back the devices of pods on one host, bringing every class up to date
    /// (every host, when a device of an `allNodes` pool moved); journaled like capacity.
    pub(super) fn shift_devices(&mut self, host: HostId, ids: &[DeviceId], take: bool) {
        if self.devices.is_none() || ids.is_empty() {
            return;
        }
        self.journaling = self.open_txns > 0;
        self.move_devices(host, ids, take);
        self.journaling = false;
        if self.open_txns > 0 {
            self.journal.push(super::Change::Devices(host, ids.to_vec().into_boxed_slice(), take));
        }
    }

    /// [`Cluster::shift_devices`] without the journal (rollback's own moves).
    pub(super) fn move_devices(&mut self, host: HostId, ids: &[DeviceId], take: bool) {
        let Some(store) = self.devices.as_mut() else { return };
        let shared = store.shift(ids, take);
        let hosts: Vec<HostId> = if shared { self.topo.hosts().collect() } else { vec![host] };
        for h in hosts {
            self.modify_host(h, |s| s.devices_version = s.devices_version.wrapping_add(1));
        }
        if !take {
            // Devices given back may let a gang in that did not fit.
            self.epoch += 1;
        }
    }
}

/// `(host, device ids of its pods)` for every host where pods of `placement` got devices,
/// sorted by host; `devices` holds one entry per pod or nothing.
pub(super) fn devices_per_host(
    placement: &Placement,
    devices: &[Option<PodAllocation>],
) -> Vec<(HostId, Vec<DeviceId>)> {
    // Most placements carry no claims at all.
    if devices.is_empty() {
        return Vec::new();
    }
    let mut out: BTreeMap<HostId, Vec<DeviceId>> = BTreeMap::new();
    for (i, allocation) in devices.iter().enumerate() {
        if let (Some(allocation), Some(&host)) = (allocation, placement.hosts.get(i)) {
            out.entry(host).or_default().extend(ids_of(allocation));
        }
    }
    out.into_iter().collect()
}
