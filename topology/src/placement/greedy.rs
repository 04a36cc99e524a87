//! Greedy topology-aware gang placement: lowest level that fits, best fit within it.
//!
//! One depth-first pass computes, for every domain that can hold at least one pod, how many
//! units of the gang fit in it (`fits`): pods, or whole slices at and above the slice level.
//! Subtrees that cannot hold a single pod are skipped. The chosen domain is the one at the
//! lowest allowed level whose `fits` is the smallest that still holds the whole gang (best
//! fit: keep big holes for big gangs). Units are then spread inside it the same way, child by
//! child: the tightest child that takes all remaining units, otherwise the roomiest child
//! first. Because `fits` is exact for identical pods, the search is complete: if any allowed
//! domain can hold the gang, one is found.

use super::{CostModel, Placement, PlacementFailure, PlacementRequest, SearchPath};
use crate::{DomainId, HostId, Resources, Topology};

/// Per-placement working memory, kept between calls to avoid allocation.
#[derive(Clone, Debug)]
pub(crate) struct Scratch {
    /// Units of the gang each domain holds (valid for domains visited by the last count).
    pub(crate) fits: Vec<u64>,
    /// Per depth: best-fit candidate `(fits, free gpus, domain)` holding the whole gang
    /// (`(free gpus, fits, domain)` for hosts).
    best: Vec<Option<(u64, u64, u32)>>,
    /// Per depth: the most units any domain there can take.
    pub(crate) most: Vec<u64>,
    /// A working copy of the free capacity for searches that place set after set (kept so
    /// that a search copies into it instead of allocating a cluster-sized vector).
    pub(crate) local: Vec<Resources>,
}

impl Scratch {
    pub(crate) fn new(domains: usize, host_depth: u8) -> Scratch {
        let depths = usize::from(host_depth) + 1;
        Scratch { fits: vec![0; domains], best: vec![None; depths], most: vec![0; depths], local: Vec::new() }
    }
}

/// How a request's pods group into units level by level.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Units {
    /// Depth of the slice level, or `u8::MAX` when the gang is not sliced.
    pub(crate) slice_depth: u8,
    /// Pods per slice (1 when not sliced).
    pub(crate) size: u64,
    /// Pods in the gang.
    pub(crate) pods: u64,
    /// Only hosts of this flavor count.
    pub(crate) flavor: Option<u16>,
}

impl Units {
    /// Checks the slice arithmetic of a request.
    pub(crate) fn of(request: &PlacementRequest) -> Result<Units, PlacementFailure> {
        let pods = u64::from(request.pods);
        let flavor = request.flavor;
        match request.constraint.slice {
            None => Ok(Units { slice_depth: u8::MAX, size: 1, pods, flavor }),
            Some(s) if s.size == 0 || !request.pods.is_multiple_of(s.size) => {
                Err(PlacementFailure::BadSlice { pods: request.pods, size: s.size })
            }
            Some(s) => Ok(Units { slice_depth: s.depth, size: u64::from(s.size), pods, flavor }),
        }
    }

    /// Pods in one unit at `depth`.
    pub(crate) fn pods_per_unit(&self, depth: u8) -> u64 {
        if depth <= self.slice_depth { self.size } else { 1 }
    }

    /// Units the whole gang needs at `depth`.
    pub(crate) fn need(&self, depth: u8) -> u64 {
        self.pods / self.pods_per_unit(depth)
    }
}

/// The failure for a gang larger than the free capacity, or with no domain holding a pod.
pub(crate) fn capacity_failure(free: &[Resources], request: &PlacementRequest) -> PlacementFailure {
    PlacementFailure::Capacity { requested: request.total(), free: free[0] }
}

/// Counts fits into `scratch`, or fails fast when the gang obviously cannot fit.
pub(crate) fn count(
    topo: &Topology,
    free: &[Resources],
    request: &PlacementRequest,
    scratch: &mut Scratch,
) -> Result<Units, PlacementFailure> {
    count_under(topo, free, request, DomainId::ROOT, scratch)
}

/// [`count`] within the subtree of `root` only.
fn count_under(
    topo: &Topology,
    free: &[Resources],
    request: &PlacementRequest,
    root: DomainId,
    scratch: &mut Scratch,
) -> Result<Units, PlacementFailure> {
    let units = Units::of(request)?;
    if request.pods == 0 || request.pod.is_zero() || !free[root.0 as usize].covers(&request.total()) {
        return Err(capacity_failure(free, request));
    }
    scratch.best.iter_mut().for_each(|b| *b = None);
    scratch.most.iter_mut().for_each(|m| *m = 0);
    count_fits(topo, free, request.pod, &units, root, scratch);
    Ok(units)
}

/// The failure to report when no allowed domain holds the gang.
pub(crate) fn no_fit(
    topo: &Topology,
    free: &[Resources],
    request: &PlacementRequest,
    scratch: &Scratch,
) -> PlacementFailure {
    let top = request.constraint.top_depth;
    let units = Units::of(request).expect("checked by count");
    if scratch.fits[0] >= units.need(0) && top > 0 {
        return PlacementFailure::Topology {
            level: topo.levels()[usize::from(top) - 1].clone(),
            pods: request.pods,
            best_domain_fit: scratch.most[usize::from(top)] * units.pods_per_unit(top),
        };
    }
    capacity_failure(free, request)
}

/// Places a gang over the given free capacities (indexed by domain).
pub(crate) fn place(
    topo: &Topology,
    free: &[Resources],
    request: &PlacementRequest,
    model: &CostModel,
    scratch: &mut Scratch,
) -> Result<Placement, PlacementFailure> {
    place_under(topo, free, request, DomainId::ROOT, model, scratch)
}

/// [`place`] within the subtree of `root`; the request's top depth should not lie above it.
pub(crate) fn place_under(
    topo: &Topology,
    free: &[Resources],
    request: &PlacementRequest,
    root: DomainId,
    model: &CostModel,
    scratch: &mut Scratch,
) -> Result<Placement, PlacementFailure> {
    let units = count_under(topo, free, request, root, scratch)?;
    let top = request.constraint.top_depth.max(topo.depth(root));
    let chosen = (top..=topo.host_depth()).rev().find_map(|depth| scratch.best[usize::from(depth)]);
    let Some((_, _, domain)) = chosen else {
        return Err(no_fit(topo, free, request, scratch));
    };
    let domain = DomainId(domain);
    let mut hosts = Vec::with_capacity(request.pods as usize);
    let k = units.need(topo.depth(domain));
    spread(topo, free, &units, domain, k, &scratch.fits, &mut hosts);
    Ok(finish(topo, free, request.pod, hosts, SearchPath::Greedy, model))
}

/// A lower bound on the cost of any placement of the request: at every level the gang needs
/// at least as many domains as the roomiest one there divides it into, and strands nothing.
/// When greedy meets it, greedy is optimal and the exact search can be skipped.
pub(crate) fn lower_bound(topo: &Topology, units: &Units, scratch: &Scratch, model: &CostModel) -> u64 {
    let h = topo.host_depth();
    (1..=h)
        .map(|d| {
            let most = scratch.most[usize::from(d)].max(1);
            model.weight(d, h) * units.need(d).div_ceil(most)
        })
        .sum()
}

/// Builds the [`Placement`] value of a host list: its enclosing domain and its cost.
pub(crate) fn finish(
    topo: &Topology,
    free: &[Resources],
    pod: Resources,
    hosts: Vec<HostId>,
    path: SearchPath,
    model: &CostModel,
) -> Placement {
    let mut domain = topo.host_domain(hosts[0]);
    for &h in &hosts[1..] {
        while topo.ancestor_at(topo.host_domain(h), topo.depth(domain)) != domain {
            domain = topo.parent(domain).unwrap_or(DomainId::ROOT);
        }
    }
    let sets = vec![super::PlacedSet { pods: u32::try_from(hosts.len()).unwrap_or(u32::MAX), pod }];
    let mut placement = Placement {
        hosts,
        sets,
        domain,
        depth: topo.depth(domain),
        cost: 0,
        path,
        lower_bound: None,
        layout: None,
        gpus: Vec::new(),
        device_fit: None,
        devices: Vec::new(),
    };
    placement.cost = model.cost(topo, free, pod, &placement.per_host());
    placement
}

fn count_fits(
    topo: &Topology,
    free: &[Resources],
    pod: Resources,
    units: &Units,
    d: DomainId,
    scratch: &mut Scratch,
) -> u64 {
    let f = free[d.0 as usize];
    if !f.covers(&pod) {
        scratch.fits[d.0 as usize] = 0;
        return 0;
    }
    let children = topo.children(d);
    if children.is_empty() {
        return count_leaf(topo, f, pod, units, d, scratch);
    }
    // Hosts, most of the tree, are counted here rather than by a call each: a count walks
    // every host with room for a pod, once per placement search.
    let below = children.iter().fold(0u64, |acc, &c| {
        let c = DomainId(c);
        let fits = match topo.as_host(c) {
            Some(_) => {
                let f = free[c.0 as usize];
                if f.covers(&pod) {
                    debug_assert!(topo.children(c).is_empty(), "hosts are leaves");
                    count_leaf(topo, f, pod, units, c, scratch)
                } else {
                    scratch.fits[c.0 as usize] = 0;
                    0
                }
            }
            None => count_fits(topo, free, pod, units, c, scratch),
        };
        acc.saturating_add(fits)
    });
    record_fits(topo, f, units, d, below, false, scratch)
}

/// [`count_fits`] of a domain without children (a host) that has room for a pod.
#[inline(always)]
fn count_leaf(topo: &Topology, f: Resources, pod: Resources, units: &Units, d: DomainId, scratch: &mut Scratch) -> u64 {
    let other_flavor = units.flavor.is_some_and(|want| topo.as_host(d).and_then(|h| topo.host_flavor(h)) != Some(want));
    let below = if other_flavor { 0 } else { f.fit_count(&pod) };
    record_fits(topo, f, units, d, below, true, scratch)
}

/// Records what a domain with room for a pod holds (`below`: pods, or units of the level below)
/// and whether it is the best candidate of its level so far.
#[inline(always)]
fn record_fits(
    topo: &Topology,
    f: Resources,
    units: &Units,
    d: DomainId,
    below: u64,
    leaf: bool,
    scratch: &mut Scratch,
) -> u64 {
    let depth = topo.depth(d);
    // At the slice level pods below become whole slices; above it, slices simply add up.
    let fits = if depth == units.slice_depth { below / units.size } else { below };
    scratch.fits[d.0 as usize] = fits;
    let at = usize::from(depth);
    scratch.most[at] = scratch.most[at].max(fits);
    if fits >= units.need(depth) {
        // Hosts compare by the GPUs they would strand (the cost model's tie-breaker), other
        // domains by how many units they hold (tightest first).
        let candidate = if leaf { (f.gpus, fits, d.0) } else { (fits, f.gpus, d.0) };
        let best = &mut scratch.best[at];
        if best.is_none_or(|b| candidate < b) {
            *best = Some(candidate);
        }
    }
    fits
}

/// Puts `k` units into domain `d`, which is known to hold at least `k`.
pub(crate) fn spread(
    topo: &Topology,
    free: &[Resources],
    units: &Units,
    d: DomainId,
    k: u64,
    fits: &[u64],
    out: &mut Vec<HostId>,
) {
    let depth = topo.depth(d);
    if let Some(host) = topo.as_host(d) {
        out.extend(std::iter::repeat_n(host, (k * units.pods_per_unit(depth)) as usize));
        return;
    }
    let mut remaining = k * units.pods_per_unit(depth) / units.pods_per_unit(depth + 1);
    let mut children: Vec<u32> = topo.children(d).iter().copied().filter(|&c| fits[c as usize] > 0).collect();
    while remaining > 0 {
        let tightest = children
            .iter()
            .copied()
            .filter(|&c| fits[c as usize] >= remaining)
            .min_by_key(|&c| (fits[c as usize], free[c as usize].gpus, c));
        if let Some(c) = tightest {
            spread(topo, free, units, DomainId(c), remaining, fits, out);
            return;
        }
        // No child takes the rest: fill the roomiest one and continue.
        let (pos, &roomiest) = children
            .iter()
            .enumerate()
            .max_by_key(|&(_, &c)| (fits[c as usize], std::cmp::Reverse(c)))
            .expect("the domain holds `k` units, so some child has room");
        let take = fits[roomiest as usize];
        spread(topo, free, units, DomainId(roomiest), take, fits, out);
        remaining -= take;
        children.swap_remove(pos);
    }
}
