//! TPU tori in the tree: domains whose hosts are the blocks of a torus of chips, and where
//! each host sits in it.
//!
//! A torus domain (a GKE TPU node pool, a TPU pod, a v7x cube) holds the hosts of one torus.
//! Hosts take the torus's host blocks in natural name order (`h2` before `h10`), the first
//! dimension varying slowest, so positions never depend on the order hosts were added in. A
//! torus with fewer hosts than blocks has holes there (busy to every slice); hosts past the
//! last block have no position and take no slice.

use std::cmp::Ordering;

use super::{DomainId, HostId, Topology};
use crate::torus::TorusSpec;
use crate::{Error, InputError, Result};

impl Topology {
    /// Makes `d` a torus of `spec` (`None`: no longer one). `d` must be a live domain above the
    /// host level with a valid spec.
    pub fn set_torus(&mut self, d: DomainId, spec: Option<TorusSpec>) -> Result<()> {
        let live = d.index() < self.depth.len() && self.depth[d.index()] < self.host_depth() && d != DomainId::ROOT;
        let bad = |message: String| Error::from(InputError::invalid(self.name(), None, "tori", message));
        if !live {
            return Err(bad(format!("domain {} is not a domain between the cluster and its hosts", d.0)));
        }
        match spec {
            Some(spec) => {
                spec.validate().map_err(|e| bad(format!("{}: {e}", self.path(d))))?;
                self.tori.insert(d.0, spec);
            }
            None => {
                self.tori.remove(&d.0);
            }
        }
        Ok(())
    }

    /// The torus of domain `d`, if it is one.
    pub fn torus(&self, d: DomainId) -> Option<&TorusSpec> {
        self.tori.get(&d.0)
    }

    /// Every torus domain with its spec, in domain order.
    pub fn tori(&self) -> impl Iterator<Item = (DomainId, &TorusSpec)> + '_ {
        self.tori.iter().map(|(&d, s)| (DomainId(d), s))
    }

    /// Whether the cluster has any torus.
    pub fn has_tori(&self) -> bool {
        !self.tori.is_empty()
    }

    /// The hosts under `d` in the order they take the torus's host blocks.
    pub fn torus_hosts(&self, d: DomainId) -> Vec<HostId> {
        let mut hosts = Vec::new();
        let mut stack = vec![d.0];
        while let Some(v) = stack.pop() {
            match self.as_host(DomainId(v)) {
                Some(h) => hosts.push(h),
                None => stack.extend(self.children(DomainId(v)).iter().rev()),
            }
        }
        hosts.sort_by(|&a, &b| natural_cmp(self.host_name(a), self.host_name(b)).then(a.cmp(&b)));
        hosts
    }

    /// Hosts one slice of `shape` takes on this cluster's tori; `Err` says why no torus can ever
    /// hold it (no tori, no torus it fits, smaller than a host).
    pub fn tpu_hosts_per_slice(&self, shape: &crate::torus::SliceShape) -> std::result::Result<u32, String> {
        crate::placement::tpu::hosts_per_slice(self, shape)
    }

    /// The hosts of torus `d` with the chip coordinates of their block's first chip, in block
    /// order; hosts past the last block are left out.
    pub fn torus_layout(&self, d: DomainId) -> Vec<(HostId, Vec<u32>)> {
        let Some(spec) = self.tori.get(&d.0) else { return Vec::new() };
        self.torus_hosts(d).into_iter().enumerate().map_while(|(i, h)| Some((h, block_origin(spec, i)?))).collect()
    }

    /// The torus `host` belongs to and the chip coordinates of its block's first chip.
    pub fn torus_position(&self, host: HostId) -> Option<(DomainId, Vec<u32>)> {
        let mut d = self.host_domain(host);
        let torus = loop {
            d = self.parent(d)?;
            if self.tori.contains_key(&d.0) {
                break d;
            }
        };
        let (_, origin) = self.torus_layout(torus).into_iter().find(|(h, _)| *h == host)?;
        Some((torus, origin))
    }
}

/// Host blocks of a torus: its sizes divided by the host block, per dimension.
pub(crate) fn block_grid(spec: &TorusSpec) -> Vec<u32> {
    spec.dims.iter().zip(&spec.host_block).map(|(&n, &b)| n / b.max(1)).collect()
}

/// The first chip of block `index` (the first dimension varying slowest); `None` past the last.
pub(crate) fn block_origin(spec: &TorusSpec, mut index: usize) -> Option<Vec<u32>> {
    let grid = block_grid(spec);
    let blocks: usize = grid.iter().map(|&g| g as usize).product();
    if index >= blocks {
        return None;
    }
    let mut origin = vec![0u32; grid.len()];
    for i in (0..grid.len()).rev() {
        let g = grid[i] as usize;
        origin[i] = (index % g) as u32 * spec.host_block[i];
        index /= g;
    }
    Some(origin)
}

/// The block index of the block whose first chip is `chip` (the inverse of [`block_origin`]).
pub(crate) fn block_index(spec: &TorusSpec, chip: &[u32]) -> usize {
    let grid = block_grid(spec);
    chip.iter().zip(&spec.host_block).zip(&grid).fold(0usize, |acc, ((&c, &b), &g)| acc * g as usize + (c / b) as usize)
}

/// Orders names as people count: runs of digits compare by value, so `h2` comes before `h10`.
pub(crate) fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut x, mut y) = (a.as_bytes(), b.as_bytes());
    loop {
        match (x.first(), y.first()) {
            (None, None) => return a.cmp(b),
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(p), Some(q)) if p.is_ascii_digit() && q.is_ascii_digit() => {
                let run = |s: &[u8]| s.iter().take_while(|c| c.is_ascii_digit()).count();
                let (m, n) = (run(x), run(y));
                let (dx, dy) = (trim_zeros(&x[..m]), trim_zeros(&y[..n]));
                let order = dx.len().cmp(&dy.len()).then_with(|| dx.cmp(dy));
                if order != Ordering::Equal {
                    return order;
                }
                (x, y) = (&x[m..], &y[n..]);
            }
            (Some(p), Some(q)) => {
                if p != q {
                    return p.cmp(q);
                }
                (x, y) = (&x[1..], &y[1..]);
            }
        }
    }
}

fn trim_zeros(digits: &[u8]) -> &[u8] {
    let zeros = digits.iter().take_while(|&&c| c == b'0').count();
    &digits[zeros..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_by_their_numbers() {
        let mut names = vec!["h10", "h2", "h1", "g3", "h02"];
        names.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(names, ["g3", "h1", "h02", "h2", "h10"]);
    }

    #[test]
    fn block_origins_and_indices_agree() {
        let spec: TorusSpec = "4x4x8:host=2x2x1".parse().unwrap();
        assert_eq!(block_grid(&spec), [2, 2, 8]);
        for index in 0..32 {
            let origin = block_origin(&spec, index).unwrap();
            assert_eq!(block_index(&spec, &origin), index);
        }
        assert_eq!(block_origin(&spec, 1).unwrap(), [0, 0, 1]);
        assert_eq!(block_origin(&spec, 8).unwrap(), [0, 2, 0]);
        assert!(block_origin(&spec, 32).is_none());
    }
}
