//! The cluster's DRA objects as watched: DeviceClasses, ResourceSlices and
//! ResourceClaimTemplates (what the engine's devices are made of) and ResourceClaims (which
//! devices are taken). Each event costs the object it carries. Once per cycle the engine takes
//! what changed: the pools whose slices changed (only their nodes are counted again), or the
//! devices whole when a class or template changed (or a pool serving several nodes did); only
//! the devices of claims that changed move.
//!
//! A claim owned by a pod of a trainyard gang is not counted: the engine holds that pod's
//! devices itself. Every other allocated claim (other schedulers' pods, shared claims) holds its
//! devices against every gang.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use kube::runtime::watcher::Event;
use serde::Serialize;
use trainyard_topology::devices::{DeviceId, DraObjects, PoolKey, read_object};

use super::Note;

/// One watch event of a DRA kind (boxed inside [`super::Change`], so its size does not matter).
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)]
pub enum DraChange {
    /// A DeviceClass.
    Class(Event<DeviceClass>),
    /// A ResourceSlice.
    Slice(Event<ResourceSlice>),
    /// A ResourceClaimTemplate.
    Template(Event<ResourceClaimTemplate>),
    /// A ResourceClaim.
    Claim(Event<ResourceClaim>),
}

impl DraChange {
    /// The kind's name, for relists and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            DraChange::Class(_) => "deviceclass",
            DraChange::Slice(_) => "resourceslice",
            DraChange::Template(_) => "resourceclaimtemplate",
            DraChange::Claim(_) => "resourceclaim",
        }
    }
}

/// The DRA kinds watched when the server serves `resource.k8s.io/v1`.
pub const DRA_KINDS: [&str; 4] = ["deviceclass", "resourceslice", "resourceclaimtemplate", "resourceclaim"];

/// The devices an allocated claim holds, and the pod that owns it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct HeldClaim {
    owner_pod: Option<String>,
    devices: Vec<DeviceId>,
}

/// What the engine's devices must take since the last time.
#[derive(Debug, PartialEq)]
pub enum DeviceUpdate {
    /// Every object (classes or templates changed).
    Whole(DraObjects),
    /// Pools, with every slice each of them has now.
    Pools(Vec<PoolKey>, Vec<trainyard_topology::devices::objects::ResourceSlice>),
}

/// What the live picture knows of DRA.
#[derive(Debug, Default)]
pub struct Devices {
    /// Parsed objects by kind and key (`name`, or `namespace/name` for templates).
    objects: BTreeMap<(&'static str, String), DraObjects>,
    /// Objects that do not read, by `Kind/name`, with why.
    problems: BTreeMap<String, String>,
    /// Allocated claims by uid.
    claims: HashMap<String, HeldClaim>,
    /// Claims by owning pod uid.
    by_owner: HashMap<String, BTreeSet<String>>,
    /// uids of pods of trainyard's gangs.
    gang_pods: HashSet<String>,
    /// Holders of each device among the counted claims.
    observed: HashMap<DeviceId, u32>,
    /// Keys seen since the `Init` of a kind being relisted.
    relists: HashMap<&'static str, BTreeSet<String>>,
    /// Any DRA event was ever seen (the server serves the API).
    pub(super) seen: bool,
    /// Classes or templates changed (or nothing was taken yet): the devices go whole.
    whole: bool,
    /// Pools whose slices changed since the last take.
    pools_changed: BTreeSet<PoolKey>,
    /// Slice keys of each pool.
    slices_by_pool: BTreeMap<PoolKey, BTreeSet<String>>,
    claims_changed: bool,
    /// Whether the devices were ever taken.
    taken: bool,
    /// Whole GPUs per node, as last counted from the devices.
    pub(super) gpus: BTreeMap<String, u64>,
    /// Pool reports last given, so that each is noted once.
    reported: BTreeSet<String>,
}

fn key_of(meta: &kube::api::ObjectMeta, namespaced: bool) -> String {
    let name = meta.name.clone().unwrap_or_default();
    match (namespaced, &meta.namespace) {
        (true, Some(ns)) => format!("{ns}/{name}"),
        _ => name,
    }
}

impl Devices {
    /// Applies one event; returns a note for an object that does not read.
    pub fn apply(&mut self, change: DraChange) -> Vec<Note> {
        self.seen = true;
        let kind = change.kind();
        match change {
            DraChange::Class(e) => self.relisted(kind, e, |d, o| d.put_object("deviceclass", "DeviceClass", &o, false)),
            DraChange::Slice(e) => {
                self.relisted(kind, e, |d, o| d.put_object("resourceslice", "ResourceSlice", &o, false))
            }
            DraChange::Template(e) => {
                self.relisted(kind, e, |d, o| d.put_object("resourceclaimtemplate", "ResourceClaimTemplate", &o, true))
            }
            DraChange::Claim(e) => self.relisted(kind, e, |d, o| {
                d.put_claim(&o);
                None
            }),
        }
    }

    fn relisted<K: kube::Resource + Serialize>(
        &mut self,
        kind: &'static str,
        event: Event<K>,
        put: impl Fn(&mut Devices, K) -> Option<Note>,
    ) -> Vec<Note> {
        let key = |o: &K| match kind {
            "resourceclaim" => o.meta().uid.clone().unwrap_or_default(),
            "resourceclaimtemplate" => key_of(o.meta(), true),
            _ => key_of(o.meta(), false),
        };
        match event {
            Event::Init => {
                self.relists.insert(kind, BTreeSet::new());
                Vec::new()
            }
            Event::InitApply(o) | Event::Apply(o) => {
                if let Some(seen) = self.relists.get_mut(kind) {
                    seen.insert(key(&o));
                }
                put(self, o).into_iter().collect()
            }
            Event::Delete(o) => {
                self.remove(kind, &key(&o));
                Vec::new()
            }
            Event::InitDone => {
                let seen = self.relists.remove(kind).unwrap_or_default();
                for gone in self.keys(kind).into_iter().filter(|k| !seen.contains(k)) {
                    self.remove(kind, &gone);
                }
                Vec::new()
            }
        }
    }

    fn keys(&self, kind: &'static str) -> Vec<String> {
        if kind == "resourceclaim" {
            return self.claims.keys().cloned().collect();
        }
        let mut keys: Vec<String> = self.objects.keys().filter(|(k, _)| *k == kind).map(|(_, n)| n.clone()).collect();
        keys.extend(self.problems.keys().filter_map(|p| {
            let (k, name) = p.split_once('/')?;
            (k.to_ascii_lowercase() == kind).then(|| name.to_string())
        }));
        keys
    }

    fn remove(&mut self, kind: &'static str, key: &str) {
        if kind == "resourceclaim" {
            self.set_claim(key, None);
            return;
        }
        let removed = self.objects.remove(&(kind, key.to_string()));
        self.changed(kind, key, removed.as_ref(), None);
        self.problems.retain(|p, _| p.split_once('/').is_none_or(|(k, n)| k.to_ascii_lowercase() != kind || n != key));
    }

    fn put_object<K: kube::Resource + Serialize>(
        &mut self,
        kind: &'static str,
        kind_name: &str,
        object: &K,
        namespaced: bool,
    ) -> Option<Note> {
        let key = key_of(object.meta(), namespaced);
        let subject = format!("{kind_name}/{key}");
        let mut value = serde_json::to_value(object).ok()?;
        // Watched objects carry no apiVersion/kind; the reader wants them.
        value["apiVersion"] = "resource.k8s.io/v1".into();
        value["kind"] = kind_name.into();
        match read_object(value, &subject) {
            Ok(mut parsed) => {
                // Templates are namespaced: gangs name them `namespace/name`.
                for t in &mut parsed.claims {
                    t.name = key.clone();
                }
                self.problems.remove(&subject);
                let slot = (kind, key.clone());
                if self.objects.get(&slot) != Some(&parsed) {
                    let old = self.objects.insert(slot, parsed.clone());
                    self.changed(kind, &key, old.as_ref(), Some(&parsed));
                }
                None
            }
            Err(e) => {
                let removed = self.objects.remove(&(kind, key.clone()));
                self.changed(kind, &key, removed.as_ref(), None);
                let message = format!("{e}; left out");
                let new = self.problems.insert(subject, message.clone()).as_ref() != Some(&message);
                new.then_some(Note { node: None, message })
            }
        }
    }

    /// Notes what an object's change asks of the engine: its pool (old and new) for a slice,
    /// the whole devices for a class or template.
    fn changed(&mut self, kind: &str, key: &str, old: Option<&DraObjects>, new: Option<&DraObjects>) {
        if old.is_none() && new.is_none() {
            return;
        }
        if kind != "resourceslice" {
            self.whole = true;
            return;
        }
        let pool_of =
            |o: Option<&DraObjects>| o.and_then(|o| o.slices.first()).map(|s| (s.driver.clone(), s.pool.name.clone()));
        if let Some(pool) = pool_of(old) {
            if let Some(keys) = self.slices_by_pool.get_mut(&pool) {
                keys.remove(key);
                if keys.is_empty() {
                    self.slices_by_pool.remove(&pool);
                }
            }
            self.pools_changed.insert(pool);
        }
        if let Some(pool) = pool_of(new) {
            self.slices_by_pool.entry(pool.clone()).or_default().insert(key.to_string());
            self.pools_changed.insert(pool);
        }
    }

    fn put_claim(&mut self, claim: &ResourceClaim) {
        let Some(uid) = claim.metadata.uid.clone() else { return };
        let held =
            claim.status.as_ref().and_then(|s| s.allocation.as_ref()).and_then(|a| a.devices.as_ref()).map(|d| {
                d.results
                    .iter()
                    .flatten()
                    // Admin access sees devices in use without taking them.
                    .filter(|r| r.admin_access != Some(true))
                    .map(|r| DeviceId::new(&r.driver, &r.pool, &r.device))
                    .collect::<Vec<_>>()
            });
        let owner_pod = claim
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.kind == "Pod" && o.api_version == "v1")
            .map(|o| o.uid.clone());
        let held = held.filter(|d| !d.is_empty()).map(|devices| HeldClaim { owner_pod, devices });
        self.set_claim(&uid, held);
    }

    fn counted(&self, claim: &HeldClaim) -> bool {
        claim.owner_pod.as_ref().is_none_or(|o| !self.gang_pods.contains(o))
    }

    fn count(&mut self, devices: &[DeviceId], add: bool) {
        for id in devices {
            let n = self.observed.entry(id.clone()).or_default();
            if add {
                *n += 1;
            } else {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.observed.remove(id);
                }
            }
        }
        self.claims_changed = true;
    }

    fn set_claim(&mut self, uid: &str, held: Option<HeldClaim>) {
        if self.claims.get(uid) == held.as_ref() {
            return;
        }
        if let Some(old) = self.claims.remove(uid) {
            if self.counted(&old) {
                self.count(&old.devices, false);
            }
            if let Some(o) = &old.owner_pod
                && let Some(set) = self.by_owner.get_mut(o)
            {
                set.remove(uid);
                if set.is_empty() {
                    self.by_owner.remove(o);
                }
            }
        }
        if let Some(new) = held {
            if self.counted(&new) {
                self.count(&new.devices, true);
            }
            if let Some(o) = &new.owner_pod {
                self.by_owner.entry(o.clone()).or_default().insert(uid.to_string());
            }
            self.claims.insert(uid.to_string(), new);
        }
    }

    /// A pod seen, and whether it belongs to a trainyard gang (its claims are then the engine's).
    pub fn pod(&mut self, uid: &str, of_gang: bool) {
        let was = self.gang_pods.contains(uid);
        if was == of_gang {
            return;
        }
        let owned: Vec<HeldClaim> =
            self.by_owner.get(uid).into_iter().flatten().filter_map(|c| self.claims.get(c)).cloned().collect();
        for claim in &owned {
            self.count(&claim.devices, !of_gang);
        }
        if of_gang {
            self.gang_pods.insert(uid.to_string());
        } else {
            self.gang_pods.remove(uid);
        }
    }

    /// What the engine must take of the slices, classes and templates changed since the last
    /// call (the first call, and any after a class or template changed, gives every object).
    pub fn take_update(&mut self) -> Option<DeviceUpdate> {
        let pools = std::mem::take(&mut self.pools_changed);
        if std::mem::take(&mut self.whole) || (!self.taken && self.seen) {
            self.taken = true;
            return Some(DeviceUpdate::Whole(self.all_objects()));
        }
        if pools.is_empty() {
            return None;
        }
        let slices = pools
            .iter()
            .flat_map(|p| self.slices_by_pool.get(p).into_iter().flatten())
            .filter_map(|k| self.objects.get(&("resourceslice", k.clone())))
            .flat_map(|o| o.slices.iter().cloned())
            .collect();
        Some(DeviceUpdate::Pools(pools.into_iter().collect(), slices))
    }

    /// Every object as last read.
    pub fn all_objects(&self) -> DraObjects {
        let mut all = DraObjects::default();
        for parsed in self.objects.values() {
            all.extend(parsed.clone());
        }
        all
    }

    /// The devices counted claims hold, when a claim changed since the last call.
    pub fn take_observed(&mut self) -> Option<HashSet<DeviceId>> {
        std::mem::take(&mut self.claims_changed).then(|| self.observed.keys().cloned().collect())
    }

    /// Notes for pool reports not given before (and forgets those no longer made).
    pub fn report(&mut self, reports: &[trainyard_topology::devices::PoolReport]) -> Vec<Note> {
        let now: BTreeSet<String> = reports.iter().map(|r| format!("{}: {}", r.subject, r.reason)).collect();
        let notes = now.difference(&self.reported).map(|m| Note { node: None, message: format!("DRA {m}") }).collect();
        self.reported = now;
        notes
    }

    /// [`Devices::report`] for the pools `keys` published again: their old reports are replaced.
    pub fn report_pools(&mut self, keys: &[PoolKey], reports: &[trainyard_topology::devices::PoolReport]) -> Vec<Note> {
        let prefixes: Vec<String> = keys.iter().map(|(d, p)| format!("{d}/{p}")).collect();
        let of_pools =
            |m: &String| prefixes.iter().any(|p| m.starts_with(&format!("{p}:")) || m.starts_with(&format!("{p}/")));
        let mut now: BTreeSet<String> = self.reported.iter().filter(|m| !of_pools(m)).cloned().collect();
        let fresh: BTreeSet<String> = reports.iter().map(|r| format!("{}: {}", r.subject, r.reason)).collect();
        let notes =
            fresh.difference(&self.reported).map(|m| Note { node: None, message: format!("DRA {m}") }).collect();
        now.extend(fresh);
        self.reported = now;
        notes
    }
}
