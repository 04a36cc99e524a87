//! The gang records by id, and the fast hash the engine's maps use. A cycle looks a gang up
//! several times per pending gang, so lookups are constant time (a hash of the id, not a walk
//! down a tree of 50,000 entries). Iteration order is a hash map's own: every caller whose
//! result can reach a decision or an output sorts by id first (`GangMap::ids`).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::GangId;
use crate::gangs::record::GangRecord;

/// A multiply-rotate hash over whole words (the engine hashes ids and small request values,
/// never text from outside, so a keyed hash buys nothing here).
#[derive(Default)]
pub(crate) struct IdHasher(u64);

const K: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }

    fn write_u16(&mut self, n: u16) {
        self.write_u64(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(K);
    }
}

/// The engine's hash for its own keys.
pub(crate) type FastHash = BuildHasherDefault<IdHasher>;

/// A set of gang ids (sorted wherever it is read out).
pub(crate) type GangSet = std::collections::HashSet<GangId, FastHash>;

/// Gang records keyed by id. A record is shared between copies of the engine and copied when
/// one of them changes it (`Arc::make_mut`): a copy (`estimates/eta.rs`) copies a pointer per gang, and
/// then only the records its run changes. The engine itself never shares one, so a change
/// copies nothing there.
pub(crate) type GangMap = HashMap<GangId, std::sync::Arc<GangRecord>, FastHash>;
