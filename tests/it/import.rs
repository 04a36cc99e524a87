//! `trainyard import kueue` on Kueue's documented examples (tests/fixtures/kueue/README.md),
//! against golden outputs; and its errors on bad input.

use crate::{TempDir, trainyard};

/// `(fixture, extra flags)`; the golden file has the fixture's name.
const CASES: [(&str, &[&str]); 4] = [
    ("single-clusterqueue", &[]),
    ("tas-gpu-queues", &[]),
    ("cohort-borrowing", &[]),
    ("resource-groups", &["--gpu-resource", "gpu"]),
];

/// Each example's output matches its golden file (`TRAINYARD_BLESS=1` rewrites them after
/// review) and reads back as trainyard Queue and Topology objects whose tree the controller
/// accepts.
#[test]
fn kueues_documented_examples_carry_over_as_the_golden_files_say() {
    for (name, flags) in CASES {
        let fixture = format!("tests/fixtures/kueue/{name}.yaml");
        let mut args = vec!["import", "kueue", "-f", fixture.as_str()];
        args.extend(flags);
        let run = trainyard(&args);
        run.assert_success();
        let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/golden/kueue/{name}.yaml"));
        if std::env::var_os("TRAINYARD_BLESS").is_some_and(|v| v == "1") {
            std::fs::write(&golden, &run.stdout).unwrap();
        }
        let want = std::fs::read_to_string(&golden).unwrap_or_default();
        assert!(
            run.stdout == want,
            "stale {}; rerun with TRAINYARD_BLESS=1 after review:\n{}",
            golden.display(),
            run.stdout
        );

        let mut configs = Vec::new();
        for doc in run.stdout.split("\n---\n").skip(1) {
            let value: serde_json::Value = serde_saphyr::from_str(doc).unwrap();
            match value["kind"].as_str() {
                Some("Queue") => {
                    let queue: trainyard::api::Queue = serde_saphyr::from_str(doc).unwrap();
                    configs.push(queue.to_queue_config().unwrap());
                }
                Some("Topology") => {
                    let topology: trainyard::api::Topology = serde_saphyr::from_str(doc).unwrap();
                    assert!(!topology.spec.levels.is_empty(), "{name}: a Topology without levels");
                }
                other => panic!("{name}: unexpected kind {other:?}"),
            }
        }
        assert!(!configs.is_empty(), "{name}: no queue");
        trainyard_policies::check_tree(&configs).unwrap_or_else(|e| panic!("{name}: {e:?}"));
    }
}

/// The same objects in one `List` give the same queues as in documents.
#[test]
fn a_list_of_objects_reads_as_its_items() {
    let dir = TempDir::create();
    let items: Vec<serde_json::Value> = std::fs::read_to_string("tests/fixtures/kueue/single-clusterqueue.yaml")
        .unwrap()
        .split("\n---\n")
        .map(|d| serde_saphyr::from_str(d).unwrap())
        .collect();
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    let path = dir.write("list.json", &list.to_string());
    let run = trainyard(&["import", "kueue", "-f", &path]);
    run.assert_success();
    let queues: Vec<&str> = run.stdout.split("\n---\n").skip(1).collect();
    let golden = std::fs::read_to_string("tests/golden/kueue/single-clusterqueue.yaml").unwrap();
    assert_eq!(queues, golden.split("\n---\n").skip(1).collect::<Vec<_>>());
}

#[test]
fn bad_input_names_the_file_line_and_field() {
    let dir = TempDir::create();
    trainyard(&["import", "kueue", "-f", "no/such/file.yaml"]).assert_error(&["cannot read no/such/file.yaml"]);
    let bad_yaml =
        dir.write("bad.yaml", "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\n---\nkind: [unclosed\n");
    trainyard(&["import", "kueue", "-f", &bad_yaml]).assert_error(&["bad.yaml (document from line 3)"]);
    let quantity = dir.write(
        "quantity.yaml",
        "# a comment\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: a}\nspec:\n  resourceGroups:\n  - coveredResources: [cpu]\n    flavors:\n    - name: f\n      resources:\n      - {name: cpu, nominalQuota: 9 cpus}\n",
    );
    trainyard(&["import", "kueue", "-f", &quantity]).assert_error(&[
        "quantity.yaml:2: ClusterQueue a: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
    ]);
    let empty = dir.write("empty.yaml", "# nothing here\n");
    trainyard(&["import", "kueue", "-f", &empty]).assert_error(&["no objects in"]);
    let run = trainyard(&["import", "kueue"]);
    assert_eq!(run.status.code(), Some(2), "clap's usage-error status: {}", run.stderr);
    assert!(run.stderr.contains("--filename <FILE>"), "{}", run.stderr);
}
