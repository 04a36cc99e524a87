//! Eligibility classes: one per distinct host filter that some gang carries, with the free
//! capacity of the hosts it admits.
//!
//! A class that admits every usable host shares the cluster's base sums; the first time it
//! excludes one it gets sums of its own, kept up to date from then on (so a taint that comes and
//! goes costs O(depth) per change, not a rebuild). Capacities for "could this ever fit" are
//! computed on demand and cached until the cluster's structure changes.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::HostState;
use super::devices::{DeviceFit, DeviceStore, MAX_DEVICE_PODS_PER_HOST};
use super::gpus::offered;
use super::live::HostView;
use crate::eligibility::HostFilter;
use crate::{DomainId, HostId, LayoutNeed, Resources, Topology};

/// Index of an eligibility class of a [`super::Cluster`]. [`HostClass::DEFAULT`] (no
/// tolerations, no selector) always exists; others exist while some gang holds them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HostClass(pub(crate) u16);

impl HostClass {
    /// Pods without tolerations or node selectors.
    pub const DEFAULT: HostClass = HostClass(0);
}

#[derive(Clone, Debug)]
struct Class {
    filter: HostFilter,
    /// The GPU layout its gangs ask of each host; such a class always has sums of its own.
    layout: Option<LayoutNeed>,
    /// The device claims of its gangs' pods; such a class always has sums of its own.
    devices: Option<DeviceFit>,
    /// Per host slot, for a class of devices: how many of its pods the host's devices hold.
    fits: Vec<HostFit>,
    holders: usize,
    /// Per host slot: whether the filter admits the host's labels and taints.
    admits: Vec<bool>,
    /// Usable hosts the filter does not admit.
    excluded: usize,
    /// Own sums, once the class has excluded a usable host.
    free: Option<Vec<Resources>>,
    /// Capacity of the admitted hosts per domain, for the structure generation it was made at.
    capacity: Option<(u64, Vec<Resources>)>,
}

/// How many pods of a class's device need one host's devices hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct HostFit {
    /// The bound the counts were made under ([`pods_cap`] of the host's capacity).
    cap: u32,
    /// With the devices in use now.
    pub(crate) now: u32,
    /// With no device in use, counted under `empty_cap` (`None`: not counted yet).
    empty: Option<(u32, u32)>,
}

impl HostFit {
    /// Pods on no devices in use, once counted.
    pub(crate) fn empty(&self) -> Option<u32> {
        self.empty.map(|(_, n)| n)
    }
}

/// What tells classes apart: the host filter, the GPU layout and the device claims of the pods.
type ClassKey = (HostFilter, Option<LayoutNeed>, Option<DeviceFit>);

/// Every class of a cluster.
#[derive(Clone, Debug)]
pub(crate) struct Classes {
    slots: Vec<Option<Class>>,
    /// Looked up only, never iterated.
    by_filter: HashMap<ClassKey, u16>,
    /// Host slots, to size new classes.
    host_slots: usize,
}

impl Classes {
    pub(crate) fn new(host_slots: usize) -> Classes {
        let default = Class {
            filter: HostFilter::default(),
            layout: None,
            devices: None,
            fits: Vec::new(),
            holders: usize::MAX,
            admits: vec![true; host_slots],
            excluded: 0,
            free: None,
            capacity: None,
        };
        let mut by_filter = HashMap::new();
        by_filter.insert((HostFilter::default(), None, None), 0);
        Classes { slots: vec![Some(default)], by_filter, host_slots }
    }

    fn class(&self, c: HostClass) -> &Class {
        self.slots[usize::from(c.0)].as_ref().expect("a class is used only while held")
    }

    pub(crate) fn filter(&self, c: HostClass) -> &HostFilter {
        &self.class(c).filter
    }

    pub(crate) fn layout(&self, c: HostClass) -> Option<LayoutNeed> {
        self.class(c).layout
    }

    pub(crate) fn device_fit(&self, c: HostClass) -> Option<DeviceFit> {
        self.class(c).devices
    }

    pub(crate) fn admits(&self, c: HostClass, host: HostId) -> bool {
        self.class(c).admits[host.0 as usize]
    }

    /// The class's free sums (the base ones while it excludes no usable host).
    pub(crate) fn free<'a>(&'a self, c: HostClass, base: &'a [Resources]) -> &'a [Resources] {
        self.class(c).free.as_deref().unwrap_or(base)
    }

    /// The class of `filter`, and whether it is new (its index may be one a released class had).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn acquire(
        &mut self,
        filter: &HostFilter,
        layout: Option<LayoutNeed>,
        devices: Option<DeviceFit>,
        topo: &Topology,
        hosts: &[HostState],
        base: &[Resources],
        store: Option<&mut DeviceStore>,
    ) -> Option<(HostClass, bool)> {
        // Most gangs carry no filter, layout or claims: the default class, held for ever.
        if layout.is_none() && devices.is_none() && *filter == HostFilter::default() {
            return Some((HostClass::DEFAULT, false));
        }
        let key = (filter.clone(), layout, devices);
        if let Some(&i) = self.by_filter.get(&key) {
            let class = self.slots[usize::from(i)].as_mut().expect("indexed classes exist");
            class.holders = class.holders.saturating_add(1);
            return Some((HostClass(i), false));
        }
        let admits: Vec<bool> = (0..self.host_slots).map(|h| filter.admits(&hosts[h].attrs)).collect();
        let excluded = topo.hosts().filter(|h| hosts[h.0 as usize].usable() && !admits[h.0 as usize]).count();
        let mut fits = Vec::new();
        if let (Some(fit), Some(store)) = (devices, store) {
            fits = vec![HostFit::default(); self.host_slots];
            for h in topo.hosts() {
                let cap = pods_cap(topo.host_capacity(h), fit.pod);
                let now = store.fits(topo.host_name(h), fit.need, cap, false);
                let empty = store.in_use().devices.is_empty().then_some((cap, now));
                fits[h.0 as usize] = HostFit { cap, now, empty };
            }
        }
        let mut class = Class {
            filter: filter.clone(),
            layout,
            devices,
            fits,
            holders: 1,
            admits,
            excluded,
            free: None,
            capacity: None,
        };
        if excluded > 0 || layout.is_some() || devices.is_some() {
            class.free = Some(class_sums(topo, hosts, &class, base.len()));
        }
        let i = match self.slots.iter().position(Option::is_none) {
            Some(i) => i,
            None if self.slots.len() < usize::from(u16::MAX) => {
                self.slots.push(None);
                self.slots.len() - 1
            }
            None => return None,
        };
        self.slots[i] = Some(class);
        let i = u16::try_from(i).expect("bounded above");
        self.by_filter.insert(key, i);
        Some((HostClass(i), true))
    }

    pub(crate) fn release(&mut self, c: HostClass) {
        if c == HostClass::DEFAULT {
            return;
        }
        let slot = &mut self.slots[usize::from(c.0)];
        let Some(class) = slot.as_mut() else { return };
        class.holders -= 1;
        if class.holders == 0 {
            self.by_filter.remove(&(class.filter.clone(), class.layout, class.devices));
            *slot = None;
        }
    }

    /// Grows every class to `slots` hosts (new ones are judged when their attributes are set).
    pub(crate) fn grow(&mut self, slots: usize) {
        self.host_slots = self.host_slots.max(slots);
        for class in self.slots.iter_mut().flatten() {
            class.admits.resize(self.host_slots, false);
            if class.devices.is_some() {
                class.fits.resize(self.host_slots, HostFit::default());
            }
        }
    }

    /// Grows every materialised sum to `domains` entries.
    pub(crate) fn grow_domains(&mut self, domains: usize) {
        for class in self.slots.iter_mut().flatten() {
            if let Some(free) = class.free.as_mut() {
                free.resize(domains, Resources::ZERO);
            }
        }
    }

    /// The devices of `host` were replaced: its counts on no devices in use are stale (counts
    /// with the devices in use now are made again as its devices version moves).
    pub(crate) fn forget_empty_device_counts(&mut self, host: HostId) {
        for class in self.slots.iter_mut().flatten() {
            if let Some(f) = class.fits.get_mut(host.0 as usize) {
                f.empty = None;
            }
        }
    }

    /// The cached capacities are stale.
    pub(crate) fn structure_changed(&mut self) {
        for class in self.slots.iter_mut().flatten() {
            class.capacity = None;
        }
    }

    /// A host's usability, attributes, free capacity or devices changed from `before` to
    /// `after`; `attrs_changed` asks for its eligibility to be judged again. Every
    /// class with sums of its own takes the difference along `path` (the host's domain and its
    /// ancestors); a class that starts excluding a usable host gets sums of its own. Classes of
    /// a device need count the host's pods again when its devices moved.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn host_changed(
        &mut self,
        host: HostId,
        before: HostView,
        after: HostView,
        attrs_changed: bool,
        path: &[u32],
        topo: &Topology,
        hosts: &[HostState],
        mut store: Option<&mut DeviceStore>,
    ) {
        let h = host.0 as usize;
        for class in self.slots.iter_mut().flatten() {
            let was = class.admits[h];
            if attrs_changed {
                class.admits[h] = class.filter.admits(&hosts[h].attrs);
            }
            let now = class.admits[h];
            class.excluded -= usize::from(before.usable && !was);
            class.excluded += usize::from(after.usable && !now);
            let fit_before = class.devices.map(|f| (class.fits[h].now, f.pod));
            if let (Some(fit), Some(store)) = (class.devices, store.as_deref_mut()) {
                let cap = pods_cap(topo.host_capacity(host), fit.pod);
                let counted = &mut class.fits[h];
                if before.devices != after.devices || attrs_changed || counted.cap != cap {
                    *counted = HostFit { cap, now: store.fits(topo.host_name(host), fit.need, cap, false), ..*counted };
                }
            }
            let fit_after = class.devices.map(|f| (class.fits[h].now, f.pod));
            match class.free.as_mut() {
                Some(free) => {
                    let state = &hosts[h];
                    let old = if was { offered(state, before, class.layout, fit_before) } else { Resources::ZERO };
                    let new = if now { offered(state, after, class.layout, fit_after) } else { Resources::ZERO };
                    if old != new {
                        for &d in path {
                            let f = &mut free[d as usize];
                            *f = f
                                .checked_sub(&old)
                                .expect("a domain holds its hosts' free capacity")
                                .saturating_add(&new);
                        }
                    }
                }
                None if class.excluded > 0 => {
                    class.free = Some(class_sums(topo, hosts, class, topo.domain_count()));
                }
                None => {}
            }
        }
    }

    /// Capacity per domain of the hosts `c` admits, present or not usable; cached per generation.
    /// A class of a device need counts each host's pods on no devices in use once per capacity.
    pub(crate) fn capacity(
        &mut self,
        c: HostClass,
        topo: &Topology,
        hosts: &[HostState],
        generation: u64,
        mut store: Option<&mut DeviceStore>,
    ) -> &[Resources] {
        let class = self.slots[usize::from(c.0)].as_mut().expect("a class is used only while held");
        if class.capacity.as_ref().is_none_or(|(g, _)| *g != generation) {
            let mut cap = vec![Resources::ZERO; topo.domain_count()];
            for h in topo.hosts() {
                let state = &hosts[h.0 as usize];
                if class.admits[h.0 as usize] && !state.gone {
                    let empty = HostView { usable: true, free: topo.host_capacity(h), gpus_taken: 0, devices: 0 };
                    let devices = match (class.devices, store.as_deref_mut()) {
                        (Some(fit), Some(store)) => {
                            let pods = pods_cap(topo.host_capacity(h), fit.pod);
                            let counted = &mut class.fits[h.0 as usize];
                            let n = match counted.empty {
                                Some((at, n)) if at == pods => n,
                                _ => {
                                    let n = store.fits(topo.host_name(h), fit.need, pods, true);
                                    counted.empty = Some((pods, n));
                                    n
                                }
                            };
                            Some((n, fit.pod))
                        }
                        (Some(fit), None) => Some((0, fit.pod)),
                        (None, _) => None,
                    };
                    add_up(topo, &mut cap, topo.host_domain(h), offered(state, empty, class.layout, devices));
                }
            }
            class.capacity = Some((generation, cap));
        }
        &class.capacity.as_ref().expect("set above").1
    }

    /// Every class index in use, for checks.
    pub(crate) fn in_use(&self) -> impl Iterator<Item = HostClass> + '_ {
        self.slots.iter().enumerate().filter(|(_, c)| c.is_some()).map(|(i, _)| HostClass(i as u16))
    }

    /// Per host slot, pods of the class's device need its devices hold (empty for a class
    /// without one).
    pub(crate) fn fits(&self, c: HostClass) -> &[HostFit] {
        &self.class(c).fits
    }

    /// Whether `c` has sums of its own (for tests of the sharing rule).
    pub(crate) fn has_own_sums(&self, c: HostClass) -> bool {
        self.class(c).free.is_some()
    }
}

/// Free capacity per domain of the usable hosts `admits` lets in, as a class of `layout` (and
/// of pods of `devices.0` fitting `devices.1[host].now` times) sees it, from scratch.
pub(crate) fn sums(
    topo: &Topology,
    hosts: &[HostState],
    admits: &[bool],
    layout: Option<LayoutNeed>,
    devices: Option<(Resources, &[HostFit])>,
    domains: usize,
) -> Vec<Resources> {
    let mut free = vec![Resources::ZERO; domains];
    for h in topo.hosts() {
        let state = &hosts[h.0 as usize];
        if admits[h.0 as usize] && state.usable() {
            let view = state.view(topo.host_capacity(h));
            let devices = devices.map(|(pod, fits)| (fits[h.0 as usize].now, pod));
            add_up(topo, &mut free, topo.host_domain(h), offered(state, view, layout, devices));
        }
    }
    free
}

fn class_sums(topo: &Topology, hosts: &[HostState], class: &Class, domains: usize) -> Vec<Resources> {
    let devices = class.devices.map(|f| (f.pod, class.fits.as_slice()));
    sums(topo, hosts, &class.admits, class.layout, devices, domains)
}

/// Pods of `pod` a host of `capacity` could ever hold, bounding how many pods of a device need
/// are counted on it.
pub(crate) fn pods_cap(capacity: Resources, pod: Resources) -> u32 {
    u32::try_from(capacity.fit_count(&pod).min(u64::from(MAX_DEVICE_PODS_PER_HOST))).expect("bounded above")
}

fn add_up(topo: &Topology, sums: &mut [Resources], d: DomainId, amount: Resources) {
    let mut at = Some(d);
    while let Some(d) = at {
        sums[d.0 as usize] = sums[d.0 as usize].saturating_add(&amount);
        at = topo.parent(d);
    }
}
