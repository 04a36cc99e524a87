//! One pod's occupancy and slice search ([`Torus`]), and all-or-nothing multi-slice placement
//! over several pods ([`TpuPool`]).

use super::occupancy::{Grid, Prefix};
use super::shape::{Oriented, host_step, orientations, pad};
use super::{Rotation, SliceShape, SubMesh, TorusError, TorusFailure, TorusSpec};

/// One pod: its spec, which chips are busy, and the slices currently allocated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Torus {
    spec: TorusSpec,
    grid: Grid,
    free: u64,
    /// Allocated boxes in allocation order, each with its origin reduced to 0 along dimensions
    /// it spans, so that `release` recognises the same box however its origin was written.
    live: Vec<SubMesh>,
}

impl Torus {
    /// An empty pod; fails when the spec's fields disagree (see [`TorusSpec::validate`]).
    pub fn new(spec: TorusSpec) -> Result<Torus, TorusError> {
        spec.validate()?;
        let grid = Grid::new(&spec);
        Ok(Torus { free: spec.chips(), spec, grid, live: Vec::new() })
    }

    /// The pod's spec.
    pub fn spec(&self) -> &TorusSpec {
        &self.spec
    }

    /// Chips not in any slice.
    pub fn free_chips(&self) -> u64 {
        self.free
    }

    /// Slices allocated now, in allocation order.
    pub fn slices(&self) -> &[SubMesh] {
        &self.live
    }

    /// Whether the chip at `chip` is in a slice; `None` when the coordinates are not a chip.
    pub fn is_busy(&self, chip: &[u32]) -> Option<bool> {
        let ok = chip.len() == self.spec.rank() && chip.iter().zip(&self.spec.dims).all(|(c, n)| c < n);
        ok.then(|| self.grid.is_busy(pad0(chip)))
    }

    /// Checks that a slice of `shape` could ever be placed on this pod (rank, size, host block).
    pub fn check(&self, shape: &SliceShape, rotation: Rotation) -> Result<(), TorusError> {
        self.spec.check(shape, rotation)
    }

    /// The best free box for `shape` in any orientation, without allocating it. The outer error
    /// is bad input (the shape can never fit); the inner one says why it does not fit now.
    pub fn find(&self, shape: &SliceShape) -> Result<Result<SubMesh, TorusFailure>, TorusError> {
        self.find_with(shape, Rotation::Any)
    }

    /// [`Torus::find`] with a choice of whether the slice may be rotated.
    pub fn find_with(
        &self,
        shape: &SliceShape,
        rotation: Rotation,
    ) -> Result<Result<SubMesh, TorusFailure>, TorusError> {
        let oriented = orientations(&self.spec, shape, rotation)?;
        let needed = shape.chips();
        if needed > self.free {
            return Ok(Err(TorusFailure::NotEnoughChips { needed, free: self.free }));
        }
        let prefix = Prefix::build(&self.grid);
        Ok(self.best_box(&oriented, &prefix).ok_or_else(|| TorusFailure::Fragmented {
            needed,
            free: self.free,
            placed: 0,
            largest_free_cube: prefix.largest_free_cube(&self.grid, self.spec.rank()),
        }))
    }

    /// Marks the chips of `m` busy. Fails, changing nothing, when `m` is not a valid box of this
    /// pod (rank, range, unwrapped border, host block) or any of its chips is busy.
    pub fn allocate(&mut self, m: &SubMesh) -> Result<(), TorusError> {
        let (canonical, origin, extent) = self.validate_mesh(m)?;
        if let Some(chip) = self.grid.cells(origin, extent).find(|&c| self.grid.is_busy(c)) {
            let chip = chip[..self.spec.rank()].iter().map(usize::to_string).collect::<Vec<_>>().join(",");
            return Err(TorusError::Busy { mesh: m.to_string(), torus: self.spec.sizes(), chip });
        }
        self.occupy(canonical);
        Ok(())
    }

    /// Frees the chips of a slice allocated before. Fails, changing nothing, when `m` is not a
    /// live slice (released twice, or only part of one).
    pub fn release(&mut self, m: &SubMesh) -> Result<(), TorusError> {
        let (canonical, _, _) = self.validate_mesh(m)?;
        let pos = self
            .live
            .iter()
            .position(|l| *l == canonical)
            .ok_or_else(|| TorusError::NotAllocated { mesh: m.to_string(), torus: self.spec.sizes() })?;
        self.vacate(pos);
        Ok(())
    }

    /// Allocates a box known to be valid and free.
    fn occupy(&mut self, m: SubMesh) {
        self.grid.mark(pad0(&m.origin), pad(&m.extent), true);
        self.free -= m.chips_count();
        self.live.push(m);
    }

    /// Frees the live slice at `pos`, keeping the others in order.
    fn vacate(&mut self, pos: usize) {
        let m = self.live.remove(pos);
        self.grid.mark(pad0(&m.origin), pad(&m.extent), false);
        self.free += m.chips_count();
    }

    /// `m` with origins reduced to 0 where it spans a dimension, and padded origin and extent.
    fn validate_mesh(&self, m: &SubMesh) -> Result<(SubMesh, [usize; 3], [usize; 3]), TorusError> {
        let bad = |message: String| TorusError::BadMesh { mesh: m.to_string(), torus: self.spec.sizes(), message };
        let rank = self.spec.rank();
        if m.origin.len() != rank || m.extent.len() != rank {
            return Err(bad(format!(
                "origin has {} and extent {} coordinates, the torus {rank}",
                m.origin.len(),
                m.extent.len()
            )));
        }
        let mut canonical = m.clone();
        for i in 0..rank {
            let (o, e, n) = (m.origin[i], m.extent[i], self.spec.dims[i]);
            if e == 0 || e > n {
                return Err(bad(format!("extent {e} along dimension {i} is outside 1..={n}")));
            }
            if o >= n {
                return Err(bad(format!("origin {o} along dimension {i} is outside 0..{n}")));
            }
            if !self.spec.wrap[i] && o + e > n {
                return Err(bad(format!("crosses the end of dimension {i}, which does not wrap")));
            }
            if e == n {
                canonical.origin[i] = 0;
            }
        }
        let step = host_step(&m.extent, &self.spec.host_block)
            .ok_or_else(|| bad(format!("splits hosts of {}", super::shape::join(&self.spec.host_block))))?;
        if canonical.origin.iter().zip(&step).any(|(o, s)| !o.is_multiple_of(*s)) {
            return Err(bad(format!("origin is off the host grid (steps {})", super::shape::join(&step))));
        }
        let (origin, extent) = (pad0(&canonical.origin), pad(&canonical.extent));
        Ok((canonical, origin, extent))
    }

    /// The free box with the largest contact area; ties to the lowest origin, then the earlier
    /// orientation.
    fn best_box(&self, oriented: &[Oriented], prefix: &Prefix) -> Option<SubMesh> {
        let g = &self.grid;
        let mut best: Option<(u64, [usize; 3], usize)> = None;
        for (k, o) in oriented.iter().enumerate() {
            let e = o.extent;
            for x in g.origins(0, e[0], o.step[0]) {
                for y in g.origins(1, e[1], o.step[1]) {
                    for z in g.origins(2, e[2], o.step[2]) {
                        let origin = [x, y, z];
                        if prefix.busy_in(origin, [x + e[0], y + e[1], z + e[2]]) != 0 {
                            continue;
                        }
                        let score = self.contact(prefix, origin, e);
                        let better = match best {
                            None => true,
                            Some((s, bo, bk)) => score > s || (score == s && (origin, k) < (bo, bk)),
                        };
                        if better {
                            best = Some((score, origin, k));
                        }
                    }
                }
            }
        }
        let (_, origin, k) = best?;
        let rank = self.spec.rank();
        Some(SubMesh {
            origin: origin[..rank].iter().map(|&c| c as u32).collect(),
            extent: oriented[k].extent[..rank].iter().map(|&c| c as u32).collect(),
        })
    }

    /// Unit faces of the box touching a busy chip, an unwrapped border, or the box itself (a
    /// dimension it spans completely has no open face).
    fn contact(&self, prefix: &Prefix, origin: [usize; 3], extent: [usize; 3]) -> u64 {
        let g = &self.grid;
        let mut total = 0u64;
        for i in 0..3 {
            let area: usize = (0..3).filter(|&j| j != i).map(|j| extent[j]).product();
            let (o, e, n) = (origin[i], extent[i], g.dims[i]);
            if e == n {
                total += 2 * area as u64;
                continue;
            }
            let layer = |c: usize| {
                let mut lo = origin;
                let mut hi: [usize; 3] = std::array::from_fn(|j| origin[j] + extent[j]);
                lo[i] = c;
                hi[i] = c + 1;
                u64::from(prefix.busy_in(lo, hi))
            };
            total += match (o, g.wrap[i]) {
                (0, false) => area as u64,
                (0, true) => layer(n - 1),
                _ => layer(o - 1),
            };
            total += if o + e == n && !g.wrap[i] { area as u64 } else { layer(o + e) };
        }
        total
    }
}

/// Pads coordinates to three dimensions with 0.
fn pad0(v: &[u32]) -> [usize; 3] {
    let mut out = [0; 3];
    for (o, &x) in out.iter_mut().zip(v) {
        *o = x as usize;
    }
    out
}

/// Several pods; a multi-slice job takes equal slices from any of them, connected by the data
/// centre network rather than chip links, so slices need not share a pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TpuPool {
    pods: Vec<Torus>,
}

impl TpuPool {
    /// A pool of the given pods, indexed in this order.
    pub fn new(pods: Vec<Torus>) -> TpuPool {
        TpuPool { pods }
    }

    /// The pods.
    pub fn pods(&self) -> &[Torus] {
        &self.pods
    }

    /// Free chips over all pods.
    pub fn free_chips(&self) -> u64 {
        self.pods.iter().map(Torus::free_chips).sum()
    }

    /// Places `count` slices of `shape` (any orientation) and allocates them; see
    /// [`TpuPool::place_slices_with`].
    pub fn place_slices(
        &mut self,
        shape: &SliceShape,
        count: u32,
    ) -> Result<Result<Vec<(usize, SubMesh)>, TorusFailure>, TorusError> {
        self.place_slices_with(shape, count, Rotation::Any)
    }

    /// Places `count` slices of `shape`, all or nothing, returning `(pod index, box)` per slice.
    /// Slices go one at a time to the pod with the fewest free chips that has a box (ties to
    /// the lower index), which keeps emptier pods whole for larger jobs. On failure every slice
    /// placed so far is released, leaving the pool exactly as it was. The outer error is bad
    /// input: the shape fits no pod of the pool at all; pods it can never fit are skipped.
    pub fn place_slices_with(
        &mut self,
        shape: &SliceShape,
        count: u32,
        rotation: Rotation,
    ) -> Result<Result<Vec<(usize, SubMesh)>, TorusFailure>, TorusError> {
        let mut eligible: Vec<(usize, Vec<Oriented>)> = Vec::new();
        let mut first_error = None;
        for (i, pod) in self.pods.iter().enumerate() {
            match orientations(&pod.spec, shape, rotation) {
                Ok(o) => eligible.push((i, o)),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let (true, Some(e)) = (eligible.is_empty(), first_error) {
            return Err(e);
        }
        let needed = shape.chips() * u64::from(count);
        let free: u64 = eligible.iter().map(|(i, _)| self.pods[*i].free).sum();
        if needed > free {
            return Ok(Err(TorusFailure::NotEnoughChips { needed, free }));
        }
        let mut placed: Vec<(usize, SubMesh)> = Vec::new();
        for _ in 0..count {
            let mut order: Vec<usize> = (0..eligible.len()).collect();
            order.sort_by_key(|&k| (self.pods[eligible[k].0].free, eligible[k].0));
            let found = order.into_iter().find_map(|k| {
                let (i, oriented) = &eligible[k];
                let pod = &self.pods[*i];
                if pod.free < shape.chips() {
                    return None;
                }
                pod.best_box(oriented, &Prefix::build(&pod.grid)).map(|m| (*i, m))
            });
            match found {
                Some((i, m)) => {
                    self.pods[i].occupy(m.clone());
                    placed.push((i, m));
                }
                None => {
                    let done = placed.len() as u32;
                    // Undo in reverse so each pod's slice list returns to its former order.
                    while let Some((i, _)) = placed.pop() {
                        let pod = &mut self.pods[i];
                        pod.vacate(pod.live.len() - 1);
                    }
                    let largest_free_cube = eligible
                        .iter()
                        .map(|(i, _)| {
                            let pod = &self.pods[*i];
                            Prefix::build(&pod.grid).largest_free_cube(&pod.grid, pod.spec.rank())
                        })
                        .max()
                        .unwrap_or(0);
                    return Ok(Err(TorusFailure::Fragmented { needed, free, placed: done, largest_free_cube }));
                }
            }
        }
        Ok(Ok(placed))
    }

    /// Releases one slice of pod `pod`; see [`Torus::release`].
    pub fn release(&mut self, pod: usize, m: &SubMesh) -> Result<(), TorusError> {
        let pods = self.pods.len();
        self.pods.get_mut(pod).ok_or(TorusError::NoSuchPod { pod, pods })?.release(m)
    }
}
