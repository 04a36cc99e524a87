//! How many pods of a device need a host's devices hold, remembered per state of the host's
//! devices: what-if searches (a reservation planned by releasing running gangs, a preemption
//! tried and rolled back) move hosts back and forth between a few states, and each state is
//! counted once instead of once per move.

use std::collections::HashMap;

use super::devices::DeviceNeed;
use crate::devices::{DeviceId, PoolKey, PoolView};

/// Hosts with more devices than this are counted every time.
const MAX_DEVICES: usize = 128;

/// States remembered per host before the host's memory is cleared.
const MAX_STATES: usize = 1024;

#[derive(Clone)]
struct HostCounts {
    /// The host's devices in id order.
    ids: Vec<DeviceId>,
    /// Which of them are in use (bit `i` = `ids[i]`).
    taken: u128,
    /// Pods counted per (need, bound, devices in use).
    counted: HashMap<(DeviceNeed, u32, u128), u32>,
}

/// The remembered counts of every host whose devices all sit in node-local pools.
#[derive(Clone)]
pub(crate) struct DeviceCounts {
    hosts: HashMap<String, HostCounts>,
}

impl DeviceCounts {
    /// Remembers nothing when some pool serves every node, nor for nodes a `nodeSelector` pool
    /// (`selected`) serves: a device taken there changes what other hosts hold, which a host's
    /// own state does not show.
    pub(crate) fn new(
        view: &PoolView,
        by_node: &std::collections::BTreeMap<String, Vec<PoolKey>>,
        shared: bool,
        selected: &[PoolKey],
    ) -> DeviceCounts {
        let mut hosts = HashMap::new();
        if !shared {
            for (node, keys) in by_node.iter().filter(|(_, keys)| !keys.iter().any(|k| selected.contains(k))) {
                let ids: Vec<DeviceId> = view.host_in(node, keys).devices.iter().map(|d| d.id.clone()).collect();
                if ids.len() <= MAX_DEVICES {
                    hosts.insert(node.clone(), HostCounts { ids, taken: 0, counted: HashMap::new() });
                }
            }
        }
        DeviceCounts { hosts }
    }

    /// The remembered count for `node` in its current state (or with nothing in use, `empty`).
    pub(crate) fn get(&self, node: &str, need: DeviceNeed, cap: u32, empty: bool) -> Option<u32> {
        let host = self.hosts.get(node)?;
        let state = if empty { 0 } else { host.taken };
        host.counted.get(&(need, cap, state)).copied()
    }

    /// Remembers a count made for `node`.
    pub(crate) fn put(&mut self, node: &str, need: DeviceNeed, cap: u32, empty: bool, pods: u32) {
        let Some(host) = self.hosts.get_mut(node) else { return };
        if host.counted.len() >= MAX_STATES {
            host.counted.clear();
        }
        let state = if empty { 0 } else { host.taken };
        host.counted.insert((need, cap, state), pods);
    }

    /// Counts `node` afresh from the view (its pools were published again): nothing remembered,
    /// the devices `taken` says are in use marked.
    pub(crate) fn refresh(
        &mut self,
        view: &PoolView,
        node: &str,
        keys: Option<&Vec<PoolKey>>,
        taken: impl Fn(&DeviceId) -> bool,
    ) {
        self.hosts.remove(node);
        let Some(keys) = keys else { return };
        if keys.iter().any(|k| view.pools.get(k).is_some_and(|p| p.selector.is_some() || p.node.is_none())) {
            return;
        }
        let ids: Vec<DeviceId> = view.host_in(node, keys).devices.iter().map(|d| d.id.clone()).collect();
        if ids.len() > MAX_DEVICES {
            return;
        }
        let mut bits = 0u128;
        for (i, id) in ids.iter().enumerate() {
            if taken(id) {
                bits |= 1 << i;
            }
        }
        self.hosts.insert(node.to_string(), HostCounts { ids, taken: bits, counted: HashMap::new() });
    }

    /// A device of `node` was taken or given back.
    pub(crate) fn shift(&mut self, node: &str, id: &DeviceId, take: bool) {
        let Some(host) = self.hosts.get_mut(node) else { return };
        let Ok(i) = host.ids.binary_search(id) else { return };
        if take {
            host.taken |= 1 << i;
        } else {
            host.taken &= !(1 << i);
        }
    }
}
