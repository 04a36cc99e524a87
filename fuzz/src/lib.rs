//! trainyard-fuzz: every reader trainyard has, fed inputs it was not written for.
//!
//! Each target (`targets/`) is seeded from the repository's own examples and fixtures; its
//! inputs are those seeds mutated byte by byte and token by token (`mutate.rs`: numbers made
//! extreme, lines duplicated or dropped, CR or CRLF line ends, a byte-order mark, invalid
//! UTF-8, YAML aliases, truncation), or built from their parts by a structure-aware generator.
//! The driver (`driver.rs`) runs them within a budget and holds every input to the contract of
//! bad input: a verdict (read or refused), never a panic or a hang; a refusal that names the
//! file, a line or a field; no trace row lost. A failing input is kept under
//! `fuzz/regressions/`, read again by every test run.
//!
//! The commands' flags are fuzzed through the real binary (`flags.rs`).
//!
//! `cargo test -p trainyard-fuzz` runs each target briefly (as CI does); `scripts/fuzz.sh`
//! runs the long search.

pub mod driver;
pub mod flags;
pub mod mutate;
pub mod targets;
