//! The exact joint search: a mixed-integer model of a multi-set gang, solved through good_lp.
//!
//! Variables: `n[s][h]` pods of set `s` on host `h` (integer), `y[h]` host used and `z[D]`
//! domain used (binary), `q[s][D]` the domain a set must stay within, `m[s][D]` slices of a
//! set in a slice-level domain (integer). Constraints: every set fully placed, host capacity
//! per resource, a host is used only inside a used domain, at most one gang domain at the
//! required level, slices whole. The objective is the cost of `cost.rs`, which is linear in
//! these variables: domain weights on `y` and `z`, stranded GPUs as
//! `stranded_per_gpu * (free GPUs of h * y[h] - GPUs placed on h)`.
//!
//! The pure-Rust microlp solver is the default; the `highs` feature switches to HiGHS. The
//! solver starts from the greedy answer and stops at the time limit with the best incumbent:
//! an answer proven optimal carries its lower bound, one cut short does not.

use good_lp::{
    Expression, ProblemVariables, Solution, SolutionStatus, SolverModel, Variable, WithInitialSolution, WithMipGap,
    WithTimeLimit, variable,
};

#[cfg(feature = "highs")]
use good_lp::highs as solver;
#[cfg(not(feature = "highs"))]
use good_lp::microlp as solver;

use super::joint::{self, JointOptions, JointPlacement, JointRequest};
use super::{CostModel, SearchPath};
use crate::{DomainId, HostId, Resources, Topology};

/// Reads one resource out of [`Resources`].
type Component = fn(&Resources) -> u64;

/// The hosts and domains a model covers.
struct Universe {
    hosts: Vec<HostId>,
    /// Domains above the hosts (depth >= 1) that contain a universe host, by index.
    domains: Vec<DomainId>,
}

/// Picks the hosts to model: every host under an allowed gang domain that can take a pod of
/// some set; when that is too many, only the hosts under the greedy answer's domain. `None`
/// when no host qualifies or even the narrowed set is too large.
fn universe(
    topo: &Topology,
    free: &[Resources],
    request: &JointRequest,
    depth: u8,
    greedy: Option<&JointPlacement>,
    max_hosts: usize,
) -> Option<Universe> {
    let total = request.total();
    let takes_a_pod = |h: HostId| {
        let f = free[topo.host_domain(h).0 as usize];
        let flavor_ok = request.flavor.is_none_or(|want| topo.host_flavor(h) == Some(want));
        flavor_ok && request.sets.iter().any(|s| f.covers(&s.pod))
    };
    let allowed =
        |h: HostId| free[topo.ancestor_at(topo.host_domain(h), depth).0 as usize].covers(&total) && takes_a_pod(h);
    let mut hosts: Vec<HostId> = topo.hosts().filter(|&h| allowed(h)).collect();
    if hosts.len() > max_hosts {
        let root = greedy?.domain;
        hosts = topo
            .hosts()
            .filter(|&h| topo.ancestor_at(topo.host_domain(h), topo.depth(root)) == root && takes_a_pod(h))
            .collect();
        if hosts.len() > max_hosts {
            return None;
        }
    }
    // An empty model is `Infeasible` to microlp but a `ModelEmpty` error to HiGHS: settle it here.
    if hosts.is_empty() {
        return None;
    }
    let mut domains: Vec<DomainId> = Vec::new();
    for &h in &hosts {
        let mut d = topo.parent(topo.host_domain(h));
        while let Some(x) = d.filter(|&x| topo.depth(x) >= 1) {
            domains.push(x);
            d = topo.parent(x);
        }
    }
    domains.sort_unstable();
    domains.dedup();
    Some(Universe { hosts, domains })
}

/// Solves the joint model; `None` when it is too large or the solver found nothing.
pub(crate) fn solve(
    topo: &Topology,
    free: &[Resources],
    request: &JointRequest,
    model: &CostModel,
    options: &JointOptions,
    greedy: Option<&JointPlacement>,
) -> Option<JointPlacement> {
    let c = request.constraint;
    let depth = match c.preferred_depth {
        Some(p) if p > c.top_depth && greedy.is_some_and(|g| g.depth >= p) => p,
        _ => c.top_depth,
    };
    let u = universe(topo, free, request, depth, greedy, options.max_hosts)?;
    let hd = topo.host_depth();
    let host_free = |h: HostId| free[topo.host_domain(h).0 as usize];
    let domain_index = |d: DomainId| u.domains.binary_search(&d).ok();
    // The domain of a host at `depth`, as a key shared by hosts and upper domains.
    let at = |h: HostId, depth: u8| topo.ancestor_at(topo.host_domain(h), depth);

    let mut vars = ProblemVariables::new();
    let mut init: Vec<(Variable, f64)> = Vec::new();
    // The greedy answer is the warm start; without one every variable starts at zero.
    let no_sets = Vec::new();
    let greedy_sets = greedy.map_or(&no_sets, |g| &g.sets);
    let greedy_hosts = |s: usize| greedy_sets.get(s).map_or(&[][..], |v: &Vec<HostId>| v.as_slice());
    let greedy_count = |s: usize, h: HostId| greedy_hosts(s).iter().filter(|&&x| x == h).count() as f64;
    let greedy_uses =
        |d: DomainId| greedy_sets.iter().flatten().any(|&h| topo.ancestor_at(topo.host_domain(h), topo.depth(d)) == d);

    let n: Vec<Vec<Variable>> = request
        .sets
        .iter()
        .enumerate()
        .map(|(s, set)| {
            u.hosts
                .iter()
                .map(|&h| {
                    let fit = host_free(h).fit_count(&set.pod).min(u64::from(set.pods));
                    let v = vars.add(variable().integer().min(0).max(fit as f64));
                    init.push((v, greedy_count(s, h)));
                    v
                })
                .collect()
        })
        .collect();
    let y: Vec<Variable> = u
        .hosts
        .iter()
        .map(|&h| {
            let v = vars.add(variable().binary());
            init.push((v, if greedy_uses(topo.host_domain(h)) { 1.0 } else { 0.0 }));
            v
        })
        .collect();
    let z: Vec<Variable> = u
        .domains
        .iter()
        .map(|&d| {
            let v = vars.add(variable().binary());
            init.push((v, if greedy_uses(d) { 1.0 } else { 0.0 }));
            v
        })
        .collect();
    // Domains at a depth, as (key, indicator) pairs: hosts use `y`, upper domains `z`.
    let level = |depth: u8| -> Vec<(DomainId, Variable)> {
        if depth == hd {
            u.hosts.iter().zip(&y).map(|(&h, &v)| (topo.host_domain(h), v)).collect()
        } else {
            u.domains.iter().zip(&z).filter(|(d, _)| topo.depth(**d) == depth).map(|(&d, &v)| (d, v)).collect()
        }
    };

    let mut objective = Expression::from(0.0);
    for (&d, &v) in u.domains.iter().zip(&z) {
        objective += model.weight(topo.depth(d), hd) as f64 * v;
    }
    for (i, &h) in u.hosts.iter().enumerate() {
        let own = model.host_weight as f64 + (model.stranded_per_gpu * host_free(h).gpus) as f64;
        objective += own * y[i];
        for (s, set) in request.sets.iter().enumerate() {
            objective -= (model.stranded_per_gpu * set.pod.gpus) as f64 * n[s][i];
        }
    }

    let mut constraints = Vec::new();
    for (s, set) in request.sets.iter().enumerate() {
        let placed: Expression = n[s].iter().sum();
        constraints.push(placed.eq(f64::from(set.pods)));
        for (i, &h) in u.hosts.iter().enumerate() {
            let fit = host_free(h).fit_count(&set.pod).min(u64::from(set.pods)) as f64;
            constraints.push((fit * y[i] - n[s][i]).geq(0.0));
        }
        if let Some(w) = set.within.filter(|&w| w > depth) {
            let choices = level(w);
            let mut chosen = Expression::from(0.0);
            let mut q_of: Vec<(DomainId, Variable)> = Vec::new();
            for (d, _) in &choices {
                let q = vars.add(variable().binary());
                init.push((q, if greedy_hosts(s).first().is_some_and(|&h| at(h, w) == *d) { 1.0 } else { 0.0 }));
                chosen += q;
                q_of.push((*d, q));
            }
            constraints.push(chosen.eq(1.0));
            for (i, &h) in u.hosts.iter().enumerate() {
                let fit = host_free(h).fit_count(&set.pod).min(u64::from(set.pods)) as f64;
                let q = q_of.iter().find(|(d, _)| *d == at(h, w)).expect("every host lies in a domain of each level").1;
                constraints.push((fit * q - n[s][i]).geq(0.0));
            }
        }
        if let Some(slice) = set.slice {
            for (d, _) in level(slice.depth) {
                let m = vars.add(variable().integer().min(0));
                let inside: Expression =
                    u.hosts.iter().enumerate().filter(|&(_, &h)| at(h, slice.depth) == d).map(|(i, _)| n[s][i]).sum();
                let greedy_in = greedy_hosts(s).iter().filter(|&&h| at(h, slice.depth) == d).count() as f64;
                init.push((m, greedy_in / f64::from(slice.size)));
                constraints.push((inside - f64::from(slice.size) * m).eq(0.0));
            }
        }
    }
    for (i, &h) in u.hosts.iter().enumerate() {
        if let Some(p) = topo.parent(topo.host_domain(h)).and_then(domain_index) {
            constraints.push((z[p] - y[i]).geq(0.0));
        }
        let f = host_free(h);
        let per_resource: [(Component, u64); 3] =
            [(|r| r.gpus, f.gpus), (|r| r.cpu_milli, f.cpu_milli), (|r| r.memory_mib, f.memory_mib)];
        for (get, available) in per_resource {
            if request.sets.iter().all(|s| get(&s.pod) == 0) {
                continue;
            }
            let used: Expression = request.sets.iter().enumerate().map(|(s, set)| get(&set.pod) as f64 * n[s][i]).sum();
            constraints.push(used.leq(available as f64));
        }
    }
    for (j, &d) in u.domains.iter().enumerate() {
        if let Some(p) = topo.parent(d).and_then(domain_index) {
            constraints.push((z[p] - z[j]).geq(0.0));
        }
    }
    if depth > 0 {
        let gang_domains: Expression = level(depth).into_iter().map(|(_, v)| v).sum();
        constraints.push(gang_domains.leq(1.0));
    }

    // HiGHS stops by default at a 1e-4 relative gap, microlp at none: ask both for a proof so that
    // `Optimal` (and so `lower_bound`) means the same with either backend.
    let mut problem = vars
        .minimise(objective)
        .using(solver)
        .with_time_limit(options.time_limit_ms as f64 / 1000.0)
        .with_mip_gap(0.0)
        .ok()?;
    if greedy.is_some() {
        problem = problem.with_initial_solution(init);
    }
    for constraint in constraints {
        problem.add_constraint(constraint);
    }
    let solution = problem.solve().ok()?;
    let optimal = matches!(solution.status(), SolutionStatus::Optimal);
    let mut sets = vec![Vec::new(); request.sets.len()];
    for (s, set) in request.sets.iter().enumerate() {
        for (i, &h) in u.hosts.iter().enumerate() {
            let k = solution.value(n[s][i]).round().max(0.0) as usize;
            sets[s].extend(std::iter::repeat_n(h, k));
        }
        if sets[s].len() != set.pods as usize {
            return None;
        }
    }
    let mut placement = joint::finish(topo, free, request, sets, SearchPath::Exact, model);
    placement.lower_bound = optimal.then_some(placement.cost);
    Some(placement)
}
