//! A placed slice: an axis-aligned box of chips given by origin and extent, wrapping modulo sizes.

use std::fmt;

use super::TorusSpec;
use super::shape::join;

/// A box of chips: `extent[i]` chips along dimension `i` starting at `origin[i]`, coordinates
/// taken modulo the torus size (so a box on a wrapped dimension may run past the end).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SubMesh {
    /// First chip along each dimension.
    pub origin: Vec<u32>,
    /// Chips along each dimension, in the orientation chosen at placement.
    pub extent: Vec<u32>,
}

impl SubMesh {
    /// Number of chips.
    pub fn chips_count(&self) -> u64 {
        self.extent.iter().map(|&e| u64::from(e)).product()
    }

    /// Coordinates of every chip of the box on a torus of `spec`'s sizes, the first dimension
    /// varying slowest. Meant for a box and spec of the same rank; missing coordinates count as 0.
    pub fn chips<'a>(&'a self, spec: &'a TorusSpec) -> impl Iterator<Item = Vec<u32>> + 'a {
        (0..self.chips_count()).map(move |mut index| {
            let mut chip = vec![0; self.extent.len()];
            for i in (0..self.extent.len()).rev() {
                let e = u64::from(self.extent[i]);
                let offset = (index % e) as u32;
                index /= e;
                let n = spec.dims.get(i).copied().unwrap_or(u32::MAX);
                let o = self.origin.get(i).copied().unwrap_or(0);
                chip[i] = ((u64::from(o) + u64::from(offset)) % u64::from(n)) as u32;
            }
            chip
        })
    }
}

impl fmt::Display for SubMesh {
    /// `extent@origin`, e.g. `4x4x8@0,4,24`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let origin: Vec<String> = self.origin.iter().map(u32::to_string).collect();
        write!(f, "{}@{}", join(&self.extent), origin.join(","))
    }
}
