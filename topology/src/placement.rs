//! Greedy topology-aware gang placement: lowest level that fits, best fit within it.
//!
//! One depth-first pass computes, for every domain that can hold at least one pod, how many
//! pods of the gang's shape fit in it (`fits`). Subtrees that cannot hold a single pod are
//! skipped. The chosen domain is the one at the lowest allowed level whose `fits` is the
//! smallest that still holds the whole gang (best fit: keep big holes for big gangs). Pods are
//! then spread inside it the same way, child by child: the tightest child that takes all
//! remaining pods, otherwise the roomiest child first. Because `fits` is exact for identical
//! pods, the search is complete: if any allowed domain can hold the gang, one is found.

use crate::{DomainId, HostId, LevelConstraint, Resources, Topology};

/// What to place: `pods` copies of `pod`, within `constraint`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PlacementRequest {
    /// Number of pods in the gang.
    pub pods: u32,
    /// Resources of each pod.
    pub pod: Resources,
    /// Resolved topology request.
    pub constraint: LevelConstraint,
}

/// Where every pod of a gang goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Host of pod `i`.
    pub hosts: Vec<HostId>,
    /// The smallest domain that contains every pod.
    pub domain: DomainId,
    /// Depth of that domain (0 = spans the whole cluster).
    pub depth: u8,
}

impl Placement {
    /// `(host, pods on it)`, sorted by host.
    pub fn per_host(&self) -> Vec<(HostId, u32)> {
        let mut hosts = self.hosts.clone();
        hosts.sort_unstable();
        let mut out: Vec<(HostId, u32)> = Vec::new();
        for h in hosts {
            match out.last_mut() {
                Some((last, n)) if *last == h => *n += 1,
                _ => out.push((h, 1)),
            }
        }
        out
    }
}

/// Why a gang does not fit now. An expected outcome, not an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlacementFailure {
    /// The whole cluster cannot hold the gang: not enough free, or free only in pieces too small for a pod.
    Capacity {
        /// What the gang needs in total.
        requested: Resources,
        /// What the cluster has free in total.
        free: Resources,
    },
    /// The cluster could hold the gang, but no single domain of the required level can.
    Topology {
        /// The required level.
        level: String,
        /// Pods the gang has.
        pods: u32,
        /// Most pods any one domain of that level could take now.
        best_domain_fit: u64,
    },
}

/// Per-placement working memory, kept between calls to avoid allocation.
#[derive(Clone, Debug)]
pub(crate) struct Scratch {
    fits: Vec<u64>,
    /// Per depth: best-fit candidate `(fits, free gpus, domain)` holding the whole gang.
    best: Vec<Option<(u64, u64, u32)>>,
    /// Per depth: the most pods any domain there can take.
    most: Vec<u64>,
}

impl Scratch {
    pub(crate) fn new(domains: usize, host_depth: u8) -> Scratch {
        let depths = usize::from(host_depth) + 1;
        Scratch { fits: vec![0; domains], best: vec![None; depths], most: vec![0; depths] }
    }
}

/// Places a gang over the given free capacities (indexed by domain).
pub(crate) fn place(
    topo: &Topology,
    free: &[Resources],
    request: &PlacementRequest,
    scratch: &mut Scratch,
) -> Result<Placement, PlacementFailure> {
    let n = u64::from(request.pods);
    let requested =
        request.pod.checked_mul(n).unwrap_or(Resources { gpus: u64::MAX, cpu_milli: u64::MAX, memory_mib: u64::MAX });
    let capacity_failure = || PlacementFailure::Capacity { requested, free: free[0] };
    if n == 0 || request.pod.is_zero() || !free[0].covers(&requested) {
        return Err(capacity_failure());
    }
    scratch.best.iter_mut().for_each(|b| *b = None);
    scratch.most.iter_mut().for_each(|m| *m = 0);
    let in_cluster = count_fits(topo, free, request.pod, n, DomainId::ROOT, scratch);
    let top = request.constraint.top_depth;
    let chosen = (top..=topo.host_depth()).rev().find_map(|depth| scratch.best[usize::from(depth)]);
    let Some((_, _, domain)) = chosen else {
        if in_cluster >= n && top > 0 {
            return Err(PlacementFailure::Topology {
                level: topo.levels()[usize::from(top) - 1].clone(),
                pods: request.pods,
                best_domain_fit: scratch.most[usize::from(top)],
            });
        }
        return Err(capacity_failure());
    };
    let domain = DomainId(domain);
    let mut hosts = Vec::with_capacity(request.pods as usize);
    spread(topo, free, domain, n, &scratch.fits, &mut hosts);
    Ok(Placement { hosts, domain, depth: topo.depth(domain) })
}

fn count_fits(topo: &Topology, free: &[Resources], pod: Resources, n: u64, d: DomainId, scratch: &mut Scratch) -> u64 {
    let f = free[d.0 as usize];
    if !f.covers(&pod) {
        scratch.fits[d.0 as usize] = 0;
        return 0;
    }
    let children = topo.children(d);
    let fits = if children.is_empty() {
        f.fit_count(&pod)
    } else {
        children.iter().fold(0u64, |acc, &c| acc.saturating_add(count_fits(topo, free, pod, n, DomainId(c), scratch)))
    };
    scratch.fits[d.0 as usize] = fits;
    let depth = usize::from(topo.depth(d));
    scratch.most[depth] = scratch.most[depth].max(fits);
    if fits >= n {
        let candidate = (fits, f.gpus, d.0);
        let best = &mut scratch.best[depth];
        if best.is_none_or(|b| candidate < b) {
            *best = Some(candidate);
        }
    }
    fits
}

/// Puts `k` pods into domain `d`, which is known to hold at least `k`.
fn spread(topo: &Topology, free: &[Resources], d: DomainId, k: u64, fits: &[u64], out: &mut Vec<HostId>) {
    if let Some(host) = topo.as_host(d) {
        out.extend(std::iter::repeat_n(host, k as usize));
        return;
    }
    let mut children: Vec<u32> = topo.children(d).iter().copied().filter(|&c| fits[c as usize] > 0).collect();
    let mut remaining = k;
    while remaining > 0 {
        let tightest = children
            .iter()
            .copied()
            .filter(|&c| fits[c as usize] >= remaining)
            .min_by_key(|&c| (fits[c as usize], free[c as usize].gpus, c));
        if let Some(c) = tightest {
            spread(topo, free, DomainId(c), remaining, fits, out);
            return;
        }
        // No child takes the rest: fill the roomiest one and continue.
        let (pos, &roomiest) = children
            .iter()
            .enumerate()
            .max_by_key(|&(_, &c)| (fits[c as usize], std::cmp::Reverse(c)))
            .expect("the domain holds `k` pods, so some child has room");
        let take = fits[roomiest as usize];
        spread(topo, free, DomainId(roomiest), take, fits, out);
        remaining -= take;
        children.swap_remove(pos);
    }
}
