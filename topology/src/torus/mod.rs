//! TPU pods as 2-D/3-D tori of chips, and placement of slices as contiguous boxes of free chips.
//!
//! A TPU pod wires its chips as a torus: v4 has 4,096 chips, v5p 8,960 chips (modelled here as
//! `16x20x28`), v5e 256 chips as a 2-D `16x16`. Chips come in hosts of four (v4, v5p: a `2x2x1`
//! block) or eight (v5e multi-host VMs: `2x4`). Users ask for a slice by its shape, for example
//! v5p `2x2x1` (one host, `v5p-8`), `2x2x2`, `2x4x4`, `4x4x4` (one cube), `4x4x8`, `4x8x8`,
//! `8x8x8`, `8x8x16`, `8x16x16`, `16x16x16` and `16x16x24` (the largest v5p slice). A slice must
//! be an axis-aligned box of chips ("contiguous sub-mesh"); a slice of a whole cube or more gets
//! wrap-around links of its own, which this module does not model: the per-dimension wrap flags
//! of a [`TorusSpec`] say whether a *placement* may cross the pod's boundary in that dimension.
//!
//! ```text
//!  "16x20x28:host=2x2x1" ──parse──> TorusSpec ──> Torus (occupancy bits, live slices)
//!  "4x4x8" ──parse──> SliceShape ──┐                 │ find: every orientation and aligned origin,
//!                                  └───────────────> │ O(1) per box via a summed-area table over a
//!                                                    │ grid doubled along wrapped dimensions
//!                                  SubMesh <─────────┘ or TorusFailure (a value, not an error)
//!  TpuPool: several pods; place_slices puts N equal slices, all or nothing.
//! ```
//!
//! Rules a placement obeys:
//! - **Box**: origin plus extent per dimension; along a wrapped dimension the box may run past the
//!   end and continue at 0, along an unwrapped one it may not. No extent exceeds the torus size.
//! - **Orientation**: [`Rotation::Any`] (the default of [`Torus::find`]) tries every permutation
//!   of the request's axes, since `4x4x8` and `8x4x4` are the same slice to a user;
//!   [`Rotation::Fixed`] keeps the axes as given.
//! - **Whole hosts**: with a host block other than all ones, an oriented slice is either made of
//!   whole hosts (each extent a multiple of the block, origin on the block grid) or lies inside a
//!   single host (each extent at most the block and dividing it, origin a multiple of the extent,
//!   as v5e `2x2` does in an 8-chip host). So on v5p `2x2x1` fits one host, while its rotation
//!   `1x2x2` would take half of two hosts and is never used.
//! - **Choice**: among free boxes, the one with the largest *contact area* wins: the number of
//!   unit faces of the box that touch a busy chip, an unwrapped pod border, or itself (a dimension
//!   the box spans completely). Packing against corners and neighbours keeps large boxes free.
//!   Ties go to the lexicographically lowest origin, then to the earlier orientation (axis
//!   permutations in lexicographic order).

mod error;
mod mesh;
mod occupancy;
mod place;
mod shape;

pub use error::{TorusError, TorusFailure};
pub use mesh::SubMesh;
pub use place::{Torus, TpuPool};
pub use shape::{MAX_CHIPS, Rotation, SliceShape, TorusSpec};
