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

/// Every class of a cluster.
#[derive(Clone, Debug)]
pub(crate) struct Classes {
    slots: Vec<Option<Class>>,
    /// Looked up only, never iterated.
    by_filter: HashMap<(HostFilter, Option<LayoutNeed>), u16>,
    /// Host slots, to size new classes.
    host_slots: usize,
}

impl Classes {
    pub(crate) fn new(host_slots: usize) -> Classes {
        let default = Class {
            filter: HostFilter::default(),
            layout: None,
            holders: usize::MAX,
            admits: vec![true; host_slots],
            excluded: 0,
            free: None,
            capacity: None,
        };
        let mut by_filter = HashMap::new();
        by_filter.insert((HostFilter::default(), None), 0);
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

    pub(crate) fn admits(&self, c: HostClass, host: HostId) -> bool {
        self.class(c).admits[host.0 as usize]
    }

    /// The class's free sums (the base ones while it excludes no usable host).
    pub(crate) fn free<'a>(&'a self, c: HostClass, base: &'a [Resources]) -> &'a [Resources] {
        self.class(c).free.as_deref().unwrap_or(base)
    }

    /// The class of `filter`, and whether it is new (its index may be one a released class had).
    pub(crate) fn acquire(
        &mut self,
        filter: &HostFilter,
        layout: Option<LayoutNeed>,
        topo: &Topology,
        hosts: &[HostState],
        base: &[Resources],
    ) -> Option<(HostClass, bool)> {
        let key = (filter.clone(), layout);
        if let Some(&i) = self.by_filter.get(&key) {
            let class = self.slots[usize::from(i)].as_mut().expect("indexed classes exist");
            class.holders = class.holders.saturating_add(1);
            return Some((HostClass(i), false));
        }
        let admits: Vec<bool> = (0..self.host_slots).map(|h| filter.admits(&hosts[h].attrs)).collect();
        let excluded = topo.hosts().filter(|h| hosts[h.0 as usize].usable() && !admits[h.0 as usize]).count();
        let mut class =
            Class { filter: filter.clone(), layout, holders: 1, admits, excluded, free: None, capacity: None };
        if excluded > 0 || layout.is_some() {
            class.free = Some(sums(topo, hosts, &class.admits, layout, base.len()));
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
            self.by_filter.remove(&(class.filter.clone(), class.layout));
            *slot = None;
        }
    }

    /// Grows every class to `slots` hosts (new ones are judged when their attributes are set).
    pub(crate) fn grow(&mut self, slots: usize) {
        self.host_slots = self.host_slots.max(slots);
        for class in self.slots.iter_mut().flatten() {
            class.admits.resize(self.host_slots, false);
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

    /// The cached capacities are stale.
    pub(crate) fn structure_changed(&mut self) {
        for class in self.slots.iter_mut().flatten() {
            class.capacity = None;
        }
    }

    /// A host's usability, attributes or free capacity changed from `before` to `after`;
    /// `attrs_changed` asks for its eligibility to be judged again. Every
    /// class with sums of its own takes the difference along `path` (the host's domain and its
    /// ancestors); a class that starts excluding a usable host gets sums of its own.
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
            match class.free.as_mut() {
                Some(free) => {
                    let state = &hosts[h];
                    let old = if was { offered(state, before, class.layout) } else { Resources::ZERO };
                    let new = if now { offered(state, after, class.layout) } else { Resources::ZERO };
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
                    class.free = Some(sums(topo, hosts, &class.admits, None, topo.domain_count()));
                }
                None => {}
            }
        }
    }

    /// Capacity per domain of the hosts `c` admits, present or not usable; cached per generation.
    pub(crate) fn capacity(
        &mut self,
        c: HostClass,
        topo: &Topology,
        hosts: &[HostState],
        generation: u64,
    ) -> &[Resources] {
        let class = self.slots[usize::from(c.0)].as_mut().expect("a class is used only while held");
        if class.capacity.as_ref().is_none_or(|(g, _)| *g != generation) {
            let mut cap = vec![Resources::ZERO; topo.domain_count()];
            for h in topo.hosts() {
                let state = &hosts[h.0 as usize];
                if class.admits[h.0 as usize] && !state.gone {
                    let empty = HostView { usable: true, free: topo.host_capacity(h), gpus_taken: 0 };
                    add_up(topo, &mut cap, topo.host_domain(h), offered(state, empty, class.layout));
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

    /// Whether `c` has sums of its own (for tests of the sharing rule).
    pub(crate) fn has_own_sums(&self, c: HostClass) -> bool {
        self.class(c).free.is_some()
    }
}

/// Free capacity per domain of the usable hosts `admits` lets in, as a class of `layout` sees
/// it, from scratch.
pub(crate) fn sums(
    topo: &Topology,
    hosts: &[HostState],
    admits: &[bool],
    layout: Option<LayoutNeed>,
    domains: usize,
) -> Vec<Resources> {
    let mut free = vec![Resources::ZERO; domains];
    for h in topo.hosts() {
        let state = &hosts[h.0 as usize];
        if admits[h.0 as usize] && state.usable() {
            let view = state.view(topo.host_capacity(h));
            add_up(topo, &mut free, topo.host_domain(h), offered(state, view, layout));
        }
    }
    free
}

fn add_up(topo: &Topology, sums: &mut [Resources], d: DomainId, amount: Resources) {
    let mut at = Some(d);
    while let Some(d) = at {
        sums[d.0 as usize] = sums[d.0 as usize].saturating_add(&amount);
        at = topo.parent(d);
    }
}
