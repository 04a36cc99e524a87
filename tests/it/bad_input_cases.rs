//! The bad inputs found from outside (issue: bad input never panics, hangs or drops a job),
//! each kept as a case: absurd flags, replays without end, files whose line endings or
//! emptiness made a reader read nothing, runtimes that shrank a gang, and messages that named
//! neither file, line nor field.

use std::time::{Duration, Instant};

use crate::{CSV_HEADER, TempDir, trainyard};

/// A small trace: 20 one-GPU jobs of an hour, a minute apart.
fn small_trace(dir: &TempDir) -> String {
    let mut text = format!("{CSV_HEADER}\n");
    for i in 0..20 {
        text.push_str(&format!("j{i},{},3600,,team-a,0,1,1,0,0,\n", i * 60));
    }
    dir.write("jobs.csv", &text)
}

#[test]
fn synth_refuses_tenant_counts_it_cannot_make_naming_the_flag() {
    for tenants in ["18446744073709551615", "4294967296", "0"] {
        let run = trainyard(&["trace", "synth", "--jobs", "1", "--tenants", tenants]);
        assert_eq!(run.status.code(), Some(2), "a usage error: {}", run.stderr);
        assert!(run.stderr.contains("--tenants") && !run.stderr.contains("panicked"), "{}", run.stderr);
    }
    let run = trainyard(&["trace", "synth", "--jobs", "100000000"]);
    assert!(run.stderr.contains("--jobs") && run.stderr.contains("10000000"), "{}", run.stderr);
}

#[test]
fn an_mtbf_that_lets_no_work_progress_is_refused_at_once() {
    let dir = TempDir::create();
    let trace = small_trace(&dir);
    for mtbf in ["1s", "5m", "7m"] {
        let started = Instant::now();
        let run = trainyard(&["simulate", "--trace", &trace, "--mtbf", mtbf, "-q"]);
        run.assert_error(&["--mtbf", "--checkpoint-interval", "--restart-cost"]);
        assert!(started.elapsed() < Duration::from_secs(60), "--mtbf {mtbf} took {:?}", started.elapsed());
    }
}

#[test]
fn a_replay_past_its_horizon_ends_and_says_so() {
    let dir = TempDir::create();
    let trace = small_trace(&dir);
    // Twenty one-hour jobs on one GPU run 20 hours past the last submission.
    let cluster = dir.write("one.yaml", "name: one\nlevels: [host]\nnodes:\n  - {name: h0, gpus: 1}\n");
    let run = trainyard(&["simulate", "--cluster", &cluster, "--trace", &trace, "--horizon", "2h", "-q"]);
    run.assert_error(&["horizon", "2h", "jobs not done", "--horizon"]);
    trainyard(&["simulate", "--cluster", &cluster, "--trace", &trace, "--horizon", "30h", "-q"]).assert_success();
}

#[test]
fn a_sweep_refuses_an_mtbf_without_progress_duplicates_and_names_its_trace_field() {
    let dir = TempDir::create();
    let mtbf = dir.write("mtbf.yaml", "grid:\n  mtbf: [1m]\n");
    trainyard(&["sweep", &mtbf, "-q"]).assert_error(&["mtbf.yaml: line 2: field `mtbf`", "point 0"]);
    let twice = dir.write("twice.yaml", "grid:\n  load: [1, 2, 1]\n");
    trainyard(&["sweep", &twice, "-q"]).assert_error(&["twice.yaml: line 2: field `grid.load`", "`1`"]);
    let trace = dir.write("trace.yaml", "trace: inf\ngrid:\n  seed: [1]\n");
    trainyard(&["sweep", &trace, "-q"]).assert_error(&["trace.yaml: line 1: field `trace`", "inf"]);
}

#[test]
fn kueue_objects_in_cr_line_endings_are_read() {
    let dir = TempDir::create();
    let lf = "# queues of team a\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: a}\nspec:\n  resourceGroups:\n  - coveredResources: [nvidia.com/gpu]\n    flavors:\n    - name: f\n      resources:\n      - {name: nvidia.com/gpu, nominalQuota: 8}\n";
    let expected = trainyard(&["import", "kueue", "-f", &dir.write("lf.yaml", lf)]);
    expected.assert_success();
    for (name, text) in [("cr.yaml", lf.replace('\n', "\r")), ("crlf.yaml", lf.replace('\n', "\r\n"))] {
        let run = trainyard(&["import", "kueue", "-f", &dir.write(name, &text)]);
        run.assert_success();
        assert_eq!(
            run.stdout.replace(name, "lf.yaml"),
            expected.stdout,
            "{name} reads as the LF file does:\n{}",
            run.stderr
        );
    }
}

#[test]
fn an_empty_cohort_name_is_refused_at_its_field() {
    let dir = TempDir::create();
    let path = dir.write(
        "empty-cohort.yaml",
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: a}\nspec:\n  cohortName: \"\"\n",
    );
    trainyard(&["import", "kueue", "-f", &path]).assert_error(&[
        "empty-cohort.yaml",
        "ClusterQueue a",
        "spec.cohortName",
    ]);
}

const MPI_JOB: &str = "bridges/tests/fixtures/mpi_deepspeed.trainjob.yaml";
const MPI_RUNTIME: &str = "bridges/tests/fixtures/mpi_deepspeed.runtime.yaml";

#[test]
fn a_runtime_without_the_job_numnodes_scales_is_refused_not_shrunk() {
    let dir = TempDir::create();
    let runtime = std::fs::read_to_string(MPI_RUNTIME).expect("the fixture");
    let renamed = dir.write("renamed.yaml", &runtime.replace("- name: node\n", "- name: workers\n"));
    trainyard(&["render", "-f", MPI_JOB, "--runtime", &renamed, "--topology", "examples/clusters/demo.yaml"])
        .assert_error(&["deepspeed-mpi", "replicated job named \"node\""]);
    let second = dir.write("second.yaml", &runtime.replace("- name: node\n", "- name: launcher\n"));
    trainyard(&["render", "-f", MPI_JOB, "--runtime", &second, "--topology", "examples/clusters/demo.yaml"])
        .assert_error(&["spec.template.spec.replicatedJobs[1].name", "\"launcher\" is named twice"]);
}

#[test]
fn claim_templates_that_hold_none_are_refused() {
    let dir = TempDir::create();
    for (name, text) in [("empty.yaml", ""), ("cr-comment.yaml", "# nothing\r# here\r")] {
        let path = dir.write(name, text);
        trainyard(&[
            "render",
            "-f",
            "examples/kubernetes/trainjob-dra.yaml",
            "--runtime",
            "examples/kubernetes/runtime.yaml",
            "--claim-templates",
            &path,
        ])
        .assert_error(&[name, "--claim-templates", "no ResourceClaimTemplate"]);
    }
}

#[test]
fn place_names_the_flag_whose_level_is_unknown() {
    trainyard(&["place", "--slice", ":4"]).assert_error(&["--slice `:4`"]);
    trainyard(&["place", "--pod-set", "w:2x8@nowhere"]).assert_error(&["--pod-set `w:2x8@nowhere`"]);
    let run = trainyard(&["place", "--cpus", "18446744073709551615"]);
    assert!(run.stderr.contains("--cpus") && !run.stderr.contains("panicked"), "{}", run.stderr);
}

#[test]
fn one_anchor_reused_on_a_hundred_nodes_is_ordinary_yaml() {
    let dir = TempDir::create();
    // The first node carries the anchor; the other 100 merge it (a common style).
    let mut yaml = String::from(
        "name: anchors\nlevels: [rack, host]\nnodes:\n  - &node {name: h0, at: {rack: r0}, gpus: 8, cpus: 96, memory_gib: 1024}\n",
    );
    for i in 1..=100 {
        yaml.push_str(&format!("  - {{<<: *node, name: h{i}, at: {{rack: r{}}}}}\n", i / 10));
    }
    let cluster = dir.write("anchors.yaml", &yaml);
    let run = trainyard(&["place", "--cluster", &cluster, "--pods", "2"]);
    run.assert_success();
}
