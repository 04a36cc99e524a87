//! The placement cost: domains spanned, weighted by level, then capacity stranded on hosts.
//!
//! ```text
//! cost = sum over used domains D (every level, hosts included) of weight(level of D)
//!      + stranded_per_gpu * (GPUs left free on the hosts the gang uses)
//! weight(host level) = host_weight, and each level up multiplies it by level_factor
//! defaults: host_weight 1024, level_factor 4, stranded_per_gpu 64
//! ```
//! The first term counts boundaries the gang's traffic must cross: a second rack costs
//! `level_factor` times a second host. The second term breaks ties toward hosts the gang
//! fills, keeping whole hosts free for later gangs (best fit). Costs are integers so that
//! every policy and the exact search compare them without rounding, and ties stay stable.

use crate::{DomainId, HostId, Resources, Topology};

/// Weights of the cost function; the defaults are documented above.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CostModel {
    /// Cost of one more host.
    pub host_weight: u64,
    /// How much more a domain one level up costs than one level down.
    pub level_factor: u64,
    /// Cost of each GPU left free on a host the gang uses.
    pub stranded_per_gpu: u64,
}

impl Default for CostModel {
    fn default() -> CostModel {
        CostModel { host_weight: 1024, level_factor: 4, stranded_per_gpu: 64 }
    }
}

impl CostModel {
    /// Weight of one used domain at `depth` (0 for the cluster root, which every gang uses).
    pub fn weight(&self, depth: u8, host_depth: u8) -> u64 {
        if depth == 0 {
            return 0;
        }
        let up = u32::from(host_depth.saturating_sub(depth));
        self.host_weight.saturating_mul(self.level_factor.saturating_pow(up))
    }

    /// Cost of putting `k >= 1` pods on a host with `free` left.
    pub fn host_cost(&self, free: Resources, pod: Resources, k: u64, host_depth: u8) -> u64 {
        let left = free.gpus.saturating_sub(pod.gpus.saturating_mul(k));
        self.weight(host_depth, host_depth) + self.stranded_per_gpu * left
    }

    /// Cost of a placement given as `(host, pods)` pairs, on the free capacity before it.
    pub fn cost(&self, topo: &Topology, free: &[Resources], pod: Resources, per_host: &[(HostId, u32)]) -> u64 {
        let h = topo.host_depth();
        let domains = self.domains_cost(topo, per_host.iter().map(|&(host, _)| host), per_host.len());
        let hosts: u64 = per_host
            .iter()
            .map(|&(host, k)| {
                let d = topo.host_domain(host);
                self.host_cost(free[d.0 as usize], pod, u64::from(k), h)
            })
            .sum();
        domains + hosts
    }

    /// The domains part of a cost: each level's weight times the domains used there. A gang on
    /// one host (most gangs) uses one domain per level, which needs no counting.
    fn domains_cost(&self, topo: &Topology, hosts: impl IntoIterator<Item = HostId>, distinct: usize) -> u64 {
        let h = topo.host_depth();
        if distinct == 1 {
            return (1..h).map(|d| self.weight(d, h)).sum();
        }
        let spans = Spans::of(topo, hosts);
        (1..h).map(|d| self.weight(d, h) * u64::from(spans.at(d))).sum()
    }

    /// Cost of a placement given as `(host, what its pods take there)` pairs, on the free
    /// capacity before it: [`CostModel::cost`] for pods of several shapes.
    pub fn usage_cost(&self, topo: &Topology, free: &[Resources], per_host: &[(HostId, Resources)]) -> u64 {
        let h = topo.host_depth();
        let domains = self.domains_cost(topo, per_host.iter().map(|&(host, _)| host), per_host.len());
        let hosts: u64 = per_host
            .iter()
            .map(|&(host, used)| self.host_cost(free[topo.host_domain(host).0 as usize], used, 1, h))
            .sum();
        domains + hosts
    }
}

/// A cost taken apart: domains used and their weight per level, and stranded GPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CostBreakdown {
    /// `(level name, domains used, weight of one)`, outermost level first, hosts last.
    pub levels: Vec<(String, u32, u64)>,
    /// GPUs left free on the hosts the gang uses.
    pub stranded_gpus: u64,
    /// Cost of each of them.
    pub stranded_per_gpu: u64,
    /// The total, equal to [`CostModel::cost`].
    pub total: u64,
}

impl std::fmt::Display for CostBreakdown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} =", self.total)?;
        for (i, (level, count, weight)) in self.levels.iter().enumerate() {
            let sep = if i == 0 { "" } else { " +" };
            write!(f, "{sep} {count} {level} x {weight}")?;
        }
        write!(f, " + {} stranded GPUs x {}", self.stranded_gpus, self.stranded_per_gpu)
    }
}

impl CostModel {
    /// [`CostModel::cost`], term by term.
    pub fn breakdown(
        &self,
        topo: &Topology,
        free: &[Resources],
        pod: Resources,
        per_host: &[(HostId, u32)],
    ) -> CostBreakdown {
        let h = topo.host_depth();
        let spans = Spans::of(topo, per_host.iter().map(|&(host, _)| host));
        let levels =
            (1..=h).map(|d| (topo.levels()[usize::from(d) - 1].clone(), spans.at(d), self.weight(d, h))).collect();
        let stranded_gpus = per_host
            .iter()
            .map(|&(host, k)| {
                let f = free[topo.host_domain(host).0 as usize];
                f.gpus.saturating_sub(pod.gpus.saturating_mul(u64::from(k)))
            })
            .sum::<u64>();
        let total = self.cost(topo, free, pod, per_host);
        CostBreakdown { levels, stranded_gpus, stranded_per_gpu: self.stranded_per_gpu, total }
    }
}

/// How many distinct domains a placement uses at each level.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Spans {
    /// `per_level[i]` counts domains of level `i` (outermost first; the last is hosts).
    pub per_level: Vec<u32>,
}

impl Spans {
    /// Counts the domains used by a set of hosts (repeats are fine).
    pub fn of(topo: &Topology, hosts: impl IntoIterator<Item = HostId>) -> Spans {
        let levels = usize::from(topo.host_depth());
        let mut seen: Vec<Vec<u32>> = vec![Vec::new(); levels];
        for host in hosts {
            let mut d = topo.host_domain(host);
            loop {
                let depth = usize::from(topo.depth(d));
                if depth == 0 {
                    break;
                }
                let at = &mut seen[depth - 1];
                if at.contains(&d.0) {
                    // Ancestors were recorded with the first host under this domain.
                    break;
                }
                at.push(d.0);
                d = topo.parent(d).unwrap_or(DomainId::ROOT);
            }
        }
        Spans { per_level: seen.iter().map(|s| s.len() as u32).collect() }
    }

    /// Domains used at `depth` (1 = outermost level).
    pub fn at(&self, depth: u8) -> u32 {
        self.per_level.get(usize::from(depth).wrapping_sub(1)).copied().unwrap_or(1)
    }

    /// Domains used over every level above the hosts: the boundaries a gang crosses.
    pub fn above_hosts(&self) -> u32 {
        self.per_level.iter().rev().skip(1).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Cluster;

    #[test]
    fn weights_grow_by_the_level_factor_and_root_is_free() {
        let m = CostModel::default();
        assert_eq!(m.weight(3, 3), 1024);
        assert_eq!(m.weight(2, 3), 4096);
        assert_eq!(m.weight(1, 3), 16384);
        assert_eq!(m.weight(0, 3), 0);
    }

    #[test]
    fn a_second_rack_costs_more_than_a_second_host() {
        let c =
            Cluster::from_yaml("name: t\nlevels: [rack, host]\ngenerate:\n  counts: [2, 2]\n  node: {gpus: 8}\n", "t")
                .unwrap();
        let topo = c.topology();
        let free: Vec<Resources> = (0..topo.domain_count() as u32).map(|d| c.free(DomainId(d))).collect();
        let m = CostModel::default();
        let pod = Resources::gpus(8);
        let same_rack = m.cost(topo, &free, pod, &[(HostId(0), 1), (HostId(1), 1)]);
        let two_racks = m.cost(topo, &free, pod, &[(HostId(0), 1), (HostId(2), 1)]);
        assert_eq!(same_rack, 4096 + 2 * 1024);
        assert_eq!(two_racks, 2 * 4096 + 2 * 1024);
        // Half a host left free strands capacity.
        assert_eq!(m.cost(topo, &free, Resources::gpus(4), &[(HostId(0), 1)]), 4096 + 1024 + 256);
        let spans = Spans::of(topo, [HostId(0), HostId(2), HostId(3), HostId(3)]);
        assert_eq!(spans.per_level, vec![2, 3]);
        assert_eq!(spans.above_hosts(), 2);
    }
}
