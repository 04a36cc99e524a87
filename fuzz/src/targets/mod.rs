//! The fuzz targets: one per reader trainyard has, each with the shipped examples and fixtures
//! it is seeded from, an optional structure-aware generator, and the call that reads an input
//! as the command or the controller would.
//!
//! Every input ends in a [`Verdict`]: read, refused with a message, or broken (an invariant
//! of the reader failed: a row lost, a document read as nothing). A panic or a hang is caught
//! by the driver (`driver.rs`).

mod kubernetes;
mod readers;
mod traces;

use crate::mutate::Mutator;

/// What a reader made of one input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Read.
    Accepted,
    /// Refused with this message (which must name the file, a line or a field).
    Refused(String),
    /// An invariant failed: what went wrong.
    Broken(String),
}

/// One reader under test.
pub struct Target {
    /// Short name, as `--target` takes it.
    pub name: &'static str,
    /// The file name the reader is told: its errors name it.
    pub source: &'static str,
    /// Good inputs to mutate, with where each comes from.
    pub seeds: fn() -> Vec<(&'static str, Vec<u8>)>,
    /// Builds an input from its parts (structure-aware), for a share of the inputs.
    pub generate: Option<fn(&mut Mutator) -> Vec<u8>>,
    /// Reads one input.
    pub run: fn(&[u8]) -> Verdict,
}

/// Every target, in a fixed order.
pub fn all() -> Vec<Target> {
    let mut out = readers::targets();
    out.extend(traces::targets());
    out.extend(kubernetes::targets());
    out
}

/// The input as every command reads a file (no byte-order mark, LF line ends, UTF-8), or the
/// refusal of bytes that are not UTF-8.
pub(crate) fn text(bytes: &[u8], source: &str) -> Result<String, Verdict> {
    trainyard_topology::input_text::decode(bytes.to_vec(), source).map_err(|e| Verdict::Refused(e.to_string()))
}

/// A reader's result as a verdict.
pub(crate) fn verdict<T, E: std::fmt::Display>(result: Result<T, E>) -> Verdict {
    match result {
        Ok(_) => Verdict::Accepted,
        Err(e) => Verdict::Refused(e.to_string()),
    }
}

/// A seed file of the repository, cut to its first `max_lines` lines (large traces and node
/// dumps would make every input slow to read without reaching more of the reader).
macro_rules! seed {
    ($path:literal) => {
        seed!($path, 400)
    };
    ($path:literal, $max_lines:expr) => {
        ($path, $crate::targets::head(include_bytes!(concat!("../../../", $path)), $max_lines))
    };
}
pub(crate) use seed;

/// The first `max_lines` lines of `bytes`.
pub(crate) fn head(bytes: &[u8], max_lines: usize) -> Vec<u8> {
    let mut lines = 0;
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'\n' {
            lines += 1;
            if lines == max_lines {
                return bytes[..=i].to_vec();
            }
        }
    }
    bytes.to_vec()
}
