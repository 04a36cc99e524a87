//! `trainyard trace synth`: determinism, output destinations, and replaying what it writes.

use crate::json::{validate, without_keys};
use crate::{CSV_HEADER, TempDir, arg, read, trainyard};

/// Writes a synthetic trace with `trace synth` and returns its text.
#[track_caller]
fn synth(dir: &TempDir, name: &str, extra: &[&str]) -> String {
    let out = dir.path(name);
    let run = trainyard(&[&["trace", "synth", "--out", &arg(&out)], extra].concat());
    run.assert_success();
    assert_eq!(run.stdout, "", "with --out nothing goes to stdout");
    assert_eq!(run.stderr, "");
    read(&out)
}

#[test]
fn synth_is_deterministic_per_seed() {
    let dir = TempDir::create();
    let a = synth(&dir, "a.csv", &["--seed", "7", "--jobs", "300"]);
    let b = synth(&dir, "b.csv", &["--seed", "7", "--jobs", "300"]);
    let c = synth(&dir, "c.csv", &["--seed", "8", "--jobs", "300"]);
    assert!(a == b, "the same seed must give the same bytes");
    assert!(a != c, "different seeds must give different traces");
    for text in [&a, &c] {
        assert_eq!(text.lines().next(), Some(CSV_HEADER));
        assert_eq!(text.lines().count(), 301, "header plus 300 rows");
        assert!(text.ends_with('\n') && !text.contains('\r'));
    }
    let ja = synth(&dir, "a.jsonl", &["--seed", "7", "--jobs", "300", "--format", "jsonl"]);
    let jb = synth(&dir, "b.jsonl", &["--seed", "7", "--jobs", "300", "--format", "jsonl"]);
    assert!(ja == jb, "jsonl: the same seed must give the same bytes");
    assert_eq!(ja.lines().count(), 300);
    for line in ja.lines() {
        assert!(line.starts_with("{\"id\":"), "{line}");
        validate(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    }
}

#[test]
fn synth_writes_to_stdout_without_out() {
    let dir = TempDir::create();
    let file = synth(&dir, "s.csv", &["--seed", "7", "--jobs", "50"]);
    let run = trainyard(&["trace", "synth", "--seed", "7", "--jobs", "50"]);
    run.assert_success();
    assert_eq!(run.stderr, "");
    assert_eq!(run.stdout.lines().next(), Some(CSV_HEADER), "the header line, exactly");
    assert!(run.stdout == file, "stdout and --out must hold the same trace");
    let jsonl = trainyard(&["trace", "synth", "--seed", "7", "--jobs", "50", "--format", "jsonl"]);
    jsonl.assert_success();
    assert!(jsonl.stdout == synth(&dir, "s.jsonl", &["--seed", "7", "--jobs", "50", "--format", "jsonl"]));
    // The defaults are the built-in trace of `simulate`: seed 42, 2,000 jobs.
    let defaults = trainyard(&["trace", "synth"]);
    assert_eq!(defaults.assert_success().stdout.lines().count(), 2001);
}

#[test]
fn synthetic_csv_and_jsonl_traces_replay_identically() {
    let dir = TempDir::create();
    let mut reports = Vec::new();
    for format in ["csv", "jsonl"] {
        let trace = dir.path(&format!("t.{format}"));
        trainyard(&["trace", "synth", "--seed", "7", "--jobs", "300", "--format", format, "--out", &arg(&trace)])
            .assert_success();
        let out = dir.path(&format!("{format}.json"));
        let run = trainyard(&["simulate", "--trace", &arg(&trace), "--out", &arg(&out)]);
        run.assert_success().assert_stdout_has(&[
            "jobs             300 (300 finished, 0 unschedulable)\n",
            &format!("trace            {} ({format})\n", trace.display()),
        ]);
        assert_eq!(run.stderr, "");
        let json = read(&out);
        validate(&json).unwrap();
        assert!(json.contains(&format!("\"trace_format\": \"{format}\"")), "{format}");
        reports.push(json);
    }
    let context = ["trace", "trace_format"];
    let (csv, jsonl) = (without_keys(&reports[0], &context), without_keys(&reports[1], &context));
    assert_eq!(csv.lines().count() + 2, reports[0].lines().count(), "exactly the two context lines differ");
    assert!(csv == jsonl, "csv and jsonl replays differ beyond the trace name and format");
}

#[test]
fn rich_gangs_are_written_in_the_pod_set_columns_and_replay() {
    let dir = TempDir::create();
    let text = synth(&dir, "rich.csv", &["--jobs", "200", "--rich", "40"]);
    assert_eq!(text.lines().next(), Some(format!("{CSV_HEADER},slice,pod_sets").as_str()));
    assert!(text.contains("leader=1x1"), "{text}");
    let run = trainyard(&["simulate", "--trace", &arg(&dir.path("rich.csv"))]);
    run.assert_success();
    let bad = trainyard(&["trace", "synth", "--rich", "101"]);
    assert!(!bad.status.success());
    assert!(bad.stderr.contains("--rich"), "{}", bad.stderr);
}

#[test]
fn gpu_layouts_are_written_in_their_column_and_replay_with_gpu_indices() {
    let dir = TempDir::create();
    let text = synth(&dir, "layout.csv", &["--jobs", "300", "--gpu-layout", "50"]);
    assert_eq!(text.lines().next(), Some(format!("{CSV_HEADER},gpu_layout").as_str()));
    assert!(text.contains(",switch\n") && text.contains(",numa\n"), "{text}");
    let cluster = "examples/clusters/p4d-layout.yaml".to_string();
    let (one, two) = (dir.path("one.json"), dir.path("two.json"));
    let run =
        trainyard(&["simulate", "--cluster", &cluster, "--trace", &arg(&dir.path("layout.csv")), "--out", &arg(&one)]);
    run.assert_success()
        .assert_stdout_has(&["jobs             300 (300 finished, 0 unschedulable)\n", "GPU layout inside hosts ("]);
    trainyard(&[
        "simulate",
        "--cluster",
        &cluster,
        "--trace",
        &arg(&dir.path("layout.csv")),
        "--quiet",
        "--out",
        &arg(&two),
    ])
    .assert_success();
    let json = read(&one);
    assert!(json.contains("\"gpu_locality\""), "{json}");
    assert!(json == read(&two), "replays with GPU indices are deterministic");
    // On a cluster without GPU layouts those jobs can never run, and the reason says why.
    let plain = trainyard(&["simulate", "--trace", &arg(&dir.path("layout.csv"))]);
    plain.assert_success().assert_stdout_has(&["which no node's known GPU layout holds"]);
    let bad = trainyard(&["trace", "synth", "--gpu-layout", "101"]);
    assert!(!bad.status.success() && bad.stderr.contains("--gpu-layout"), "{}", bad.stderr);
}
