//! Baseline placement policies, reproducing how other schedulers choose hosts.
//!
//! They share trainyard's fit counts (so they agree on *whether* a gang fits) and differ in
//! *where* they put it:
//! - **first-fit**: topology-blind; hosts in declaration order, each filled before the next.
//!   A required level is still honoured (the first domain of that level that holds the gang),
//!   since a scheduler that breaks it would run the job somewhere it must not be.
//! - **Kueue BestFit** (topology-aware scheduling, `TASProfileMixed`): at the requested level
//!   sort domains by fit, descending; take the tightest single domain that holds the gang, or
//!   go one level up when the request is only preferred; at the top level take domains in
//!   sorted order until the gang is covered, the last one swapped for the tightest that covers
//!   the rest. Then descend level by level, pooling the chosen domains' children and keeping
//!   the fewest needed the same way. Unconstrained requests use LeastFreeCapacity: the fullest
//!   hosts first.
//! - **Slurm topology/tree**: the lowest switch (or host) that holds the job, fewest free
//!   first; then its leaf switches best fit (a leaf that takes the rest, the tightest such;
//!   otherwise the roomiest), and hosts in order within a leaf.

use super::exact::{domains_at, domains_under};
use super::greedy::{self, Scratch, Units, capacity_failure, finish, no_fit};
use super::{CostModel, Placement, PlacementFailure, PlacementRequest, SearchPath};
use crate::{DomainId, HostId, Resources, Topology};

/// Topology-blind first fit.
pub(crate) fn first_fit(
    topo: &Topology,
    free: &[Resources],
    request: &PlacementRequest,
    model: &CostModel,
    scratch: &mut Scratch,
) -> Result<Placement, PlacementFailure> {
    let units = greedy::count(topo, free, request, scratch)?;
    let top = request.constraint.top_depth;
    let fits = &scratch.fits;
    let Some(domain) = domains_at(topo, fits, top).find(|d| fits[d.0 as usize] >= units.need(top)) else {
        return Err(no_fit(topo, free, request, scratch));
    };
    let mut hosts = Vec::with_capacity(request.pods as usize);
    fill_in_order(topo, &units, fits, domain, units.need(top), &mut hosts);
    Ok(finish(topo, free, request.pod, hosts, SearchPath::Baseline, model))
}

/// Puts `k` units into `d`, children in declaration order, each filled before the next.
fn fill_in_order(topo: &Topology, units: &Units, fits: &[u64], d: DomainId, k: u64, out: &mut Vec<HostId>) {
    let depth = topo.depth(d);
    if let Some(host) = topo.as_host(d) {
        out.extend(std::iter::repeat_n(host, (k * units.pods_per_unit(depth)) as usize));
        return;
    }
    let mut remaining = k * units.pods_per_unit(depth) / units.pods_per_unit(depth + 1);
    for &c in topo.children(d) {
        if remaining == 0 {
            break;
        }
        let take = fits[c as usize].min(remaining);
        if take > 0 {
            fill_in_order(topo, units, fits, DomainId(c), take, out);
            remaining -= take;
        }
    }
}

/// Picks from `candidates` (already sorted in preference order) domains covering `need`
/// units: in order, except that the domain that completes the cover is the tightest one
/// left that does. Returns `(domain, units taken)`.
fn take_sorted(candidates: &[DomainId], fits: &[u64], need: u64) -> Vec<(DomainId, u64)> {
    let mut chosen = Vec::new();
    let mut remaining = need;
    let mut used = vec![false; candidates.len()];
    for i in 0..candidates.len() {
        if remaining == 0 {
            break;
        }
        if used[i] {
            continue;
        }
        let f = fits[candidates[i].0 as usize];
        if f >= remaining {
            let tightest = (i..candidates.len())
                .filter(|&j| !used[j] && fits[candidates[j].0 as usize] >= remaining)
                .min_by_key(|&j| (fits[candidates[j].0 as usize], j))
                .expect("candidate i qualifies");
            used[tightest] = true;
            chosen.push((candidates[tightest], remaining));
            remaining = 0;
        } else {
            used[i] = true;
            chosen.push((candidates[i], f));
            remaining -= f;
        }
    }
    chosen
}

/// Sorts domains by fit, most first, then by index.
fn by_fit_descending(mut ds: Vec<DomainId>, fits: &[u64]) -> Vec<DomainId> {
    ds.sort_by_key(|d| (std::cmp::Reverse(fits[d.0 as usize]), d.0));
    ds
}

/// Kueue's topology-aware BestFit.
pub(crate) fn kueue_best_fit(
    topo: &Topology,
    free: &[Resources],
    request: &PlacementRequest,
    model: &CostModel,
    scratch: &mut Scratch,
) -> Result<Placement, PlacementFailure> {
    let units = greedy::count(topo, free, request, scratch)?;
    let fits = &scratch.fits;
    let c = request.constraint;
    let mut chosen: Vec<(DomainId, u64)>;
    let mut depth;
    match c.preferred_depth {
        None => {
            // LeastFreeCapacity in one pass at the slice level (or over hosts).
            depth = units.slice_depth.min(topo.host_depth()).max(c.top_depth);
            let mut ds: Vec<DomainId> = domains_at(topo, fits, depth).collect();
            ds.sort_by_key(|d| (fits[d.0 as usize], d.0));
            if ds.iter().map(|d| fits[d.0 as usize]).sum::<u64>() < units.need(depth) {
                return Err(no_fit(topo, free, request, scratch));
            }
            chosen = Vec::new();
            let mut remaining = units.need(depth);
            for d in ds {
                if remaining == 0 {
                    break;
                }
                let take = fits[d.0 as usize].min(remaining);
                chosen.push((d, take));
                remaining -= take;
            }
        }
        Some(p) => {
            depth = p;
            loop {
                let need = units.need(depth);
                let ds = by_fit_descending(domains_at(topo, fits, depth).collect(), fits);
                if ds.first().is_some_and(|d| fits[d.0 as usize] >= need) {
                    chosen = take_sorted(&ds, fits, need);
                    break;
                }
                if depth <= c.top_depth.max(1) {
                    if c.top_depth > 0 || ds.iter().map(|d| fits[d.0 as usize]).sum::<u64>() < need {
                        return Err(no_fit(topo, free, request, scratch));
                    }
                    chosen = take_sorted(&ds, fits, need);
                    break;
                }
                depth -= 1;
            }
        }
    }
    while depth < topo.host_depth() {
        let next = depth + 1;
        let per_unit = units.pods_per_unit(depth) / units.pods_per_unit(next);
        if next <= units.slice_depth {
            // Above the slice level: pool the children of every chosen domain.
            let need: u64 = chosen.iter().map(|&(_, k)| k * per_unit).sum();
            let pool: Vec<DomainId> = chosen
                .iter()
                .flat_map(|&(d, _)| topo.children(d).iter().map(|&c| DomainId(c)))
                .filter(|c| fits[c.0 as usize] > 0)
                .collect();
            chosen = take_sorted(&by_fit_descending(pool, fits), fits, need);
        } else {
            // At and below it: each domain splits its own share, keeping slices whole.
            chosen = chosen
                .iter()
                .flat_map(|&(d, k)| {
                    let kids: Vec<DomainId> =
                        topo.children(d).iter().map(|&c| DomainId(c)).filter(|c| fits[c.0 as usize] > 0).collect();
                    take_sorted(&by_fit_descending(kids, fits), fits, k * per_unit)
                })
                .collect();
        }
        depth = next;
    }
    let per_unit = units.pods_per_unit(depth);
    let hosts = chosen
        .iter()
        .flat_map(|&(d, k)| {
            let h = topo.as_host(d).expect("the descent ends at hosts");
            std::iter::repeat_n(h, (k * per_unit) as usize)
        })
        .collect::<Vec<_>>();
    if hosts.len() != request.pods as usize {
        return Err(capacity_failure(free, request));
    }
    Ok(finish(topo, free, request.pod, hosts, SearchPath::Baseline, model))
}

/// Slurm's topology/tree selection.
pub(crate) fn slurm_tree(
    topo: &Topology,
    free: &[Resources],
    request: &PlacementRequest,
    model: &CostModel,
    scratch: &mut Scratch,
) -> Result<Placement, PlacementFailure> {
    let units = greedy::count(topo, free, request, scratch)?;
    let fits = &scratch.fits;
    let top = request.constraint.top_depth;
    let h = topo.host_depth();
    let switch = (top..=h).rev().find_map(|depth| {
        domains_at(topo, fits, depth)
            .filter(|d| fits[d.0 as usize] >= units.need(depth))
            .min_by_key(|d| (fits[d.0 as usize], d.0))
    });
    let Some(switch) = switch else {
        return Err(no_fit(topo, free, request, scratch));
    };
    let mut hosts = Vec::with_capacity(request.pods as usize);
    let depth = topo.depth(switch);
    if depth + 1 >= h {
        fill_in_order(topo, &units, fits, switch, units.need(depth), &mut hosts);
    } else {
        // Slices are chosen whole: leaves are then the slice-level domains.
        let leaf_depth = (h - 1).min(units.slice_depth).max(depth + 1);
        let mut leaves: Vec<DomainId> = domains_under(topo, fits, switch, leaf_depth).collect();
        let mut remaining = units.need(leaf_depth);
        while remaining > 0 {
            let pick = leaves
                .iter()
                .enumerate()
                .filter(|(_, l)| fits[l.0 as usize] >= remaining)
                .min_by_key(|(_, l)| (fits[l.0 as usize], l.0))
                .or_else(|| leaves.iter().enumerate().max_by_key(|(_, l)| (fits[l.0 as usize], std::cmp::Reverse(l.0))))
                .map(|(i, &l)| (i, l));
            let Some((i, leaf)) = pick else { break };
            let take = fits[leaf.0 as usize].min(remaining);
            fill_in_order(topo, &units, fits, leaf, take, &mut hosts);
            remaining -= take;
            leaves.swap_remove(i);
        }
    }
    Ok(finish(topo, free, request.pod, hosts, SearchPath::Baseline, model))
}
