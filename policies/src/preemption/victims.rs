//! Topology-aware victim search: the cheapest set of whole running gangs whose removal lets
//! a blocked gang fit, all inside one domain of the level the gang must (or prefers to) use.
//!
//! For the roomiest domains of that level (at most 16) where the gang could fit once the
//! domain were emptied of preemptible gangs, victims are released inside a transaction in
//! order of cost (lowest priority, then least lost work, then most GPUs freed; at most 256)
//! until the gang fits there; a small set is then pruned of victims it does not need. The cheapest set over all domains wins:
//! highest victim priority first, then total lost work, then number of victims, then the
//! domain's index. Everything is rolled back; nothing changes unless the caller commits.
//! A set is returned only when the gang then really fits (and its queue's quota then admits
//! it), so no gang is ever preempted for a preemptor that still could not start.

use std::collections::BTreeMap;

use trainyard_topology::{Cluster, Demand, DomainId, Placement, Resources};

use crate::GangId;
use crate::quota::QueueIdx;

/// Candidates tried per domain, cheapest first; past them a domain is given up.
const MAX_CANDIDATES: usize = 256;

/// Domains searched per level, roomiest first.
const MAX_DOMAINS: usize = 16;

/// Victim sets up to this size are pruned of victims they do not need.
const MAX_PRUNED: usize = 16;

/// A running gang that may be preempted for the one being placed.
#[derive(Clone, Debug)]
pub(crate) struct Candidate<'a> {
    /// The gang.
    pub(crate) id: GangId,
    /// Its queue.
    pub(crate) queue: QueueIdx,
    /// Everything it holds.
    pub(crate) total: Resources,
    /// Where it runs (with the shape of each of its pods), borrowed from the gang table.
    pub(crate) placement: &'a Placement,
    /// Its priority.
    pub(crate) priority: i32,
    /// Work lost if it is preempted now, GPU-seconds.
    pub(crate) lost_work: u64,
}

/// The chosen victims and what their removal buys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct VictimSet {
    /// Gangs to preempt, cheapest first.
    pub(crate) victims: Vec<GangId>,
    /// The domain the preemptor will run in.
    pub(crate) domain: DomainId,
    /// Where the preemptor goes once the victims are gone.
    pub(crate) placement: Placement,
    /// `(highest victim priority, lost work, victim count)`.
    pub(crate) cost: (i32, u64, usize),
}

/// The depths whose domains are searched, in turn: the preferred level (when below the
/// required one), then the required level or the whole cluster.
fn search_depths(request: &Demand) -> Vec<u8> {
    let c = request.constraint();
    match c.preferred_depth {
        Some(p) if p > c.top_depth => vec![p, c.top_depth],
        _ => vec![c.top_depth],
    }
}

/// Whether the preemptor's quota admits it once these victims are gone.
pub(crate) type QuotaCheck<'a> = &'a dyn Fn(&[&Candidate]) -> bool;

/// Finds the cheapest victim set that makes the gang fit and that `quota_ok` accepts, or
/// `None` when no preemptible set does.
pub(crate) fn choose_victims(
    cluster: &mut Cluster,
    request: &Demand,
    candidates: &[Candidate],
    quota_ok: QuotaCheck<'_>,
) -> Option<VictimSet> {
    if candidates.is_empty() {
        return None;
    }
    search_depths(request).into_iter().find_map(|depth| choose_at(cluster, request, candidates, quota_ok, depth))
}

/// [`choose_victims`] with victims and preemptor inside one domain of `depth`.
fn choose_at(
    cluster: &mut Cluster,
    request: &Demand,
    candidates: &[Candidate],
    quota_ok: QuotaCheck<'_>,
    depth: u8,
) -> Option<VictimSet> {
    let topo = cluster.topology();
    let mut order: Vec<&Candidate> = candidates.iter().collect();
    order.sort_by_key(|c| (c.priority, c.lost_work, std::cmp::Reverse(c.placement.hosts.len()), c.id));
    // Bucket the candidates by the domains of this depth they touch (in cost order).
    let mut by_domain: BTreeMap<DomainId, Vec<&Candidate>> = BTreeMap::new();
    for c in &order {
        let mut touched: Vec<DomainId> =
            c.placement.hosts.iter().map(|&h| topo.ancestor_at(topo.host_domain(h), depth)).collect();
        touched.sort_unstable();
        touched.dedup();
        for d in touched {
            by_domain.entry(d).or_default().push(c);
        }
    }
    let need = request.total();
    // The roomiest domains need the fewest victims: look at those first, and only at a few.
    let mut domains: Vec<(DomainId, Vec<&Candidate>)> = by_domain.into_iter().collect();
    domains.sort_by_key(|(d, _)| (std::cmp::Reverse(cluster.free(*d).gpus), *d));
    domains.truncate(MAX_DOMAINS);
    let mut best: Option<VictimSet> = None;
    for (domain, inside) in domains {
        // Cheap bound: even every preemptible gang here plus the free capacity is too little.
        let reclaimable =
            inside.iter().fold(cluster.free(domain), |acc, c| acc.checked_add(&c.placement.total()).unwrap_or(acc));
        if !reclaimable.covers(&need) {
            continue;
        }
        if let Some(set) = victims_in(cluster, request, domain, &inside, quota_ok)
            && best.as_ref().is_none_or(|b| (set.cost, set.domain) < (b.cost, b.domain))
        {
            best = Some(set);
        }
    }
    best
}

/// The victims inside one domain: release in cost order until the gang fits there, then drop
/// every victim the fit does not need (for small sets; a large one is kept as found).
fn victims_in(
    cluster: &mut Cluster,
    request: &Demand,
    domain: DomainId,
    inside: &[&Candidate],
    quota_ok: QuotaCheck<'_>,
) -> Option<VictimSet> {
    let need = request.total();
    let txn = cluster.begin();
    let mut taken: Vec<&Candidate> = Vec::new();
    let mut found = false;
    for c in inside.iter().take(MAX_CANDIDATES) {
        if cluster.release_placement(c.placement).is_err() {
            break;
        }
        taken.push(c);
        // Cheapest tests first: room in the domain, then the quota, then a placement.
        if cluster.free(domain).covers(&need) && quota_ok(&taken) && fits_in(cluster, request, domain).is_some() {
            found = true;
            break;
        }
    }
    cluster.rollback(txn);
    if !found {
        return None;
    }
    if taken.len() <= MAX_PRUNED {
        let mut i = taken.len();
        while i > 0 {
            i -= 1;
            let without: Vec<&Candidate> = taken.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, c)| *c).collect();
            if quota_ok(&without) && with_released(cluster, &without, |c| fits_in(c, request, domain)).is_some() {
                taken = without;
            }
        }
    }
    // The preemptor's real placement, by the cluster's own policy, on exactly this capacity.
    let placement = with_released(cluster, &taken, |c| {
        let found = c.place_demand(request).ok();
        match found {
            Some(p) if within(c.topology(), &p, domain) => Some(p),
            _ => fits_in(c, request, domain),
        }
    })?;
    let cost = (
        taken.iter().map(|c| c.priority).max().unwrap_or(i32::MIN),
        taken.iter().map(|c| c.lost_work).sum(),
        taken.len(),
    );
    Some(VictimSet { victims: taken.iter().map(|c| c.id).collect(), domain, placement, cost })
}

/// Runs `f` with the victims' capacity released, then undoes the release.
fn with_released<T>(
    cluster: &mut Cluster,
    victims: &[&Candidate],
    f: impl FnOnce(&mut Cluster) -> Option<T>,
) -> Option<T> {
    let txn = cluster.begin();
    let ok = victims.iter().all(|c| cluster.release_placement(c.placement).is_ok());
    let out = if ok { f(cluster) } else { None };
    cluster.rollback(txn);
    out
}

/// A placement of the gang inside `domain` if it now fits there (greedy: fast, and complete
/// for whether it fits).
fn fits_in(cluster: &mut Cluster, request: &Demand, domain: DomainId) -> Option<Placement> {
    let placement = cluster.place_demand_within(request, domain).ok()?;
    within(cluster.topology(), &placement, domain).then_some(placement)
}

/// Whether every pod of `placement` is inside `domain`.
fn within(topo: &trainyard_topology::Topology, placement: &Placement, domain: DomainId) -> bool {
    let depth = topo.depth(domain);
    placement.hosts.iter().all(|&h| topo.ancestor_at(topo.host_domain(h), depth) == domain)
}
