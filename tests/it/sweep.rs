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
