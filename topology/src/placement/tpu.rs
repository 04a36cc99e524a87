//! TPU slices on the cluster's tori: a pod set of whole hosts cut into slices of a torus shape,
//! each slice a contiguous box of host blocks inside one torus domain, all slices or none.
//!
//! The occupancy of each torus is read from the free capacity the search is handed: a host block
//! is free when its host is a live host of the request's class and flavor with room for the pod.
//! [`crate::torus::TpuPool`] then places the slices (fullest torus first, best contact inside
//! it). With a gang-level constraint every slice stays inside one domain of that level; the
//! fullest such domain that takes them all wins, so emptier ones stay whole.

use crate::model::{block_grid, block_index, block_origin};
use crate::torus::{Rotation, SliceShape, SubMesh, Torus, TorusFailure, TorusSpec, TpuPool};
use crate::{DomainId, HostClass, HostId, LevelConstraint, Resources, Topology};

use super::{CostModel, Placement, PlacementFailure, SearchPath, greedy, times};

/// A pod set of whole TPU hosts cut into slices of one torus shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TpuRequest {
    /// Pods (hosts) of all slices.
    pub pods: u32,
    /// What each pod takes of its host.
    pub pod: Resources,
    /// The shape of every slice, in chips; any orientation.
    pub shape: SliceShape,
    /// Hosts (pods) per slice on the tori that can hold the shape.
    pub hosts_per_slice: u32,
    /// Where the whole gang must (or would like to) stay; the slice level is the torus.
    pub constraint: LevelConstraint,
    /// Only hosts of this flavor.
    pub flavor: Option<u16>,
    /// Only hosts of this eligibility class.
    pub hosts: HostClass,
}

impl TpuRequest {
    /// Number of slices.
    pub fn slices(&self) -> u32 {
        self.pods / self.hosts_per_slice.max(1)
    }

    /// Resources of all pods.
    pub fn total(&self) -> Resources {
        times(self.pod, self.pods)
    }
}

/// The hosts per slice of `shape` on the cluster's tori: `Err` names why no torus can ever
/// hold it (no tori, a shape no torus fits, a shape smaller than a host).
pub(crate) fn hosts_per_slice(topo: &Topology, shape: &SliceShape) -> Result<u32, String> {
    if !topo.has_tori() {
        return Err(format!("TPU slice {shape} asked of a cluster without TPU tori"));
    }
    let mut reasons: Vec<String> = Vec::new();
    let mut per_slice: Option<u32> = None;
    for (d, spec) in topo.tori() {
        match slice_hosts(spec, shape) {
            Ok(n) => {
                per_slice = Some(per_slice.map_or(n, |m| m.min(n)));
            }
            Err(e) => {
                if reasons.len() < 3 {
                    reasons.push(format!("{} ({}): {e}", topo.path(d), spec.sizes()));
                }
            }
        }
    }
    per_slice.ok_or_else(|| format!("TPU slice {shape} fits no torus of this cluster: {}", reasons.join("; ")))
}

/// Hosts a slice of `shape` takes on `spec`, when it fits there as whole hosts.
fn slice_hosts(spec: &TorusSpec, shape: &SliceShape) -> Result<u32, String> {
    spec.check(shape, Rotation::Any).map_err(|e| e.to_string())?;
    let block: u64 = spec.host_block.iter().map(|&b| u64::from(b)).product();
    if shape.chips() < block || !shape.chips().is_multiple_of(block) {
        return Err(format!("{shape} is smaller than a host of {block} chips; ask for chips on one host instead"));
    }
    u32::try_from(shape.chips() / block).map_err(|_| format!("{shape} is too large"))
}

/// Places every slice of `request` on the tori, given the free capacity per domain of its class.
pub(crate) fn place(
    topo: &Topology,
    free: &[Resources],
    request: &TpuRequest,
    model: &CostModel,
) -> Result<Placement, PlacementFailure> {
    let top = request.constraint.top_depth;
    // Candidate tori grouped by their domain at the gang's top level, in domain order.
    let mut groups: Vec<(DomainId, Vec<(DomainId, &TorusSpec)>)> = Vec::new();
    for (d, spec) in topo.tori() {
        if topo.depth(d) < top || slice_hosts(spec, &request.shape).ok() != Some(request.hosts_per_slice) {
            continue;
        }
        let group = topo.ancestor_at(d, top);
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, members)) => members.push((d, spec)),
            None => groups.push((group, vec![(d, spec)])),
        }
    }
    let slices = request.slices();
    let mut best: Option<(u64, Vec<HostId>)> = None;
    let mut most_placed = 0u32;
    let mut free_chips_seen = 0u64;
    for (_, members) in &groups {
        let (mut pool, hosts) = occupancy(topo, free, request, members);
        let chips = pool.free_chips();
        free_chips_seen = free_chips_seen.max(chips);
        match pool.place_slices(&request.shape, slices) {
            Ok(Ok(boxes)) => {
                if best.as_ref().is_some_and(|(c, _)| *c <= chips) {
                    continue;
                }
                let chosen = boxes.iter().flat_map(|(i, m)| box_hosts(members[*i].1, m, &hosts[*i])).collect();
                best = Some((chips, chosen));
            }
            Ok(Err(TorusFailure::Fragmented { placed, .. })) => most_placed = most_placed.max(placed),
            Ok(Err(TorusFailure::NotEnoughChips { free, .. })) => {
                let fit = (free / request.shape.chips().max(1)).min(u64::from(slices.saturating_sub(1)));
                most_placed = most_placed.max(fit as u32);
            }
            Err(_) => {}
        }
    }
    match best {
        Some((_, hosts)) => Ok(greedy::finish(topo, free, request.pod, hosts, SearchPath::Torus, model)),
        None => Err(PlacementFailure::Slices {
            shape: request.shape.to_string(),
            slices,
            placed: most_placed,
            free_chips: free_chips_seen,
        }),
    }
}

/// The tori of one group as a pool whose busy blocks are the hosts that cannot take a pod, and
/// each torus's hosts by block index (`None`: a hole, or a host past the last block).
fn occupancy(
    topo: &Topology,
    free: &[Resources],
    request: &TpuRequest,
    members: &[(DomainId, &TorusSpec)],
) -> (TpuPool, Vec<Vec<Option<HostId>>>) {
    let mut tori = Vec::with_capacity(members.len());
    let mut by_block = Vec::with_capacity(members.len());
    for &(d, spec) in members {
        let blocks: usize = block_grid(spec).iter().map(|&g| g as usize).product();
        let mut hosts: Vec<Option<HostId>> = topo.torus_hosts(d).into_iter().map(Some).collect();
        hosts.resize(blocks, None);
        hosts.truncate(blocks);
        let mut torus = Torus::new(spec.clone()).expect("tori are validated when set");
        for (index, host) in hosts.iter().enumerate() {
            let takes = host.is_some_and(|h| {
                free[topo.host_domain(h).0 as usize].covers(&request.pod)
                    && (request.flavor.is_none() || topo.host_flavor(h) == request.flavor)
            });
            if !takes {
                let origin = block_origin(spec, index).expect("index below the block count");
                let block = SubMesh { origin, extent: spec.host_block.clone() };
                torus.allocate(&block).expect("host blocks of one torus never overlap");
            }
        }
        tori.push(torus);
        by_block.push(hosts);
    }
    (TpuPool::new(tori), by_block)
}

/// The hosts of a placed box, in the order of its blocks (the first dimension varying slowest).
fn box_hosts<'a>(
    spec: &'a TorusSpec,
    m: &'a SubMesh,
    hosts: &'a [Option<HostId>],
) -> impl Iterator<Item = HostId> + 'a {
    m.chips(spec)
        .filter(|chip| chip.iter().zip(&spec.host_block).all(|(c, b)| c % b == 0))
        .map(move |chip| hosts[block_index(spec, &chip)].expect("a placed block is a free host"))
}
