//! Replays of the shipped trace excerpts through the engine, checking policy outcomes.

use std::path::PathBuf;

use trainyard_policies::PolicyConfig;
use trainyard_simulator::report::{Report, ReportContext};
use trainyard_simulator::trace::{ReadOptions, TraceFormat, read_trace};
use trainyard_simulator::{EstimateSource, Fate, ReplayOptions, ReplayResult, TraceJob, replay};
use trainyard_topology::Cluster;

fn repo_file(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn cluster(name: &str) -> Cluster {
    let path = repo_file(&format!("examples/clusters/{name}.yaml"));
    Cluster::from_yaml(&std::fs::read_to_string(&path).unwrap(), name).unwrap()
}

fn trace(path: &str, format: TraceFormat) -> Vec<TraceJob> {
    let file = std::fs::File::open(repo_file(path)).unwrap();
    read_trace(format, file, path, &ReadOptions::default()).unwrap().jobs
}

fn run(cluster_name: &str, policy: &str, jobs: &[TraceJob], estimates: EstimateSource) -> ReplayResult {
    let policy = PolicyConfig::builtin(policy).unwrap();
    replay(cluster(cluster_name), policy, jobs, ReplayOptions { estimates }, &mut |_| {}).unwrap()
}

fn mean_wait(result: &ReplayResult) -> f64 {
    let waits: Vec<u64> = result
        .outcomes
        .iter()
        .filter_map(|o| match o.fate {
            Fate::Finished { start, .. } => Some(start - o.job.submit),
            Fate::Unschedulable { .. } => None,
        })
        .collect();
    waits.iter().sum::<u64>() as f64 / waits.len() as f64
}

#[test]
fn backfill_beats_strict_fifo_on_helios_and_keeps_every_reservation() {
    let jobs = trace("data/traces/helios-excerpt.csv", TraceFormat::DirLab);
    assert_eq!(jobs.len(), 15_000);
    let fifo = run("helios-704", "fifo", &jobs, EstimateSource::Actual);
    let easy = run("helios-704", "easy-backfill", &jobs, EstimateSource::Actual);
    let (fifo_wait, easy_wait) = (mean_wait(&fifo), mean_wait(&easy));
    assert!(easy_wait < fifo_wait, "EASY mean wait {easy_wait:.0}s is not below FIFO's {fifo_wait:.0}s");
    let reserved = easy.first_reservation.iter().filter(|r| r.is_some()).count();
    assert!(reserved > 100, "the congested replay must exercise reservations, got {reserved}");
    assert_eq!(easy.late_reserved_starts(), vec![], "a reserved gang started after its reservation");
    let backfilled = easy.outcomes.iter().filter(|o| matches!(o.fate, Fate::Finished { backfilled: true, .. })).count();
    assert!(backfilled > 0);
    for result in [&fifo, &easy] {
        assert!(result.outcomes.iter().all(|o| matches!(o.fate, Fate::Finished { .. })));
    }
}

#[test]
fn philly_excerpt_replay_accounts_for_every_job_and_is_deterministic() {
    let jobs = trace("data/traces/philly-excerpt.csv", TraceFormat::Philly);
    let context = ReportContext { cluster: "philly-2490".into(), cluster_gpus: 2490, ..ReportContext::default() };
    let json = |r: &ReplayResult| Report::new(context.clone(), &r.outcomes, 2490).to_json();
    let first = run("philly-2490", "easy-backfill", &jobs, EstimateSource::Trace);
    let second = run("philly-2490", "easy-backfill", &jobs, EstimateSource::Trace);
    assert_eq!(first.outcomes.len(), jobs.len());
    assert_eq!(json(&first), json(&second));
    assert_eq!(first.events, 2 * jobs.len() as u64);
}

#[test]
fn jobs_that_never_fit_are_reported_not_dropped() {
    let mut jobs = trace("data/traces/philly-excerpt.csv", TraceFormat::Philly);
    jobs.truncate(50);
    let mut huge = jobs[10].clone();
    huge.id = "huge".into();
    huge.gang.pods = 512;
    huge.gang.pod = trainyard_topology::Resources::gpus(8);
    jobs.push(huge);
    let result = run("philly-2490", "easy-backfill", &jobs, EstimateSource::Trace);
    let unschedulable: Vec<(&str, &str)> = result
        .outcomes
        .iter()
        .filter_map(|o| match &o.fate {
            Fate::Unschedulable { reason } => Some((o.job.id.as_str(), reason.as_str())),
            Fate::Finished { .. } => None,
        })
        .collect();
    assert_eq!(unschedulable, vec![("huge", "needs 4096 GPU, more than the empty cluster can hold")]);
    assert_eq!(result.outcomes.len(), 51);
}

/// The full Philly trace lives outside the repository; CI has it next to the checkout.
#[test]
fn full_philly_trace_replays_on_2490_gpus_when_available() {
    let path = repo_file("../shared/traces/philly/philly.csv");
    let Ok(file) = std::fs::File::open(&path) else {
        eprintln!("skipped: {} is not present", path.display());
        return;
    };
    let jobs = read_trace(TraceFormat::Philly, file, "philly.csv", &ReadOptions::default()).unwrap().jobs;
    assert_eq!(jobs.len(), 82_247);
    let result = run("philly-2490", "easy-backfill", &jobs, EstimateSource::Trace);
    let finished = result.outcomes.iter().filter(|o| matches!(o.fate, Fate::Finished { .. })).count();
    let unschedulable = result.outcomes.iter().filter(|o| matches!(o.fate, Fate::Unschedulable { .. })).count();
    assert_eq!(finished + unschedulable, 82_247);
    let summary = Report::new(ReportContext::default(), &result.outcomes, 2490).summary;
    assert_eq!(summary.jobs, 82_247);
    assert!(summary.gpu_utilisation > 0.0 && summary.makespan_s > 0);
}
