//! The changes a live cluster brings, each applied in O(depth × classes): hosts added, changed
//! and removed, hosts becoming unusable and usable again, and usage by pods trainyard does not
//! place. Gangs keep their hosts through all of it: a removed host that gangs still hold stays
//! charged (and is offered to nobody) until they release it.

use std::collections::BTreeMap;

use super::{Cluster, HostState};
use crate::eligibility::HostAttrs;
use crate::{Error, HostId, InputError, Resources, Result};

/// A host as the caller sees it now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostSpec {
    /// One name per level, the host's own last.
    pub path: Vec<String>,
    /// Allocatable capacity.
    pub capacity: Resources,
    /// GPU flavor (model), if known.
    pub flavor: Option<String>,
    /// Labels and taints for eligibility.
    pub attrs: HostAttrs,
    /// Schedulable and ready.
    pub ready: bool,
}

/// What [`Cluster::remove_host`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removal {
    /// The host is gone; its id may be reused.
    Removed,
    /// Gangs still hold it: it stays, charged and unusable, until they release it.
    Held,
}

/// One host in a form that does not depend on ids, for comparing two clusters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CanonicalHost {
    /// Capacity.
    pub capacity: Resources,
    /// Held by gangs.
    pub used: Resources,
    /// Held by other pods.
    pub foreign: Resources,
    /// Free (zero while unusable).
    pub free: Resources,
    /// Offered to gangs.
    pub usable: bool,
}

/// What the views read of a host at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HostView {
    /// Offered to gangs.
    pub(crate) usable: bool,
    /// Free capacity (zero while not usable).
    pub(crate) free: Resources,
    /// GPU indices gangs hold.
    pub(crate) gpus_taken: u64,
    /// The host's devices version: classes of a device need count its pods again when it moves.
    pub(crate) devices: u32,
}

impl HostView {
    /// A host no view counts.
    pub(crate) const NONE: HostView = HostView { usable: false, free: Resources::ZERO, gpus_taken: 0, devices: 0 };
}

impl HostState {
    /// Free capacity given the host's capacity (zero while it is not usable).
    pub(crate) fn free(&self, capacity: Resources) -> Resources {
        if self.usable() { capacity.saturating_sub(&self.used.saturating_add(&self.foreign)) } else { Resources::ZERO }
    }

    /// What the views read of it now.
    pub(crate) fn view(&self, capacity: Resources) -> HostView {
        HostView {
            usable: self.usable(),
            free: self.free(capacity),
            gpus_taken: self.gpus_taken,
            devices: self.devices_version,
        }
    }
}

impl Cluster {
    /// Applies `change` to a host's state and brings every view up to date along its path.
    pub(super) fn modify_host(&mut self, host: HostId, change: impl FnOnce(&mut HostState)) {
        self.update_host_with(host, false, change);
    }

    fn update_host_with(&mut self, host: HostId, attrs_changed: bool, change: impl FnOnce(&mut HostState)) {
        let capacity = self.topo.host_capacity(host);
        let state = &mut self.hosts[host.0 as usize];
        let before = state.view(capacity);
        let counted = (state.used, state.foreign);
        change(state);
        let after = state.view(capacity);
        if before == after && !attrs_changed && counted != (state.used, state.foreign) {
            // An overcommitted host shows no free capacity either way, yet what it holds moved:
            // what a gang's end would give back is another amount, so the state is another.
            self.bump_version();
            if !self.journaling {
                self.unjournaled += 1;
            }
            return;
        }
        self.apply(host, before, after, attrs_changed);
    }

    /// Moves the views from `before` to `after` along the host's path.
    pub(super) fn apply(&mut self, host: HostId, before: HostView, after: HostView, attrs_changed: bool) {
        if before == after && !attrs_changed {
            return;
        }
        self.bump_version();
        if !self.journaling {
            self.unjournaled += 1;
        }
        let path = self.path_of(host);
        let path = path.as_slice();
        if before.free != after.free {
            self.free_index.moved(path[0], before.free.gpus, after.free.gpus);
            for &d in path {
                let f = &mut self.free[d as usize];
                *f = f
                    .checked_sub(&before.free)
                    .expect("a domain holds its hosts' free capacity")
                    .saturating_add(&after.free);
            }
        }
        let devices = self.devices.as_deref_mut();
        self.classes.host_changed(host, before, after, attrs_changed, path, &self.topo, &self.hosts, devices);
        if !before.free.covers(&after.free) || (after.usable && !before.usable) || attrs_changed {
            self.epoch += 1;
        }
    }

    /// The domains from the host up to the root. Kept on the stack: every allocation and
    /// release of a gang moves each of its hosts' paths.
    fn path_of(&self, host: HostId) -> DomainPath {
        let mut path = DomainPath { inline: [0; INLINE_DEPTH], len: 0, spilled: Vec::new() };
        let mut at = Some(self.topo.host_domain(host));
        while let Some(d) = at {
            path.push(d.0);
            at = self.topo.parent(d);
        }
        path
    }

    pub(super) fn structure_changed(&mut self) {
        self.changed_unjournaled();
        self.generation += 1;
        self.epoch += 1;
        self.classes.structure_changed();
    }

    /// Adds a host; a removed host at the same path that gangs still hold comes back instead
    /// (the node returned), keeping what they hold.
    pub fn add_host(&mut self, spec: HostSpec) -> Result<HostId> {
        if let Some(h) = self.topo.find_host(&spec.path)
            && self.hosts[h.0 as usize].gone
        {
            self.modify_host(h, |s| s.gone = false);
            self.held.remove(&h);
            self.update_host_spec(h, spec)?;
            self.structure_changed();
            return Ok(h);
        }
        self.check_open_txns();
        let h = self.topo.add_host(&spec.path, spec.capacity, spec.flavor.as_deref())?;
        let (domains, slots) = (self.topo.domain_count(), self.topo.host_slots());
        self.free.resize(domains, crate::Resources::ZERO);
        self.classes.grow(slots);
        self.classes.grow_domains(domains);
        if self.hosts.len() < slots {
            self.hosts.resize_with(slots, HostState::default);
        }
        self.hosts[h.0 as usize] = HostState { ready: false, gone: false, ..HostState::default() };
        self.structure_changed();
        let HostSpec { attrs, ready, .. } = spec;
        self.update_host_with(h, true, |s| {
            s.attrs = attrs;
            s.ready = ready;
        });
        Ok(h)
    }

    /// Brings a host to `spec`: a new path moves it (its gangs go with it), a new capacity, flavor,
    /// labels or taints take effect at once. What gangs and other pods hold on it stays.
    pub fn update_host(&mut self, host: HostId, spec: HostSpec) -> Result<()> {
        self.check_live(host)?;
        self.update_host_spec(host, spec)
    }

    fn update_host_spec(&mut self, host: HostId, spec: HostSpec) -> Result<()> {
        self.check_open_txns();
        let current = self.topo.path_parts(self.topo.host_domain(host));
        let structural = current != spec.path
            || self.topo.host_capacity(host) != spec.capacity
            || self.topo.host_flavor(host) != spec.flavor.as_deref().and_then(|f| self.topo.flavor_id(f))
            || self.hosts[host.0 as usize].attrs != spec.attrs;
        if current != spec.path {
            if self.topo.find(&spec.path).is_some() {
                let message = format!("host `{}`: another domain has this path", spec.path.join("/"));
                return Err(InputError::invalid(self.topo.name(), None, "path", message).into());
            }
            // Out of the old path's sums, into the new one's.
            let capacity = self.topo.host_capacity(host);
            let before = self.hosts[host.0 as usize].view(capacity);
            self.apply(host, before, HostView::NONE, false);
            self.topo.move_host(host, &spec.path)?;
            let domains = self.topo.domain_count();
            self.free.resize(domains, Resources::ZERO);
            self.classes.grow_domains(domains);
            self.apply(host, HostView::NONE, before, false);
        }
        if self.topo.host_capacity(host) != spec.capacity {
            let state = &self.hosts[host.0 as usize];
            if state.gpus.as_ref().is_some_and(|g| u64::from(g.layout().gpu_count()) != spec.capacity.gpus) {
                // A layout for another GPU count no longer describes the host.
                self.swap_layout(host, None);
            }
            let before = self.hosts[host.0 as usize].view(self.topo.host_capacity(host));
            self.topo.set_host_capacity(host, spec.capacity);
            let after = self.hosts[host.0 as usize].view(spec.capacity);
            self.apply(host, before, after, false);
        }
        self.topo.set_host_flavor(host, spec.flavor.as_deref());
        let HostSpec { attrs, ready, .. } = spec;
        let attrs_changed = self.hosts[host.0 as usize].attrs != attrs;
        self.update_host_with(host, attrs_changed, |s| {
            s.attrs = attrs;
            s.ready = ready;
        });
        if structural {
            self.structure_changed();
        }
        Ok(())
    }

    /// Makes domain `d` a TPU torus of `spec`, or no longer one; nothing changes when it already
    /// is what `spec` says.
    pub fn set_torus(&mut self, d: crate::DomainId, spec: Option<crate::torus::TorusSpec>) -> Result<()> {
        if self.topo.torus(d) == spec.as_ref() {
            return Ok(());
        }
        self.topo.set_torus(d, spec)?;
        self.structure_changed();
        Ok(())
    }

    /// Marks a host schedulable and ready, or not; gangs on it keep it either way.
    pub fn set_ready(&mut self, host: HostId, ready: bool) -> Result<()> {
        self.check_live(host)?;
        self.modify_host(host, |s| s.ready = ready);
        Ok(())
    }

    /// Whether a host is offered to gangs (schedulable, ready, not removed).
    pub fn usable(&self, host: HostId) -> bool {
        self.hosts[host.0 as usize].usable()
    }

    /// Whether a host was removed and stays only because gangs still hold it.
    pub fn is_gone(&self, host: HostId) -> bool {
        self.hosts[host.0 as usize].gone
    }

    /// Removes a host. One that gangs still hold stays, unusable, until they release it
    /// ([`Removal::Held`]); it is dropped by the release that empties it. Other pods' usage on it
    /// must be released first.
    pub fn remove_host(&mut self, host: HostId) -> Result<Removal> {
        self.check_live(host)?;
        self.check_open_txns();
        let state = &self.hosts[host.0 as usize];
        if !state.foreign.is_zero() {
            let message = format!("host `{}` still carries {} of other pods", self.topo.host_name(host), state.foreign);
            return Err(InputError::invalid(self.topo.name(), None, "foreign", message).into());
        }
        self.modify_host(host, |s| s.gone = true);
        self.structure_changed();
        if !self.hosts[host.0 as usize].used.is_zero() {
            self.held.insert(host);
            return Ok(Removal::Held);
        }
        self.drop_host(host);
        Ok(Removal::Removed)
    }

    fn drop_host(&mut self, host: HostId) {
        self.held.remove(&host);
        self.update_host_with(host, true, |s| *s = HostState { gone: true, ..HostState::default() });
        self.topo.remove_host(host);
    }

    /// Drops the removed hosts that gangs no longer hold; call outside transactions (after a
    /// gang ends). Returns them.
    pub fn reap(&mut self) -> Vec<HostId> {
        self.check_open_txns();
        let done: Vec<HostId> = self
            .held
            .iter()
            .copied()
            .filter(|h| {
                let s = &self.hosts[h.0 as usize];
                s.gone && s.used.is_zero() && s.foreign.is_zero()
            })
            .collect();
        for &h in &done {
            self.drop_host(h);
        }
        self.reaped.extend_from_slice(&done);
        done
    }

    /// The hosts dropped by [`Cluster::reap`] since the last call.
    pub fn take_reaped(&mut self) -> Vec<HostId> {
        std::mem::take(&mut self.reaped)
    }

    /// Charges usage of pods trainyard did not place (it may exceed what is free: the pods are
    /// there whatever trainyard thought).
    pub fn charge_foreign(&mut self, host: HostId, amount: Resources) -> Result<()> {
        self.check_live(host)?;
        self.modify_host(host, |s| s.foreign = s.foreign.saturating_add(&amount));
        Ok(())
    }

    /// Releases usage charged by [`Cluster::charge_foreign`]; more than was charged is an error.
    pub fn release_foreign(&mut self, host: HostId, amount: Resources) -> Result<()> {
        self.check_live(host)?;
        let state = &self.hosts[host.0 as usize];
        let Some(left) = state.foreign.checked_sub(&amount) else {
            let capacity = self.topo.host_capacity(host);
            return Err(Error::OverRelease { host: self.topo.host_name(host).to_string(), capacity, released: amount });
        };
        self.modify_host(host, |s| s.foreign = left);
        Ok(())
    }

    /// Usage of other pods on a host.
    pub fn host_foreign(&self, host: HostId) -> Resources {
        self.hosts[host.0 as usize].foreign
    }

    /// Hosts where gangs and other pods together hold more than the capacity.
    pub fn overcommitted(&self) -> Vec<HostId> {
        self.topo
            .hosts()
            .filter(|&h| {
                let s = &self.hosts[h.0 as usize];
                !self.topo.host_capacity(h).covers(&s.used.saturating_add(&s.foreign))
            })
            .collect()
    }

    /// Every host by its path, with what it holds: equal for two clusters in the same state
    /// however they got there.
    pub fn canonical(&self) -> BTreeMap<String, CanonicalHost> {
        self.topo
            .hosts()
            .map(|h| {
                let s = &self.hosts[h.0 as usize];
                let host = CanonicalHost {
                    capacity: self.topo.host_capacity(h),
                    used: s.used,
                    foreign: s.foreign,
                    free: self.host_free(h),
                    usable: s.usable(),
                };
                (self.topo.path(self.topo.host_domain(h)), host)
            })
            .collect()
    }

    /// Recomputes every sum from the hosts and says which differs first (for tests): the tree's
    /// capacities, the base view and each class's own sums.
    pub fn audit(&self) -> std::result::Result<(), String> {
        let topo = &self.topo;
        let domains = topo.domain_count();
        let mut capacity = vec![Resources::ZERO; domains];
        for h in topo.hosts() {
            let mut at = Some(topo.host_domain(h));
            while let Some(d) = at {
                capacity[d.0 as usize] = capacity[d.0 as usize].saturating_add(&topo.host_capacity(h));
                at = topo.parent(d);
            }
        }
        let live: Vec<usize> =
            (0..domains).filter(|&d| topo.depth(crate::DomainId(d as u32)) != crate::model::DEAD_DEPTH).collect();
        let all = vec![true; topo.host_slots()];
        let base = super::classes::sums(topo, &self.hosts, &all, None, None, domains);
        for &d in &live {
            let have = topo.capacity(crate::DomainId(d as u32));
            if have != capacity[d] {
                return Err(format!("domain {d}: capacity {have} but its hosts have {}", capacity[d]));
            }
            if base[d] != self.free[d] {
                return Err(format!("domain {d}: free {} but its hosts have {}", self.free[d], base[d]));
            }
        }
        let mut indexed: Vec<(u32, u64)> = topo
            .hosts()
            .map(|h| (topo.host_domain(h).0, self.hosts[h.0 as usize].free(topo.host_capacity(h)).gpus))
            .filter(|&(_, g)| g > 0)
            .collect();
        indexed.sort_unstable();
        let oversized = indexed.iter().filter(|&&(_, g)| g > super::free_index::MAX_BUCKET).count();
        indexed.retain(|&(_, g)| g <= super::free_index::MAX_BUCKET);
        let have = self.free_index.entries();
        if have != indexed || self.free_index.oversized() != oversized {
            return Err(format!("hosts by free GPUs: indexed {have:?} but the hosts have {indexed:?}"));
        }
        for h in topo.hosts() {
            let s = &self.hosts[h.0 as usize];
            let held = u64::from(s.gpus_taken.count_ones());
            let all = s.gpus.as_ref().map_or(0, |g| g.all());
            if held > s.used.gpus || s.gpus_taken & !all != 0 {
                return Err(format!(
                    "host {}: GPU indices {:b} but {} GPUs in use",
                    topo.host_name(h),
                    s.gpus_taken,
                    s.used
                ));
            }
        }
        for c in self.classes.in_use().filter(|&c| self.classes.has_own_sums(c)) {
            let admits: Vec<bool> = (0..topo.host_slots()).map(|h| self.classes.admits(c, HostId(h as u32))).collect();
            let devices = self.classes.device_fit(c).map(|f| (f.pod, self.classes.fits(c)));
            let want = super::classes::sums(topo, &self.hosts, &admits, self.classes.layout(c), devices, domains);
            let have = self.classes.free(c, &self.free);
            if let Some(&d) = live.iter().find(|&&d| want[d] != have[d]) {
                return Err(format!("class {c:?}, domain {d}: free {} but its hosts have {}", have[d], want[d]));
            }
        }
        Ok(())
    }

    pub(super) fn check_live(&self, host: HostId) -> Result<()> {
        if self.topo.is_host(host) {
            return Ok(());
        }
        let message = format!("host #{} is not part of the cluster", host.0);
        Err(InputError::invalid(self.topo.name(), None, "host", message).into())
    }

    pub(super) fn check_open_txns(&self) {
        debug_assert_eq!(self.open_txns, 0, "the cluster changes between transactions, never inside one");
    }
}

/// Domains a path holds without a heap allocation; deeper trees spill to the heap.
const INLINE_DEPTH: usize = 12;

/// A host's path of domains, host first.
struct DomainPath {
    inline: [u32; INLINE_DEPTH],
    len: usize,
    spilled: Vec<u32>,
}

impl DomainPath {
    fn push(&mut self, d: u32) {
        if self.len < INLINE_DEPTH && self.spilled.is_empty() {
            self.inline[self.len] = d;
            self.len += 1;
        } else {
            if self.spilled.is_empty() {
                self.spilled.extend_from_slice(&self.inline[..self.len]);
            }
            self.spilled.push(d);
        }
    }

    fn as_slice(&self) -> &[u32] {
        if self.spilled.is_empty() { &self.inline[..self.len] } else { &self.spilled }
    }
}

#[cfg(test)]
mod path_tests {
    use super::*;

    #[test]
    fn a_path_deeper_than_the_inline_room_spills_whole_and_in_order() {
        let mut path = DomainPath { inline: [0; INLINE_DEPTH], len: 0, spilled: Vec::new() };
        for d in 0..INLINE_DEPTH as u32 {
            path.push(d);
        }
        assert_eq!(path.as_slice(), (0..INLINE_DEPTH as u32).collect::<Vec<_>>().as_slice());
        path.push(99);
        path.push(100);
        let mut want: Vec<u32> = (0..INLINE_DEPTH as u32).collect();
        want.extend([99, 100]);
        assert_eq!(path.as_slice(), want.as_slice());
    }
}

#[cfg(test)]
mod version_tests {
    use super::*;

    #[test]
    fn usage_hidden_by_an_overcommitted_host_still_moves_the_version() {
        let yaml = "name: t\nlevels: [host]\ngenerate:\n  counts: [2]\n  node: {gpus: 8, cpus: 8}\n";
        let mut c = Cluster::from_yaml(yaml, "t.yaml").unwrap();
        c.allocate(HostId(0), Resources::gpus(8)).unwrap();
        let full = c.version();
        // The host shows no free GPUs before and after, but a gang's end now frees 7, not 8.
        c.charge_foreign(HostId(0), Resources::gpus(1)).unwrap();
        assert_eq!(c.host_free(HostId(0)).gpus, 0);
        assert_ne!(c.version(), full);
        let charged = c.version();
        c.release_foreign(HostId(0), Resources::gpus(1)).unwrap();
        assert_ne!(c.version(), charged);
    }

    #[test]
    fn a_rollback_gives_the_version_back_and_the_next_change_a_new_one() {
        let yaml = "name: t\nlevels: [host]\ngenerate:\n  counts: [2]\n  node: {gpus: 8, cpus: 8}\n";
        let mut c = Cluster::from_yaml(yaml, "t.yaml").unwrap();
        let start = c.version();
        let txn = c.begin();
        c.allocate(HostId(0), Resources::gpus(2)).unwrap();
        let what_if = c.version();
        c.rollback(txn);
        assert_eq!(c.version(), start, "the state is as it was");
        // Another state than the what-if's: it must not carry the what-if's version.
        c.allocate(HostId(1), Resources::gpus(2)).unwrap();
        assert_ne!(c.version(), what_if);
        assert_ne!(c.version(), start);
    }
}
