//! GKE's TPU node labels: the node pool a TPU host belongs to is one slice, a torus of the chip
//! topology its label names, made of hosts of a fixed block of chips.

use crate::torus::TorusSpec;

/// GKE's node label with the chip topology of the node's TPU slice, e.g. `2x2x4`.
pub const TPU_TOPOLOGY_LABEL: &str = "cloud.google.com/gke-tpu-topology";
/// GKE's node label naming the node pool: a multi-host TPU slice is one node pool.
pub const NODEPOOL_LABEL: &str = "cloud.google.com/gke-nodepool";
/// GKE's node label with the TPU accelerator, e.g. `tpu-v5p-slice`; read as the node's flavor.
pub const TPU_ACCELERATOR_LABEL: &str = "cloud.google.com/gke-tpu-accelerator";

/// The torus of a GKE TPU node pool of `topology` whose hosts have `chips` chips each: a 3-D
/// topology takes hosts of `2x2x1` (4 chips), a 2-D one `2x2` (4) or `2x4` (8); a single-host
/// topology is one block. `None` when the label or the chip count fits none of these.
pub fn gke_torus(topology: &str, chips: u64) -> Option<TorusSpec> {
    let dims: Vec<u32> = topology.trim().split('x').map(|d| d.trim().parse().ok()).collect::<Option<_>>()?;
    if !(2..=3).contains(&dims.len()) || dims.contains(&0) {
        return None;
    }
    let total: u64 = dims.iter().map(|&d| u64::from(d)).product();
    let block = if total == chips {
        dims.clone()
    } else {
        match (dims.len(), chips) {
            (3, 4) => vec![2, 2, 1],
            (2, 4) => vec![2, 2],
            (2, 8) => vec![2, 4],
            _ => return None,
        }
    };
    // Every wrap flag off: a slice of a node pool never runs past the pool's own borders.
    let spec = TorusSpec { wrap: vec![false; dims.len()], host_block: block, dims };
    spec.validate().ok().map(|()| spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gke_topologies_become_tori_of_host_blocks() {
        let v5p = gke_torus("2x2x4", 4).unwrap();
        assert_eq!((v5p.dims.clone(), v5p.host_block.clone()), (vec![2, 2, 4], vec![2, 2, 1]));
        assert_eq!(gke_torus("4x8", 8).unwrap().host_block, [2, 4]);
        assert_eq!(gke_torus("2x4", 8).unwrap().host_block, [2, 4], "a single-host slice is one block");
        assert!(gke_torus("2x2x4", 3).is_none());
        assert!(gke_torus("2xq", 4).is_none());
        assert!(gke_torus("3x2x4", 4).is_none(), "the block must divide the topology");
    }
}
