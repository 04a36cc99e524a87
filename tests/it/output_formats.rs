//! `-o table|wide|json|yaml` on `place`, `render` and `simulate`: a golden transcript of each
//! format, and checks that the structured formats say what the text says.

use serde_json::Value;

use crate::{CSV_HEADER, TempDir, arg, read, trainyard};

const JOB: &str = "bridges/tests/fixtures/torch_multinode.trainjob.yaml";
const RUNTIME: &str = "bridges/tests/fixtures/torch_multinode.runtime.yaml";
const MPI_JOB: &str = "bridges/tests/fixtures/mpi_deepspeed.trainjob.yaml";
const MPI_RUNTIME: &str = "bridges/tests/fixtures/mpi_deepspeed.runtime.yaml";
const SLURM: [&str; 8] = [
    "-f",
    "examples/slurm/trainjob.yaml",
    "--runtime",
    "examples/kubernetes/runtime.yaml",
    "--topology",
    "examples/slurm/cluster.yaml",
    "--slurm-queues",
    "examples/slurm/queues.yaml",
];

/// Stdout of a successful run.
#[track_caller]
fn stdout(args: &[&str]) -> String {
    let run = trainyard(args);
    run.assert_success();
    run.stdout
}

fn parse_json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

fn parse_yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("not YAML ({e}):\n{text}"))
}

/// JSON and YAML of the same command carry the same document.
#[track_caller]
fn json_and_yaml_agree(args: &[&str]) -> Value {
    let json = parse_json(&stdout(&[args, &["-o", "json"]].concat()));
    let yaml = parse_yaml(&stdout(&[args, &["-o", "yaml"]].concat()));
    assert_eq!(json, yaml, "{args:?}: -o json and -o yaml differ");
    json
}

#[test]
fn every_format_of_place_render_and_simulate_prints_what_the_golden_file_says() {
    let dir = TempDir::create();
    let trace = dir.write("t.csv", &format!("{CSV_HEADER}\na,0,100,,t,0,2,8,0,0,\nb,10,50,,u,0,1,4,0,0,\n"));
    let place: &[&str] =
        &["place", "--pods", "4", "--gpus", "2", "--topology", "required:host", "--intra-node", "aws-p4d"];
    let render: &[&str] = &["render", "-f", JOB, "--runtime", RUNTIME, "--topology", "examples/clusters/demo.yaml"];
    let commands: Vec<Vec<&str>> = vec![
        place.to_vec(),
        place.to_vec(),
        place.to_vec(),
        place.to_vec(),
        vec!["place", "--pod-set", "leader:1x1", "--pod-set", "workers:3x8@rack"],
        vec!["place", "--pods", "2", "--gpus", "8", "--policy", "all"],
        vec!["place", "--torus", "v5p", "--shape", "4x4x8", "--slices", "2"],
        render.to_vec(),
        render.to_vec(),
        render.to_vec(),
        [&["render"][..], &SLURM].concat(),
        [&["render"][..], &SLURM].concat(),
        vec!["simulate", "--trace", &trace],
        vec!["simulate", "--trace", &trace],
    ];
    let formats = [
        "table", "wide", "json", "yaml", "wide", "wide", "wide", "table", "wide", "json", "table", "yaml", "table",
        "yaml",
    ];
    // The trace's temporary directory is the only part that changes from run to run.
    let root = format!("{}/", dir.path("t.csv").parent().unwrap().display());
    let mut transcript = String::new();
    for (command, format) in commands.iter().zip(formats) {
        let mut args = command.clone();
        args.extend(["-o", format]);
        transcript.push_str(&format!("$ trainyard {}\n", args.join(" ").replace(&root, "")));
        transcript.push_str(&stdout(&args).replace(&root, ""));
        transcript.push('\n');
    }
    let golden = std::path::Path::new("tests/golden/cli/offline.txt");
    if std::env::var_os("TRAINYARD_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(golden, &transcript).unwrap();
    }
    let want = std::fs::read_to_string(golden).unwrap_or_default();
    assert!(transcript == want, "stale {}; rerun with TRAINYARD_BLESS=1 after review:\n{transcript}", golden.display());
}

#[test]
fn place_as_data_names_every_pod_its_host_and_gpus() {
    let args = ["place", "--pods", "4", "--gpus", "2", "--topology", "required:host", "--intra-node", "aws-p4d"];
    let answer = json_and_yaml_agree(&args);
    assert_eq!(answer["cluster"]["gpus"], 512);
    let placement = &answer["placements"][0];
    assert_eq!(placement["policy"], "trainyard");
    assert!(placement["within"].as_str().unwrap().starts_with("host "), "{placement}");
    let pods = placement["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 4);
    let mut gpus: Vec<u64> = Vec::new();
    for pod in pods {
        assert_eq!(pod["host"], pods[0]["host"], "required:host puts every pod on one host");
        gpus.extend(pod["gpus"].as_array().unwrap().iter().map(|g| g.as_u64().unwrap()));
    }
    gpus.sort();
    assert_eq!(gpus, (0..8).collect::<Vec<_>>(), "four pods of two GPUs share the host's eight, each once");

    let wide = stdout(&[&args[..], &["-o", "wide"]].concat());
    let table = stdout(&args);
    assert!(wide.starts_with(&table), "wide is the table and more:\n{wide}");
    assert!(wide.contains("POD   HOST     DOMAIN"), "{wide}");

    // Pod sets and compared policies are allocated too: their pods have GPU indices.
    let sets = ["place", "--pod-set", "leader:1x1", "--pod-set", "workers:2x8", "--intra-node", "aws-p4d"];
    let answer = json_and_yaml_agree(&sets);
    let gpus = |pod: &Value| pod["gpus"].as_array().map_or(0, Vec::len);
    let pods = answer["placements"][0]["pods"].as_array().unwrap();
    let by_set: Vec<(&str, usize)> = pods.iter().map(|p| (p["set"].as_str().unwrap(), gpus(p))).collect();
    assert_eq!(by_set, [("leader", 1), ("workers", 8), ("workers", 8)]);
    let compared =
        json_and_yaml_agree(&["place", "--pods", "2", "--gpus", "4", "--policy", "all", "--intra-node", "aws-p4d"]);
    for p in compared["placements"].as_array().unwrap() {
        assert!(p["pods"].as_array().unwrap().iter().all(|pod| gpus(pod) == 4), "{p}");
    }

    // Every policy, fitting or not, is one entry; a gang too big for any is a reason, not an error.
    let all = json_and_yaml_agree(&["place", "--pods", "80", "--gpus", "8", "--policy", "all"]);
    let placements = all["placements"].as_array().unwrap();
    assert_eq!(placements.len(), 5);
    for p in placements {
        assert_eq!(p["fits"], false, "{p}");
        assert!(p["reason"].as_str().unwrap().contains("free"), "{p}");
    }
}

#[test]
fn render_as_json_is_a_list_of_the_yaml_documents() {
    let args = ["render", "-f", MPI_JOB, "--runtime", MPI_RUNTIME, "--topology", "examples/clusters/demo.yaml"];
    let run = trainyard(&[&args[..], &["-o", "json"]].concat());
    run.assert_success();
    let list = parse_json(&run.stdout);
    assert_eq!((list["apiVersion"].as_str(), list["kind"].as_str()), (Some("v1"), Some("List")));
    assert!(run.stderr.contains("# admitted: 3 pods on 2 nodes"), "comments go to stderr: {}", run.stderr);
    let yaml = stdout(&args);
    let documents: Vec<Value> = yaml.split("---\n").skip(1).map(parse_yaml).collect();
    assert_eq!(list["items"].as_array().unwrap(), &documents, "the same objects, JobSet then ConfigMap");
    assert_eq!(stdout(&[&args[..], &["-o", "yaml"]].concat()), yaml, "-o yaml is the default");

    let table = stdout(&[&args[..], &["-o", "wide"]].concat());
    assert!(table.contains("JobSet      ds-t5                nlp         3      2\n"), "{table}");
    let pods = table.lines().filter(|l| l.contains(" job ") && l.contains("host-")).count();
    assert_eq!(pods, 3, "one row per gang pod:\n{table}");

    // A Slurm gang: its nodes and the script it is submitted with.
    let slurm = json_and_yaml_agree(&[&["render"][..], &SLURM].concat());
    let script = stdout(&[&["render"][..], &SLURM].concat());
    assert!(script.ends_with(slurm["script"].as_str().unwrap()), "{slurm}");
    assert_eq!(slurm["nodes"].as_array().unwrap().len(), 2);
}

#[test]
fn simulate_as_data_is_the_out_report_with_its_explanations() {
    let dir = TempDir::create();
    let out = dir.path("r.json");
    let base =
        ["simulate", "--cluster", "examples/clusters/helios-704.yaml", "--trace", "data/traces/helios-excerpt.csv"];
    let json = stdout(&[&base[..], &["--policy", "fifo", "-o", "json", "--out", &arg(&out)]].concat());
    assert_eq!(json, read(&out), "-o json prints the --out report byte for byte");

    let explain = [&base[..], &["--policy", "fifo", "--explain", "job-9000"]].concat();
    let document = json_and_yaml_agree(&explain);
    let explanations = document["explanations"].as_array().unwrap();
    assert!(!explanations.is_empty());
    let table = stdout(&explain);
    for x in explanations {
        assert_eq!(x["job"], "job-9000");
        let line = format!("  t={}s job-9000: {}\n", x["at"], x["text"].as_str().unwrap());
        assert!(table.contains(&line), "the table prints {line:?}");
    }

    // Twelve gangs too big for the cluster: the table lists ten, wide lists all.
    let rows: String = (0..12).map(|i| format!("huge-{i},{i},60,,t,0,80,8,0,0,\n")).collect();
    let trace = dir.write("huge.csv", &format!("{CSV_HEADER}\n{rows}"));
    let table = stdout(&["simulate", "--trace", &trace]);
    let wide = stdout(&["simulate", "--trace", &trace, "-o", "wide"]);
    assert!(table.contains("… and 2 more") && !table.contains("huge-11 "), "{table}");
    assert!(!wide.contains("… and") && wide.contains("huge-11 "), "{wide}");
}
