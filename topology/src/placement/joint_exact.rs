//! The exact joint search the engine runs: a branch-and-bound over how many pods of each set go
//! on each host, on a small universe of hosts, under a budget of search nodes (not of time), so
//! that the same state always gives the same answer and replays stay byte-identical.
//!
//! Sets are placed one after another, each host in turn taking 0 up to as many pods as fit.
//! A partial placement is bounded below by the weights of the domains and hosts it already uses
//! (stranded GPUs can only add to that), and cut when the bound reaches the best cost found.

use super::greedy::Scratch;
use super::joint::{JointPlacement, JointRequest, finish, greedy_under};
use super::{CostModel, PlacementFailure, SearchPath};
use crate::{DomainId, HostId, Resources, Topology};

/// Largest universe the search takes; a larger one keeps the greedy answer.
pub(crate) const MAX_HOSTS: usize = 16;

/// Search nodes (a host's pod count tried for a set) before the search stops with what it has.
pub(crate) const BUDGET: u64 = 200_000;

struct Search<'a> {
    topo: &'a Topology,
    free: &'a [Resources],
    request: &'a JointRequest,
    model: &'a CostModel,
    hosts: Vec<HostId>,
    /// Each universe host's domain at every depth (`path[i][depth]`), read by the validity
    /// checks at every leaf.
    path: Vec<Vec<DomainId>>,
    /// Each universe host's weight, and its domains above it (the root excluded) with theirs:
    /// what using the host adds to the bound, read at every node where a host comes into use.
    weights: Vec<(u64, Vec<(DomainId, u64)>)>,
    /// What is left on each universe host.
    left: Vec<Resources>,
    /// Pods of each set on each universe host.
    counts: Vec<Vec<u32>>,
    /// Times each domain above the hosts is used by the partial placement (indexed by domain).
    uses: Vec<u32>,
    /// Universe hosts holding any pod.
    used_hosts: Vec<u32>,
    /// Weight of the domains and hosts in use.
    bound: u64,
    best: Option<(u64, Vec<Vec<u32>>)>,
    nodes: u64,
}

impl Search<'_> {
    /// Puts `k` pods of set `s` on universe host `i` (or takes them back with `add = false`).
    fn shift(&mut self, s: usize, i: usize, k: u32, add: bool) {
        let pod = self.request.sets[s].pod;
        let amount = pod.checked_mul(u64::from(k)).expect("bounded by what fits");
        let was_used = self.used_hosts[i] > 0;
        if add {
            self.left[i] = self.left[i].checked_sub(&amount).expect("only what fits is added");
            self.counts[s][i] += k;
            self.used_hosts[i] += k;
        } else {
            self.left[i] = self.left[i].checked_add(&amount).expect("given back");
            self.counts[s][i] -= k;
            self.used_hosts[i] -= k;
        }
        let now_used = self.used_hosts[i] > 0;
        if was_used == now_used {
            return;
        }
        let (host_weight, above) = &self.weights[i];
        let mut delta = *host_weight;
        for &(x, weight) in above {
            let slot = &mut self.uses[x.0 as usize];
            let first_or_last = if now_used { *slot == 0 } else { *slot == 1 };
            if now_used {
                *slot += 1;
            } else {
                *slot -= 1;
            }
            if first_or_last {
                delta += weight;
            }
        }
        if now_used {
            self.bound += delta;
        } else {
            self.bound -= delta;
        }
    }

    /// Whether the hosts set `s` uses (and the gang's) keep to their levels and slices. Runs at
    /// every leaf, so it allocates nothing: a universe has at most [`MAX_HOSTS`] hosts.
    fn set_is_valid(&self, s: usize) -> bool {
        let set = &self.request.sets[s];
        let counts = &self.counts[s];
        let on = || (0..self.hosts.len()).filter(|&i| counts[i] > 0);
        if let Some(w) = set.within
            && !all_equal(on().map(|i| self.path[i][usize::from(w)]))
        {
            return false;
        }
        if let Some(slice) = set.slice {
            let mut per_domain = [(DomainId::ROOT, 0u32); MAX_HOSTS];
            let mut domains = 0;
            for i in on() {
                let d = self.path[i][usize::from(slice.depth)];
                match per_domain[..domains].iter_mut().find(|(x, _)| *x == d) {
                    Some((_, n)) => *n += counts[i],
                    None => {
                        per_domain[domains] = (d, counts[i]);
                        domains += 1;
                    }
                }
            }
            if per_domain[..domains].iter().any(|&(_, n)| n % slice.size != 0) {
                return false;
            }
        }
        true
    }

    fn gang_is_valid(&self) -> bool {
        let top = usize::from(self.request.constraint.top_depth);
        top == 0 || all_equal((0..self.hosts.len()).filter(|&i| self.used_hosts[i] > 0).map(|i| self.path[i][top]))
    }

    /// The cost of the complete placement the counts hold: the weights of the domains and
    /// hosts in use (`bound`) plus the GPUs left free on the used hosts, which is what
    /// [`super::joint::joint_cost`] adds up from host lists, without building them.
    fn leaf_cost(&self) -> u64 {
        let stranded: u64 = (0..self.hosts.len()).filter(|&i| self.used_hosts[i] > 0).map(|i| self.left[i].gpus).sum();
        self.bound + self.model.stranded_per_gpu * stranded
    }

    fn walk(&mut self, s: usize, i: usize, remaining: u32) {
        if self.nodes >= BUDGET || self.best.as_ref().is_some_and(|(b, _)| self.bound >= *b) {
            return;
        }
        if remaining == 0 {
            if !self.set_is_valid(s) {
                return;
            }
            if s + 1 < self.request.sets.len() {
                let next = self.request.sets[s + 1].pods;
                self.walk(s + 1, 0, next);
                return;
            }
            if !self.gang_is_valid() {
                return;
            }
            let cost = self.leaf_cost();
            debug_assert_eq!(
                cost,
                super::joint::joint_cost(
                    self.topo,
                    self.free,
                    self.request,
                    &self.host_lists(&self.counts),
                    self.model
                )
            );
            if self.best.as_ref().is_none_or(|(b, _)| cost < *b) {
                self.best = Some((cost, self.counts.clone()));
            }
            return;
        }
        if i == self.hosts.len() {
            return;
        }
        let pod = self.request.sets[s].pod;
        let most = self.left[i].fit_count(&pod).min(u64::from(remaining)) as u32;
        // More pods on a host first: full hosts are cheap, so good answers come early and cut more.
        for k in (0..=most).rev() {
            self.nodes += 1;
            if k > 0 {
                self.shift(s, i, k, true);
            }
            self.walk(s, i + 1, remaining - k);
            if k > 0 {
                self.shift(s, i, k, false);
            }
            if self.nodes >= BUDGET {
                return;
            }
        }
    }

    /// Host lists per set from counts; a sliced set's hosts grouped by slice domain, so that
    /// every `size` consecutive pods share one.
    fn host_lists(&self, counts: &[Vec<u32>]) -> Vec<Vec<HostId>> {
        self.request
            .sets
            .iter()
            .enumerate()
            .map(|(s, set)| {
                let mut order: Vec<usize> = (0..self.hosts.len()).filter(|&i| counts[s][i] > 0).collect();
                if let Some(slice) = set.slice {
                    order.sort_by_key(|&i| (self.path[i][usize::from(slice.depth)], self.hosts[i]));
                }
                order.iter().flat_map(|&i| std::iter::repeat_n(self.hosts[i], counts[s][i] as usize)).collect()
            })
            .collect()
    }
}

/// Whether every item is the same (true for none).
fn all_equal(mut items: impl Iterator<Item = DomainId>) -> bool {
    let Some(first) = items.next() else { return true };
    items.all(|d| d == first)
}

/// The hosts under `root`, if there are at most `limit` of them (the walk stops past that).
pub(crate) fn hosts_under(topo: &Topology, root: DomainId, limit: usize) -> Option<Vec<HostId>> {
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(d) = stack.pop() {
        match topo.as_host(d) {
            Some(h) => {
                out.push(h);
                if out.len() > limit {
                    return None;
                }
            }
            None => stack.extend(topo.children(d).iter().rev().map(|&c| DomainId(c))),
        }
    }
    out.sort_unstable();
    Some(out)
}

/// What the exact search found.
pub(crate) struct Exact {
    /// A placement strictly cheaper than the incumbent (or the first one, without an incumbent).
    pub(crate) better: Option<JointPlacement>,
    /// The search ran to its end: the best of `better` and the incumbent is optimal.
    pub(crate) complete: bool,
}

/// Searches `hosts` (at most [`MAX_HOSTS`]) for a placement cheaper than `incumbent`, within
/// [`BUDGET`] nodes. `None` when the universe is empty or too large to search.
pub(crate) fn search(
    topo: &Topology,
    free: &[Resources],
    request: &JointRequest,
    hosts: Vec<HostId>,
    model: &CostModel,
    incumbent: Option<u64>,
) -> Option<Exact> {
    if hosts.is_empty() || hosts.len() > MAX_HOSTS || request.sets.iter().any(|s| s.pod.is_zero()) {
        return None;
    }
    let left = hosts.iter().map(|&h| free[topo.host_domain(h).0 as usize]).collect();
    let path = hosts
        .iter()
        .map(|&h| {
            let d = topo.host_domain(h);
            (0..=topo.host_depth()).map(|depth| topo.ancestor_at(d, depth)).collect()
        })
        .collect();
    let weight_of = |d: DomainId| model.weight(topo.depth(d), topo.host_depth());
    let weights = hosts
        .iter()
        .map(|&h| {
            let host = topo.host_domain(h);
            let above = std::iter::successors(topo.parent(host), |&x| topo.parent(x))
                .take_while(|&x| topo.depth(x) > 0)
                .map(|x| (x, weight_of(x)))
                .collect();
            (weight_of(host), above)
        })
        .collect();
    let mut search = Search {
        topo,
        free,
        request,
        model,
        counts: vec![vec![0u32; hosts.len()]; request.sets.len()],
        used_hosts: vec![0u32; hosts.len()],
        hosts,
        path,
        weights,
        left,
        uses: vec![0; topo.domain_count()],
        bound: 0,
        // A known answer's cost cuts from the start; only something strictly cheaper is kept.
        best: incumbent.map(|cost| (cost, Vec::new())),
        nodes: 0,
    };
    search.walk(0, 0, request.sets[0].pods);
    let complete = search.nodes < BUDGET;
    let better = match search.best.take() {
        Some((cost, counts)) if !counts.is_empty() => {
            let sets = search.host_lists(&counts);
            let mut placement = finish(topo, free, request, sets, SearchPath::Exact, model);
            debug_assert_eq!(placement.cost, cost);
            placement.lower_bound = complete.then_some(cost);
            Some(placement)
        }
        _ => None,
    };
    Some(Exact { better, complete })
}

/// A lower bound on the cost of any placement of the request on `hosts`: one domain at every
/// level above the hosts, and as many hosts as the roomiest of them divides the gang's GPUs
/// into (at least one); stranded GPUs can only add to it.
fn lower_bound(
    topo: &Topology,
    free: &[Resources],
    request: &JointRequest,
    hosts: &[HostId],
    model: &CostModel,
) -> u64 {
    let h = topo.host_depth();
    let levels: u64 = (1..h).map(|d| model.weight(d, h)).sum();
    let gpus = request.total().gpus;
    let roomiest = hosts.iter().map(|&x| free[topo.host_domain(x).0 as usize].gpus).max().unwrap_or(0);
    let fewest_hosts = if gpus == 0 || roomiest == 0 { 1 } else { gpus.div_ceil(roomiest) };
    levels + model.weight(h, h) * fewest_hosts
}

/// The joint greedy answer, then the exact search on the hosts that could take a pod of the gang
/// when they are few (the whole cluster's, else those under the greedy answer's domain): the
/// cheaper wins, and a search that ran to its end proves the winner optimal. The host walks give
/// up past a few times [`MAX_HOSTS`], so on a large cluster this costs next to nothing.
pub(crate) fn place(
    topo: &Topology,
    free: &[Resources],
    request: &JointRequest,
    model: &CostModel,
    scratch: &mut Scratch,
) -> Result<JointPlacement, PlacementFailure> {
    let greedy = greedy_under(topo, free, request, DomainId::ROOT, model, scratch);
    let takes_a_pod = |h: HostId| {
        let f = free[topo.host_domain(h).0 as usize];
        request.flavor.is_none_or(|want| topo.host_flavor(h) == Some(want))
            && request.sets.iter().any(|s| f.covers(&s.pod))
    };
    let small = |root: DomainId| hosts_under(topo, root, 4 * MAX_HOSTS);
    let hosts: Vec<HostId> = small(DomainId::ROOT)
        .filter(|all| all.iter().filter(|&&h| takes_a_pod(h)).count() <= MAX_HOSTS)
        .or_else(|| greedy.as_ref().ok().and_then(|g| small(g.domain)))
        .unwrap_or_default()
        .into_iter()
        .filter(|&h| takes_a_pod(h))
        .collect();
    let incumbent = greedy.as_ref().ok().map(|g| g.cost);
    // When the greedy answer meets the bound, nothing on these hosts is cheaper: the search
    // would only confirm it.
    let proven = !hosts.is_empty() && incumbent.is_some_and(|c| c <= lower_bound(topo, free, request, &hosts, model));
    let exact = match proven {
        true => Some(Exact { better: None, complete: true }),
        false => search(topo, free, request, hosts, model, incumbent),
    };
    match (greedy, exact) {
        (_, Some(Exact { better: Some(b), .. })) => Ok(b),
        (Ok(mut g), Some(Exact { better: None, complete: true })) => {
            g.lower_bound = Some(g.cost);
            Ok(g)
        }
        (g, _) => g,
    }
}
