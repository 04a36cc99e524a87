//! `trainyard simulate --mtbf`: the failure section in the table and the JSON, the same bytes
//! for the same seed, and flags that make no sense refused with their name.

use crate::{TempDir, arg, read, trainyard};

#[test]
fn failures_show_in_the_table_and_the_json_and_repeat_for_a_seed() {
    let dir = TempDir::create();
    let (a, b) = (arg(&dir.path("a.json")), arg(&dir.path("b.json")));
    let run = trainyard(&["simulate", "--mtbf", "40h", "--repair", "2h", "--out", &a]);
    run.assert_success().assert_stdout_has(&[
        "Failures (MTBF 1d 16h per host, repair 2h 00m, checkpoint every 1h 00m, restart 10m 00s)",
        "host failures ",
        "work lost ",
    ]);
    let json: serde_json::Value = serde_json::from_str(&read(&dir.path("a.json"))).unwrap();
    let failures = &json["failures"];
    assert_eq!(failures["mtbf_s"], 40 * 3600);
    assert!(failures["host_failures"].as_u64().unwrap() > 0, "{failures}");
    assert!(failures["gang_interruptions"].as_u64().unwrap() > 0, "{failures}");
    trainyard(&["simulate", "--mtbf", "40h", "--repair", "2h", "--out", &b, "--quiet"]).assert_success();
    assert_eq!(read(&dir.path("a.json")), read(&dir.path("b.json")));
    // Without --mtbf there is no failure section at all.
    let plain = arg(&dir.path("plain.json"));
    trainyard(&["simulate", "--out", &plain, "--quiet"]).assert_success();
    assert!(!read(&dir.path("plain.json")).contains("\"failures\""));
}

#[test]
fn failure_flags_that_make_no_sense_are_refused() {
    let zero = trainyard(&["simulate", "--mtbf", "0"]);
    assert!(!zero.status.success() && zero.stderr.contains("--mtbf") && zero.stderr.contains("longer than zero"));
    let word = trainyard(&["simulate", "--mtbf", "often"]);
    assert!(!word.status.success() && word.stderr.contains("`often` is not a duration"), "{}", word.stderr);
    let alone = trainyard(&["simulate", "--repair", "2h"]);
    assert!(!alone.status.success() && alone.stderr.contains("--mtbf"), "{}", alone.stderr);
}
