//! The crate's shape, as ARCHITECTURE.md draws it: every file in a folder that names its stage,
//! the engine calls the stages and no stage reaches back into it, and no file imports a file
//! that imports it in turn (a circle of files is a hub by another name).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Every Rust file under `src/`, by its path relative to it (`cycle/walk.rs`).
fn sources() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).expect("src is readable") {
            let path: PathBuf = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(&root).expect("under src").to_string_lossy().replace('\\', "/");
                out.insert(rel, fs::read_to_string(&path).expect("a source file is readable"));
            }
        }
    }
    out
}

/// The code of a file without comments and without its unit tests: what it really uses.
fn code(text: &str) -> String {
    let body = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    body.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// Test-only files (`*_tests.rs`) may use anything.
fn is_test_file(path: &str) -> bool {
    path.ends_with("_tests.rs")
}

#[test]
fn every_file_but_the_crate_root_sits_in_a_folder() {
    let loose: Vec<String> = sources().into_keys().filter(|p| !p.contains('/') && p != "lib.rs").collect();
    assert!(loose.is_empty(), "files outside a folder: {loose:?}");
}

#[test]
fn no_two_modules_differ_only_by_a_suffix() {
    let stems: BTreeSet<String> = sources()
        .into_keys()
        .flat_map(|p| p.trim_end_matches(".rs").split('/').map(str::to_string).collect::<Vec<_>>())
        .filter(|s| s != "mod" && s != "lib")
        .collect();
    for a in &stems {
        for suffix in ["s", "ion", "ing", "_map"] {
            let b = format!("{a}{suffix}");
            assert!(!stems.contains(&b), "modules `{a}` and `{b}` differ only by a suffix");
        }
    }
}

#[test]
fn only_the_engine_folder_touches_the_engine() {
    for (path, text) in sources() {
        if path.starts_with("engine/") || path == "lib.rs" || is_test_file(&path) {
            continue;
        }
        let code = code(&text);
        assert!(!code.contains("impl Engine"), "{path} implements on the engine; a stage takes the state it needs");
        assert!(!code.contains("crate::engine"), "{path} imports the engine, which calls it");
        let names_engine = code
            .lines()
            .filter(|l| l.trim_start().starts_with("use "))
            .any(|l| l.split(|c: char| !c.is_alphanumeric() && c != '_').any(|word| word == "Engine"));
        assert!(!names_engine, "{path} imports the engine, which calls it");
    }
}

/// The file a `crate::` path names: the longest prefix that is a module file.
fn module_file(files: &BTreeSet<String>, segments: &[&str]) -> Option<String> {
    (1..=segments.len()).rev().find_map(|n| {
        let base = segments[..n].join("/");
        [format!("{base}.rs"), format!("{base}/mod.rs")].into_iter().find(|f| files.contains(f))
    })
}

/// The files each file imports through `crate::` paths (re-exports at the crate root, which
/// are the public types, are left out).
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let sources = sources();
    let files: BTreeSet<String> = sources.keys().cloned().collect();
    let mut out = BTreeMap::new();
    for (path, text) in &sources {
        if is_test_file(path) || path == "lib.rs" {
            continue;
        }
        let code = code(text);
        let mut deps = BTreeSet::new();
        for (i, _) in code.match_indices("crate::") {
            let rest = &code[i + "crate::".len()..];
            let segments: Vec<&str> = rest
                .split("::")
                .map(|s| s.split(|c: char| !c.is_alphanumeric() && c != '_').next().unwrap_or(""))
                .take_while(|s| !s.is_empty() && s.chars().next().is_some_and(|c| c.is_lowercase()))
                .collect();
            if let Some(file) = module_file(&files, &segments).filter(|f| f != path) {
                // `crate::quota::X` names `quota/mod.rs`, `crate::quota::build::Y` names `quota/build.rs`.
                deps.insert(file);
            }
        }
        out.insert(path.clone(), deps);
    }
    out
}

#[test]
fn no_circle_of_files_imports_itself() {
    let graph = imports();
    // Depth-first search with colours: grey on the stack, black done.
    fn visit<'a>(
        node: &'a str,
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        colour: &mut BTreeMap<&'a str, u8>,
        stack: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        colour.insert(node, 1);
        stack.push(node);
        for next in graph.get(node).into_iter().flatten() {
            match colour.get(next.as_str()) {
                Some(1) => {
                    let from = stack.iter().position(|n| n == next).expect("grey nodes are on the stack");
                    let mut circle: Vec<String> = stack[from..].iter().map(|s| s.to_string()).collect();
                    circle.push(next.clone());
                    return Some(circle);
                }
                Some(_) => {}
                None => {
                    if let Some(circle) = visit(next, graph, colour, stack) {
                        return Some(circle);
                    }
                }
            }
        }
        stack.pop();
        colour.insert(node, 2);
        None
    }
    let mut colour = BTreeMap::new();
    for node in graph.keys() {
        if !colour.contains_key(node.as_str())
            && let Some(circle) = visit(node, &graph, &mut colour, &mut Vec::new())
        {
            panic!("files import each other in a circle: {}", circle.join(" -> "));
        }
    }
}

#[test]
fn the_import_reader_sees_the_engine_calling_its_stages() {
    // Guards the reader itself: a reader that saw no imports would pass the circle test.
    let graph = imports();
    let engine = &graph["engine/mod.rs"];
    for stage in ["cycle/walk.rs", "state/mod.rs", "backfill/mod.rs", "lifecycle/node_loss.rs"] {
        assert!(engine.contains(stage), "engine/mod.rs should import {stage}: {engine:?}");
    }
}
