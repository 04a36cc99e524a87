//! The short fuzz run CI makes (`cargo test -p trainyard-fuzz`): every target on a fixed number
//! of inputs from a fixed seed, and every kept regression input read again. Each must find
//! nothing; the refusals seen must number at least 1,000, none of them naming neither file,
//! line nor field. The commands' flags are fuzzed by `tests/it/flags_fuzz.rs` of the
//! `trainyard` package, which has the binary.

use std::path::{Path, PathBuf};
use std::time::Duration;

use trainyard_fuzz::driver::{self, Budget, FailureKind};
use trainyard_fuzz::targets;

/// Inputs per target in the short run; `TRAINYARD_FUZZ_INPUTS` sets another count.
fn inputs() -> u64 {
    std::env::var("TRAINYARD_FUZZ_INPUTS").ok().and_then(|v| v.parse().ok()).unwrap_or(600)
}

/// What one input may take: a debug build reads far slower than a release one.
const PER_INPUT: Duration = Duration::from_secs(20);

fn regressions_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions")
}

#[test]
fn every_target_ends_every_input_in_a_verdict_that_names_where() {
    let budget = Budget { inputs: inputs(), time: Duration::from_secs(3600), per_input: PER_INPUT };
    let (mut refused, mut tried) = (0u64, 0u64);
    let mut problems = Vec::new();
    for target in targets::all() {
        let report = driver::run(&target, 1, &budget, None);
        tried += report.inputs;
        refused += report.refused;
        assert!(report.accepted > 0, "target {}: no input was read, not even the seeds", target.name);
        for failure in &report.failures {
            let shown = String::from_utf8_lossy(&failure.input[..failure.input.len().min(400)]).to_string();
            problems.push(format!("{}: {:?}: {}\n  input: {shown:?}", target.name, failure.kind, failure.detail));
        }
    }
    assert!(problems.is_empty(), "{} failing inputs of {tried}:\n{}", problems.len(), problems.join("\n"));
    // The messages of at least 1,000 refusals were read; every one named the file, a line or a field.
    assert!(refused >= 1000, "only {refused} refusals among {tried} inputs: too few to judge the messages by");
    if let Some(mib) = driver::peak_memory_mib() {
        assert!(mib < 2048, "the short run peaked at {mib} MiB");
    }
}

#[test]
fn every_kept_regression_input_now_ends_well() {
    let all = targets::all();
    let mut problems = Vec::new();
    let kept = driver::regressions(&regressions_dir());
    for (name, file, input) in &kept {
        let Some(target) = all.iter().find(|t| t.name == name) else {
            problems.push(format!("{}: no target named {name}", file.display()));
            continue;
        };
        if let Some(failure) = driver::replay(target, input, PER_INPUT) {
            problems.push(format!("{}: {:?}: {}", file.display(), failure.kind, failure.detail));
        }
    }
    assert!(problems.is_empty(), "kept inputs that still fail:\n{}", problems.join("\n"));
}

#[test]
fn the_driver_catches_panics_and_vague_refusals() {
    // Guards the driver itself: a reader that panics or refuses without saying where fails.
    let panics = targets::Target {
        name: "panics",
        source: "x.yaml",
        seeds: || vec![("a seed", b"a: 1\n".to_vec())],
        generate: None,
        run: |bytes| if bytes.len() > 3 { panic!("boom") } else { targets::Verdict::Accepted },
    };
    let budget = Budget { inputs: 50, time: Duration::from_secs(60), per_input: PER_INPUT };
    let report = driver::run(&panics, 1, &budget, None);
    assert!(report.failures.iter().any(|f| f.kind == FailureKind::Panic && f.detail.contains("boom")));
    let vague = targets::Target {
        name: "vague",
        source: "x.yaml",
        seeds: || vec![("a seed", b"a: 1\n".to_vec())],
        generate: None,
        run: |_| targets::Verdict::Refused("something is wrong".into()),
    };
    let report = driver::run(&vague, 1, &budget, None);
    assert_eq!(report.failed, report.inputs);
    assert!(report.failures.iter().all(|f| f.kind == FailureKind::Vague));
}
