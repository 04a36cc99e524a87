//! `trainyard compare`: every placement policy on a Helios slice, tables and JSON.

use crate::json::{number_after, validate};
use crate::{TempDir, arg, read, trainyard};

#[test]
fn compare_prints_both_tables_and_writes_matching_json() {
    let dir = TempDir::create();
    let helios = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/data/traces/helios-excerpt.csv"))
        .expect("the shipped Helios excerpt");
    let slice: Vec<&str> = helios.lines().take(1_201).collect();
    let trace = dir.write("helios-1200.csv", &(slice.join("\n") + "\n"));
    let out = dir.path("compare.json");
    let args = ["compare", "--cluster", "examples/clusters/helios-704.yaml", "--trace", &trace, "--format", "dirlab"];
    let run = trainyard(&[&args[..], &["--estimates", "actual", "--out", &arg(&out)]].concat());
    run.assert_success().assert_stdout_has(&[
        "trainyard placement comparison\n",
        "cluster     helios-704 (704 GPUs, 88 hosts; rack > host)\n",
        "(1200 jobs)\n",
        "slowdown    cluster 1.15, rack 1.05, host 1\n",
        "Shadow comparison",
        "Full replays",
        "trainyard costlier than a baseline on 0 (gang, baseline) pairs",
        &format!("JSON comparison written to {}\n", out.display()),
    ]);
    for policy in ["trainyard", "greedy", "first-fit", "kueue-best-fit", "slurm-tree"] {
        let rows = run.stdout.lines().filter(|l| l.starts_with(&format!("  {policy} "))).count();
        assert_eq!(rows, 2, "{policy} should have a row in both tables:\n{}", run.stdout);
    }
    assert_eq!(run.stderr, "");
    let json = read(&out);
    validate(&json).unwrap();
    assert_eq!(number_after(&json, "\"comparison_version\"", "comparison_version"), 1.0);
    assert_eq!(number_after(&json, "\"shadow\"", "gangs"), 1200.0);
    assert_eq!(number_after(&json, "\"shadow\"", "costlier_pairs"), 0.0);
}

/// Gangs whose pods ask for a GPU layout run on a cluster with layouts; the per-gang comparison
/// shows them as placed (the baselines know no layout) and the replays go through.
#[test]
fn compare_runs_on_a_cluster_with_gpu_layouts() {
    let dir = TempDir::create();
    let trace = dir.path("layout.csv");
    trainyard(&["trace", "synth", "--jobs", "200", "--gpu-layout", "50", "--out", &arg(&trace)]).assert_success();
    let run = trainyard(&["compare", "--cluster", "examples/clusters/p4d-layout.yaml", "--trace", &arg(&trace)]);
    run.assert_success().assert_stdout_has(&["trainyard          200"]);
}
