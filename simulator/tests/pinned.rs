//! Replays of the shipped Helios and Philly excerpts (one pod set per gang) pinned to the bytes
//! they gave before gangs had pod sets: the report, and a digest of every job's start and end.
//! A change to what they give fails here; `TRAINYARD_BLESS=1` rewrites the files after review.

use std::path::PathBuf;

use trainyard_policies::PolicyConfig;
use trainyard_simulator::report::{Report, ReportContext};
use trainyard_simulator::trace::{ReadOptions, TraceFormat, read_trace};
use trainyard_simulator::{EstimateSource, ReplayOptions, replay};
use trainyard_topology::Cluster;

fn repo_file(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// FNV-1a, 64 bits: a digest of the outcomes.
use trainyard_topology::rng::fnv1a as fnv64;

fn pinned(cluster: &str, trace: &str, format: TraceFormat, policy: &str, estimates: EstimateSource) -> String {
    let path = repo_file(&format!("examples/clusters/{cluster}.yaml"));
    let cluster_model = Cluster::from_yaml(&std::fs::read_to_string(&path).unwrap(), cluster).unwrap();
    let gpus = cluster_model.total_capacity().gpus;
    let file = std::fs::File::open(repo_file(trace)).unwrap();
    let jobs = read_trace(format, file, trace, &ReadOptions::default()).unwrap().jobs;
    assert!(jobs.iter().all(|j| j.gang.is_simple()), "the pinned traces have one pod set per gang");
    let options = ReplayOptions { estimates, ..ReplayOptions::default() };
    let result = replay(cluster_model, PolicyConfig::builtin(policy).unwrap(), &jobs, options, &mut |_| {}).unwrap();
    let context = ReportContext {
        cluster: cluster.into(),
        cluster_gpus: gpus,
        trace: trace.into(),
        policy: policy.into(),
        ..ReportContext::default()
    };
    let report = Report::new(context, &result.outcomes, gpus).to_json();
    let fates: Vec<String> = result.outcomes.iter().map(|o| format!("{} {:?}", o.job.id, o.fate)).collect();
    format!("{report}\noutcomes {} fnv64 {:016x}\n", fates.len(), fnv64(fates.join("\n").as_bytes()))
}

fn check(name: &str, got: &str) {
    let golden = repo_file(&format!("simulator/tests/golden/{name}"));
    if std::env::var_os("TRAINYARD_BLESS").is_some() {
        std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
        std::fs::write(&golden, got).unwrap();
    }
    let want = std::fs::read_to_string(&golden).unwrap_or_default();
    assert!(want == got, "{} changed; rerun with TRAINYARD_BLESS=1 after review:\n{got}", golden.display());
}

#[test]
fn the_helios_excerpt_replays_as_it_always_has() {
    let got = pinned(
        "helios-704",
        "data/traces/helios-excerpt.csv",
        TraceFormat::DirLab,
        "easy-backfill",
        EstimateSource::Actual,
    );
    check("helios-easy-backfill.txt", &got);
}

#[test]
fn the_philly_excerpt_replays_as_it_always_has() {
    let got =
        pinned("philly-2490", "data/traces/philly-excerpt.csv", TraceFormat::Philly, "fifo", EstimateSource::Trace);
    check("philly-fifo.txt", &got);
}
