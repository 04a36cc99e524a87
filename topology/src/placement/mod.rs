//! Gang placement: what a gang asks, where it goes, and the policies that decide.
//!
//! Every policy sees the same inputs (the tree, free capacity per domain, the request) and
//! returns a [`Placement`] or a [`PlacementFailure`]. `trainyard` runs the greedy search and
//! then the exact tree search of `exact.rs`, keeping the cheaper answer under the cost model
//! of `cost.rs`; the baselines reproduce how other schedulers choose, for comparison.

mod baselines;
pub(crate) mod cost;
mod demand;
mod exact;
pub(crate) mod explain;
pub(crate) mod greedy;
pub(crate) mod joint;
pub(crate) mod joint_exact;
mod mip;
mod policy;
pub(crate) mod tpu;

pub use cost::{CostBreakdown, CostModel, Spans};
pub use demand::Demand;
pub use explain::{Explanation, LevelVerdict, Rival};
pub use joint::{JointOptions, JointPlacement, JointRequest, PodSet};
pub use policy::{ParsePlacementPolicyError, PlacementPolicy};
pub use tpu::TpuRequest;

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
    /// Only hosts of this GPU flavor (see [`Topology::flavor_id`]); `None` for any host.
    pub flavor: Option<u16>,
    /// Only hosts this eligibility class admits (see [`crate::Cluster::class_of`]); placement
    /// functions that take free capacities directly are handed the class's.
    pub hosts: crate::HostClass,
}

impl PlacementRequest {
    /// `pods` copies of `pod` within `constraint`, on any host of any flavor.
    pub fn new(pods: u32, pod: Resources, constraint: LevelConstraint) -> PlacementRequest {
        PlacementRequest { pods, pod, constraint, flavor: None, hosts: crate::HostClass::DEFAULT }
    }

    /// Resources of the whole gang (saturating: a gang that large never fits anyway).
    pub fn total(&self) -> Resources {
        self.pod.checked_mul(u64::from(self.pods)).unwrap_or(Resources {
            gpus: u64::MAX,
            cpu_milli: u64::MAX,
            memory_mib: u64::MAX,
        })
    }
}

/// Which search produced a placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SearchPath {
    /// trainyard's greedy search (lowest level, best fit).
    Greedy,
    /// trainyard's exact search over the tree; the answer is optimal under the cost model.
    Exact,
    /// A baseline policy (first-fit, Kueue BestFit, Slurm tree).
    Baseline,
    /// Decided earlier and recorded (a scheduler taking back its running gangs after a restart).
    Recorded,
    /// TPU slices as contiguous boxes on the cluster's tori.
    Torus,
}

/// One pod set's share of a [`Placement`]: `pods` pods of shape `pod`, whose hosts follow those
/// of the sets before it in [`Placement::hosts`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PlacedSet {
    /// Pods of the set.
    pub pods: u32,
    /// Resources of each.
    pub pod: Resources,
}

/// Where every pod of a gang goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Host of pod `i`, the pods of every set one after another in the order of `sets`.
    pub hosts: Vec<HostId>,
    /// The gang's pod sets, in the order their pods stand in `hosts`; one for a single-set gang.
    pub sets: Vec<PlacedSet>,
    /// The smallest domain that contains every pod.
    pub domain: DomainId,
    /// Depth of that domain (0 = spans the whole cluster).
    pub depth: u8,
    /// Cost under the cost model, on the free capacity the placement was made for.
    pub cost: u64,
    /// The search that produced it.
    pub path: SearchPath,
    /// A proven lower bound on the cost of any placement of this request; equal to `cost`
    /// when the answer is known to be optimal, `None` when no bound was computed.
    pub lower_bound: Option<u64>,
    /// The GPU layout the gang's pods of that many GPUs ask for (from its eligibility class).
    pub layout: Option<crate::LayoutNeed>,
    /// GPU indices of pod `i` as a mask (bit `g` = GPU `g`), given by
    /// [`crate::Cluster::allocate_placement`] on hosts whose layout is known; empty when no pod
    /// got any, 0 for a pod that got none.
    pub gpus: Vec<u64>,
    /// The device claims the gang's pods of that shape carry (from its eligibility class).
    pub device_fit: Option<crate::DeviceFit>,
    /// DRA devices of pod `i`, given by [`crate::Cluster::allocate_placement`]; empty when no pod
    /// carries claims, `None` for a pod that carries none.
    pub devices: Vec<Option<crate::devices::PodAllocation>>,
}

impl Placement {
    /// A placement of no pods (what a stopped gang holds).
    pub fn none() -> Placement {
        Placement {
            hosts: Vec::new(),
            sets: Vec::new(),
            domain: DomainId::ROOT,
            depth: 0,
            cost: 0,
            path: SearchPath::Recorded,
            lower_bound: None,
            layout: None,
            gpus: Vec::new(),
            device_fit: None,
            devices: Vec::new(),
        }
    }

    /// `(host, pods on it)`, sorted by host.
    pub fn per_host(&self) -> Vec<(HostId, u32)> {
        fn group(hosts: &[HostId]) -> Vec<(HostId, u32)> {
            let mut out: Vec<(HostId, u32)> = Vec::with_capacity(hosts.len().min(8));
            for &h in hosts {
                match out.last_mut() {
                    Some((last, n)) if *last == h => *n += 1,
                    _ => out.push((h, 1)),
                }
            }
            out
        }
        // Most placements list their hosts in order already: no copy to sort then.
        if self.hosts.is_sorted() {
            return group(&self.hosts);
        }
        let mut hosts = self.hosts.clone();
        hosts.sort_unstable();
        group(&hosts)
    }

    /// The optimality gap (`cost - lower bound`), when a bound is known.
    pub fn gap(&self) -> Option<u64> {
        self.lower_bound.map(|lb| self.cost.saturating_sub(lb))
    }

    /// `(host, what the gang's pods take there)`, sorted by host.
    pub fn per_host_usage(&self) -> Vec<(HostId, Resources)> {
        let mut pods: Vec<(HostId, Resources)> = self.pods().collect();
        pods.sort_unstable_by_key(|&(h, _)| h);
        let mut out: Vec<(HostId, Resources)> = Vec::with_capacity(pods.len());
        for (h, pod) in pods {
            match out.last_mut() {
                Some((last, sum)) if *last == h => *sum = sum.saturating_add(&pod),
                _ => out.push((h, pod)),
            }
        }
        out
    }

    /// `(host, resources)` of every pod, in pod order.
    pub fn pods(&self) -> impl Iterator<Item = (HostId, Resources)> + '_ {
        let shapes = self.sets.iter().flat_map(|s| std::iter::repeat_n(s.pod, s.pods as usize));
        self.hosts.iter().copied().zip(shapes)
    }

    /// Resources of pod `i`, `None` past the last pod.
    pub fn pod_of(&self, i: usize) -> Option<Resources> {
        let mut first = 0usize;
        for s in &self.sets {
            first += s.pods as usize;
            if i < first {
                return Some(s.pod);
            }
        }
        None
    }

    /// The hosts of set `k`'s pods.
    pub fn set_hosts(&self, k: usize) -> &[HostId] {
        let start: usize = self.sets[..k.min(self.sets.len())].iter().map(|s| s.pods as usize).sum();
        let len = self.sets.get(k).map_or(0, |s| s.pods as usize);
        &self.hosts[start.min(self.hosts.len())..(start + len).min(self.hosts.len())]
    }

    /// Everything the gang's pods take.
    pub fn total(&self) -> Resources {
        self.sets.iter().fold(Resources::ZERO, |acc, s| acc.saturating_add(&times(s.pod, s.pods)))
    }
}

/// `count` pods of `pod` (saturating: a gang that large never fits anyway).
pub(crate) fn times(pod: Resources, count: u32) -> Resources {
    pod.checked_mul(u64::from(count)).unwrap_or(Resources { gpus: u64::MAX, cpu_milli: u64::MAX, memory_mib: u64::MAX })
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
    /// The request cannot be met as written: its pod count is not a multiple of its slice size,
    /// or the slice level lies above the level the whole gang must stay within.
    BadSlice {
        /// Pods the gang has.
        pods: u32,
        /// The slice size asked for.
        size: u32,
    },
    /// Not every TPU slice finds a free contiguous box on the tori now.
    Slices {
        /// The slice shape, e.g. `2x2x4`.
        shape: String,
        /// Slices the gang asks for.
        slices: u32,
        /// Most slices that fit now (in one domain of the gang's level).
        placed: u32,
        /// Most free chips on the candidate tori of one such domain.
        free_chips: u64,
    },
}

/// Per-placement working memory, kept between calls to avoid allocation.
#[derive(Clone, Debug)]
pub(crate) struct Scratch {
    pub(crate) greedy: greedy::Scratch,
    pub(crate) exact: exact::Scratch,
}

impl Scratch {
    pub(crate) fn new(domains: usize, host_depth: u8) -> Scratch {
        Scratch { greedy: greedy::Scratch::new(domains, host_depth), exact: exact::Scratch::default() }
    }

    /// Grows the buffers to a cluster that gained domains.
    pub(crate) fn fit(&mut self, domains: usize, host_depth: u8) {
        if self.greedy.fits.len() < domains {
            self.greedy = greedy::Scratch::new(domains, host_depth);
        }
    }
}

/// Places a gang over the given free capacities (indexed by domain) with `policy`.
pub(crate) fn place(
    topo: &Topology,
    free: &[Resources],
    request: &PlacementRequest,
    policy: PlacementPolicy,
    model: &CostModel,
    scratch: &mut Scratch,
) -> Result<Placement, PlacementFailure> {
    match policy {
        PlacementPolicy::Greedy => greedy::place(topo, free, request, model, &mut scratch.greedy),
        PlacementPolicy::Trainyard => {
            let mut greedy = greedy::place(topo, free, request, model, &mut scratch.greedy)?;
            if proven_optimal(topo, request, &greedy, model, &scratch.greedy) {
                greedy.lower_bound = Some(greedy.cost);
                return Ok(greedy);
            }
            match exact::place(topo, free, request, model, &scratch.greedy, &mut scratch.exact) {
                Some(exact) if exact.cost < greedy.cost => Ok(exact),
                Some(exact) => Ok(Placement { lower_bound: exact.lower_bound, ..greedy }),
                None => Ok(greedy),
            }
        }
        PlacementPolicy::FirstFit => baselines::first_fit(topo, free, request, model, &mut scratch.greedy),
        PlacementPolicy::KueueBestFit => baselines::kueue_best_fit(topo, free, request, model, &mut scratch.greedy),
        PlacementPolicy::SlurmTree => baselines::slurm_tree(topo, free, request, model, &mut scratch.greedy),
    }
}

/// Greedy's answer for a gang of one pod (no slice, any flavor) on `host`, the host greedy's
/// count would pick, under `policy` (greedy or trainyard's); `None` when trainyard's policy
/// would go on to the exact search (the caller then runs the full search). For one pod every
/// level's bound is one domain, so the lower bound needs no count.
pub(crate) fn one_pod_on(
    topo: &Topology,
    free: &[Resources],
    request: &PlacementRequest,
    host: HostId,
    policy: PlacementPolicy,
    model: &CostModel,
) -> Option<Placement> {
    debug_assert!(request.pods == 1 && request.constraint.slice.is_none() && request.flavor.is_none());
    let mut greedy = greedy::finish(topo, free, request.pod, vec![host], SearchPath::Greedy, model);
    match policy {
        PlacementPolicy::Greedy => Some(greedy),
        PlacementPolicy::Trainyard => {
            let h = topo.host_depth();
            let bound = (1..=h).map(|d| model.weight(d, h)).sum();
            proven_with_bound(topo, request, &greedy, model, bound).then(|| {
                greedy.lower_bound = Some(greedy.cost);
                greedy
            })
        }
        _ => None,
    }
}

/// Whether a greedy answer is optimal without searching: it meets the level-count lower
/// bound, or it is the single host that strands least and stranding there costs less than
/// a second host would.
fn proven_optimal(
    topo: &Topology,
    request: &PlacementRequest,
    greedy: &Placement,
    model: &CostModel,
    scratch: &greedy::Scratch,
) -> bool {
    let Ok(units) = greedy::Units::of(request) else { return false };
    proven_with_bound(topo, request, greedy, model, greedy::lower_bound(topo, &units, scratch, model))
}

/// [`proven_optimal`] given the lower bound.
fn proven_with_bound(
    topo: &Topology,
    request: &PlacementRequest,
    greedy: &Placement,
    model: &CostModel,
    lower_bound: u64,
) -> bool {
    if greedy.cost == lower_bound {
        return true;
    }
    // Greedy picks, among single hosts that hold the gang, the one that strands least.
    let single_host = greedy.depth == topo.host_depth() && request.constraint.slice.is_none();
    single_host && {
        let stranded = greedy.cost - (1..=topo.host_depth()).map(|x| model.weight(x, topo.host_depth())).sum::<u64>();
        stranded < model.host_weight
    }
}
