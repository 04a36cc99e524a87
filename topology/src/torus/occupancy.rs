//! Which chips are busy, and a summed-area table that counts busy chips in any box in O(1).

use super::TorusSpec;
use super::shape::pad;

/// Busy flags of every chip, padded to three dimensions (missing ones have size 1, no wrap).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Grid {
    pub(crate) dims: [usize; 3],
    pub(crate) wrap: [bool; 3],
    busy: Vec<bool>,
}

impl Grid {
    /// An all-free grid; `spec` must be valid.
    pub(crate) fn new(spec: &TorusSpec) -> Grid {
        let dims = pad(&spec.dims);
        let mut wrap = [false; 3];
        for (w, &s) in wrap.iter_mut().zip(&spec.wrap) {
            *w = s;
        }
        Grid { dims, wrap, busy: vec![false; dims.iter().product()] }
    }

    /// Flat index of a chip given by coordinates already reduced modulo the sizes.
    fn index(&self, c: [usize; 3]) -> usize {
        (c[0] * self.dims[1] + c[1]) * self.dims[2] + c[2]
    }

    pub(crate) fn is_busy(&self, c: [usize; 3]) -> bool {
        self.busy[self.index(c)]
    }

    /// Reduced coordinates of every chip in the box, the first dimension varying slowest.
    pub(crate) fn cells(&self, origin: [usize; 3], extent: [usize; 3]) -> impl Iterator<Item = [usize; 3]> + '_ {
        let [e0, e1, e2] = extent;
        (0..e0).flat_map(move |a| {
            (0..e1).flat_map(move |b| {
                (0..e2).map(move |c| {
                    let off = [a, b, c];
                    std::array::from_fn(|i| (origin[i] + off[i]) % self.dims[i])
                })
            })
        })
    }

    /// Origins along one dimension for a box of extent `e` with origin step `step`: every
    /// multiple of the step below the size on a wrapped dimension, only those keeping the box
    /// inside otherwise, and just 0 when the box spans the dimension (all origins are the same box).
    pub(crate) fn origins(
        &self,
        i: usize,
        e: usize,
        step: usize,
    ) -> std::iter::StepBy<std::ops::RangeInclusive<usize>> {
        let n = self.dims[i];
        let last = if e == n {
            0
        } else if self.wrap[i] {
            n - 1
        } else {
            n - e
        };
        (0..=last).step_by(step.max(1))
    }

    /// Marks every chip of the box busy or free.
    pub(crate) fn mark(&mut self, origin: [usize; 3], extent: [usize; 3], busy: bool) {
        let cells: Vec<[usize; 3]> = self.cells(origin, extent).collect();
        for c in cells {
            let i = self.index(c);
            self.busy[i] = busy;
        }
    }
}

/// Summed-area table of busy chips over the grid extended to twice its size along every wrapped
/// dimension, so that a box crossing the wrap-around is a plain box of the extended grid.
pub(crate) struct Prefix {
    /// Extended size plus one per dimension (the table has a zero border).
    len: [usize; 3],
    sums: Vec<u32>,
}

impl Prefix {
    pub(crate) fn build(grid: &Grid) -> Prefix {
        let ext: [usize; 3] = std::array::from_fn(|i| if grid.wrap[i] { 2 * grid.dims[i] } else { grid.dims[i] });
        let len = ext.map(|e| e + 1);
        let mut p = Prefix { len, sums: vec![0; len.iter().product()] };
        for x in 0..ext[0] {
            for y in 0..ext[1] {
                for z in 0..ext[2] {
                    let v = u32::from(grid.is_busy([x % grid.dims[0], y % grid.dims[1], z % grid.dims[2]]));
                    let (x1, y1, z1) = (x + 1, y + 1, z + 1);
                    let add = v + p.at(x, y1, z1) + p.at(x1, y, z1) + p.at(x1, y1, z) + p.at(x, y, z);
                    let sub = p.at(x, y, z1) + p.at(x, y1, z) + p.at(x1, y, z);
                    let i = p.idx(x1, y1, z1);
                    p.sums[i] = add - sub;
                }
            }
        }
        p
    }

    fn idx(&self, x: usize, y: usize, z: usize) -> usize {
        (x * self.len[1] + y) * self.len[2] + z
    }

    fn at(&self, x: usize, y: usize, z: usize) -> u32 {
        self.sums[self.idx(x, y, z)]
    }

    /// Busy chips in the half-open box `lo..hi` of extended coordinates (each `hi` at most the
    /// extended size: origin below the size plus an extent at most the size).
    pub(crate) fn busy_in(&self, lo: [usize; 3], hi: [usize; 3]) -> u32 {
        let ([a0, a1, a2], [b0, b1, b2]) = (lo, hi);
        let add = self.at(b0, b1, b2) + self.at(a0, a1, b2) + self.at(a0, b1, a2) + self.at(b0, a1, a2);
        let sub = self.at(a0, b1, b2) + self.at(b0, a1, b2) + self.at(b0, b1, a2) + self.at(a0, a1, a2);
        add - sub
    }

    /// Side of the largest free cube (extent 1 in dimensions beyond `rank`), alignment ignored.
    pub(crate) fn largest_free_cube(&self, grid: &Grid, rank: usize) -> u32 {
        let max = grid.dims[..rank].iter().copied().min().unwrap_or(0);
        let free_cube_exists = |s: usize| {
            let extent: [usize; 3] = std::array::from_fn(|i| if i < rank { s } else { 1 });
            grid.origins(0, extent[0], 1).any(|x| {
                grid.origins(1, extent[1], 1).any(|y| {
                    grid.origins(2, extent[2], 1)
                        .any(|z| self.busy_in([x, y, z], [x + extent[0], y + extent[1], z + extent[2]]) == 0)
                })
            })
        };
        // Free cubes nest, so existence is monotone in the side: binary search.
        let (mut lo, mut hi) = (0, max);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if free_cube_exists(mid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo as u32
    }
}
