//! Golden renders of the fixture pairs; `TRAINYARD_BLESS=1` rewrites the committed copies.

mod common;

use std::collections::BTreeSet;

use common::{Goldens, dir};

use trainyard_bridges::{
    JobSet, LeaderWorkerSet, Placement, RenderOptions, TrainJob, TrainingRuntime, WorkloadKind, render_jobset,
    render_leader_worker_set, workload_kind,
};

/// (case name, runtime YAML, TrainJob YAML, options)
fn cases() -> Vec<(&'static str, &'static str, &'static str, RenderOptions)> {
    let unplaced =
        RenderOptions { placement: Placement::Unplaced, pod_group_markers: true, ..RenderOptions::default() };
    let gated = |gang: &str| RenderOptions {
        placement: Placement::Gated { gang: gang.into() },
        pod_group_markers: false,
        ..RenderOptions::default()
    };
    let rack = |gang: &str, domain: &str| RenderOptions {
        placement: Placement::Domain {
            gang: gang.into(),
            selector: vec![("topology.example.org/rack".into(), domain.into())],
        },
        pod_group_markers: false,
        ..RenderOptions::default()
    };
    vec![
        (
            "worked_example",
            include_str!("fixtures/worked_example.runtime.yaml"),
            include_str!("fixtures/worked_example.trainjob.yaml"),
            unplaced.clone(),
        ),
        (
            "torch_multinode",
            include_str!("fixtures/torch_multinode.runtime.yaml"),
            include_str!("fixtures/torch_multinode.trainjob.yaml"),
            gated("vision-resnet-cpu"),
        ),
        (
            "mpi_deepspeed",
            include_str!("fixtures/mpi_deepspeed.runtime.yaml"),
            include_str!("fixtures/mpi_deepspeed.trainjob.yaml"),
            rack("nlp-ds-t5", "rack-07"),
        ),
        ("jax", include_str!("fixtures/jax.runtime.yaml"), include_str!("fixtures/jax.trainjob.yaml"), unplaced),
        (
            "xgboost",
            include_str!("fixtures/xgboost.runtime.yaml"),
            include_str!("fixtures/xgboost.trainjob.yaml"),
            gated("tabular-churn-xgb"),
        ),
        (
            "torch_lws",
            include_str!("fixtures/torch_lws.runtime.yaml"),
            include_str!("fixtures/torch_lws.trainjob.yaml"),
            gated("research-llm-pretrain"),
        ),
        (
            "mpi_lws",
            include_str!("fixtures/mpi_lws.runtime.yaml"),
            include_str!("fixtures/mpi_lws.trainjob.yaml"),
            rack("hpc-osu-bench", "rack-02"),
        ),
        (
            "flux",
            include_str!("fixtures/flux.runtime.yaml"),
            include_str!("fixtures/flux.trainjob.yaml"),
            gated("lammps-reax"),
        ),
        (
            "torch_dra",
            include_str!("fixtures/torch_dra.runtime.yaml"),
            include_str!("fixtures/torch_dra.trainjob.yaml"),
            RenderOptions { claim_gpus: claim_templates(), ..gated("ml-llm-dra") },
        ),
    ]
}

/// The ResourceClaimTemplates the DRA case's claims name: 8 GPUs, and a NIC (no GPUs).
fn claim_templates() -> std::collections::BTreeMap<String, i64> {
    let yaml = "
- apiVersion: resource.k8s.io/v1
  kind: ResourceClaimTemplate
  metadata: {name: h100-8gpu, namespace: ml}
  spec: {spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com, count: 8}}]}}}
- apiVersion: resource.k8s.io/v1
  kind: ResourceClaimTemplate
  metadata: {name: rdma-nic, namespace: ml}
  spec: {spec: {devices: {requests: [{name: nic, exactly: {deviceClassName: rdma.example.com}}]}}}
";
    let objects: Vec<serde_json::Value> = serde_saphyr::from_str(yaml).expect("templates");
    trainyard_bridges::render::claims::gpus_by_template(&objects)
}

/// Renders a case with the workload its runtime asks for; returns (golden file suffix, YAML).
fn render(name: &str, runtime: &str, job: &str, opts: &RenderOptions) -> (&'static str, String) {
    let runtime: TrainingRuntime = serde_saphyr::from_str(runtime).unwrap_or_else(|e| panic!("{name} runtime: {e}"));
    let job: TrainJob = serde_saphyr::from_str(job).unwrap_or_else(|e| panic!("{name} trainjob: {e}"));
    let runtime_name = runtime.metadata.name.clone().unwrap_or_default();
    match workload_kind(&runtime.metadata, &runtime_name).unwrap_or_else(|e| panic!("{name}: {e}")) {
        WorkloadKind::JobSet => {
            let jobset = render_jobset(&job, &runtime.spec, opts).unwrap_or_else(|e| panic!("{name}: {e}"));
            ("jobset", serde_saphyr::to_string(&jobset).expect("serialize"))
        }
        WorkloadKind::LeaderWorkerSet => {
            let lws = render_leader_worker_set(&job, &runtime.spec, opts).unwrap_or_else(|e| panic!("{name}: {e}"));
            ("lws", serde_saphyr::to_string(&lws).expect("serialize"))
        }
    }
}

#[test]
fn golden_renders_are_current() {
    let mut goldens = Goldens::new();
    for (name, runtime, job, opts) in cases() {
        let (suffix, got) = render(name, runtime, job, &opts);
        goldens.check(dir("golden").join(format!("{name}.{suffix}.yaml")), &got);
    }
    goldens.finish();
}

#[test]
fn golden_renders_parse_back_unchanged() {
    for (name, runtime, job, opts) in cases() {
        let (suffix, yaml) = render(name, runtime, job, &opts);
        let again = if suffix == "lws" {
            let parsed: LeaderWorkerSet = serde_saphyr::from_str(&yaml).expect("parse back");
            serde_saphyr::to_string(&parsed)
        } else {
            let parsed: JobSet = serde_saphyr::from_str(&yaml).expect("parse back");
            serde_saphyr::to_string(&parsed)
        };
        assert_eq!(again.expect("serialize"), yaml, "{name} does not round-trip");
    }
}

/// File names in a test folder, sorted; subfolders (other bridges' cases, e.g. `slurm/`) are skipped.
fn names(sub: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir(sub))
        .unwrap_or_else(|e| panic!("tests/{sub}: {e}"))
        .map(|entry| entry.expect("dir entry"))
        .filter(|entry| !entry.file_type().expect("file type").is_dir())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn every_fixture_pair_has_a_golden_and_a_case_and_vice_versa() {
    let (mut runtimes, mut jobs) = (BTreeSet::new(), BTreeSet::new());
    for file in names("fixtures") {
        if let Some(case) = file.strip_suffix(".runtime.yaml") {
            runtimes.insert(case.to_owned());
        } else if let Some(case) = file.strip_suffix(".trainjob.yaml") {
            jobs.insert(case.to_owned());
        } else {
            panic!("tests/fixtures/{file} is neither <case>.runtime.yaml nor <case>.trainjob.yaml");
        }
    }
    assert_eq!(runtimes, jobs, "every case needs both a runtime and a trainjob fixture");
    let mut goldens = BTreeSet::new();
    for file in names("golden") {
        let case = file.strip_suffix(".jobset.yaml").or_else(|| file.strip_suffix(".lws.yaml"));
        let case =
            case.unwrap_or_else(|| panic!("tests/golden/{file} is neither <case>.jobset.yaml nor <case>.lws.yaml"));
        assert!(goldens.insert(case.to_owned()), "case {case} has both a JobSet and a LeaderWorkerSet golden");
    }
    assert_eq!(runtimes, goldens, "fixture pairs and golden files differ");
    let wired: BTreeSet<String> = cases().into_iter().map(|(name, ..)| name.to_owned()).collect();
    assert_eq!(runtimes, wired, "fixture pairs and the cases() list of this test differ");
}
