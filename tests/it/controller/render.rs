//! `trainyard render`: the offline view of what the controller would create.

use std::process::Command;

fn render(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_trainyard")).arg("render").args(args).output().unwrap();
    (out.status.success(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

const JOB: &str = "bridges/tests/fixtures/torch_multinode.trainjob.yaml";
const RUNTIME: &str = "bridges/tests/fixtures/torch_multinode.runtime.yaml";
const MPI_JOB: &str = "bridges/tests/fixtures/mpi_deepspeed.trainjob.yaml";
const MPI_RUNTIME: &str = "bridges/tests/fixtures/mpi_deepspeed.runtime.yaml";
const CLUSTER: &str = "examples/clusters/demo.yaml";

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn path(p: &str) -> String {
    root().join(p).display().to_string()
}

#[test]
fn placed_render_gates_the_gang_and_lists_each_pods_host() {
    let (ok, out, err) = render(&["-f", &path(JOB), "--runtime", &path(RUNTIME), "--topology", &path(CLUSTER)]);
    assert!(ok, "{err}");
    assert!(out.contains("# admitted: 3 pods on 1 nodes"), "{out}");
    assert!(out.contains("# pod node job 0 index 2 -> host-"), "{out}");
    assert!(out.contains("kind: JobSet"));
    assert_eq!(out.matches("name: trainyard.io/topology").count(), 1, "only the node replicated job is gated");
}

#[test]
fn unplaced_render_is_what_kubeflow_trainer_builds() {
    let (ok, out, err) = render(&["-f", &path(JOB), "--runtime", &path(RUNTIME)]);
    assert!(ok, "{err}");
    assert!(!out.contains("trainyard.io/topology"));
    assert!(!out.contains("# admitted"));
}

#[test]
fn mpi_render_prints_the_hostfile_and_companion_mode_prints_the_patch() {
    let (ok, out, err) = render(&["-f", &path(MPI_JOB), "--runtime", &path(MPI_RUNTIME), "--topology", &path(CLUSTER)]);
    assert!(ok, "{err}");
    assert!(out.contains("kind: ConfigMap") && out.contains("hostfile"), "{out}");
    let (ok, out, err) = render(&[
        "-f",
        &path(MPI_JOB),
        "--runtime",
        &path(MPI_RUNTIME),
        "--topology",
        &path(CLUSTER),
        "--mode",
        "companion",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("manager: trainyard.io/scheduler") && out.contains("suspend: false"), "{out}");
    assert!(!out.contains("kind: JobSet"));
}

#[test]
fn bad_input_names_the_file_and_field() {
    let dir = std::env::temp_dir().join(format!("trainyard-render-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string(root().join(JOB)).unwrap().replace("numNodes: 3", "numNodes: 0");
    let zero = dir.join("zero.yaml");
    std::fs::write(&zero, text).unwrap();
    let (ok, _, err) = render(&["-f", zero.to_str().unwrap(), "--runtime", &path(RUNTIME)]);
    assert!(!ok);
    assert!(err.contains("zero.yaml") && err.contains("spec.trainer.numNodes"), "{err}");

    let text = std::fs::read_to_string(root().join(JOB)).unwrap().replace(
        "metadata: {name: resnet-cpu,",
        "metadata: {annotations: {kueue.x-k8s.io/podset-required-topology: host}, name: resnet-cpu,",
    );
    let big = dir.join("big.yaml");
    let text = text.replace("limits: {memory: 32Gi}", "limits: {memory: 32Gi, nvidia.com/gpu: 8}");
    std::fs::write(&big, text).unwrap();
    let (ok, _, err) =
        render(&["-f", big.to_str().unwrap(), "--runtime", &path(RUNTIME), "--topology", &path(CLUSTER)]);
    assert!(!ok);
    assert!(err.contains("would not be admitted") && err.contains("NeverFits"), "{err}");

    let (ok, _, err) = render(&["-f", &path(JOB), "--runtime", &path(JOB)]);
    assert!(!ok);
    assert!(err.contains("torch_multinode.trainjob.yaml") && err.contains("TrainJob"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_kubernetes_examples_parse_and_render_placed_in_one_subblock() {
    let (ok, out, err) = render(&[
        "-f",
        &path("examples/kubernetes/trainjob.yaml"),
        "--runtime",
        &path("examples/kubernetes/runtime.yaml"),
        "--topology",
        &path("examples/kubernetes/cluster.yaml"),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("# admitted: 4 pods on 4 nodes"), "{out}");
    for (file, kind) in [("topology.yaml", "Topology"), ("queues.yaml", "Queue")] {
        let text = std::fs::read_to_string(root().join("examples/kubernetes").join(file)).unwrap();
        for doc in text.split("\n---\n") {
            match kind {
                "Topology" => drop(serde_saphyr::from_str::<trainyard::api::Topology>(doc).unwrap()),
                _ => drop(serde_saphyr::from_str::<trainyard::api::Queue>(doc).unwrap()),
            }
        }
    }
    let queues: Vec<trainyard::api::Queue> = std::fs::read_to_string(root().join("examples/kubernetes/queues.yaml"))
        .unwrap()
        .split("\n---\n")
        .map(|d| serde_saphyr::from_str(d).unwrap())
        .collect();
    let refs: Vec<&trainyard::api::Queue> = queues.iter().collect();
    let policy = trainyard::controller::snapshot::policy_with_queues(
        "",
        "none",
        &refs,
        trainyard::controller::snapshot::Side::Kubernetes,
    )
    .unwrap();
    assert_eq!(policy.queues.len(), 3);
}

#[test]
fn a_trainjob_of_a_slurm_queue_renders_as_its_batch_script() {
    let slurm_args = |queues: &str| {
        render(&[
            "-f",
            &path("examples/slurm/trainjob.yaml"),
            "--runtime",
            &path("examples/kubernetes/runtime.yaml"),
            "--topology",
            &path("examples/slurm/cluster.yaml"),
            "--slurm-queues",
            &path(queues),
        ])
    };
    let (ok, out, err) = slurm_args("examples/slurm/queues.yaml");
    assert!(ok, "{err}");
    let golden = root().join("tests/golden/slurm_trainjob.sbatch");
    if std::env::var_os("TRAINYARD_BLESS").is_some() {
        std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
        std::fs::write(&golden, &out).unwrap();
    }
    let want = std::fs::read_to_string(&golden).unwrap_or_default();
    assert_eq!(out, want, "stale {}; rerun with TRAINYARD_BLESS=1", golden.display());
    assert!(out.contains("#SBATCH --nodelist=gpu-01,gpu-02\n"), "both nodes under one switch: {out}");

    // A queue file without the TrainJob's queue, or a Kubernetes queue, is named in the error.
    let (ok, _, err) = slurm_args("examples/kubernetes/queues.yaml");
    assert!(!ok);
    assert!(err.contains("queue \"hpc-llm\" is not in") && err.contains("queues.yaml"), "{err}");
}

#[test]
fn the_controller_rejects_a_bad_policy_or_flag_before_touching_a_cluster() {
    let dir = std::env::temp_dir().join(format!("trainyard-ctl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("policy.yaml");
    std::fs::write(&bad, "backfill: easy\nqueues:\n  - {name: a, nominal: {gpus: -3}}\n").unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_trainyard"))
            .arg("controller")
            .args(args)
            .env("KUBECONFIG", dir.join("none"))
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8(out.stderr).unwrap())
    };
    let (ok, err) = run(&["--policy", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("policy.yaml") && err.contains("line 3"), "{err}");
    let (ok, err) = run(&["--cycle", "0"]);
    assert!(!ok && err.contains("--cycle"), "{err}");
    let (ok, err) = run(&["--slurm", "--mode", "companion"]);
    assert!(!ok && err.contains("--slurm needs --mode standalone"), "{err}");
    for poll in ["0.1", "61", "1e20", "NaN"] {
        let (ok, err) = run(&["--slurm", "--slurm-poll", poll]);
        assert!(!ok && err.contains("--slurm-poll"), "{poll}: {err}");
    }
    let (ok, err) = run(&["--slurm-poll", "5"]);
    assert!(!ok && err.contains("--slurm"), "the poll interval needs --slurm: {err}");
    std::fs::remove_dir_all(&dir).ok();
}
