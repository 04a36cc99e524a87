//! `trainyard simulate`: the table, the JSON report, the shipped traces, policies and `--quiet`.

use std::io::Read;
use std::process::Stdio;

use crate::json::{number_after, validate};
use crate::{CSV_HEADER, TempDir, arg, command, read, trainyard};

/// The value of a header line of the table (`key` then at least two spaces).
#[track_caller]
fn table_value<'a>(table: &'a str, key: &str) -> &'a str {
    table
        .lines()
        .find_map(|l| l.strip_prefix(key).filter(|rest| rest.starts_with("  ")).map(str::trim))
        .unwrap_or_else(|| panic!("no `{key}` line in the table:\n{table}"))
}

/// Checks that the JSON's summary counts and makespan are the ones the table shows.
#[track_caller]
fn assert_json_agrees_with_table(json: &str, table: &str) {
    let count = |key: &str| number_after(json, "\"summary\"", key) as u64;
    let jobs = format!("{} ({} finished, {} unschedulable)", count("jobs"), count("finished"), count("unschedulable"));
    assert_eq!(table_value(table, "jobs"), jobs);
    let makespan = table_value(table, "makespan");
    assert!(makespan.starts_with(&format!("{} s (", count("makespan_s"))), "table makespan {makespan:?}");
    let backfilled = table_value(table, "backfilled");
    assert!(backfilled.starts_with(&format!("{} (", count("backfilled"))), "table backfilled {backfilled:?}");
    let skipped = number_after(json, "\"context\"", "skipped_rows") as u64;
    assert_eq!(table_value(table, "skipped rows"), skipped.to_string());
}

#[test]
fn default_run_prints_the_table_and_nothing_on_stderr() {
    let run = trainyard(&["simulate"]);
    run.assert_success().assert_stdout_has(&[
        "trainyard replay report\n",
        "cluster          demo (512 GPUs, 64 hosts)\n",
        "trace            built-in synthetic trace (seed 42, 2000 jobs) (synth)\n",
        "policy           easy-backfill (placement trainyard)\n",
        "jobs             2000 (2000 finished, 0 unschedulable)\n",
        "skipped rows     0\n",
        "\nQueueing delay (submit to start, finished jobs)\n",
        "\nJob completion time (submit to end, finished jobs)\n",
        "  all            2000 ",
    ]);
    assert!(run.stdout.starts_with("trainyard replay report\n"), "{}", run.stdout);
    assert!(!run.stdout.contains("Unschedulable jobs"), "{}", run.stdout);
    assert!(!run.stdout.contains("JSON report written"), "{}", run.stdout);
    assert_eq!(run.stderr, "", "stderr is not a terminal: no progress bar, no warnings");
}

#[test]
fn json_out_is_deterministic_valid_and_agrees_with_the_table() {
    let dir = TempDir::create();
    let inputs: [&[&str]; 2] =
        [&[], &["--trace", "data/traces/philly-excerpt.csv", "--cluster", "examples/clusters/philly-2490.yaml"]];
    for (i, input) in inputs.iter().enumerate() {
        let (a, b) = (dir.path(&format!("a{i}.json")), dir.path(&format!("b{i}.json")));
        let run_a = trainyard(&[&["simulate", "--out", &arg(&a)], *input].concat());
        run_a.assert_success().assert_stdout_has(&[&format!("JSON report written to {}\n", a.display())]);
        trainyard(&[&["simulate", "--out", &arg(&b)], *input].concat()).assert_success();
        let (json, again) = (read(&a), read(&b));
        assert!(json == again, "two runs of {input:?} wrote different JSON");
        validate(&json).unwrap_or_else(|e| panic!("invalid JSON for {input:?}: {e}\n{json}"));
        assert!(json.starts_with("{\n  \"report_version\": 1,\n"), "{}", &json[..json.len().min(200)]);
        assert!(json.ends_with("}\n"));
        for key in [
            "\"context\"",
            "\"summary\"",
            "\"makespan_s\"",
            "\"gpu_utilisation\"",
            "\"p99_9\"",
            "\"by_tenant\"",
            "\"by_size_class\"",
            "\"unschedulable\": []",
        ] {
            assert!(json.contains(key), "JSON of {input:?} lacks {key}");
        }
        assert_json_agrees_with_table(&json, &run_a.stdout);
        let count = number_after(&json, "\"queueing_delay\"", "count");
        assert_eq!(
            count,
            number_after(&json, "\"summary\"", "finished"),
            "overall queueing-delay count is the finished jobs"
        );
    }
    assert_eq!(number_after(&read(&dir.path("a0.json")), "\"summary\"", "jobs"), 2000.0);
    assert_eq!(number_after(&read(&dir.path("a1.json")), "\"summary\"", "jobs"), 3000.0);
}

#[test]
fn philly_excerpt_is_detected_and_the_explicit_format_agrees() {
    let base =
        ["simulate", "--trace", "data/traces/philly-excerpt.csv", "--cluster", "examples/clusters/philly-2490.yaml"];
    let detected = trainyard(&base);
    detected.assert_success().assert_stdout_has(&[
        "cluster          philly-2490 (2490 GPUs, 312 hosts)\n",
        "trace            data/traces/philly-excerpt.csv (philly)\n",
        "jobs             3000 (3000 finished, 0 unschedulable)\n",
    ]);
    let explicit = trainyard(&[&base[..], &["--format", "philly"]].concat());
    explicit.assert_success();
    assert_eq!(detected.stdout, explicit.stdout, "--format philly must replay exactly what detection does");
    assert_eq!(detected.stderr, "");
}

#[test]
fn helios_excerpt_replays_as_dirlab() {
    let run = trainyard(&[
        "simulate",
        "--trace",
        "data/traces/helios-excerpt.csv",
        "--cluster",
        "examples/clusters/helios-704.yaml",
        "--policy",
        "fifo",
    ]);
    run.assert_success().assert_stdout_has(&[
        "cluster          helios-704 (704 GPUs, 88 hosts)\n",
        "trace            data/traces/helios-excerpt.csv (dirlab)\n",
        "policy           fifo (placement trainyard)\n",
        "jobs             15000 (15000 finished, 0 unschedulable)\n",
        "backfilled       0 (0.0% of finished)\n",
        "  size cpu-only ",
    ]);
    assert_eq!(run.stderr, "");
}

#[test]
fn every_policy_runs_on_the_built_in_trace() {
    for (policy, name) in
        [("fifo", "fifo"), ("easy-backfill", "easy-backfill"), ("examples/policies/teams.yaml", "teams")]
    {
        let run = trainyard(&["simulate", "--policy", policy]);
        run.assert_success().assert_stdout_has(&[
            &format!("policy           {name} (placement trainyard)\n"),
            "jobs             2000 (2000 finished, 0 unschedulable)\n",
        ]);
        let backfilled = table_value(&run.stdout, "backfilled");
        assert_eq!(backfilled.starts_with("0 "), policy == "fifo", "{policy}: backfilled {backfilled}");
    }
}

#[test]
fn easy_backfill_queues_less_than_fifo_on_a_congested_helios_cluster() {
    let dir = TempDir::create();
    let mean_delay = |policy: &str| {
        let out = dir.path(&format!("{policy}.json"));
        trainyard(&[
            "simulate",
            "--trace",
            "data/traces/helios-excerpt.csv",
            "--cluster",
            "examples/clusters/helios-704.yaml",
            "--estimates",
            "actual",
            "--policy",
            policy,
            "--quiet",
            "--out",
            &arg(&out),
        ])
        .assert_success();
        let json = read(&out);
        validate(&json).unwrap_or_else(|e| panic!("{policy}: invalid JSON: {e}"));
        assert_eq!(number_after(&json, "\"summary\"", "finished"), 15000.0, "{policy}");
        number_after(&json, "\"queueing_delay\"", "mean")
    };
    let (fifo, easy) = (mean_delay("fifo"), mean_delay("easy-backfill"));
    assert!(easy > 0.0 && easy < fifo, "mean queueing delay: easy-backfill {easy} s, fifo {fifo} s");
}

#[test]
fn a_job_that_can_never_fit_is_unschedulable() {
    let dir = TempDir::create();
    let trace = dir.write("huge.csv", &format!("{CSV_HEADER}\nsmall,0,60,,t,0,1,1,0,0,\nhuge-job,5,60,,t,0,512,8,0,0,\nlate,10,60,,u,0,2,8,0,0,required:rack\n"));
    let out = dir.path("huge.json");
    let run = trainyard(&["simulate", "--trace", &trace, "--out", &arg(&out)]);
    run.assert_success().assert_stdout_has(&[
        "jobs             3 (2 finished, 1 unschedulable)\n",
        "Unschedulable jobs (1)\n",
        "huge-job",
        "4096",
        "more than the empty cluster can hold",
    ]);
    let json = read(&out);
    validate(&json).unwrap();
    assert_json_agrees_with_table(&json, &run.stdout);
    let list = &json[json.rfind("\"unschedulable\": [").expect("an unschedulable list")..];
    assert!(list.contains("\"id\": \"huge-job\""), "{list}");
    assert!(list.contains("\"gpus\": 4096"), "{list}");
    assert!(list.contains("more than the empty cluster can hold"), "{list}");
    assert!(!list.contains("\"small\"") && !list.contains("\"late\""), "{list}");
}

#[test]
fn quiet_prints_nothing_but_still_writes_the_json() {
    let dir = TempDir::create();
    let out = dir.path("quiet.json");
    let run = trainyard(&["simulate", "--quiet", "--out", &arg(&out)]);
    run.assert_success();
    assert_eq!(run.stdout, "");
    assert_eq!(run.stderr, "");
    let json = read(&out);
    validate(&json).unwrap();
    assert_eq!(number_after(&json, "\"summary\"", "finished"), 2000.0);
    let short = dir.path("short.json");
    let run = trainyard(&["simulate", "-q", "--out", &arg(&short)]);
    assert_eq!((run.status.success(), run.stdout.as_str()), (true, ""));
    assert!(read(&short) == json, "-q and --quiet write the same report");
}

#[test]
fn a_closed_stdout_is_not_a_panic() {
    let mut child = command(&["simulate".to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run the trainyard binary");
    // Close the reading end before the replay finishes, as `| head -0` would.
    drop(child.stdout.take());
    let mut stderr = String::new();
    child.stderr.take().expect("piped stderr").read_to_string(&mut stderr).expect("stderr is UTF-8");
    let status = child.wait().expect("the child exits");
    assert!(!stderr.contains("panicked"), "status {status}, stderr:\n{stderr}");
}

#[test]
fn slowdown_lengthens_wide_gangs_and_the_json_has_a_placement_section() {
    let dir = TempDir::create();
    // On the built-in cluster (8 hosts of 8 GPUs per rack, 4 racks per block): `tiny` stays on
    // one host, `wide` (9 hosts) needs a block, `huge` (40 hosts) the whole cluster. One at a time.
    let trace = dir.write(
        "spans.csv",
        &format!("{CSV_HEADER}\ntiny,0,100,,t,0,1,8,0,0,\nwide,1000,100,,t,0,9,8,0,0,\nhuge,2000,100,,t,0,40,8,0,0,\n"),
    );
    let out = dir.path("slow.json");
    let run = trainyard(&["simulate", "--trace", &trace, "--slowdown", "rack=1.05,cluster=1.25", "--out", &arg(&out)]);
    run.assert_success().assert_stdout_has(&[
        "\nPlacement (finished gangs by the smallest domain holding all their pods)\n",
        "  host         1.00  default      1  33.3%     8       2.0%\n",
        "  block        1.05  rack         1  33.3%    72      18.0%\n",
        "  cluster      1.25  cluster      1  33.3%   320      80.0%\n",
        "  mean slowdown    1.100 (GPU-weighted 1.209)\n",
    ]);
    let json = read(&out);
    validate(&json).unwrap();
    assert_json_agrees_with_table(&json, &run.stdout);
    // `huge` ends at 2000 + ceil(100 x 1.25); without the slowdown it would end at 2100.
    assert_eq!(number_after(&json, "\"summary\"", "makespan_s"), 2125.0);
    assert!(json.find("\"unschedulable\": []").unwrap() < json.find("\"placement\"").unwrap());
    assert_eq!(number_after(&json, "\"placement\"", "mean_factor"), 1.1);
    assert_eq!(number_after(&json, "\"placement\"", "gpu_weighted_mean_factor"), 1.209);
    assert_eq!(number_after(&json, "\"level\": \"block\"", "factor"), 1.05);
    assert_eq!(number_after(&json, "\"fragmentation\"", "observed_s"), 2125.0);
    assert!(json.contains("\"from\": \"rack\""), "block inherits the rack factor");
    assert!(json.contains("\"series\": ["));
    let plain = dir.path("plain.json");
    trainyard(&["simulate", "--trace", &trace, "--quiet", "--out", &arg(&plain)]).assert_success();
    let plain = read(&plain);
    assert_eq!(number_after(&plain, "\"summary\"", "makespan_s"), 2100.0);
    assert_eq!(number_after(&plain, "\"placement\"", "mean_factor"), 1.0);
}

#[test]
fn a_bad_slowdown_is_a_usage_error_and_an_unknown_level_is_named() {
    let dir = TempDir::create();
    let out = dir.path("report.json");
    // Syntax is checked by the argument parser: clap's usage-error status, like any bad flag value.
    let run = trainyard(&["simulate", "--slowdown", "rack=fast", "--out", &arg(&out)]);
    assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
    assert_eq!(run.stdout, "");
    assert!(run.stderr.contains("bad slowdown entry `rack=fast`: factor `fast` is not a number"), "{}", run.stderr);
    let run = trainyard(&["simulate", "--slowdown", "cluster=0.5"]);
    assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("below 1.0"), "{}", run.stderr);
    // A level is checked against the cluster once it is loaded, like the other input errors.
    let run = trainyard(&["simulate", "--slowdown", "rack=1.1,row=1.2", "--out", &arg(&out)]);
    run.assert_error(&[
        "--slowdown: slowdown level `row` is not a level of cluster `demo`; known levels: cluster, block, rack, host",
    ]);
    assert!(!out.exists(), "a failed run wrote a report");
}

#[test]
fn placement_policy_can_be_chosen_on_the_command_line() {
    let run = trainyard(&["simulate", "--placement", "slurm-tree", "--quiet", "--out", "/dev/stdout"]);
    run.assert_success();
    assert!(
        run.stdout.contains("easy-backfill (placement slurm-tree)"),
        "{}",
        &run.stdout[..400.min(run.stdout.len())]
    );
    let bad = trainyard(&["simulate", "--placement", "best"]);
    assert_eq!(bad.status.code(), Some(2), "clap rejects bad flag values with 2");
    assert!(bad.stderr.contains("`best` is not a placement policy"), "{}", bad.stderr);
}

#[test]
fn explain_prints_why_chosen_jobs_waited() {
    let args = [
        "simulate",
        "--cluster",
        "examples/clusters/helios-704.yaml",
        "--trace",
        "data/traces/helios-excerpt.csv",
        "--policy",
        "fifo",
        "--explain",
        "job-9000",
    ];
    let run = trainyard(&args);
    run.assert_success()
        .assert_stdout_has(&["Explanations (each time they changed)", "job-9000: gang #9000: queued behind gang #"]);
    trainyard(&["simulate", "--explain", "job-nope"]).assert_error(&["--explain: no job `job-nope` in the trace"]);
}

#[test]
fn a_search_trace_adds_a_searches_section_to_the_table_and_the_json() {
    let dir = TempDir::create();
    // The research queue holds two trials' worth of GPUs.
    let policy = dir.write("capped.yaml", "backfill: easy\nqueues: [{name: research, nominal_gpus: 16}]\n");
    let out = dir.path("search.json");
    let trace = "examples/traces/search.csv";
    let run = trainyard(&["simulate", "--trace", trace, "--policy", &policy, "--out", &arg(&out)]);
    run.assert_success().assert_stdout_has(&[
        "jobs             9 (9 finished, 0 unschedulable)\n",
        "\nSearches (trials of a hyperparameter search, at most `parallel` live at once)\n",
        "search    parallel  trials  finished  unschedulable  max live    makespan  best trial\n",
        "lr-sweep         2       6         6              0         2  2h 55m 00s  trial-3 (min 0.351)\n",
    ]);
    let json = read(&out);
    validate(&json).unwrap();
    assert_json_agrees_with_table(&json, &run.stdout);
    let searches = &json[json.find("\n  \"searches\": [").expect("a searches section")..];
    for needle in ["\"name\": \"lr-sweep\"", "\"max_live\": 2", "\"id\": \"trial-3\"", "\"objective\": 0.351"] {
        assert!(searches.contains(needle), "{needle} in {searches}");
    }
    // A trace without searches prints and writes no such section.
    let plain = trainyard(&["simulate", "--trace", "examples/traces/dra-sample.csv", "--quiet", "--out", &arg(&out)]);
    plain.assert_success();
    assert!(!read(&out).contains("\"searches\""));
    let bad = dir.write(
        "bad.csv",
        &format!("{CSV_HEADER},search,objective\na,0,60,,t,0,1,8,0,0,,lr:2,0.5\nb,0,60,,t,0,1,8,0,0,,lr:3,\n"),
    );
    trainyard(&["simulate", "--trace", &bad, "-q"])
        .assert_error(&["bad.csv: line 3: field `search`: search \"lr\" runs 2 trials at once (line 2), not 3"]);
}

#[test]
fn a_fleet_runs_each_gang_in_one_member_and_reports_each_member() {
    let dir = TempDir::create();
    let out = dir.path("fleet.json");
    let run = trainyard(&["simulate", "--cluster", "examples/clusters/fleet.yaml", "--out", &arg(&out)]);
    run.assert_success().assert_stdout_has(&[
        "cluster          two-regions (768 GPUs, 96 hosts)\n",
        "\nClusters of the fleet\n",
        "  east                512",
        "  west                256",
    ]);
    let json = read(&out);
    validate(&json).unwrap();
    let fleet = &json[json.find("\n  \"fleet\": {").expect("a fleet section")..];
    assert!(fleet.contains("\"name\": \"east\"") && fleet.contains("\"name\": \"west\""), "{fleet}");
    // Two 2-host members: a 3-host gang fits no member though the fleet has 4 hosts.
    let member =
        |name: &str| format!("name: {name}\nlevels: [rack, host]\ngenerate: {{counts: [1, 2], node: {{gpus: 8}}}}\n");
    dir.write("a.yaml", &member("a"));
    let fleet = dir.write(
        "pair.yaml",
        &format!(
            "name: pair\nclusters:\n  - {{name: a, file: a.yaml}}\n  - name: b\n    cluster: {{{}}}\n",
            "name: b, levels: [rack, host], generate: {counts: [1, 2], node: {gpus: 8}}"
        ),
    );
    let trace = dir.write("t.csv", &format!("{CSV_HEADER}\nsmall,0,60,,t,0,2,8,0,0,\nwide,0,60,,t,0,3,8,0,0,\n"));
    let run = trainyard(&["simulate", "--cluster", &fleet, "--trace", &trace]);
    run.assert_success().assert_stdout_has(&["jobs             2 (1 finished, 1 unschedulable)\n"]);
    // A member given both ways is refused, naming the file and the entry.
    let bad = dir.write("bad.yaml", "name: bad\nclusters:\n  - {name: a, file: a.yaml, cluster: {name: a, levels: [host], nodes: [{name: h, gpus: 8}]}}\n");
    trainyard(&["simulate", "--cluster", &bad, "-q"])
        .assert_error(&["bad.yaml:3: clusters[0]: give either `file` or `cluster`"]);
}
