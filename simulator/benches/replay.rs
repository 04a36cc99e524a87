//! Replay benchmark: wall time, events per second and peak memory of whole-trace replays.
//!
//! Run with `cargo bench -p trainyard-simulator --bench replay`. It replays the full Philly
//! trace (82,247 jobs) on the 2,490-GPU cluster when `../shared/traces` is present next to
//! the checkout, otherwise the shipped 3,000-job excerpt, and the Helios excerpt on the
//! congested 704-GPU cluster under both policies. Numbers are printed with their ratio to the
//! target, so one run is self-contained.

/// The `trainyard` binary's allocator, so that the replay is timed as the command runs it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use trainyard_policies::PolicyConfig;
use trainyard_simulator::report::{Report, ReportContext};
use trainyard_simulator::trace::{ReadOptions, TraceFormat, read_trace};
use trainyard_simulator::{EstimateSource, ReplayOptions, ReplayResult, TraceJob, replay};
use trainyard_topology::Cluster;

/// The acceptance target for the full Philly replay.
const TARGET: Duration = Duration::from_secs(2);
/// Repetitions per measurement; the minimum is the figure least disturbed by other work.
const RUNS: usize = 5;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn cluster(name: &str) -> Cluster {
    let path = root().join(format!("examples/clusters/{name}.yaml"));
    Cluster::from_yaml(&std::fs::read_to_string(path).expect("cluster file"), name).expect("valid cluster")
}

fn read(path: &Path, format: TraceFormat) -> (Vec<TraceJob>, Duration) {
    let started = Instant::now();
    let file = std::fs::File::open(path).expect("trace file");
    let jobs = read_trace(format, std::io::BufReader::new(file), &path.display().to_string(), &ReadOptions::default())
        .expect("valid trace")
        .jobs;
    (jobs, started.elapsed())
}

fn timed(
    cluster_name: &str,
    policy: &str,
    jobs: &[TraceJob],
    estimates: EstimateSource,
) -> (ReplayResult, Vec<Duration>) {
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..RUNS {
        let c = cluster(cluster_name);
        let p = PolicyConfig::builtin(policy).expect("built-in policy");
        // The jobs are handed over as `trainyard simulate` hands over the ones it parsed.
        let jobs = jobs.to_vec();
        let started = Instant::now();
        let options = ReplayOptions { estimates, ..ReplayOptions::default() };
        let result = replay(c, p, jobs, options, &mut |_| {}).expect("replay");
        times.push(started.elapsed());
        last = Some(result);
    }
    times.sort();
    (last.expect("at least one run"), times)
}

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    // `cargo bench` passes `--bench`; this binary takes no other arguments.
    let full = root().join("../shared/traces/philly/philly.csv");
    let (philly_path, label) = if full.exists() {
        (full, "full Philly trace")
    } else {
        (root().join("data/traces/philly-excerpt.csv"), "Philly excerpt (full trace not found)")
    };
    let (jobs, parse) = read(&philly_path, TraceFormat::Philly);
    println!("## Philly replay: {label}, {} jobs, philly-2490 cluster, {RUNS} runs each", jobs.len());
    println!("parse: {:.1} ms", ms(parse));
    for policy in ["fifo", "easy-backfill"] {
        let (result, times) = timed("philly-2490", policy, &jobs, EstimateSource::Trace);
        let best = times[0];
        let median = times[times.len() / 2];
        let eps = result.events as f64 / best.as_secs_f64();
        println!(
            "{policy:>14}: min {:.1} ms, median {:.1} ms, {} events, {} cycles, {:.2} M events/s, {:.3}x of the {} s target",
            ms(best),
            ms(median),
            result.events,
            result.cycles,
            eps / 1e6,
            best.as_secs_f64() / TARGET.as_secs_f64(),
            TARGET.as_secs(),
        );
    }
    if let Some(mib) = peak_rss_mib() {
        println!("peak resident memory after the Philly replays: {mib:.1} MiB (target 300 MB)");
    }

    let (helios, _) = read(&root().join("data/traces/helios-excerpt.csv"), TraceFormat::DirLab);
    println!("\n## Helios excerpt: {} jobs, helios-704 cluster, exact runtime estimates", helios.len());
    println!(
        "{:>14} {:>10} {:>12} {:>12} {:>12} {:>12} {:>11}",
        "policy", "wall ms", "mean wait s", "p50 wait s", "p99 wait s", "backfilled", "GPU util"
    );
    for policy in ["fifo", "easy-backfill"] {
        let (result, times) = timed("helios-704", policy, &helios, EstimateSource::Actual);
        let summary = Report::new(ReportContext::default(), &result.outcomes, 704).summary;
        println!(
            "{policy:>14} {:>10.1} {:>12.0} {:>12.0} {:>12.0} {:>12} {:>10.2}%",
            ms(times[0]),
            summary.queueing_delay.mean,
            summary.queueing_delay.p50,
            summary.queueing_delay.p99,
            summary.backfilled,
            summary.gpu_utilisation * 100.0,
        );
    }
}
