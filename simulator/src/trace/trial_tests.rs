//! The `search` and `objective` columns (keys in JSONL): reading, refusing, writing back.

use super::*;
use crate::trial::{Direction, Objective};

const HEADER: &str = "id,submit_s,runtime_s,runtime_estimate_s,tenant,priority,pods,gpus_per_pod,cpu_milli_per_pod,memory_mib_per_pod,topology,search,objective\n";

const SEARCH: &str = include_str!("../../../examples/traces/search.csv");

fn read(format: TraceFormat, text: &str) -> Result<TraceRead, TraceError> {
    read_trace(format, text.as_bytes(), "jobs", &ReadOptions::default())
}

fn written(jobs: &[TraceJob], format: TraceFormat) -> String {
    let mut out = Vec::new();
    match format {
        TraceFormat::Jsonl => write_jsonl(jobs, &mut out).unwrap(),
        _ => write_csv(jobs, &mut out).unwrap(),
    }
    String::from_utf8(out).unwrap()
}

#[test]
fn trials_read_and_write_back_in_both_formats() {
    let text = format!(
        "{HEADER}a,0,60,,t,0,1,8,0,0,unconstrained,lr-sweep:2,0.25\n\
         b,1,60,,t,0,1,8,0,0,unconstrained,acc:3:max,\n\
         c,2,60,,t,0,1,8,0,0,unconstrained,,\n\
         d,3,60,,t,0,1,8,0,0,unconstrained,lr-sweep:2,-1.5\n"
    );
    let jobs = read(TraceFormat::Csv, &text).unwrap().jobs;
    let a = jobs[0].trial.as_ref().unwrap();
    assert_eq!((a.search.name.as_str(), a.search.parallel, a.search.direction), ("lr-sweep", 2, Direction::Min));
    assert_eq!(a.objective, Objective::new(0.25));
    let b = jobs[1].trial.as_ref().unwrap();
    assert_eq!((b.search.direction, b.objective), (Direction::Max, None));
    assert_eq!(jobs[2].trial, None);
    assert_eq!(written(&jobs, TraceFormat::Csv), text);
    let jsonl = written(&jobs, TraceFormat::Jsonl);
    assert!(jsonl.starts_with("{\"id\":\"a\",") && jsonl.contains(",\"search\":\"lr-sweep:2\",\"objective\":0.25}\n"));
    assert!(!jsonl.lines().nth(2).unwrap().contains("search"), "{jsonl}");
    let back = read(TraceFormat::Jsonl, &jsonl).unwrap().jobs;
    assert_eq!(back.iter().map(|j| &j.trial).collect::<Vec<_>>(), jobs.iter().map(|j| &j.trial).collect::<Vec<_>>());
}

#[test]
fn traces_without_trials_are_written_without_the_columns() {
    let text = format!("{HEADER}a,0,60,,t,0,1,8,0,0,unconstrained,,\n");
    let jobs = read(TraceFormat::Csv, &text).unwrap().jobs;
    assert!(!written(&jobs, TraceFormat::Csv).contains("search"));
}

#[test]
fn bad_trials_name_line_and_field() {
    let good = "ok,0,60,,t,0,1,1,0,0,,lr:2,0.5\n";
    let cases = [
        (
            "x,0,60,,t,0,1,1,0,0,,lr,",
            "field `search`: \"lr\" is not a search; write <name>:<parallel trials>[:max|min], e.g. lr-sweep:2",
        ),
        ("x,0,60,,t,0,1,1,0,0,,:2,", "field `search`: \":2\": the search name must not be empty"),
        (
            "x,0,60,,t,0,1,1,0,0,,lr:0,",
            "field `search`: \"lr:0\": parallel trials must be a whole number from 1 to 100, found \"0\"",
        ),
        (
            "x,0,60,,t,0,1,1,0,0,,lr:101,",
            "field `search`: \"lr:101\": parallel trials must be a whole number from 1 to 100, found \"101\"",
        ),
        (
            "x,0,60,,t,0,1,1,0,0,,lr:2:best,",
            "field `search`: \"lr:2:best\": the direction must be max or min, found \"best\"",
        ),
        ("x,0,60,,t,0,1,1,0,0,,lr:2,NaN", "field `objective`: expected a finite number, found \"NaN\""),
        ("x,0,60,,t,0,1,1,0,0,,lr:2,inf", "field `objective`: expected a finite number, found \"inf\""),
        ("x,0,60,,t,0,1,1,0,0,,lr:2,low", "field `objective`: expected a finite number, found \"low\""),
        (
            "x,0,60,,t,0,1,1,0,0,,,0.5",
            "field `objective`: only a trial reports an objective; name its search in `search`",
        ),
        ("x,0,60,,t,0,1,1,0,0,,lr:3,", "field `search`: search \"lr\" runs 2 trials at once (line 2), not 3"),
        (
            "x,0,60,,t,0,1,1,0,0,,lr:2:max,",
            "field `search`: search \"lr\" keeps the min objective (line 2), not the max",
        ),
    ];
    for (row, message) in cases {
        let text = format!("{HEADER}{good}{row}\n");
        let error = read(TraceFormat::Csv, &text).unwrap_err().to_string();
        assert_eq!(error, format!("jobs: line 3: {message}"), "{row}");
    }
    // Skipping a bad row keeps the search as its first trial gave it.
    let text = format!("{HEADER}{good}x,0,60,,t,0,1,1,0,0,,lr:3,\ny,0,60,,t,0,1,1,0,0,,lr:2,\n");
    let opts = ReadOptions { skip_bad_rows: true, ..ReadOptions::default() };
    let read = read_trace(TraceFormat::Csv, text.as_bytes(), "jobs", &opts).unwrap();
    assert_eq!((read.jobs.len(), read.skipped[0].line), (2, 3));
}

#[test]
fn bad_trials_in_jsonl_name_line_and_key() {
    let row = |extra: &str| {
        format!(r#"{{"id":"x","submit_s":0,"runtime_s":60,"tenant":"t","pods":1,"gpus_per_pod":1{extra}}}"#)
    };
    let cases = [
        (row(r#","search":2"#), "field `search`: expected a string, found 2"),
        (row(r#","search":"lr:2","objective":"0.5""#), "field `objective`: expected a number, found \"0.5\""),
        (
            row(r#","objective":0.5"#),
            "field `objective`: only a trial reports an objective; name its search in `search`",
        ),
        (
            row(r#","search":"lr:200""#),
            "field `search`: \"lr:200\": parallel trials must be a whole number from 1 to 100, found \"200\"",
        ),
    ];
    for (line, message) in cases {
        let error = read(TraceFormat::Jsonl, &line).unwrap_err().to_string();
        assert_eq!(error, format!("jobs: line 1: {message}"), "{line}");
    }
    let ok = read(TraceFormat::Jsonl, &row(r#","search":"lr:2:max","objective":null"#)).unwrap().jobs;
    assert_eq!(ok[0].trial.as_ref().map(|t| (t.search.direction, t.objective)), Some((Direction::Max, None)));
}

#[test]
fn the_search_fixture_holds_one_search_of_six_trials() {
    let jobs = read(TraceFormat::Csv, SEARCH).unwrap().jobs;
    let trials: Vec<&TraceJob> = jobs.iter().filter(|j| j.trial.is_some()).collect();
    assert_eq!(trials.len(), 6);
    assert!(trials.iter().all(|j| j.gpus() == 8 && j.trial.as_ref().unwrap().search.to_string() == "lr-sweep:2"));
    assert_eq!(trials.iter().filter(|j| j.trial.as_ref().unwrap().objective.is_none()).count(), 1);
    assert!(jobs.len() > trials.len(), "ordinary jobs beside the search");
    assert_eq!(written(&jobs, TraceFormat::Csv), SEARCH);
}

#[test]
fn trace_jobs_written_as_json_before_searches_still_load() {
    let mut job = read(TraceFormat::Csv, SEARCH).unwrap().jobs.remove(0);
    let mut value = serde_json::to_value(&job).unwrap();
    assert!(value.get("trial").is_none(), "a job of no search writes what it always wrote");
    value.as_object_mut().unwrap().remove("trial");
    assert_eq!(serde_json::from_value::<TraceJob>(value).unwrap(), job);
    job = read(TraceFormat::Csv, SEARCH).unwrap().jobs.remove(1);
    let back: TraceJob = serde_json::from_str(&serde_json::to_string(&job).unwrap()).unwrap();
    assert_eq!(back, job);
}
