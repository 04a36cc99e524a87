//! Keeping the cluster's devices in step with a live cluster: slices, classes and templates
//! replaced while gangs hold devices, devices the cluster's own claims hold, and how many whole
//! GPUs each node's devices give (nodes whose GPUs come only through DRA advertise none).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::Cluster;
use super::devices::{DeviceStore, counts_gpus, find_device};
use crate::devices::objects::ResourceSlice;
use crate::devices::{DeviceId, DraObjects, PoolKey, PoolReport, PoolView, SelectorOwner};
use crate::{HostId, Result};

impl Cluster {
    /// Replaces the cluster's DRA objects. Needs keep their indices (gangs and classes hold
    /// them): each is resolved again against the new templates and classes, and one that no
    /// longer resolves holds no pods until it does. Devices held keep their holders where the
    /// device still exists; a device gone is simply gone. Every class of a device need counts
    /// its hosts again. Returns what was left out (incomplete pools, selectors matching no node,
    /// slices of nodes the cluster lacks).
    pub fn replace_devices(&mut self, objects: DraObjects) -> Result<Vec<PoolReport>> {
        let mut view = PoolView::build(&objects.slices);
        let nodes: Vec<crate::eligibility::HostAttrs> = self
            .topo
            .hosts()
            .map(|h| crate::eligibility::HostAttrs {
                node_name: self.topo.host_name(h).to_string(),
                labels: self.hosts[h.0 as usize].attrs.labels.clone(),
                taints: Vec::new(),
            })
            .collect();
        let mut reports = view.reports.clone();
        reports.extend(view.select_nodes(&nodes));
        let mut store = DeviceStore::new(view, objects.classes, objects.claims);
        let hosts: BTreeSet<&str> = self.topo.hosts().map(|h| self.topo.host_name(h)).collect();
        for node in store.by_node.keys().filter(|n| !hosts.contains(n.as_str())) {
            let pools: Vec<String> = store.by_node[node].iter().map(|(d, p)| format!("{d}/{p}")).collect();
            reports.push(PoolReport {
                subject: pools.join(", "),
                reason: format!("node {node} is not in the cluster; its devices are not used"),
            });
        }
        // Hosts whose counts may change: every host when classes, templates or shared pools
        // changed (a need may resolve to other claims); else those whose own pools changed.
        let changed: Vec<HostId> = match self.devices.take() {
            Some(old) => {
                let nodes = changed_nodes(&old, &store);
                take_over(&mut store, *old);
                match nodes {
                    Some(nodes) => self.topo.hosts().filter(|&h| nodes.contains(self.topo.host_name(h))).collect(),
                    None => self.topo.hosts().collect(),
                }
            }
            None => self.topo.hosts().collect(),
        };
        self.devices = Some(Box::new(store));
        for &h in &changed {
            self.classes.forget_empty_device_counts(h);
            self.modify_host(h, |s| s.devices_version = s.devices_version.wrapping_add(1));
        }
        self.structure_changed();
        Ok(reports)
    }

    /// Puts the node-local pools `keys` at what `slices` publish (every slice of those pools now;
    /// a pool without slices is gone), classes and templates unchanged: only those pools are
    /// read and only their nodes counted again. Returns the nodes of those pools and their
    /// reports, or `None` (nothing changed) when a pool serves several nodes or the cluster has
    /// no devices yet: replace the devices whole then.
    pub fn replace_pools(
        &mut self,
        keys: &[PoolKey],
        slices: &[ResourceSlice],
    ) -> Option<(BTreeSet<String>, Vec<PoolReport>)> {
        let store = self.devices.as_mut()?;
        let (nodes, reports) = store.replace_pools(keys, slices)?;
        let hosts: Vec<HostId> = self.topo.hosts().filter(|&h| nodes.contains(self.topo.host_name(h))).collect();
        for h in hosts {
            self.classes.forget_empty_device_counts(h);
            self.modify_host(h, |s| s.devices_version = s.devices_version.wrapping_add(1));
        }
        self.structure_changed();
        Some((nodes, reports))
    }

    /// Sets the devices the cluster shows allocated to claims trainyard does not place (other
    /// schedulers' pods, claims made by hand). Only the difference from the last set moves, and
    /// only the hosts reaching a device that moved are counted again.
    pub fn set_observed_devices(&mut self, ids: HashSet<DeviceId>) {
        let Some(store) = self.devices.as_mut() else { return };
        let gone: Vec<DeviceId> = store.observed.difference(&ids).cloned().collect();
        let new: Vec<DeviceId> = ids.difference(&store.observed).cloned().collect();
        if gone.is_empty() && new.is_empty() {
            return;
        }
        let host_of = |store: &DeviceStore, id: &DeviceId| find_device(&store.view, id).map(|d| d.node.clone());
        let mut moves: BTreeMap<(Option<String>, bool), Vec<DeviceId>> = BTreeMap::new();
        for (list, take) in [(gone, false), (new, true)] {
            for id in list {
                if take {
                    store.observed.insert(id.clone());
                } else {
                    store.observed.remove(&id);
                }
                // A device not (or no longer) published is remembered, and counts once it is.
                if let Some(node) = host_of(store, &id) {
                    moves.entry((node, take)).or_default().push(id);
                }
            }
        }
        let names: BTreeMap<&str, HostId> = if moves.keys().any(|(n, _)| n.is_some()) {
            self.topo.hosts().map(|h| (self.topo.host_name(h), h)).collect()
        } else {
            BTreeMap::new()
        };
        let moves: Vec<(HostId, bool, Vec<DeviceId>)> = moves
            .into_iter()
            .filter_map(|((node, take), ids)| {
                // A shared device moves every host; any host stands for them.
                let host = match node {
                    Some(n) => *names.get(n.as_str())?,
                    None => self.topo.hosts().next()?,
                };
                Some((host, take, ids))
            })
            .collect();
        for (host, take, ids) in moves {
            self.move_devices(host, &ids, take);
        }
    }

    /// Whole GPUs each node's own devices give: devices of node-local pools that every selector
    /// of some GPU-counting DeviceClass ([`counts_gpus`]) selects. For nodes whose GPUs come
    /// through DRA alone, which advertise no GPU extended resource.
    pub fn gpu_devices(&mut self) -> BTreeMap<String, u64> {
        self.gpu_devices_of(None)
    }

    /// [`Cluster::gpu_devices`] of the nodes `only` (every node for `None`).
    pub fn gpu_devices_of(&mut self, only: Option<&BTreeSet<String>>) -> BTreeMap<String, u64> {
        let Some(store) = self.devices.as_mut() else { return BTreeMap::new() };
        let DeviceStore { view, classes, selectors, by_node, .. } = &mut **store;
        let mut compiled = Vec::new();
        for class in classes.iter().filter(|c| counts_gpus(c)) {
            let owner = SelectorOwner::Class(class.name.clone());
            let ids: Option<Vec<_>> = class.selectors.iter().map(|e| selectors.compile(e, &owner).ok()).collect();
            // A class whose selector does not compile selects nothing, as upstream.
            compiled.extend(ids);
        }
        let mut out = BTreeMap::new();
        for (node, pools) in by_node.iter().filter(|(n, _)| only.is_none_or(|o| o.contains(*n))) {
            let host = view.host_in(node, pools.iter());
            let gpus = host
                .devices
                .iter()
                .filter(|d| compiled.iter().any(|ids| ids.iter().all(|&e| selectors.matches(e, d).unwrap_or(false))))
                .count() as u64;
            if gpus > 0 {
                out.insert(node.clone(), gpus);
            }
        }
        out
    }
}

impl DeviceStore {
    /// Puts the pools `keys` at what `slices` (every slice of those pools now) publish, for
    /// node-local pools only; returns the nodes whose devices may have changed, or `None` (and
    /// changes nothing) when one of the pools, old or new, serves several nodes. Holders of
    /// devices that are still published keep them.
    fn replace_pools(
        &mut self,
        keys: &[PoolKey],
        slices: &[ResourceSlice],
    ) -> Option<(BTreeSet<String>, Vec<PoolReport>)> {
        let part = PoolView::build(slices);
        let local = |p: &crate::devices::Pool| p.node.is_some() && p.selector.is_none();
        let olds: Vec<&crate::devices::Pool> = keys.iter().filter_map(|k| self.view.pools.get(k)).collect();
        if !olds.iter().all(|p| local(p))
            || !part.pools.values().all(local)
            || part.pools.keys().any(|k| !keys.contains(k))
        {
            return None;
        }
        let mut nodes = BTreeSet::new();
        let mut gone: Vec<crate::devices::Device> = Vec::new();
        for key in keys {
            if let Some(old) = self.view.pools.remove(key) {
                nodes.extend(old.node.clone());
                gone.extend(old.devices);
            }
        }
        // What gangs and claims hold of the old devices is given back, and taken again below
        // from the devices published now.
        let mut held = Vec::new();
        for device in &gone {
            self.selectors.forget(&device.id);
            if self.in_use.give_back_held(device) {
                held.push(device.id.clone());
            }
        }
        let subjects: BTreeSet<String> = keys.iter().map(|(d, p)| format!("{d}/{p}")).collect();
        self.view.reports.retain(|r| {
            let pool = r.subject.splitn(3, '/').take(2).collect::<Vec<_>>().join("/");
            !subjects.contains(&pool)
        });
        self.view.reports.extend(part.reports.iter().cloned());
        for (key, pool) in part.pools {
            nodes.extend(pool.node.clone());
            self.view.pools.insert(key, pool);
        }
        for id in held {
            match find_device(&self.view, &id) {
                Some(device) => self.in_use.take(device),
                None => {
                    self.extra_holders.remove(&id);
                }
            }
        }
        for node in &nodes {
            let list = self.by_node.entry(node.clone()).or_default();
            list.retain(|k| !keys.contains(k));
            list.extend(
                keys.iter()
                    .filter(|k| self.view.pools.get(*k).is_some_and(|p| p.node.as_deref() == Some(node.as_str())))
                    .cloned(),
            );
            list.sort();
            if list.is_empty() {
                self.by_node.remove(node);
            }
        }
        for node in &nodes {
            if self.shared.is_empty() {
                let in_use = &self.in_use;
                self.counts.refresh(&self.view, node, self.by_node.get(node), |id| in_use.devices.contains(id));
            }
        }
        Some((nodes, part.reports))
    }
}

/// The nodes whose own pools differ between `old` and `new`, or `None` when every host may count
/// differently: the classes or templates changed, or a pool several nodes share did.
fn changed_nodes(old: &DeviceStore, new: &DeviceStore) -> Option<BTreeSet<String>> {
    if old.classes != new.classes || !old.same_templates(new) {
        return None;
    }
    let pools = |store: &DeviceStore, keys: &[crate::devices::PoolKey]| -> Vec<Option<crate::devices::Pool>> {
        keys.iter().map(|k| store.view.pools.get(k).cloned()).collect()
    };
    let (old_shared, new_shared) = (old.shared_pools(), new.shared_pools());
    if old_shared != new_shared || pools(old, &old_shared) != pools(new, &new_shared) {
        return None;
    }
    let names: BTreeSet<&String> = old.by_node.keys().chain(new.by_node.keys()).collect();
    Some(names.into_iter().filter(|n| node_pools(old, n) != node_pools(new, n)).cloned().collect())
}

/// The pools a node reaches on its own, with their keys.
fn node_pools<'s>(
    store: &'s DeviceStore,
    node: &str,
) -> Vec<(&'s crate::devices::PoolKey, Option<&'s crate::devices::Pool>)> {
    let keys = store.by_node.get(node).map(Vec::as_slice).unwrap_or_default();
    keys.iter().map(|k| (k, store.view.pools.get(k))).collect()
}

/// Carries what `old` held into `new`: needs by index, holders and observed devices by id.
fn take_over(new: &mut DeviceStore, old: DeviceStore) {
    let mut lists: Vec<(Vec<String>, super::DeviceNeed)> = old.by_templates.into_iter().collect();
    lists.sort_by_key(|(_, n)| *n);
    for (templates, need) in lists {
        let need_index = usize::from(need.index());
        let resolved = new.resolve(&templates);
        let (claims, broken) = match resolved {
            Ok(claims) => (claims, None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        debug_assert_eq!(new.needs.len(), need_index, "needs are carried in index order");
        new.needs.push(super::devices::Need { claims, broken });
        new.by_templates.insert(templates, need);
    }
    new.observed = old.observed;
    for id in old.in_use.devices {
        if find_device(&new.view, &id).is_none() {
            continue;
        }
        // Taken through the store, so that in-use sets and remembered counts follow.
        new.shift(std::slice::from_ref(&id), true);
        if let Some(&extra) = old.extra_holders.get(&id) {
            new.extra_holders.insert(id, extra);
        }
    }
}
