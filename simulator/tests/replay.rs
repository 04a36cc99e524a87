//! Replays of the shipped trace excerpts through the engine, checking policy outcomes, and
//! small hand-built replays checking the slowdown model and the fragmentation numbers.

use std::path::PathBuf;

use trainyard_policies::PolicyConfig;
use trainyard_simulator::placement::PlacementSummary;
use trainyard_simulator::report::{Report, ReportContext};
use trainyard_simulator::trace::{ReadOptions, TraceFormat, read_trace};
use trainyard_simulator::{EstimateSource, Fate, ReplayOptions, ReplayResult, SimError, Slowdown, TraceJob, replay};
use trainyard_topology::{Cluster, Resources};

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
    let options = ReplayOptions { estimates, ..ReplayOptions::default() };
    replay(cluster(cluster_name), policy, jobs, options, &mut |_| {}).unwrap()
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
    huge.gang.sets[0].pods = 512;
    huge.gang.sets[0].pod = trainyard_topology::Resources::gpus(8);
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

/// Two racks of two 8-GPU hosts.
fn two_racks() -> Cluster {
    Cluster::from_yaml("name: t\nlevels: [rack, host]\ngenerate:\n  counts: [2, 2]\n  node: {gpus: 8}\n", "t.yaml")
        .unwrap()
}

fn gang(id: &str, submit: u64, runtime: u64, pods: u32, gpus_per_pod: u64) -> TraceJob {
    TraceJob::recorded(id.into(), submit, runtime, "t".into(), (pods, Resources::gpus(gpus_per_pod)), 0)
}

fn replay_on_two_racks(policy: &str, jobs: &[TraceJob], slowdown: &str) -> ReplayResult {
    let options =
        ReplayOptions { estimates: EstimateSource::Actual, slowdown: slowdown.parse().unwrap(), ..Default::default() };
    replay(two_racks(), PolicyConfig::builtin(policy).unwrap(), jobs, options, &mut |_| {}).unwrap()
}

/// `(id, end - start, span level)` of every finished job.
fn runs(result: &ReplayResult) -> Vec<(&str, u64, &str)> {
    result
        .outcomes
        .iter()
        .filter_map(|o| match &o.fate {
            Fate::Finished { start, end, span_level, .. } => {
                Some((o.job.id.as_str(), end - start, span_level.as_str()))
            }
            Fate::Unschedulable { .. } => None,
        })
        .collect()
}

#[test]
fn a_gang_spanning_racks_runs_longer_than_one_inside_a_rack() {
    // One at a time, so each gang finds the cluster empty.
    let jobs = [gang("rack", 0, 101, 2, 8), gang("wide", 1000, 101, 4, 8), gang("host", 2000, 101, 1, 1)];
    let result = replay_on_two_racks("easy-backfill", &jobs, "rack=1.05,cluster=1.25");
    // ceil(101 x 1.05) = ceil(106.05) and ceil(101 x 1.25) = ceil(126.25); a host runs at 1.0.
    assert_eq!(runs(&result), [("rack", 107, "rack"), ("wide", 127, "cluster"), ("host", 101, "host")]);
    let placement = PlacementSummary::of(&result);
    let levels: Vec<(&str, f64, u64, u64)> =
        placement.levels.iter().map(|l| (l.level.as_str(), l.factor, l.gangs, l.gpus)).collect();
    assert_eq!(levels, [("host", 1.0, 1, 1), ("rack", 1.05, 1, 16), ("cluster", 1.25, 1, 32)]);
    // Without a slowdown the same gangs run their trace runtimes on the same domains.
    let plain = replay_on_two_racks("easy-backfill", &jobs, "");
    assert_eq!(runs(&plain), [("rack", 101, "rack"), ("wide", 101, "cluster"), ("host", 101, "host")]);
}

#[test]
fn no_slowdown_changes_nothing() {
    let jobs = trace("data/traces/philly-excerpt.csv", TraceFormat::Philly);
    let default = run("philly-2490", "easy-backfill", &jobs, EstimateSource::Trace);
    // Factors of exactly 1.0 at every level must behave exactly like no slowdown at all.
    let ones = ReplayOptions {
        estimates: EstimateSource::Trace,
        slowdown: "cluster=1,rack=1.0,host=1.000000".parse().unwrap(),
        ..Default::default()
    };
    let policy = PolicyConfig::builtin("easy-backfill").unwrap();
    let explicit = replay(cluster("philly-2490"), policy, &jobs, ones, &mut |_| {}).unwrap();
    assert_eq!(default.outcomes, explicit.outcomes);
    assert_eq!(default.fragmentation, explicit.fragmentation);
    assert_eq!((default.events, default.cycles), (explicit.events, explicit.cycles));
    for o in &default.outcomes {
        if let Fate::Finished { start, end, .. } = o.fate {
            assert_eq!(end - start, o.job.runtime, "job {} ran other than its trace runtime", o.job.id);
        }
    }
}

#[test]
fn a_slowdown_level_the_cluster_lacks_is_an_error() {
    let options = ReplayOptions { slowdown: "row=1.1".parse::<Slowdown>().unwrap(), ..ReplayOptions::default() };
    let policy = PolicyConfig::builtin("fifo").unwrap();
    let err = replay(two_racks(), policy, &[gang("a", 0, 10, 1, 1)], options, &mut |_| {}).unwrap_err();
    assert!(matches!(err, SimError::Slowdown(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "slowdown level `row` is not a level of cluster `t`; known levels: cluster, rack, host"
    );
}

#[test]
fn fragmentation_of_a_hand_built_replay() {
    // Strict FIFO on 4 hosts of 8 GPUs. At 0 `spread` puts a 6-GPU pod on every host, leaving
    // 2 GPUs free on each: `four` (one 4-GPU pod) cannot start, so all 8 free GPUs are
    // fragmented. At 20 `two` (2 GPUs) queues behind `four`; now the smallest waiting gang fits
    // every host, so nothing is fragmented, though it still waits. At 100 `spread` ends and
    // both start; `two` ends at 130, `four` at 150.
    let jobs = [gang("spread", 0, 100, 4, 6), gang("four", 0, 50, 1, 4), gang("two", 20, 30, 1, 2)];
    let result = replay_on_two_racks("fifo", &jobs, "");
    assert_eq!(runs(&result), [("spread", 100, "cluster"), ("four", 50, "host"), ("two", 30, "host")]);
    let f = &result.fragmentation;
    assert_eq!(f.observed_s, 150);
    // 8 GPUs for 20 s out of 150 s.
    assert_eq!(f.mean_fragmented_gpus, 1.067);
    assert_eq!(f.max_fragmented_gpus, 8);
    // Free GPU-seconds: 8 x 20 + 8 x 80 + 26 x 30 + 28 x 20 = 2140.
    assert_eq!(f.mean_free_gpus, 14.267);
    assert_eq!(f.fragmented_share_of_free, 0.074766);
    // A gang waited from 0 to 100, each time with at least its GPUs free.
    assert_eq!(f.waiting_share, 0.666667);
    assert_eq!(f.blocked_with_free_gpus_share, 0.666667);
    let series: Vec<(u64, f64, f64)> = f.series.iter().map(|p| (p.t, p.fragmented_gpus, p.free_gpus)).collect();
    assert_eq!(series.len(), 150);
    assert_eq!(series[19], (19, 8.0, 8.0));
    assert_eq!(series[20], (20, 0.0, 8.0));
    assert_eq!(series[100], (100, 0.0, 26.0));
    assert_eq!(series[149], (149, 0.0, 28.0));
}

#[test]
fn a_mixed_trace_of_pod_sets_and_slices_replays_whole_gangs_deterministically() {
    let text = "id,submit_s,runtime_s,runtime_estimate_s,tenant,priority,pods,gpus_per_pod,cpu_milli_per_pod,memory_mib_per_pod,topology,slice,pod_sets\n\
        single,0,600,,a,0,4,8,0,0,required:rack,,\n\
        sliced,0,900,,a,0,16,8,0,0,required:block,rack:4,\n\
        leader,10,600,,b,0,8,8,0,0,,,leader=1x1 required=rack\n\
        mpi,20,300,,b,0,2,8,0,0,required:rack,,launcher=1x0 cpu_milli=2000\n\
        wide,30,1200,,a,1,31,8,0,0,required:block,host:1,head=1x8 required=rack\n\
        never,50,60,,a,0,32,8,0,0,required:block,,head=1x8\n\
        small,40,60,,b,0,1,1,0,0,,,\n";
    let jobs = read_trace(TraceFormat::Csv, text.as_bytes(), "mixed.csv", &ReadOptions::default()).unwrap().jobs;
    assert_eq!(jobs.iter().filter(|j| !j.gang.is_simple()).count(), 5);
    let first = run("demo", "easy-backfill", &jobs, EstimateSource::Actual);
    let second = run("demo", "easy-backfill", &jobs, EstimateSource::Actual);
    assert_eq!(first.outcomes, second.outcomes, "a replay of rich gangs repeats");
    for o in &first.outcomes {
        let runs = o.job.id != "never";
        assert_eq!(matches!(o.fate, Fate::Finished { .. }), runs, "{}: {:?}", o.job.id, o.fate);
    }
    // `never` needs 33 8-GPU pods in one block of 32 hosts: refused, never placed in part.
    let context = ReportContext { cluster: "demo".into(), cluster_gpus: 512, ..ReportContext::default() };
    let json = Report::new(context, &first.outcomes, 512).to_json();
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    let shapes: Vec<(&str, u64)> = report["summary"]["by_gang_shape"]
        .as_array()
        .expect("a trace of rich gangs is broken down by gang shape")
        .iter()
        .map(|g| (g["name"].as_str().unwrap(), g["jobs"].as_u64().unwrap()))
        .collect();
    assert_eq!(shapes, [("one pod set", 2), ("one pod set, sliced", 1), ("several pod sets", 4)]);
}

#[test]
fn a_mixed_trace_with_tpu_slices_replays_on_gpus_and_tori() {
    // GPU gangs (queue `gpu`, bound to the H100 hosts) beside TPU gangs (queue `tpu`): one and two
    // 2x2x4 slices, a 4x4x4 cube, three slices that wait for pools to free, and a shape too
    // large for every torus (refused, never placed in part).
    let text = "id,submit_s,runtime_s,runtime_estimate_s,tenant,priority,pods,gpus_per_pod,cpu_milli_per_pod,memory_mib_per_pod,topology,slice,pod_sets,tpu\n\
        gpu-single,0,600,,gpu,0,4,8,0,0,required:pool,,,\n\
        gpu-sliced,0,900,,gpu,0,16,8,0,0,required:block,pool:8,,\n\
        gpu-mpi,10,300,,gpu,0,2,8,0,0,required:pool,,launcher=1x0 cpu_milli=2000,\n\
        tpu-one,0,600,,tpu,0,4,4,0,0,,,,2x2x4\n\
        tpu-two,5,900,,tpu,0,8,4,0,0,,,,2x2x4\n\
        tpu-cube,10,1200,,tpu,0,16,4,0,0,,,,4x4x4\n\
        tpu-three,20,300,,tpu,0,12,4,0,0,,,,4x2x2\n\
        tpu-huge,30,60,,tpu,0,32,4,0,0,,,,8x8x2\n";
    let jobs = read_trace(TraceFormat::Csv, text.as_bytes(), "mixed-tpu.csv", &ReadOptions::default()).unwrap().jobs;
    assert_eq!(jobs.iter().filter(|j| j.gang.tpu().is_some()).count(), 5);
    let policy_path = repo_file("examples/policies/gpu-tpu.yaml");
    let policy = PolicyConfig::from_yaml(&std::fs::read_to_string(&policy_path).unwrap(), "gpu-tpu.yaml").unwrap();
    let options = ReplayOptions { estimates: EstimateSource::Actual, ..ReplayOptions::default() };
    let first = replay(cluster("gpu-tpu"), policy.clone(), &jobs, options.clone(), &mut |_| {}).unwrap();
    let second = replay(cluster("gpu-tpu"), policy, &jobs, options, &mut |_| {}).unwrap();
    assert_eq!(first.outcomes, second.outcomes, "a replay with TPU slices repeats");
    for o in &first.outcomes {
        let runs = o.job.id != "tpu-huge";
        assert_eq!(matches!(o.fate, Fate::Finished { .. }), runs, "{}: {:?}", o.job.id, o.fate);
    }
    // One slice stays in its pool (or cube); several span no more than block-1, the TPU block.
    let span = |id: &str| match &first.outcomes.iter().find(|o| o.job.id == id).unwrap().fate {
        Fate::Finished { span_level, .. } => span_level.clone(),
        other => panic!("{id}: {other:?}"),
    };
    assert_eq!(span("tpu-one"), "pool");
    assert_eq!(span("tpu-cube"), "pool");
    assert_eq!(span("tpu-two"), "block");
    let context = ReportContext { cluster: "gpu-tpu".into(), cluster_gpus: 512, ..ReportContext::default() };
    let report: serde_json::Value =
        serde_json::from_str(&Report::new(context, &first.outcomes, 512).to_json()).unwrap();
    let shapes: Vec<(&str, u64)> = report["summary"]["by_gang_shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["name"].as_str().unwrap(), g["jobs"].as_u64().unwrap()))
        .collect();
    assert_eq!(shapes, [("one pod set", 1), ("one pod set, sliced", 1), ("several pod sets", 1), ("TPU slices", 5)]);
}
