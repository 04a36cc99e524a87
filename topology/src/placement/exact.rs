//! Exact placement of one pod set: a dynamic program over the topology tree.
//!
//! The cost of `cost.rs` adds up over the tree: a domain that receives `k >= 1` pods pays its
//! own weight plus the cheapest way to split `k` among its children, and a host pays its
//! weight plus what it strands. So for every domain the cheapest cost of holding `k` pods,
//! for every `k` up to the gang size, follows from its children's tables by a min-plus
//! convolution. The table at the top answers the question exactly; walking back down the
//! tables recovers the hosts. Slices restrict tables at the slice level to whole slices.
//!
//! The work is bounded by the convolution steps, counted before each one; past the budget
//! the search gives up and the caller keeps the greedy answer. Counting steps instead of
//! reading a clock keeps replays deterministic.

use super::greedy::{self, Units};
use super::{CostModel, Placement, PlacementRequest, SearchPath};
use crate::{DomainId, HostId, Resources, Topology};

/// Convolution steps one exact search may spend (about 50 ms on one core).
pub(crate) const STEP_BUDGET: u64 = 40_000_000;

const INF: u64 = u64::MAX / 4;

/// Per-search working memory, kept between calls.
#[derive(Clone, Debug, Default)]
pub(crate) struct Scratch {
    /// Every domain's cost table, back to back.
    arena: Vec<u64>,
    /// Where a domain's table starts in `arena` (valid for tables built by this search).
    start: Vec<u32>,
    /// Length of each table (`max pods + 1`), 0 when not built.
    len: Vec<u32>,
}

struct Search<'a> {
    topo: &'a Topology,
    free: &'a [Resources],
    pod: Resources,
    units: Units,
    fits: &'a [u64],
    model: &'a CostModel,
    steps: u64,
    budget: u64,
    scratch: &'a mut Scratch,
}

/// The cheapest placement under the cost model, or `None` when the gang does not fit or the
/// step budget ran out. `fits` must come from a greedy count of the same request.
pub(crate) fn place(
    topo: &Topology,
    free: &[Resources],
    request: &PlacementRequest,
    model: &CostModel,
    greedy: &greedy::Scratch,
    scratch: &mut Scratch,
) -> Option<Placement> {
    let units = Units::of(request).ok()?;
    let n = u64::from(request.pods);
    let fits = &greedy.fits;
    let depth = search_depth(topo, request, &units, fits);
    scratch.arena.clear();
    scratch.start.resize(topo.domain_count(), 0);
    scratch.len.clear();
    scratch.len.resize(topo.domain_count(), 0);
    let mut search =
        Search { topo, free, pod: request.pod, units, fits, model, steps: 0, budget: STEP_BUDGET, scratch };
    let mut best: Option<(u64, DomainId)> = None;
    for d in domains_at(topo, fits, depth) {
        if fits[d.0 as usize] < units.need(depth) {
            continue;
        }
        let cost = search.table(d)?[n as usize];
        if cost < INF && best.is_none_or(|(c, _)| cost < c) {
            best = Some((cost, d));
        }
    }
    let (_, domain) = best?;
    // Rebuilding prefixes on the way down repeats steps already paid for.
    search.budget = u64::MAX;
    let mut hosts = Vec::with_capacity(n as usize);
    search.assign(domain, n, &mut hosts);
    let mut placement = greedy::finish(topo, free, request.pod, hosts, SearchPath::Exact, model);
    placement.lower_bound = Some(placement.cost);
    Some(placement)
}

/// The cheapest cost of holding the whole gang inside each domain at `depth` that can hold
/// it, in index order (the weights of the domains above are included). `None` past the budget.
pub(crate) fn domain_costs(
    topo: &Topology,
    free: &[Resources],
    request: &PlacementRequest,
    model: &CostModel,
    greedy: &greedy::Scratch,
    scratch: &mut Scratch,
    depth: u8,
) -> Option<Vec<(DomainId, u64)>> {
    let units = Units::of(request).ok()?;
    let fits = &greedy.fits;
    scratch.arena.clear();
    scratch.start.resize(topo.domain_count(), 0);
    scratch.len.clear();
    scratch.len.resize(topo.domain_count(), 0);
    let above: u64 = (1..depth).map(|d| model.weight(d, topo.host_depth())).sum();
    let mut search =
        Search { topo, free, pod: request.pod, units, fits, model, steps: 0, budget: STEP_BUDGET, scratch };
    let mut out = Vec::new();
    for d in domains_at(topo, fits, depth) {
        if fits[d.0 as usize] >= units.need(depth) {
            let cost = search.table(d)?[units.pods as usize];
            if cost < INF {
                out.push((d, cost + above));
            }
        }
    }
    Some(out)
}

/// The depth whose domains may enclose the gang: the required level; the preferred level
/// when some domain there holds the whole gang (Kueue's reading of "preferred"); else the root.
pub(crate) fn search_depth(topo: &Topology, request: &PlacementRequest, units: &Units, fits: &[u64]) -> u8 {
    let c = request.constraint;
    match c.preferred_depth {
        Some(p) if p > c.top_depth => {
            let held = domains_at(topo, fits, p).any(|d| fits[d.0 as usize] >= units.need(p));
            if held { p } else { c.top_depth }
        }
        _ => c.top_depth,
    }
}

/// Domains at `depth` that hold at least one unit, in index order, found through the fit
/// counts so that empty subtrees are never entered.
pub(crate) fn domains_at<'a>(topo: &'a Topology, fits: &'a [u64], depth: u8) -> impl Iterator<Item = DomainId> + 'a {
    domains_under(topo, fits, DomainId::ROOT, depth)
}

/// [`domains_at`] within the subtree of `root`.
pub(crate) fn domains_under<'a>(
    topo: &'a Topology,
    fits: &'a [u64],
    root: DomainId,
    depth: u8,
) -> impl Iterator<Item = DomainId> + 'a {
    let mut stack = vec![root];
    let mut out = Vec::new();
    while let Some(d) = stack.pop() {
        if fits[d.0 as usize] == 0 {
            continue;
        }
        if topo.depth(d) == depth {
            out.push(d);
        } else {
            stack.extend(topo.children(d).iter().rev().map(|&c| DomainId(c)));
        }
    }
    out.into_iter()
}

impl Search<'_> {
    /// Most pods a domain can usefully take.
    fn cap(&self, d: DomainId) -> u64 {
        let per_unit = self.units.pods_per_unit(self.topo.depth(d));
        (self.fits[d.0 as usize] * per_unit).min(self.units.pods)
    }

    /// The cost table of `d` (index = pods), built on first use; `None` past the budget.
    fn table(&mut self, d: DomainId) -> Option<&[u64]> {
        let i = d.0 as usize;
        if self.scratch.len[i] == 0 {
            let table = self.build(d)?;
            self.scratch.start[i] = self.scratch.arena.len() as u32;
            self.scratch.len[i] = table.len() as u32;
            self.scratch.arena.extend_from_slice(&table);
        }
        let (s, l) = (self.scratch.start[i] as usize, self.scratch.len[i] as usize);
        Some(&self.scratch.arena[s..s + l])
    }

    fn build(&mut self, d: DomainId) -> Option<Vec<u64>> {
        let topo = self.topo;
        let depth = topo.depth(d);
        let h = topo.host_depth();
        let cap = self.cap(d) as usize;
        let mut table = if topo.as_host(d).is_some() {
            let mut t = vec![INF; cap + 1];
            t[0] = 0;
            for (k, slot) in t.iter_mut().enumerate().skip(1) {
                *slot = self.model.host_cost(self.free[d.0 as usize], self.pod, k as u64, h);
            }
            t
        } else {
            let mut t = self.children_table(d)?.pop().expect("the prefix list starts with the empty table");
            let weight = self.model.weight(depth, h);
            t.iter_mut().skip(1).for_each(|c| *c = (*c + weight).min(INF));
            t
        };
        if depth == self.units.slice_depth {
            let size = self.units.pods_per_unit(depth) as usize;
            table.iter_mut().enumerate().filter(|(k, _)| !k.is_multiple_of(size)).for_each(|(_, c)| *c = INF);
        }
        Some(table)
    }

    /// The prefix convolutions over `d`'s children: entry `i` is the cheapest way to spread
    /// pods over the first `i` children with room (entry 0 takes only zero pods).
    fn children_table(&mut self, d: DomainId) -> Option<Vec<Vec<u64>>> {
        let cap = self.cap(d) as usize;
        let children: Vec<DomainId> =
            self.topo.children(d).iter().map(|&c| DomainId(c)).filter(|c| self.fits[c.0 as usize] > 0).collect();
        let mut prefixes = vec![vec![0]];
        for c in children {
            let child = self.table(c)?.to_vec();
            let acc = prefixes.last().expect("starts non-empty");
            let len = (acc.len() + child.len() - 1).min(cap + 1);
            self.steps += (acc.len() * child.len()) as u64;
            if self.steps > self.budget {
                return None;
            }
            let mut next = vec![INF; len];
            for (a, &ca) in acc.iter().enumerate() {
                if ca >= INF {
                    continue;
                }
                for (b, &cb) in child.iter().enumerate().take(len - a) {
                    let v = ca + cb;
                    if v < next[a + b] {
                        next[a + b] = v;
                    }
                }
            }
            prefixes.push(next);
        }
        Some(prefixes)
    }

    /// Walks the tables back down, putting `k` pods into `d`.
    fn assign(&mut self, d: DomainId, k: u64, out: &mut Vec<HostId>) {
        if let Some(host) = self.topo.as_host(d) {
            out.extend(std::iter::repeat_n(host, k as usize));
            return;
        }
        let children: Vec<DomainId> =
            self.topo.children(d).iter().map(|&c| DomainId(c)).filter(|c| self.fits[c.0 as usize] > 0).collect();
        let prefixes = self.children_table(d).expect("already built within the budget");
        let mut target = k as usize;
        let mut picks = Vec::new();
        for (i, &c) in children.iter().enumerate().rev() {
            let child = self.table(c).expect("built").to_vec();
            let (before, after) = (&prefixes[i], &prefixes[i + 1]);
            let j = (0..child.len().min(target + 1))
                .find(|&j| {
                    target - j < before.len()
                        && before[target - j] < INF
                        && before[target - j] + child[j] == after[target]
                })
                .expect("the optimum splits over the children");
            if j > 0 {
                picks.push((c, j as u64));
            }
            target -= j;
        }
        for (c, j) in picks.into_iter().rev() {
            self.assign(c, j, out);
        }
    }
}
