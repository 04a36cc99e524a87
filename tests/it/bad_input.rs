//! Bad input: every failure exits 1, prints nothing on stdout, writes no report and names
//! the file, line and field on stderr.

use crate::json::number_after;
use crate::{CSV_HEADER, TempDir, arg, trainyard};

/// Runs `simulate` with `args` plus `--out`, checks the failure contract and that every
/// needle is in the message, and returns stderr.
#[track_caller]
fn simulate_fails(dir: &TempDir, args: &[&str], needles: &[&str]) -> String {
    let out = dir.path("report.json");
    let run = trainyard(&[&["simulate"], args, &["--out", &arg(&out)]].concat());
    let stderr = run.assert_error(needles).to_string();
    assert!(!out.exists(), "trainyard {args:?} failed but wrote {}", out.display());
    stderr
}

/// Writes a cluster file and checks that simulating on it fails with these needles
/// (the file's path is always one).
#[track_caller]
fn bad_cluster(yaml: &str, needles: &[&str]) {
    let dir = TempDir::create();
    let path = dir.write("cluster.yaml", yaml);
    let prefix = format!("error: {path}: ");
    simulate_fails(&dir, &["--cluster", &path], &[&[prefix.as_str()], needles].concat());
}

/// Writes a policy file and checks that simulating with it fails with these needles.
#[track_caller]
fn bad_policy(yaml: &str, needles: &[&str]) {
    let dir = TempDir::create();
    let path = dir.write("policy.yaml", yaml);
    let prefix = format!("error: {path}: ");
    simulate_fails(&dir, &["--policy", &path], &[&[prefix.as_str()], needles].concat());
}

/// A trainyard CSV trace whose row on line 3 has a bad `runtime_s`; the other three are fine.
fn trace_with_a_bad_row() -> String {
    format!(
        "{CSV_HEADER}\na,0,60,,t,0,1,1,0,0,\nb,10,soon,,t,0,1,1,0,0,\nc,20,60,,t,0,2,8,0,0,required:rack\nd,30,120,,u,0,1,4,0,0,\n"
    )
}

#[test]
fn cluster_type_error_names_file_and_line() {
    bad_cluster(
        "name: t\nlevels: [rack, host]\ngenerate:\n  counts: [2, 2]\n  node: {gpus: eight}\n",
        &["line 5", "eight"],
    );
}

#[test]
fn cluster_unknown_field_names_file_line_and_field() {
    bad_cluster(
        "name: t\nlevels: [rack, host]\ncolour: blue\ngenerate:\n  counts: [2, 2]\n  node: {gpus: 8}\n",
        &["line 3", "unknown field `colour`"],
    );
}

#[test]
fn cluster_counts_of_the_wrong_length() {
    bad_cluster(
        "name: t\nlevels: [rack, host]\ngenerate:\n  counts: [2]\n  node: {gpus: 8}\n",
        &["line 4: field `generate.counts`: has 1 entries but there are 2 levels"],
    );
}

#[test]
fn cluster_node_missing_a_level() {
    bad_cluster(
        "name: t\nlevels: [rack, host]\nnodes:\n  - {name: a, at: {rack: r0}, gpus: 8}\n  - {name: b, gpus: 8}\n",
        &["line 5: field `nodes[1].at.rack`: node `b` has no `rack`"],
    );
}

#[test]
fn missing_cluster_file_is_named() {
    let dir = TempDir::create();
    let path = arg(&dir.path("absent.yaml"));
    simulate_fails(&dir, &["--cluster", &path], &[&path]);
}

#[test]
fn policy_with_a_duplicate_queue() {
    let dir = TempDir::create();
    let path = dir.write("policy.yaml", "queues:\n  - {name: a, nominal_gpus: 8}\n  - {name: a, nominal_gpus: 4}\n");
    let stderr = simulate_fails(&dir, &["--policy", &path], &[]);
    assert_eq!(stderr, format!("error: {path}: line 3: field `queues[1].name`: queue `a` is declared twice\n"));
}

#[test]
fn policy_with_an_unknown_backfill_mode() {
    bad_policy("default_runtime_estimate: 2h\nbackfill: sometimes\n", &["line 2", "sometimes"]);
}

#[test]
fn policy_with_a_bad_default_runtime_estimate() {
    bad_policy(
        "backfill: easy\ndefault_runtime_estimate: soon\n",
        &["line 2: field `default_runtime_estimate`", "`soon`"],
    );
}

#[test]
fn unknown_policy_name_lists_the_built_ins() {
    let dir = TempDir::create();
    simulate_fails(&dir, &["--policy", "nosuchpolicy"], &["`nosuchpolicy`", "fifo, easy-backfill"]);
}

#[test]
fn trace_row_with_a_bad_value_names_line_and_field() {
    let dir = TempDir::create();
    let path = dir.write("jobs.csv", &trace_with_a_bad_row());
    let stderr = simulate_fails(&dir, &["--trace", &path], &[]);
    assert_eq!(stderr, format!("error: {path}: line 3: field `runtime_s`: expected a whole number, found \"soon\"\n"));
}

#[test]
fn undetectable_trace_header_asks_for_format() {
    let dir = TempDir::create();
    let path = dir.write("mystery.csv", "a,b,c\n1,2,3\n");
    simulate_fails(
        &dir,
        &["--trace", &path],
        &[&format!("{path}: line 1: "), "`a,b,c`", "pass --format", "philly, dirlab, csv, jsonl"],
    );
}

#[test]
fn unknown_format_name_lists_the_formats() {
    let dir = TempDir::create();
    let path = dir.write("jobs.csv", &trace_with_a_bad_row());
    simulate_fails(&dir, &["--trace", &path, "--format", "nonsense"], &["`nonsense`", "philly, dirlab", "csv, jsonl"]);
}

#[test]
fn format_without_a_trace_is_refused() {
    let dir = TempDir::create();
    simulate_fails(&dir, &["--format", "csv"], &["--format needs --trace"]);
}

#[test]
fn empty_traces_have_no_jobs() {
    let dir = TempDir::create();
    let header_only = dir.write("header.csv", &format!("{CSV_HEADER}\n"));
    simulate_fails(&dir, &["--trace", &header_only], &[&format!("error: {header_only}: no jobs")]);
    let empty = dir.write("empty.csv", "");
    simulate_fails(&dir, &["--trace", &empty, "--format", "csv"], &[&format!("error: {empty}: no jobs")]);
    // Without --format an empty file cannot be recognised: still an error naming file and line.
    simulate_fails(&dir, &["--trace", &empty], &[&format!("error: {empty}: line 1: ")]);
    let all_bad = dir.write("all-bad.csv", &format!("{CSV_HEADER}\nx,0,0,,t,0,1,1,0,0,\n"));
    simulate_fails(
        &dir,
        &["--trace", &all_bad, "--skip-bad-rows"],
        &[&format!("{all_bad}: no jobs (1 bad row skipped: ")],
    );
}

#[test]
fn skipped_rows_are_named_even_when_no_job_is_left() {
    let dir = TempDir::create();
    let all_bad = dir.write("all-bad.csv", &format!("{CSV_HEADER}\nx,0,0,,t,0,1,1,0,0,\n"));
    let out = dir.path("report.json");
    let run = trainyard(&["simulate", "--trace", &all_bad, "--skip-bad-rows", "--out", &arg(&out)]);
    assert!(!run.status.success() && run.stdout.is_empty() && !out.exists());
    let warning = format!("{all_bad}: no jobs (1 bad row skipped: line 2: field `runtime_s`: must be at least 1)");
    assert!(run.stderr.contains(&warning), "stderr lacks {warning:?}:\n{}", run.stderr);
}

#[test]
fn missing_trace_file_is_named() {
    let dir = TempDir::create();
    let path = arg(&dir.path("absent.csv"));
    simulate_fails(&dir, &["--trace", &path], &["cannot open trace", &path]);
    simulate_fails(&dir, &["--trace", &path, "--format", "csv"], &["cannot open trace", &path]);
}

#[test]
fn skip_bad_rows_warns_and_replays_the_rest() {
    let dir = TempDir::create();
    let path = dir.write("jobs.csv", &trace_with_a_bad_row());
    let out = dir.path("skip.json");
    let run = trainyard(&["simulate", "--trace", &path, "--skip-bad-rows", "--out", &arg(&out)]);
    run.assert_success()
        .assert_stdout_has(&["jobs             3 (3 finished, 0 unschedulable)\n", "skipped rows     1\n"]);
    // Both distribution tables count the three good jobs, by tenant too.
    for group in [&["all", "3"][..], &["tenant", "t", "2"], &["tenant", "u", "1"]] {
        let rows =
            run.stdout.lines().filter(|l| l.split_whitespace().take(group.len()).eq(group.iter().copied())).count();
        assert_eq!(rows, 2, "{group:?} rows in\n{}", run.stdout);
    }
    assert_eq!(
        run.stderr,
        format!("warning: {path}: line 3: field `runtime_s`: expected a whole number, found \"soon\" (row skipped)\n")
    );
    let json = crate::read(&out);
    assert_eq!(number_after(&json, "\"context\"", "skipped_rows"), 1.0);
    assert_eq!(number_after(&json, "\"summary\"", "jobs"), 3.0);
    assert_eq!(number_after(&json, "\"summary\"", "finished"), 3.0);
}
