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
    let policy = trainyard::controller::watching::scheduler_inputs::policy_with_queues(
        "",
        "none",
        &refs,
        trainyard::controller::watching::scheduler_inputs::Side::Kubernetes,
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
    let (ok, err) = run(&["--slurm", "--mode", "manager"]);
    assert!(!ok && err.contains("--slurm needs --mode standalone"), "{err}");
    let replace = dir.join("replace.yaml");
    std::fs::write(&replace, "node_loss: {action: replace, grace: 1m}\n").unwrap();
    let (ok, err) = run(&["--mode", "manager", "--policy", replace.to_str().unwrap()]);
    assert!(!ok && err.contains("replace.yaml: node_loss.action: replace cannot be used with --mode manager"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Renders a TrainJob on the demo cluster and checks it against its golden file
/// (`tests/golden/render/<name>`, which `scripts/check_workloads.py` also checks against the
/// upstream schemas; `TRAINYARD_BLESS=1` rewrites it). Returns the output.
fn golden_render(name: &str, job: &str, runtime: &str) -> String {
    golden_render_on(name, job, runtime, CLUSTER, &[])
}

/// [`golden_render`] on another cluster, with more flags.
fn golden_render_on(name: &str, job: &str, runtime: &str, cluster: &str, flags: &[&str]) -> String {
    let mut args =
        vec!["-f".to_string(), path(job), "--runtime".into(), path(runtime), "--topology".into(), path(cluster)];
    args.extend(flags.iter().map(|f| f.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, out, err) = render(&args);
    assert!(ok, "{err}");
    let golden = root().join(format!("tests/golden/render/{name}"));
    if std::env::var_os("TRAINYARD_BLESS").is_some() {
        std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
        std::fs::write(&golden, &out).unwrap();
    }
    let want = std::fs::read_to_string(&golden).unwrap_or_default();
    assert_eq!(out, want, "stale {}; rerun with TRAINYARD_BLESS=1", golden.display());
    out
}

/// The demo cluster's `host-N` by the comment lines of a render, in pod order: `(block, rack)`
/// of each pod (8 hosts a rack, 4 racks a block).
fn pod_domains(out: &str) -> Vec<(u32, u32)> {
    out.lines()
        .filter(|l| l.starts_with("# pod "))
        .map(|l| {
            let host: u32 = l.rsplit("-> host-").next().unwrap().parse().unwrap();
            (host / 32, host / 8)
        })
        .collect()
}

#[test]
fn a_sliced_trainjob_gets_four_slices_of_four_nodes_each_in_one_rack_inside_one_block() {
    let out = golden_render(
        "sliced.jobset.yaml",
        "tests/fixtures/render/sliced.trainjob.yaml",
        "tests/fixtures/render/torch-gpu.runtime.yaml",
    );
    let domains = pod_domains(&out);
    assert_eq!(domains.len(), 16, "{out}");
    assert!(domains.iter().all(|d| d.0 == domains[0].0), "one block: {domains:?}");
    for slice in domains.chunks(4) {
        assert!(slice.iter().all(|d| d.1 == slice[0].1), "a slice in one rack: {domains:?}");
    }
}

#[test]
fn an_mpi_launcher_is_gated_and_placed_with_its_workers() {
    let out = golden_render("mpi.jobset.yaml", MPI_JOB, MPI_RUNTIME);
    assert!(out.contains("# pod launcher job 0 index 0 -> host-"), "{out}");
    assert_eq!(out.matches("name: trainyard.io/topology").count(), 2, "the launcher and the workers are gated");
    assert!(out.contains("# admitted: 3 pods"), "{out}");
}

#[test]
fn a_leader_worker_set_keeps_its_leader_and_workers_in_one_rack() {
    let out = golden_render(
        "lws.lws.yaml",
        "tests/fixtures/render/lws-rack.trainjob.yaml",
        "tests/fixtures/render/mpi-lws-gpu.runtime.yaml",
    );
    assert!(out.contains("# pod worker-index 0 -> host-"), "the leader is placed: {out}");
    let domains = pod_domains(&out);
    assert_eq!(domains.len(), 5);
    assert!(domains.iter().all(|d| d.1 == domains[0].1), "one rack: {domains:?}");
}

#[test]
fn a_multi_slice_tpu_trainjob_gets_two_whole_node_pools_in_one_block() {
    let out = golden_render_on(
        "tpu-multislice.jobset.yaml",
        "tests/fixtures/render/tpu-multislice.trainjob.yaml",
        "tests/fixtures/render/jax-tpu.runtime.yaml",
        "tests/fixtures/render/gke-tpu.cluster.yaml",
        &["--gpu-resource", "google.com/tpu"],
    );
    assert!(out.contains("replicas: 2") && out.contains("parallelism: 4"), "one job per slice: {out}");
    assert!(out.contains("(chip 0,0,3 of torus block-a/v5p-a"), "each pod's chip coordinates on its torus: {out}");
    // `# pod node job J index I -> v5p-<pool>-hN`: each job (slice) fills one pool, both in one block.
    let pools: Vec<(String, String)> = out
        .lines()
        .filter_map(|l| l.strip_prefix("# pod node job "))
        .map(|l| {
            let (job, host) = l.split_once(" index ").unwrap();
            let host = host.rsplit("-> ").next().unwrap();
            (job.to_string(), host.rsplit_once("-h").unwrap().0.to_string())
        })
        .collect();
    assert_eq!(pools.len(), 8, "{out}");
    for slice in pools.chunks(4) {
        assert!(slice.iter().all(|p| *p == slice[0]), "a slice is one whole pool: {pools:?}");
    }
    assert_ne!(pools[0].1, pools[4].1, "two slices, two pools");
    assert_eq!(pools[0].1[..5], pools[4].1[..5], "one block: {pools:?}");

    // Eight nodes over three replicas, or a shape no pool has, are refused naming the field.
    let (ok, _, err) = render(&[
        "-f",
        &path("tests/fixtures/render/tpu-multislice.trainjob.yaml"),
        "--runtime",
        &path("tests/fixtures/render/jax-tpu.runtime.yaml"),
        "--topology",
        &path("examples/clusters/demo.yaml"),
        "--gpu-resource",
        "google.com/tpu",
    ]);
    assert!(!ok);
    assert!(err.contains("without TPU tori"), "{err}");
}

/// Trainer v2.4's `resourceClaimsPerNode`: the claims land on the trainer pods and their `node`
/// container, and the claim templates' GPUs make torchrun start one process per GPU; without the
/// templates the count falls back to the CPUs, as the Trainer's does when it cannot read them.
#[test]
fn resource_claims_per_node_reach_the_pods_and_count_their_gpus() {
    let base = ["-f", "examples/kubernetes/trainjob-dra.yaml", "--runtime", "examples/kubernetes/runtime.yaml"]
        .map(|a| if a.starts_with("examples/") { path(a) } else { a.to_string() });
    let mut with = base.to_vec();
    with.extend(["--claim-templates".to_string(), path("examples/kubernetes/claim-templates.yaml")]);
    let args: Vec<&str> = with.iter().map(String::as_str).collect();
    let (ok, out, err) = render(&args);
    assert!(ok, "{err}");
    assert!(out.contains("- name: PET_NPROC_PER_NODE\n                value: auto"), "{out}");
    assert!(out.contains("claims:\n                - name: gpu\n                - name: rdma"), "{out}");
    assert!(out.contains("resourceClaimTemplateName: h100-8gpu"), "{out}");
    let args: Vec<&str> = base.iter().map(String::as_str).collect();
    let (ok, out, err) = render(&args);
    assert!(ok, "{err}");
    assert!(out.contains("- name: PET_NPROC_PER_NODE\n                value: \"32\""), "{out}");
}

#[test]
fn a_runtime_naming_a_binder_renders_its_pod_group_with_the_gang() {
    let job = "tests/fixtures/render/gang.trainjob.yaml";
    let out = golden_render("volcano.jobset.yaml", job, "tests/fixtures/render/volcano.runtime.yaml");
    assert!(out.contains("apiVersion: scheduling.volcano.sh/v1beta1"), "{out}");
    assert!(out.contains("queue: research") && out.contains("highestTierAllowed: 2"), "{out}");
    assert!(out.contains("scheduling.k8s.io/group-name: llm-gang"), "{out}");
    let out = golden_render("coscheduling.jobset.yaml", job, "tests/fixtures/render/coscheduling.runtime.yaml");
    assert!(out.contains("apiVersion: scheduling.x-k8s.io/v1alpha1"), "{out}");
    assert!(out.contains("scheduleTimeoutSeconds: 120"), "{out}");
    assert!(
        out.contains("minMember: 4") && out.contains("nvidia.com/gpu: \"32\"") && out.contains("memory: 512Gi"),
        "the gang's 4 pods and 32 GPUs: {out}"
    );
    assert!(out.contains("schedulerName: scheduler-plugins-scheduler"), "{out}");
}

#[test]
fn the_binder_flag_serves_runtimes_that_name_none() {
    let out = golden_render_on(
        "kai.jobset.yaml",
        "tests/fixtures/render/sliced.trainjob.yaml",
        "tests/fixtures/render/torch-gpu.runtime.yaml",
        CLUSTER,
        &["--binder", "kai"],
    );
    assert!(out.contains("apiVersion: scheduling.run.ai/v2alpha2") && out.contains("minMember: 16"), "{out}");
    assert!(out.contains("kai.scheduler/skip-podgrouper: \"true\""), "{out}");
    // A runtime's own podGroupPolicy wins over the flag.
    let (ok, out, err) = render(&[
        "-f",
        &path("tests/fixtures/render/gang.trainjob.yaml"),
        "--runtime",
        &path("tests/fixtures/render/volcano.runtime.yaml"),
        "--binder",
        "kai",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("scheduling.volcano.sh/v1beta1") && !out.contains("scheduling.run.ai"), "{out}");
    let (ok, _, err) = render(&["-f", &path(JOB), "--runtime", &path(RUNTIME), "--binder", "yunikorn"]);
    assert!(!ok && err.contains("yunikorn"), "{err}");
}

#[test]
fn a_flux_runtime_renders_brokers_with_their_scripts_and_certificate() {
    let job = "bridges/tests/fixtures/flux.trainjob.yaml";
    let out = golden_render("flux.jobset.yaml", job, "bridges/tests/fixtures/flux.runtime.yaml");
    assert!(out.contains("name: flux-installer"), "{out}");
    assert!(out.contains("kind: ConfigMap") && out.contains("name: lammps-reax-flux-entrypoint"), "{out}");
    assert!(out.contains("kind: Secret") && out.contains("name: lammps-reax-flux-curve"), "{out}");
    // Two brokers of 4 tasks and 8 GPUs: 8 tasks, 2 GPUs each; the TrainJob's queue policy and the
    // runtime's network device reach the broker's configuration.
    assert!(out.contains("flux run -N 2 -n 8 -g 2"), "{out}");
    assert!(out.contains("--cores=0-3 --gpu=0-7"), "{out}");
    // The scripts' volume has a name of its own, short whatever the TrainJob's.
    assert!(out.contains("              name: flux-entrypoint\n"), "{out}");
    assert!(out.contains("hosts = [{ host = \"lammps-reax-node-0-[0-1]\" }]"), "{out}");
    assert!(out.contains("queue-policy = \"easy\"") && out.contains("tcp://eth1:%p"), "{out}");
    assert!(out.contains("%h.lammps-reax.hpc.svc.cluster.local"), "{out}");
    // The certificate is the TrainJob's own: the same in every render.
    assert_eq!(out, golden_render("flux.jobset.yaml", job, "bridges/tests/fixtures/flux.runtime.yaml"));
    // Both scripts are shell bash accepts.
    let docs: Vec<serde_json::Value> = out
        .split("\n---\n")
        .filter_map(|d| serde_saphyr::from_str(d).ok())
        .filter(|d: &serde_json::Value| d["kind"] == "ConfigMap")
        .collect();
    assert_eq!(docs.len(), 1, "{out}");
    for script in ["init.sh", "entrypoint.sh"] {
        let text = docs[0]["data"][script].as_str().unwrap_or_else(|| panic!("{script} in {out}"));
        let file = std::env::temp_dir().join(format!("trainyard-flux-{}-{script}", std::process::id()));
        std::fs::write(&file, text).unwrap();
        let check = std::process::Command::new("bash").arg("-n").arg(&file).output().expect("bash");
        let _ = std::fs::remove_file(&file);
        assert!(check.status.success(), "{script}: {}", String::from_utf8_lossy(&check.stderr));
    }
}
