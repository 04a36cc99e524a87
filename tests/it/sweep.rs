//! `trainyard sweep`: every point runs, in parallel or not with the same bytes out; a second
//! run keeps what the first finished; a failing point is listed and the others still finish;
//! a bad sweep file names its line.

use crate::{TempDir, arg, read, trainyard};

/// Two policies x two seeds on the built-in cluster and trace, and one point whose cluster
/// file does not exist.
const SWEEP: &str = "base: {estimate_error: 0.3}\ngrid:\n  policy: [fifo, easy-backfill]\n  seed: [1, 2]\npoints:\n  - {cluster: missing.yaml, policy: fifo}\n";

#[test]
fn points_run_in_parallel_resume_and_a_failing_one_is_listed() {
    let dir = TempDir::create();
    let file = dir.write("what-if.yaml", SWEEP);
    let out = arg(&dir.path("out"));
    let first = trainyard(&["sweep", &file, "--out-dir", &out, "-j", "2"]);
    assert!(!first.status.success(), "a failed point fails the command");
    first.assert_stdout_has(&[
        "cluster=demo policy=fifo load=1 estimate_error=0.3",
        "cluster=demo policy=easy-backfill load=1 estimate_error=0.3",
        "5 points: 5 run, 0 kept from an earlier run, 1 failed",
    ]);
    assert!(
        first.stderr.contains("what-if.yaml: line 6: point `cluster=missing.yaml policy=fifo")
            && first.stderr.contains("missing.yaml")
            && first.stderr.contains("1 of 5 points failed"),
        "{}",
        first.stderr
    );
    let json = read(&dir.path("out/sweep.json"));
    let csv = read(&dir.path("out/sweep.csv"));
    assert_eq!(csv.lines().count(), 5, "a header and the four points that finished:\n{csv}");
    let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(parsed["groups"].as_array().unwrap().len(), 2);
    assert_eq!(parsed["groups"][0]["seeds"], 2);
    assert_eq!(parsed["failed"].as_array().unwrap().len(), 1);

    // Run again: the finished points are kept, the failed one is tried again, same bytes out.
    let second = trainyard(&["sweep", &file, "--out-dir", &out]);
    second.assert_stdout_has(&["5 points: 1 run, 4 kept from an earlier run, 1 failed"]);
    assert_eq!(read(&dir.path("out/sweep.json")), json);

    // From scratch, one point at a time: the very same results.
    let serial = arg(&dir.path("serial"));
    trainyard(&["sweep", &file, "--out-dir", &serial, "-j", "1", "--fresh", "-q"]);
    assert_eq!(read(&dir.path("serial/sweep.json")), json);
}

#[test]
fn a_bad_sweep_file_names_its_line_and_runs_nothing() {
    let dir = TempDir::create();
    let file = dir.write("bad.yaml", "grid:\n  policy: [fifo]\n  seeds: [1, 2]\n");
    let out = dir.path("out");
    trainyard(&["sweep", &file, "--out-dir", &arg(&out)]).assert_error(&["bad.yaml", "line 3", "seeds"]);
    assert!(!out.exists(), "nothing is written for a file that does not parse");
    let empty = dir.write("empty.yaml", "grid:\n  seed: []\n");
    trainyard(&["sweep", &empty]).assert_error(&["empty.yaml", "line 2", "grid.seed", "empty list"]);
}

#[test]
fn the_shipped_helios_sweep_runs_its_48_points() {
    let dir = TempDir::create();
    let out = arg(&dir.path("helios"));
    let run = trainyard(&["sweep", "examples/sweeps/helios-sizes.yaml", "--out-dir", &out]);
    run.assert_success().assert_stdout_has(&[
        "48 points: 48 run, 0 kept from an earlier run, 0 failed",
        "cluster=../clusters/helios-576.yaml policy=../policies/fair-share.yaml",
    ]);
    let parsed: serde_json::Value = serde_json::from_str(&read(&dir.path("helios/sweep.json"))).unwrap();
    let groups = parsed["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 12);
    assert!(groups.iter().all(|g| g["seeds"] == 4));
    // The smallest cluster makes gangs wait longest under strict FIFO.
    let wait = |i: usize| groups[i]["mean_wait_s"]["mean"].as_f64().unwrap();
    assert!(wait(0) > wait(3) && wait(3) >= wait(6), "{} {} {}", wait(0), wait(3), wait(6));
}

/// The names and bytes of every kept result of an output folder, in name order.
fn kept_results(out: &std::path::Path) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(out.join("points"))
        .unwrap_or_else(|e| panic!("{}: {e}", out.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .map(|path| (path.file_name().unwrap().to_string_lossy().into_owned(), read(&path)))
        .collect();
    files.sort();
    files
}

#[test]
fn one_point_per_process_then_gather_gives_the_bytes_of_a_run_here() {
    let dir = TempDir::create();
    let file = dir.write("what-if.yaml", SWEEP);
    let here = dir.path("here");
    assert!(!trainyard(&["sweep", &file, "--out-dir", &arg(&here), "-q"]).status.success());

    let split = dir.path("split");
    let out = arg(&split);
    for index in ["0", "1", "3"] {
        trainyard(&["sweep", &file, "--out-dir", &out, "--point", index]).assert_success();
    }
    // As a pod of an Indexed Job runs it: the index from the environment.
    let pod = crate::command(
        &["sweep", &file, "--out-dir", &out, "--point-from-env", "JOB_COMPLETION_INDEX", "-q"].map(String::from),
    )
    .env("JOB_COMPLETION_INDEX", "2")
    .output()
    .unwrap();
    assert!(pod.status.success() && pod.stdout.is_empty(), "{pod:?}");
    let again = trainyard(&["sweep", &file, "--out-dir", &out, "--point", "1"]);
    again.assert_success().assert_stdout_has(&["point 1 (cluster=demo policy=fifo", "kept from an earlier run"]);
    trainyard(&["sweep", &file, "--out-dir", &out, "--point", "4"])
        .assert_error(&["what-if.yaml: line 6: point `cluster=missing.yaml", "missing.yaml"]);

    let gather = trainyard(&["sweep", &file, "--out-dir", &out, "--gather"]);
    assert!(!gather.status.success(), "the point that cannot run fails the gathering");
    gather.assert_stdout_has(&["5 points: 4 kept, 1 without a result"]);
    assert!(gather.stderr.contains("line 6: point `cluster=missing.yaml"), "{}", gather.stderr);
    assert_eq!(kept_results(&split), kept_results(&here));
    assert_eq!(kept_results(&here).len(), 4);
    for name in ["sweep.json", "sweep.csv"] {
        assert_eq!(read(&split.join(name)), read(&here.join(name)), "{name} differs from the run here");
    }

    // A point whose task never ran is listed with its line and how to run it; the rest is written.
    let (first, _) = &kept_results(&split)[0];
    std::fs::remove_file(split.join("points").join(first)).unwrap();
    let short = trainyard(&["sweep", &file, "--out-dir", &out, "--gather", "-q"]);
    assert!(short.stderr.contains(&format!("no result (points/{first}): run it with --point")), "{}", short.stderr);
    assert!(short.stderr.contains("2 of 5 points failed or have no result"), "{}", short.stderr);
    assert_eq!(read(&split.join("sweep.csv")).lines().count(), 4, "a header and the three points still kept");
}

#[test]
fn distributed_flags_are_checked_before_anything_runs() {
    let dir = TempDir::create();
    let file = dir.write("what-if.yaml", SWEEP);
    let out = dir.path("out");
    let o = arg(&out);
    trainyard(&["sweep", &file, "--out-dir", &o, "--point", "5"])
        .assert_error(&["--point 5", "has 5 points, numbered 0 to 4"]);
    trainyard(&["sweep", &file, "--point-from-env", "TRAINYARD_NO_SUCH_VAR"])
        .assert_error(&["--point-from-env TRAINYARD_NO_SUCH_VAR", "is not set"]);
    trainyard(&["sweep", &file, "--out-dir", &o, "--gather"]).assert_error(&["--gather", "points", "does not exist"]);
    assert!(!out.exists(), "nothing is written for flags that cannot be used");
    let refused = |args: &[&str], needle: &str| {
        let mut all = vec!["sweep", file.as_str()];
        all.extend_from_slice(args);
        let run = trainyard(&all);
        assert_eq!(run.status.code(), Some(2), "{all:?} is a usage error: {}", run.stderr);
        assert!(run.stderr.contains(needle), "{all:?}: {needle:?} not in {}", run.stderr);
    };
    refused(&["--slurm", "--point", "1"], "cannot be used with");
    refused(&["--gather", "--point-from-env", "X"], "cannot be used with");
    refused(&["--gather", "--fresh"], "cannot be used with");
    refused(&["--slurm", "-j", "2"], "cannot be used with");
    refused(&["--partition", "debug"], "--slurm");
    refused(&["--task-cpus", "2"], "--slurm|--k8s-indexed-job");
    refused(&["--k8s-indexed-job", "img"], "--results-pvc");
    refused(&["--results-pvc", "r"], "--k8s-indexed-job");
    refused(&["--slurm", "--task-cpus", "0"], "--task-cpus");
    let bad = |args: &[&str], needles: &[&str]| {
        let mut all =
            vec!["sweep", "tests/fixtures/sweep/indexed.yaml", "--k8s-indexed-job", "img", "--results-pvc", "r"];
        all.extend_from_slice(args);
        trainyard(&all).assert_error(needles);
    };
    bad(&["--job-name", "Sweep_1"], &["--job-name `Sweep_1`", "DNS label"]);
    bad(&["--namespace", "a.b"], &["--namespace `a.b`"]);
    trainyard(&["sweep", &file, "--k8s-indexed-job", "img", "--results-pvc", "r"])
        .assert_error(&["what-if.yaml", "outside the current folder"]);
    // Refused before Slurm is asked anything: no Slurm runs in this test.
    let slurm = arg(&dir.path("slurm"));
    trainyard(&["sweep", &file, "--out-dir", &slurm, "--slurm", "--partition", "gpu,cpu"])
        .assert_error(&["cannot run the sweep on Slurm: --partition", "contains `,`"]);
}

const GOLDEN_JOB: &str = "tests/golden/sweep/indexed.job.yaml";

/// `trainyard sweep --k8s-indexed-job` of tests/fixtures/sweep/indexed.yaml, compared with its
/// golden file (which scripts/check_workloads.py validates as a strict batch/v1 Job and ConfigMap
/// in scripts/test.sh); `TRAINYARD_BLESS=1` rewrites it. The manifest is rendered, never applied
/// here: no Kubernetes cluster runs in the tests.
#[test]
fn the_indexed_job_manifest_is_current() {
    let run = trainyard(&[
        "sweep",
        "tests/fixtures/sweep/indexed.yaml",
        "--k8s-indexed-job",
        "ghcr.io/example/trainyard:0.1.0",
        "--results-pvc",
        "sweep-results",
        "--namespace",
        "research",
        "--parallelism",
        "2",
        "--task-memory-mib",
        "512",
    ]);
    run.assert_success();
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(GOLDEN_JOB);
    if std::env::var_os("TRAINYARD_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&golden, &run.stdout).unwrap();
    }
    let want = std::fs::read_to_string(&golden).unwrap_or_default();
    assert!(run.stdout == want, "stale {GOLDEN_JOB}; rerun with TRAINYARD_BLESS=1 after review:\n{}", run.stdout);

    // The inputs reach the pod byte for byte, at the paths the sweep file's relative paths need.
    let docs: Vec<serde_json::Value> =
        run.stdout.split("\n---\n").skip(1).map(|d| serde_saphyr::from_str(d).unwrap()).collect();
    let (config_map, job) = (&docs[0], &docs[1]);
    let spec = &job["spec"];
    assert_eq!((spec["completionMode"].as_str(), spec["completions"].as_u64()), (Some("Indexed"), Some(4)));
    assert_eq!(spec["parallelism"], 2);
    let pod = &spec["template"]["spec"];
    let args = pod["containers"][0]["args"].as_array().unwrap();
    assert!(args.iter().any(|a| a == "JOB_COMPLETION_INDEX"), "{args:?}");
    for item in pod["volumes"][0]["configMap"]["items"].as_array().unwrap() {
        let text = config_map["data"][item["key"].as_str().unwrap()].as_str().unwrap();
        assert_eq!(text, read(std::path::Path::new(item["path"].as_str().unwrap())), "{item}");
    }

    // With the inputs on a claim: no ConfigMap, the claim mounted, the files it must hold listed.
    let on_claim = trainyard(&[
        "sweep",
        "tests/fixtures/sweep/indexed.yaml",
        "--k8s-indexed-job",
        "img:1",
        "--results-pvc",
        "sweep-results",
        "--inputs-pvc",
        "sweep-inputs",
    ]);
    on_claim.assert_success().assert_stdout_has(&[
        "#   examples/clusters/helios-576.yaml\n",
        "claimName: sweep-inputs",
        "--gather --out-dir /mnt/results/sweep-indexed",
    ]);
    assert!(!on_claim.stdout.contains("kind: ConfigMap"), "{}", on_claim.stdout);
}

/// `trainyard sweep --slurm` against a real local Slurm (started by scripts/slurm/with-slurm.sh;
/// scripts/test.sh runs this with --include-ignored): the same sweep run here and as a job array,
/// through slurmrestd, gives the same result files and comparison, byte for byte; a second
/// --slurm submits nothing; a point whose task fails (through sbatch) is listed with its line,
/// the task's end and its output file.
#[test]
#[ignore = "needs a local Slurm"]
fn slurm_array_matches_local() {
    std::env::var("SLURM_CONF").expect("needs a local Slurm: run through scripts/slurm/with-slurm.sh");
    let dir = TempDir::create();
    let trace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/traces/philly-excerpt.csv");
    let sweep = format!(
        "trace: {}\nbase: {{estimate_error: 0.3}}\ngrid:\n  policy: [fifo, easy-backfill]\n  load: [1, 2]\n  seed: [1, 2]\n",
        trace.display()
    );
    let file = dir.write("philly.yaml", &sweep);
    let here = dir.path("here");
    trainyard(&["sweep", &file, "--out-dir", &arg(&here), "-q"]).assert_success();

    let on_slurm = dir.path("slurm");
    let slurm = ["sweep", &file, "--out-dir", &arg(&on_slurm), "--slurm", "--via", "rest", "--poll-seconds", "1"];
    let run = trainyard(&slurm);
    run.assert_success().assert_stdout_has(&["8 points: 8 run on Slurm (job array ", "0 failed"]);
    assert!(
        run.stderr.contains("submitted Slurm job array") && run.stderr.contains("via slurmrestd"),
        "{}",
        run.stderr
    );
    assert_eq!(kept_results(&on_slurm), kept_results(&here), "points/*.json");
    assert_eq!(kept_results(&here).len(), 8);
    for name in ["sweep.json", "sweep.csv"] {
        assert_eq!(read(&on_slurm.join(name)), read(&here.join(name)), "{name} differs from the run here");
    }
    let again = trainyard(&slurm);
    again.assert_success().assert_stdout_has(&["8 points: 0 run on Slurm, 8 kept from an earlier run"]);
    assert_eq!(read(&on_slurm.join("sweep.json")), read(&here.join("sweep.json")));

    // A task that fails: the point is listed with its line, the task's end and its output.
    dir.write("broken.yaml", "name: broken\n");
    let failing = dir.write(
        "failing.yaml",
        &format!("trace: {}\npoints:\n  - {{policy: fifo}}\n  - {{cluster: broken.yaml}}\n", trace.display()),
    );
    let out = dir.path("failing");
    let run = trainyard(&[
        "sweep",
        &failing,
        "--out-dir",
        &arg(&out),
        "--slurm",
        "--via",
        "sbatch",
        "--poll-seconds",
        "1",
        "-q",
    ]);
    assert!(!run.status.success(), "a failed task fails the command");
    for needle in [
        "failing.yaml: line 4: point `cluster=broken.yaml",
        "ended FAILED, exit code 1; output in ",
        "missing field `levels`",
        "1 of 2 points failed",
    ] {
        assert!(run.stderr.contains(needle), "{needle:?} not in {}", run.stderr);
    }
    let log = run.stderr.split("output in ").nth(1).unwrap().split(": ").next().unwrap();
    assert!(std::path::Path::new(log).is_file(), "{log}");
    assert_eq!(read(&out.join("sweep.csv")).lines().count(), 2, "the point that ran is compared");
}

#[test]
fn failures_are_an_axis_of_a_sweep_and_the_page_draws_it() {
    let dir = TempDir::create();
    let file = dir.write(
        "failing.yaml",
        "grid:\n  mtbf: [none, 40h]\n  seed: [1, 2]\nfailures: {repair: 2h, restart_cost: 5m}\n",
    );
    let (out, html) = (arg(&dir.path("out")), arg(&dir.path("failing.html")));
    let run = trainyard(&["sweep", &file, "--out-dir", &out, "--html", &html]);
    run.assert_success().assert_stdout_has(&["mtbf=40h", "4 points: 4 run"]);
    let json: serde_json::Value = serde_json::from_str(&read(&dir.path("out/sweep.json"))).unwrap();
    let groups = json["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2);
    let jct = |g: &serde_json::Value| g["mean_jct_s"]["mean"].as_f64().unwrap();
    assert!(jct(&groups[1]) > jct(&groups[0]), "crashes and restarts make jobs take longer: {groups:?}");
    let page = read(&dir.path("failing.html"));
    assert_eq!(page.matches("<figure class=\"chart\">").count(), 4);
    assert!(page.contains("mtbf=40h"));
    // Another repair time is another model: the failing points run again, the others are kept.
    std::fs::write(dir.path("failing.yaml"), "grid:\n  mtbf: [none, 40h]\n  seed: [1, 2]\nfailures: {repair: 3h}\n")
        .unwrap();
    trainyard(&["sweep", &file, "--out-dir", &out]).assert_stdout_has(&["4 points: 2 run, 2 kept"]);
}

#[test]
fn a_fleet_is_a_point_and_a_changed_member_file_runs_it_again() {
    let dir = TempDir::create();
    let member =
        |gpus: u32| format!("name: a\nlevels: [rack, host]\ngenerate: {{counts: [2, 4], node: {{gpus: {gpus}}}}}\n");
    dir.write("a.yaml", &member(8));
    dir.write("b.yaml", "name: b\nlevels: [host]\ngenerate: {counts: [16], node: {gpus: 8}}\n");
    dir.write("fleet.yaml", "name: pair\nclusters:\n  - {name: a, file: a.yaml}\n  - {name: b, file: b.yaml}\n");
    let file = dir.write("sweep.yaml", "grid:\n  cluster: [fleet.yaml, demo]\n  policy: [fifo]\n");
    let out = arg(&dir.path("out"));
    let first = trainyard(&["sweep", &file, "--out-dir", &out]);
    first.assert_success().assert_stdout_has(&["cluster=fleet.yaml policy=fifo", "2 points: 2 run, 0 kept"]);
    trainyard(&["sweep", &file, "--out-dir", &out]).assert_success().assert_stdout_has(&["2 points: 0 run, 2 kept"]);
    // The fleet file is unchanged, one of its members is not: that point runs again.
    dir.write("a.yaml", &member(4));
    trainyard(&["sweep", &file, "--out-dir", &out]).assert_success().assert_stdout_has(&["2 points: 1 run, 1 kept"]);
}
