//! Errors for bad torus input, and the failure value returned when a valid slice has no room.

use std::fmt;

/// Input that can never be placed or applied: malformed text, inconsistent specs, a slice that is
/// larger than the torus or cannot be made of whole hosts, a sub-mesh that does not belong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TorusError {
    /// Text that does not parse; `kind` is `torus spec` or `slice shape`.
    #[error("malformed {kind} `{text}`: {message}")]
    Malformed {
        /// What the text was meant to be.
        kind: &'static str,
        /// The text as given.
        text: String,
        /// What is wrong and what is accepted.
        message: String,
    },
    /// A torus spec whose fields disagree (lengths, zero sizes, host block not dividing a size).
    #[error("torus {torus}: {message}")]
    BadSpec {
        /// The torus sizes, e.g. `16x20x28`.
        torus: String,
        /// What is wrong.
        message: String,
    },
    /// A slice whose rank or extents make no sense for this torus.
    #[error("slice {shape} on torus {torus}: {message}")]
    BadShape {
        /// The slice shape as written.
        shape: String,
        /// The torus sizes.
        torus: String,
        /// What is wrong.
        message: String,
    },
    /// The slice is larger than the torus along some dimension in every allowed orientation.
    #[error("slice {shape} does not fit torus {torus} in {}", orientation_words(*.rotation))]
    TooLarge {
        /// The slice shape as written.
        shape: String,
        /// The torus sizes.
        torus: String,
        /// Whether rotations were tried.
        rotation: super::Rotation,
    },
    /// Every orientation that fits the torus would split a host between slices.
    #[error("slice {shape} cannot be made of whole {host_block} hosts of torus {torus} in {}", orientation_words(*.rotation))]
    Unaligned {
        /// The slice shape as written.
        shape: String,
        /// The torus sizes.
        torus: String,
        /// The host block, e.g. `2x2x1`.
        host_block: String,
        /// Whether rotations were tried.
        rotation: super::Rotation,
    },
    /// A sub-mesh handed to `allocate` that is not a valid box of this torus.
    #[error("sub-mesh {mesh} on torus {torus}: {message}")]
    BadMesh {
        /// The sub-mesh, as `extent@origin`.
        mesh: String,
        /// The torus sizes.
        torus: String,
        /// What is wrong.
        message: String,
    },
    /// `allocate` found a chip of the sub-mesh already in use; nothing was changed.
    #[error("sub-mesh {mesh} on torus {torus}: chip ({chip}) is already allocated")]
    Busy {
        /// The sub-mesh, as `extent@origin`.
        mesh: String,
        /// The torus sizes.
        torus: String,
        /// Coordinates of the first busy chip found.
        chip: String,
    },
    /// `release` was given a box that is not a live slice (never allocated, or released twice).
    #[error("sub-mesh {mesh} is not a live slice of torus {torus}")]
    NotAllocated {
        /// The sub-mesh, as `extent@origin`.
        mesh: String,
        /// The torus sizes.
        torus: String,
    },
    /// A pool operation named a pod the pool does not have.
    #[error("pod {pod} does not exist; the pool has {pods} pods")]
    NoSuchPod {
        /// The index asked for.
        pod: usize,
        /// How many pods there are.
        pods: usize,
    },
}

fn orientation_words(rotation: super::Rotation) -> &'static str {
    match rotation {
        super::Rotation::Any => "any orientation",
        super::Rotation::Fixed => "its given orientation",
    }
}

/// A valid request that cannot be placed now: an expected outcome, not an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TorusFailure {
    /// Fewer free chips than the request needs, fragmentation aside.
    NotEnoughChips {
        /// Chips the request needs (all slices together).
        needed: u64,
        /// Free chips in the pods that could hold the shape.
        free: u64,
    },
    /// Enough free chips, but not as free boxes of the requested shape.
    Fragmented {
        /// Chips the request needs (all slices together).
        needed: u64,
        /// Free chips in the pods that could hold the shape.
        free: u64,
        /// Slices that could be placed before running out (0 for a single `find`).
        placed: u32,
        /// Side of the largest free cube (square on 2-D tori) in any of those pods, ignoring host
        /// alignment: a cheap measure of how fragmented the free chips are.
        largest_free_cube: u32,
    },
}

impl fmt::Display for TorusFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TorusFailure::NotEnoughChips { needed, free } => {
                write!(f, "needs {needed} chips, only {free} free")
            }
            TorusFailure::Fragmented { needed, free, placed, largest_free_cube } => write!(
                f,
                "needs {needed} chips and {free} are free, but not as contiguous boxes \
                 ({placed} slices fitted; largest free cube has side {largest_free_cube})"
            ),
        }
    }
}
