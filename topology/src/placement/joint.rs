//! Gangs of several pod sets (a leader and its workers, a trainer and its rollout workers),
//! placed together: one enclosing domain for the gang, each set with its own shape.
//!
//! The greedy path tries enclosing domains from the lowest level up, tightest first, and
//! inside each places the sets one after another, largest first, on what the earlier sets
//! left. The exact path (`mip.rs`) solves all sets at once; the cheaper answer wins.

use super::greedy::{self, Scratch};
use super::{CostModel, PlacementFailure, PlacementRequest, SearchPath, Spans, mip};
use crate::{DomainId, HostId, LevelConstraint, Resources, SliceConstraint, Topology};

/// One pod set of a gang.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodSet {
    /// Name shown in output (`leader`, `workers`).
    pub name: String,
    /// Pods in the set.
    pub pods: u32,
    /// Resources of each pod.
    pub pod: Resources,
    /// Depth of a level this set alone must stay within (inside the gang's domain).
    pub within: Option<u8>,
    /// Slices of this set, each inside one domain of the slice level.
    pub slice: Option<SliceConstraint>,
}

/// A gang of several pod sets.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct JointRequest {
    /// The pod sets, in the order the caller names them.
    pub sets: Vec<PodSet>,
    /// Where the whole gang must (or would like to) stay; its `slice` is ignored.
    pub constraint: LevelConstraint,
    /// Only hosts of this GPU flavor; `None` for any host.
    pub flavor: Option<u16>,
    /// Only hosts this eligibility class admits.
    pub hosts: crate::HostClass,
}

/// Where every pod of every set goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JointPlacement {
    /// `sets[i][j]`: host of pod `j` of set `i`.
    pub sets: Vec<Vec<HostId>>,
    /// The smallest domain that contains every pod.
    pub domain: DomainId,
    /// Depth of that domain.
    pub depth: u8,
    /// Cost under the cost model, counting each domain once for the whole gang.
    pub cost: u64,
    /// The search that produced it.
    pub path: SearchPath,
    /// A proven lower bound on the cost (equal to `cost` when optimal).
    pub lower_bound: Option<u64>,
}

impl JointPlacement {
    /// The same answer as one [`super::Placement`]: the pods of every set one after another.
    pub fn into_placement(self, request: &JointRequest) -> super::Placement {
        let sets = request.sets.iter().map(|s| super::PlacedSet { pods: s.pods, pod: s.pod }).collect();
        super::Placement {
            hosts: self.sets.into_iter().flatten().collect(),
            sets,
            domain: self.domain,
            depth: self.depth,
            cost: self.cost,
            path: self.path,
            lower_bound: self.lower_bound,
            layout: None,
            gpus: Vec::new(),
            device_fit: None,
            devices: Vec::new(),
        }
    }

    /// The optimality gap, when a bound is known.
    pub fn gap(&self) -> Option<u64> {
        self.lower_bound.map(|lb| self.cost.saturating_sub(lb))
    }

    /// Domains used per level, over all sets.
    pub fn spans(&self, topo: &Topology) -> Spans {
        Spans::of(topo, self.sets.iter().flatten().copied())
    }
}

/// Limits of the exact joint search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JointOptions {
    /// Wall-clock budget of the MIP solver, milliseconds.
    pub time_limit_ms: u64,
    /// Largest number of hosts the MIP model may include; larger searches keep the greedy answer.
    pub max_hosts: usize,
}

impl Default for JointOptions {
    fn default() -> JointOptions {
        JointOptions { time_limit_ms: 2000, max_hosts: 96 }
    }
}

impl JointRequest {
    /// The single-set request of set `i` placed inside a domain at `depth`.
    pub(crate) fn set_request(&self, i: usize, depth: u8) -> PlacementRequest {
        let s = &self.sets[i];
        let top = s.within.unwrap_or(0).max(depth);
        PlacementRequest {
            pods: s.pods,
            pod: s.pod,
            constraint: LevelConstraint { top_depth: top, preferred_depth: None, slice: s.slice },
            flavor: self.flavor,
            hosts: self.hosts,
        }
    }

    /// A request for these sets within `constraint`, on any host of any flavor.
    pub fn new(sets: Vec<PodSet>, constraint: LevelConstraint) -> JointRequest {
        JointRequest { sets, constraint, flavor: None, hosts: crate::HostClass::DEFAULT }
    }

    /// Resources of the whole gang.
    pub fn total(&self) -> Resources {
        self.sets.iter().fold(Resources::ZERO, |acc, s| acc.saturating_add(&super::times(s.pod, s.pods)))
    }

    /// Pods of the whole gang.
    pub fn pods(&self) -> u32 {
        self.sets.iter().fold(0u32, |acc, s| acc.saturating_add(s.pods))
    }
}

/// Cost of a joint placement on the free capacity before it: each domain counted once, GPUs
/// left free on used hosts after every set took its share.
pub(crate) fn joint_cost(
    topo: &Topology,
    free: &[Resources],
    request: &JointRequest,
    sets: &[Vec<HostId>],
    model: &CostModel,
) -> u64 {
    let h = topo.host_depth();
    let spans = Spans::of(topo, sets.iter().flatten().copied());
    let upper: u64 = (1..h).map(|d| model.weight(d, h) * u64::from(spans.at(d))).sum();
    let mut used: Vec<(HostId, u64)> = Vec::new();
    for (set, hosts) in request.sets.iter().zip(sets) {
        for &host in hosts {
            match used.iter_mut().find(|(x, _)| *x == host) {
                Some((_, g)) => *g += set.pod.gpus,
                None => used.push((host, set.pod.gpus)),
            }
        }
    }
    let hosts: u64 = used
        .iter()
        .map(|&(host, gpus)| {
            let f = free[topo.host_domain(host).0 as usize];
            model.host_cost(f, Resources::gpus(gpus), 1, h)
        })
        .sum();
    upper + hosts
}

/// Subtracts a set's pods from a private copy of the free capacities, on the paths from its
/// hosts up to `root` (the copy is read only inside `root`'s subtree).
fn take(topo: &Topology, free: &mut [Resources], root: DomainId, pod: Resources, hosts: &[HostId]) {
    for &host in hosts {
        for x in path_up_to(topo, host, root) {
            free[x.0 as usize] = free[x.0 as usize].checked_sub(&pod).expect("placed pods fit");
        }
    }
}

/// A host's domain and its ancestors up to `root` (inclusive; up to the cluster's root when
/// `root` is not above the host).
fn path_up_to(topo: &Topology, host: HostId, root: DomainId) -> impl Iterator<Item = DomainId> + '_ {
    std::iter::successors(Some(topo.host_domain(host)), move |&x| if x == root { None } else { topo.parent(x) })
}

/// Copies into `local` the free capacity of `root`'s subtree where a search for pods no smaller
/// than `least` reads it: every domain whose parent covers `least` (a search never looks below a
/// domain that does not cover its pod, and the copy only shrinks as pods are taken). So a copy
/// costs the roomy part of the subtree, not the cluster's size.
fn copy_roomy(topo: &Topology, free: &[Resources], root: DomainId, least: &Resources, local: &mut [Resources]) {
    let mut stack = vec![root];
    while let Some(d) = stack.pop() {
        let f = free[d.0 as usize];
        local[d.0 as usize] = f;
        if f.covers(least) {
            stack.extend(topo.children(d).iter().map(|&c| DomainId(c)));
        }
    }
}

/// The greedy joint placement.
pub(crate) fn greedy(
    topo: &Topology,
    free: &[Resources],
    request: &JointRequest,
    model: &CostModel,
    scratch: &mut Scratch,
) -> Result<JointPlacement, PlacementFailure> {
    greedy_under(topo, free, request, DomainId::ROOT, model, scratch)
}

/// The greedy joint placement inside the subtree of `root`.
pub(crate) fn greedy_under(
    topo: &Topology,
    free: &[Resources],
    request: &JointRequest,
    root: DomainId,
    model: &CostModel,
    scratch: &mut Scratch,
) -> Result<JointPlacement, PlacementFailure> {
    let total = request.total();
    let room = free[root.0 as usize];
    let capacity = PlacementFailure::Capacity { requested: total, free: room };
    if request.sets.is_empty() || request.sets.iter().any(|s| s.pods == 0 || s.pod.is_zero()) || !room.covers(&total) {
        return Err(capacity);
    }
    let mut order: Vec<usize> = (0..request.sets.len()).collect();
    // Biggest pods first, as in first-fit decreasing: small pods fill the gaps big ones leave.
    order.sort_by_key(|&i| {
        let s = &request.sets[i];
        (std::cmp::Reverse((s.pod.gpus, s.pod.cpu_milli, s.pod.memory_mib, s.pods)), i)
    });
    let top = request.constraint.top_depth.max(topo.depth(root));
    // The first set is placed on the free capacity itself; the later ones on a working copy
    // with the earlier sets' pods taken out. A candidate's searches read only the roomy part of
    // its subtree, so only that is copied, once the first set is in: a try costs what it reads
    // and its pods, not the cluster's size.
    let least = request.sets.iter().skip(1).fold(request.sets[0].pod, |acc, s| acc.component_min(&s.pod));
    let mut local = std::mem::take(&mut scratch.local);
    local.resize(free.len(), Resources::ZERO);
    let found = 'depths: {
        for depth in (top..=topo.host_depth()).rev() {
            let mut candidates = Vec::new();
            covering_at(topo, free, root, depth, &total, &mut candidates);
            candidates.sort_by_key(|d| (free[d.0 as usize].gpus, d.0));
            'candidates: for d in candidates {
                let mut sets = vec![Vec::new(); request.sets.len()];
                for (step, &i) in order.iter().enumerate() {
                    let req = request.set_request(i, depth);
                    let view: &[Resources] = if step == 0 { free } else { &local };
                    match greedy::place_under(topo, view, &req, d, model, scratch) {
                        Ok(p) => {
                            if step + 1 < order.len() {
                                if step == 0 {
                                    copy_roomy(topo, free, d, &least, &mut local);
                                }
                                take(topo, &mut local, d, req.pod, &p.hosts);
                            }
                            sets[i] = p.hosts;
                        }
                        Err(_) => continue 'candidates,
                    }
                }
                break 'depths Some(sets);
            }
        }
        None
    };
    scratch.local = local;
    if let Some(sets) = found {
        return Ok(finish(topo, free, request, sets, SearchPath::Greedy, model));
    }
    match top {
        0 => Err(capacity),
        _ => Err(PlacementFailure::Topology {
            level: topo.levels()[usize::from(top) - 1].clone(),
            pods: request.sets.iter().map(|s| s.pods).sum(),
            best_domain_fit: 0,
        }),
    }
}

/// The domains at `depth` under `d` whose free capacity covers `total`. A domain that does not
/// cover it has no descendant that does, so the walk prunes there: its cost follows the roomy
/// part of the subtree, not the cluster's size.
fn covering_at(
    topo: &Topology,
    free: &[Resources],
    d: DomainId,
    depth: u8,
    total: &Resources,
    out: &mut Vec<DomainId>,
) {
    if !free[d.0 as usize].covers(total) {
        return;
    }
    if topo.depth(d) >= depth {
        out.push(d);
        return;
    }
    for &c in topo.children(d) {
        covering_at(topo, free, DomainId(c), depth, total, out);
    }
}

/// Builds the [`JointPlacement`] value of per-set host lists.
pub(crate) fn finish(
    topo: &Topology,
    free: &[Resources],
    request: &JointRequest,
    sets: Vec<Vec<HostId>>,
    path: SearchPath,
    model: &CostModel,
) -> JointPlacement {
    let all: Vec<HostId> = sets.iter().flatten().copied().collect();
    let mut domain = topo.host_domain(all[0]);
    for &h in &all[1..] {
        while topo.ancestor_at(topo.host_domain(h), topo.depth(domain)) != domain {
            domain = topo.parent(domain).unwrap_or(DomainId::ROOT);
        }
    }
    let cost = joint_cost(topo, free, request, &sets, model);
    JointPlacement { sets, domain, depth: topo.depth(domain), cost, path, lower_bound: None }
}

/// Greedy first, then the exact model when it is small enough; the cheaper answer wins.
/// When greedy finds nothing the exact model still runs: packing sets one after another can
/// miss a fit that placing them together finds.
pub(crate) fn place(
    topo: &Topology,
    free: &[Resources],
    request: &JointRequest,
    model: &CostModel,
    options: &JointOptions,
    scratch: &mut Scratch,
) -> Result<JointPlacement, PlacementFailure> {
    let greedy = greedy(topo, free, request, model, scratch);
    let exact = mip::solve(topo, free, request, model, options, greedy.as_ref().ok());
    match (greedy, exact) {
        (Ok(g), Some(e)) if e.cost >= g.cost => Ok(JointPlacement { lower_bound: e.lower_bound, ..g }),
        (_, Some(e)) => Ok(e),
        (g, None) => g,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Cluster;
    use crate::rng::SplitMix64;

    fn set(name: &str, pods: u32, gpus: u64, within: Option<u8>) -> PodSet {
        PodSet { name: name.into(), pods, pod: Resources::gpus(gpus), within, slice: None }
    }

    /// The working copy is kept from search to search and filled only where a search reads it:
    /// after the free capacity changed, a search on a used scratch answers as one on a fresh
    /// scratch (a stale part of the copy that was read would show here).
    #[test]
    fn a_reused_working_copy_answers_as_a_fresh_one() {
        let yaml = "name: t\nlevels: [block, rack, host]\ngenerate:\n  counts: [2, 3, 4]\n  node: {gpus: 8}\n";
        let mut c = Cluster::from_yaml(yaml, "t").expect("cluster");
        let topo = c.topology().clone();
        let model = CostModel::default();
        let gang = |leaders: u32, workers: u32| {
            let sets = vec![set("leader", leaders, 1, None), set("workers", workers, 8, Some(2))];
            JointRequest::new(sets, LevelConstraint { top_depth: 1, preferred_depth: Some(1), slice: None })
        };
        let mut reused = Scratch::new(topo.domain_count(), topo.host_depth());
        let mut rng = SplitMix64::new(11);
        let mut placed = 0;
        for step in 0..300 {
            // Churn: take or give back a few GPUs on a random host.
            let host = HostId(rng.below(topo.host_count() as u64) as u32);
            let gpus = 1 + rng.below(8);
            if step % 3 == 0 {
                let _ = c.release(host, Resources::gpus(gpus.min(8 - c.host_free(host).gpus)));
            } else if c.host_free(host).gpus >= gpus {
                c.allocate(host, Resources::gpus(gpus)).expect("free");
            }
            let free: Vec<Resources> = (0..topo.domain_count() as u32).map(|d| c.free(DomainId(d))).collect();
            let request = gang(1 + rng.below(2) as u32, 1 + rng.below(3) as u32);
            let mut fresh = Scratch::new(topo.domain_count(), topo.host_depth());
            let a = greedy_under(&topo, &free, &request, DomainId::ROOT, &model, &mut reused);
            let b = greedy_under(&topo, &free, &request, DomainId::ROOT, &model, &mut fresh);
            assert_eq!(a, b, "step {step}");
            placed += usize::from(a.is_ok());
        }
        assert!(placed > 50, "the churn leaves room for gangs often: {placed}");
    }
}
