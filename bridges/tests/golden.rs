//! Golden renders of the reference examples; `TRAINYARD_BLESS=1` rewrites the committed copies.

use std::path::PathBuf;

use trainyard_bridges::{Placement, RenderOptions, TrainJob, TrainingRuntime, render_jobset};

/// (case name, runtime YAML, TrainJob YAML, options)
fn cases() -> Vec<(&'static str, &'static str, &'static str, RenderOptions)> {
    vec![
        (
            "worked_example",
            include_str!("fixtures/worked_example.runtime.yaml"),
            include_str!("fixtures/worked_example.trainjob.yaml"),
            RenderOptions { placement: Placement::Unplaced, pod_group_markers: true },
        ),
        (
            "torch_multinode",
            include_str!("fixtures/torch_multinode.runtime.yaml"),
            include_str!("fixtures/torch_multinode.trainjob.yaml"),
            RenderOptions {
                placement: Placement::Gated { gang: "vision-resnet-cpu".into() },
                pod_group_markers: false,
            },
        ),
        (
            "mpi_deepspeed",
            include_str!("fixtures/mpi_deepspeed.runtime.yaml"),
            include_str!("fixtures/mpi_deepspeed.trainjob.yaml"),
            RenderOptions {
                placement: Placement::Domain {
                    gang: "nlp-ds-t5".into(),
                    level_key: "topology.example.org/rack".into(),
                    domain: "rack-07".into(),
                },
                pod_group_markers: false,
            },
        ),
    ]
}

fn render(name: &str, runtime: &str, job: &str, opts: &RenderOptions) -> String {
    let runtime: TrainingRuntime = serde_saphyr::from_str(runtime).unwrap_or_else(|e| panic!("{name} runtime: {e}"));
    let job: TrainJob = serde_saphyr::from_str(job).unwrap_or_else(|e| panic!("{name} trainjob: {e}"));
    let jobset = render_jobset(&job, &runtime.spec, opts).unwrap_or_else(|e| panic!("{name}: {e}"));
    serde_saphyr::to_string(&jobset).expect("serialize")
}

#[test]
fn golden_renders_are_current() {
    let bless = std::env::var_os("TRAINYARD_BLESS").is_some_and(|v| v == "1");
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut stale = Vec::new();
    for (name, runtime, job, opts) in cases() {
        let got = render(name, runtime, job, &opts);
        let path = dir.join(format!("{name}.jobset.yaml"));
        if bless {
            std::fs::write(&path, &got).expect("write golden");
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        if want != got {
            stale.push(format!("{}:\n--- committed\n{want}\n--- rendered\n{got}", path.display()));
        }
    }
    assert!(stale.is_empty(), "stale golden files (rerun with TRAINYARD_BLESS=1 after review):\n{}", stale.join("\n"));
}

#[test]
fn golden_renders_parse_back_unchanged() {
    for (name, runtime, job, opts) in cases() {
        let yaml = render(name, runtime, job, &opts);
        let parsed: trainyard_bridges::JobSet = serde_saphyr::from_str(&yaml).expect("parse back");
        assert_eq!(serde_saphyr::to_string(&parsed).expect("serialize"), yaml, "{name} does not round-trip");
    }
}
