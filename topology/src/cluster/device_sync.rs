//! Keeping the cluster's devices in step with a live cluster: slices, classes and templates
//! replaced while gangs hold devices, devices the cluster's own claims hold, and how many whole
//! GPUs each node's devices give (nodes whose GPUs come only through DRA advertise none).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::Cluster;
use super::devices::{DeviceStore, counts_gpus, find_device};
use crate::devices::{DeviceId, DraObjects, PoolReport, PoolView, SelectorOwner};
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
        if let Some(old) = self.devices.take() {
            take_over(&mut store, *old);
        }
        self.devices = Some(Box::new(store));
        self.classes.forget_empty_device_counts();
        let all: Vec<HostId> = self.topo.hosts().collect();
        for h in all {
            self.modify_host(h, |s| s.devices_version = s.devices_version.wrapping_add(1));
        }
        self.structure_changed();
        Ok(reports)
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
        for (node, pools) in by_node.iter() {
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
    for (id, count) in old.holders {
        if find_device(&new.view, &id).is_none() {
            continue;
        }
        // Taken once through the store, so that in-use sets and remembered counts follow; then
        // the remaining holders are added.
        new.shift(std::slice::from_ref(&id), true);
        if let Some(c) = new.holders.get_mut(&id) {
            *c = count;
        }
    }
}
