//! GPU indices for the pods of gangs on hosts whose GPU layout is known: hosts get a layout
//! (a built-in SKU or an NCCL topology file), allocation hands each pod its GPUs, release gives
//! them back, and eligibility classes of a gang's layout see only the GPUs its pods can use.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::live::HostView;
use super::{Cluster, HostState};
use crate::intra_node::{self, GpuGroups, HostLayout};
use crate::{Error, HostId, InputError, LayoutNeed, Placement, Resources, Result};

/// What one host offers a class: `free` as it stands, or for a class of a GPU layout, GPUs only
/// in whole pods of the layout ([`GpuGroups::packable`]), capped by the free count (which also
/// counts GPUs of other pods, whose indices are unknown). For a class of a device need, `devices`
/// is how many of its pods the host's free devices hold, with their pod: GPUs are offered for
/// that many pods only (every resource the pod asks, when it asks no GPUs).
pub(crate) fn offered(
    state: &HostState,
    view: HostView,
    layout: Option<LayoutNeed>,
    devices: Option<(u32, Resources)>,
) -> Resources {
    let mut offer = view.free;
    if let Some(need) = layout {
        let k = u64::from(need.gpus);
        let packs = state.gpus.as_ref().map_or(0, |g| g.packable(!view.gpus_taken, need.gpus, need.within));
        offer.gpus = packs.min(view.free.gpus / k.max(1)) * k;
    }
    if let Some((pods, pod)) = devices {
        let pods = u64::from(pods);
        if pod.gpus > 0 {
            offer.gpus = offer.gpus.min(pods.saturating_mul(pod.gpus));
        } else {
            let cap = pod.checked_mul(pods).unwrap_or(offer);
            offer = offer.component_min(&cap);
        }
    }
    offer
}

impl Cluster {
    /// Gives hosts the layouts the description names (before any class exists).
    pub(super) fn set_layouts(
        &mut self,
        layouts: Vec<(crate::spec::NodeLayout, String)>,
        resolve: impl Fn(&str) -> Option<std::result::Result<HostLayout, String>>,
    ) -> Result<()> {
        let mut known: BTreeMap<String, Arc<GpuGroups>> = BTreeMap::new();
        for (crate::spec::NodeLayout { path, name, line, field }, source_name) in layouts {
            let invalid =
                |message: String| Error::from(InputError::invalid(&source_name, line, field.clone(), message));
            let groups = match known.get(&name) {
                Some(g) => g.clone(),
                None => {
                    let layout = match intra_node::builtin(&name) {
                        Some(l) => l,
                        None => match resolve(&name) {
                            Some(Ok(l)) => l,
                            Some(Err(e)) => return Err(invalid(e)),
                            None => {
                                return Err(invalid(format!(
                                    "`{name}` is neither a built-in GPU layout ({}) nor an NCCL topology file",
                                    intra_node::BUILTIN_NAMES.join(", ")
                                )));
                            }
                        },
                    };
                    let g = Arc::new(GpuGroups::new(Arc::new(layout)));
                    known.insert(name.clone(), g.clone());
                    g
                }
            };
            let hosts: Vec<HostId> = match &path {
                None => self.topo.hosts().collect(),
                Some(p) => self.topo.find_host(p).into_iter().collect(),
            };
            for h in hosts {
                let have = self.topo.host_capacity(h).gpus;
                let want = u64::from(groups.layout().gpu_count());
                if have != want {
                    let host = self.topo.host_name(h);
                    return Err(invalid(format!("`{name}` has {want} GPUs but node `{host}` has {have}")));
                }
                self.hosts[h.0 as usize].gpus = Some(groups.clone());
            }
        }
        Ok(())
    }

    /// Gives a host a GPU layout, or takes it away; refused while gangs hold GPU indices there.
    pub fn set_host_layout(&mut self, host: HostId, layout: Option<Arc<GpuGroups>>) -> Result<()> {
        self.check_live(host)?;
        self.check_open_txns();
        let name = self.topo.host_name(host).to_string();
        if let Some(g) = &layout
            && u64::from(g.layout().gpu_count()) != self.topo.host_capacity(host).gpus
        {
            let message = format!(
                "the layout has {} GPUs but node `{name}` has {}",
                g.layout().gpu_count(),
                self.topo.host_capacity(host).gpus
            );
            return Err(InputError::invalid(self.topo.name(), None, "intra_node", message).into());
        }
        if self.hosts[host.0 as usize].gpus_taken != 0 {
            let message = format!("node `{name}`: gangs hold GPU indices there");
            return Err(InputError::invalid(self.topo.name(), None, "intra_node", message).into());
        }
        self.swap_layout(host, layout);
        self.structure_changed();
        Ok(())
    }

    /// Gives a host another layout (or none), taking it out of every view with the old one and
    /// back in with the new; GPU indices held there lose their meaning and are forgotten.
    pub(super) fn swap_layout(&mut self, host: HostId, layout: Option<Arc<GpuGroups>>) {
        let before = self.hosts[host.0 as usize].view(self.topo.host_capacity(host));
        self.apply(host, before, HostView::NONE, false);
        let state = &mut self.hosts[host.0 as usize];
        (state.gpus, state.gpus_taken) = (layout, 0);
        self.apply(host, HostView::NONE, before, false);
    }

    /// The GPU layout of a host, when known.
    pub fn host_layout(&self, host: HostId) -> Option<&GpuGroups> {
        self.hosts.get(host.0 as usize).and_then(|s| s.gpus.as_deref())
    }

    /// GPU indices gangs hold on a host, as a mask.
    pub fn host_gpus_taken(&self, host: HostId) -> u64 {
        self.hosts.get(host.0 as usize).map_or(0, |s| s.gpus_taken)
    }

    /// The GPU mask of every pod of `placement` (0 for a pod on a host without a layout); empty
    /// when no pod lands on such a host. Pods of the gang's layout go first, each inside one
    /// group; a pod of theirs that finds none is an error (placement counted wrong).
    pub(super) fn assign_gpus(&self, placement: &Placement) -> Result<Vec<u64>> {
        if placement.hosts.iter().all(|h| self.hosts[h.0 as usize].gpus.is_none()) {
            return Ok(Vec::new());
        }
        let pods: Vec<(HostId, Resources)> = placement.pods().collect();
        let constrained = |pod: &Resources| placement.layout.is_some_and(|n| pod.gpus == u64::from(n.gpus));
        let order = (0..pods.len())
            .filter(|&i| constrained(&pods[i].1))
            .chain((0..pods.len()).filter(|&i| !constrained(&pods[i].1)));
        let mut free: BTreeMap<HostId, u64> = BTreeMap::new();
        let mut masks = vec![0u64; pods.len()];
        for i in order.collect::<Vec<_>>() {
            let (host, pod) = pods[i];
            let Some(groups) = self.hosts[host.0 as usize].gpus.as_deref() else { continue };
            let Ok(k) = u8::try_from(pod.gpus) else { continue };
            let left = free.entry(host).or_insert_with(|| groups.all() & !self.hosts[host.0 as usize].gpus_taken);
            let picked = match placement.layout.filter(|_| constrained(&pod)) {
                Some(need) => Some(groups.pick_within(*left, k, need.within).ok_or_else(|| Error::GpuLayout {
                    host: self.topo.host_name(host).to_string(),
                    gpus: k,
                    within: need.within,
                })?),
                // Fewer indices free than the count says (GPUs of other pods): the pod's are unknown.
                None => groups.pick(*left, k),
            };
            if let Some(mask) = picked {
                *left &= !mask;
                masks[i] = mask;
            }
        }
        Ok(masks)
    }
}

/// `(host, what the pods take there, their GPU indices)`, sorted by host; `gpus` holds one mask
/// per pod or nothing.
pub(super) fn per_host_with_gpus(placement: &Placement, gpus: &[u64]) -> PerHost {
    let mask = |i: usize| gpus.get(i).copied().unwrap_or(0);
    // Most gangs sit on one host: no list then (every start and every end comes through here).
    if let Some(&first) = placement.hosts.first()
        && placement.hosts.iter().all(|&h| h == first)
    {
        let mut sum = Resources::ZERO;
        let mut m = 0;
        for (i, (_, pod)) in placement.pods().enumerate() {
            sum = sum.saturating_add(&pod);
            m |= mask(i);
        }
        return PerHost::One([(first, sum, m)]);
    }
    let mut pods: Vec<(HostId, Resources, u64)> =
        placement.pods().enumerate().map(|(i, (h, r))| (h, r, mask(i))).collect();
    pods.sort_unstable_by_key(|&(h, _, _)| h);
    // Pods of one host fold into the first of them, in place.
    pods.dedup_by(|(h, pod, mask), (first, sum, m)| {
        if h != first {
            return false;
        }
        *sum = sum.saturating_add(pod);
        *m |= *mask;
        true
    });
    PerHost::Many(pods)
}

/// What [`per_host_with_gpus`] gives: one host inline, or a list.
pub(super) enum PerHost {
    One([(HostId, Resources, u64); 1]),
    Many(Vec<(HostId, Resources, u64)>),
}

impl PerHost {
    pub(super) fn as_slice(&self) -> &[(HostId, Resources, u64)] {
        match self {
            PerHost::One(one) => one,
            PerHost::Many(many) => many,
        }
    }
}
