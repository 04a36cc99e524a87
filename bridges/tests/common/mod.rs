//! Golden-file helpers shared by the render tests.

use std::path::PathBuf;

/// `bridges/tests/<sub>`.
pub fn dir(sub: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests").join(sub)
}

/// Compares renders with their golden files (rewriting them under `TRAINYARD_BLESS=1`) and fails
/// with every stale file's old and new text.
pub struct Goldens {
    bless: bool,
    stale: Vec<String>,
}

impl Goldens {
    /// Starts a comparison.
    pub fn new() -> Goldens {
        Goldens { bless: std::env::var_os("TRAINYARD_BLESS").is_some_and(|v| v == "1"), stale: Vec::new() }
    }

    /// Checks (or blesses) one golden file.
    pub fn check(&mut self, path: PathBuf, got: &str) {
        if self.bless {
            std::fs::write(&path, got).expect("write golden");
            return;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        if want != got {
            self.stale.push(format!("{}:\n--- committed\n{want}\n--- rendered\n{got}", path.display()));
        }
    }

    /// Fails if any file was stale.
    pub fn finish(self) {
        assert!(
            self.stale.is_empty(),
            "stale golden files (rerun with TRAINYARD_BLESS=1 after review):\n{}",
            self.stale.join("\n")
        );
    }
}
