//! The controller's shape, as ARCHITECTURE.md draws it: one folder per role in the order data
//! flows (watching, deciding, acting, serving, slurm, fleet, process), nothing loose beside them, and
//! no two modules whose names differ only by a suffix.

use std::collections::BTreeSet;
use std::path::Path;

/// Every Rust file under `dir`, relative to it.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).expect("a readable folder") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path.strip_prefix(dir).expect("under dir").to_string_lossy().replace('\\', "/"));
            }
        }
    }
    out.sort();
    out
}

fn controller() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/controller")
}

#[test]
fn every_controller_file_sits_in_a_role_folder() {
    let loose: Vec<String> =
        files_under(&controller()).into_iter().filter(|p| !p.contains('/') && p != "mod.rs").collect();
    assert!(loose.is_empty(), "files beside the role folders: {loose:?}");
}

#[test]
fn no_two_controller_modules_differ_only_by_a_suffix() {
    let stems: BTreeSet<String> = files_under(&controller())
        .iter()
        .flat_map(|p| p.trim_end_matches(".rs").split('/').map(str::to_string).collect::<Vec<_>>())
        .filter(|s| s != "mod")
        .collect();
    for a in &stems {
        for suffix in ["s", "ion", "ing", "_map"] {
            let b = format!("{a}{suffix}");
            assert!(!stems.contains(&b), "modules `{a}` and `{b}` differ only by a suffix");
        }
    }
}
