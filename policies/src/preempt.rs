//! Topology-aware victim search: the cheapest set of whole running gangs whose removal lets
//! a blocked gang fit, all inside one domain of the level the gang must (or prefers to) use.
//!
//! For every domain of that level where the gang could fit once the domain were emptied of
//! preemptible gangs, victims are released inside a transaction in order of cost (lowest
//! priority, then least lost work, then most GPUs freed) until the gang fits there; the set
//! is then pruned of victims it does not need. The cheapest set over all domains wins:
//! highest victim priority first, then total lost work, then number of victims, then the
//! domain's index. Everything is rolled back; nothing changes unless the caller commits.
//! A set is returned only when the gang then really fits (and its queue's quota then admits
//! it), so no gang is ever preempted for a preemptor that still could not start.

use trainyard_topology::{Cluster, DomainId, Placement, PlacementRequest, Resources, Topology};

use crate::GangId;
use crate::quota_tree::QueueIdx;

/// A running gang that may be preempted for the one being placed.
#[derive(Clone, Debug)]
pub(crate) struct Candidate {
    /// The gang.
    pub(crate) id: GangId,
    /// Its queue.
    pub(crate) queue: QueueIdx,
    /// Everything it holds.
    pub(crate) total: Resources,
    /// Where it runs.
    pub(crate) placement: Placement,
    /// Resources of each of its pods.
    pub(crate) pod: Resources,
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
fn search_depths(request: &PlacementRequest) -> Vec<u8> {
    let c = request.constraint;
    match c.preferred_depth {
        Some(p) if p > c.top_depth => vec![p, c.top_depth],
        _ => vec![c.top_depth],
    }
}

/// Whether any host of the placement lies in `domain`.
fn touches(topo: &Topology, placement: &Placement, domain: DomainId) -> bool {
    let depth = topo.depth(domain);
    placement.hosts.iter().any(|&h| topo.ancestor_at(topo.host_domain(h), depth) == domain)
}

/// Whether the preemptor's quota admits it once these victims are gone.
pub(crate) type QuotaCheck<'a> = &'a dyn Fn(&[&Candidate]) -> bool;

/// Finds the cheapest victim set that makes the gang fit and that `quota_ok` accepts, or
/// `None` when no preemptible set does.
pub(crate) fn choose_victims(
    cluster: &mut Cluster,
    request: &PlacementRequest,
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
    request: &PlacementRequest,
    candidates: &[Candidate],
    quota_ok: QuotaCheck<'_>,
    depth: u8,
) -> Option<VictimSet> {
    let topo = cluster.topology().clone();
    let mut order: Vec<&Candidate> = candidates.iter().collect();
    order.sort_by_key(|c| (c.priority, c.lost_work, std::cmp::Reverse(c.placement.hosts.len()), c.id));
    let domains: Vec<DomainId> =
        (0..topo.domain_count() as u32).map(DomainId).filter(|&d| topo.depth(d) == depth).collect();
    let need = request.total();
    let mut best: Option<VictimSet> = None;
    for domain in domains {
        let inside: Vec<&Candidate> = order.iter().copied().filter(|c| touches(&topo, &c.placement, domain)).collect();
        // Cheap bound: even every preemptible gang here plus the free capacity is too little.
        let reclaimable = inside.iter().fold(cluster.free(domain), |acc, c| {
            let freed = c.pod.checked_mul(c.placement.hosts.len() as u64).unwrap_or(Resources::ZERO);
            acc.checked_add(&freed).unwrap_or(acc)
        });
        if inside.is_empty() || !reclaimable.covers(&need) {
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
/// every victim the fit does not need.
fn victims_in(
    cluster: &mut Cluster,
    request: &PlacementRequest,
    domain: DomainId,
    inside: &[&Candidate],
    quota_ok: QuotaCheck<'_>,
) -> Option<VictimSet> {
    let txn = cluster.begin();
    let mut taken: Vec<&Candidate> = Vec::new();
    let mut fitted = None;
    for c in inside {
        if cluster.release_placement(&c.placement, c.pod).is_err() {
            break;
        }
        taken.push(c);
        if !quota_ok(&taken) {
            continue;
        }
        if let Some(p) = fits_in(cluster, request, domain) {
            fitted = Some(p);
            break;
        }
    }
    cluster.rollback(txn);
    fitted.as_ref()?;
    // Prune: from the most expensive, drop each victim the fit survives without.
    let mut i = taken.len();
    while i > 0 {
        i -= 1;
        let without: Vec<&Candidate> = taken.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, c)| *c).collect();
        if !quota_ok(&without) {
            continue;
        }
        let txn = cluster.begin();
        let ok = without.iter().all(|c| cluster.release_placement(&c.placement, c.pod).is_ok());
        let placed = if ok { fits_in(cluster, request, domain) } else { None };
        cluster.rollback(txn);
        if let Some(p) = placed {
            taken = without;
            fitted = Some(p);
        }
    }
    let placement = fitted?;
    let cost = (
        taken.iter().map(|c| c.priority).max().unwrap_or(i32::MIN),
        taken.iter().map(|c| c.lost_work).sum(),
        taken.len(),
    );
    Some(VictimSet { victims: taken.iter().map(|c| c.id).collect(), domain, placement, cost })
}

/// The gang's placement if it now fits inside `domain`.
fn fits_in(cluster: &mut Cluster, request: &PlacementRequest, domain: DomainId) -> Option<Placement> {
    let placement = cluster.place(request).ok()?;
    let topo = cluster.topology();
    let depth = topo.depth(domain);
    placement.hosts.iter().all(|&h| topo.ancestor_at(topo.host_domain(h), depth) == domain).then_some(placement)
}
