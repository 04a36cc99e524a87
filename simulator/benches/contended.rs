//! Contended replays against a plain reference: the full Philly trace on the built-in 512-GPU
//! cluster (`examples/clusters/demo.yaml`) under strict FIFO and EASY backfill, and on the
//! 2,490-GPU Philly fleet under FIFO, each timed beside `reference_fifo.py` (one pool of GPUs,
//! strict FIFO, in Python) on the same trace and GPU count, in the same run.
//!
//! Run with `cargo bench -p trainyard-simulator --bench contended` (`-- --quick`: the shipped
//! 3,000-job excerpt instead of `../shared/traces/philly/philly.csv`; `-- --only demo`: one
//! cluster's replays; `-- --policy NAME`: one policy's, without Python; `-- --runs N`: rounds,
//! 5 by default). A round runs a cluster's replays and the Python reference back to back. Prints
//! each replay's best wall time (after parsing), the median over rounds of its ratios to FIFO
//! and to Python in the same round, the queueing delays each gives, the pending gangs a cycle
//! looks at, a digest of every job's fate (equal digests: the same replay, to compare builds),
//! and peak resident memory.

/// The `trainyard` binary's allocator, so that the replay is timed as the command runs it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use trainyard_policies::PolicyConfig;
use trainyard_simulator::report::{Report, ReportContext};
use trainyard_simulator::trace::{ReadOptions, TraceFormat, read_trace};
use trainyard_simulator::{EstimateSource, ReplayOptions, TraceJob, replay_observed};
use trainyard_topology::Cluster;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn cluster(name: &str) -> Cluster {
    let path = root().join(format!("examples/clusters/{name}.yaml"));
    Cluster::from_yaml(&std::fs::read_to_string(path).expect("cluster file"), name).expect("valid cluster")
}

/// What one trainyard replay gave.
struct Run {
    wall: Duration,
    mean_wait: f64,
    median_wait: f64,
    /// Pending gangs its cycles looked at, and its cycles.
    visits: (u64, u64),
    /// A digest of every job's fate (start and end, or unschedulable): equal digests are the
    /// same replay, to compare builds.
    digest: u64,
}

/// FNV-1a over the jobs' fates, in input order.
fn digest(outcomes: &[trainyard_simulator::JobOutcome]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for o in outcomes {
        let (a, b) = match &o.fate {
            trainyard_simulator::Fate::Finished { start, end, .. } => (*start, *end),
            trainyard_simulator::Fate::Unschedulable { .. } => (u64::MAX, u64::MAX),
        };
        for byte in a.to_le_bytes().into_iter().chain(b.to_le_bytes()) {
            h = (h ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// Rounds by default (`-- --runs N` to change). Each round runs every replay of a cluster and
/// the Python reference back to back, so that a round's ratios compare runs of the same
/// minutes; the machine's speed drifts by more than the differences measured.
const RUNS: usize = 5;

/// How many rounds: [`RUNS`], or `--runs N` (one run under a profiler or an instruction
/// counter, where noise does not matter).
fn runs() -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == "--runs").and_then(|i| args.get(i + 1)).and_then(|n| n.parse().ok()).unwrap_or(RUNS)
}

/// The median of some ratios.
fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 { xs[n / 2] } else { (xs[n / 2 - 1] + xs[n / 2]) / 2.0 }
}

fn trainyard_once(cluster_name: &str, policy: &str, jobs: &[TraceJob]) -> Run {
    let c = cluster(cluster_name);
    let gpus = c.total_capacity().gpus;
    let p = PolicyConfig::builtin(policy).expect("built-in policy");
    // The jobs are handed over as `trainyard simulate` hands over the ones it parsed.
    let jobs = jobs.to_vec();
    let started = Instant::now();
    let options = ReplayOptions { estimates: EstimateSource::Trace, ..ReplayOptions::default() };
    let mut visits = 0;
    let result =
        replay_observed(c, p, jobs, options, &mut |_| {}, &mut |engine, _| visits = engine.visits()).expect("replay");
    let wall = started.elapsed();
    let summary = Report::new(ReportContext::default(), &result.outcomes, gpus).summary;
    Run {
        wall,
        mean_wait: summary.queueing_delay.mean,
        median_wait: summary.queueing_delay.p50,
        visits: (visits, result.cycles),
        digest: digest(&result.outcomes),
    }
}

/// One run of the Python reference on `trace` with `gpus`: its whole process time (parsing
/// included), its simulation time, and its mean and median wait; `None` without python3.
fn reference(trace: &PathBuf, gpus: u64) -> Option<(Duration, f64, f64, f64)> {
    let script = root().join("simulator/benches/reference_fifo.py");
    let started = Instant::now();
    let out = Command::new("python3").arg(&script).arg(trace).arg(gpus.to_string()).output().ok()?;
    let total = started.elapsed();
    let text = String::from_utf8(out.stdout).ok()?;
    let field = |key: &str| -> Option<f64> {
        text.split_whitespace().find_map(|kv| kv.strip_prefix(&format!("{key}="))).and_then(|v| v.parse().ok())
    };
    Some((total, field("wall_s")?, field("mean_wait_s")?, field("median_wait_s")?))
}

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<f64>().ok()? / 1024.0)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let full = root().join("../shared/traces/philly/philly.csv");
    let trace = if full.exists() && !quick { full } else { root().join("data/traces/philly-excerpt.csv") };
    let file = std::fs::File::open(&trace).expect("trace file");
    let name = trace.display().to_string();
    let jobs = read_trace(TraceFormat::Philly, std::io::BufReader::new(file), &name, &ReadOptions::default())
        .expect("valid trace")
        .jobs;
    println!("# Contended replays: {} jobs of {name}", jobs.len());
    // `--only NAME`: one cluster's replays (to profile one of them).
    let args: Vec<String> = std::env::args().collect();
    let only = args.iter().position(|a| a == "--only").and_then(|i| args.get(i + 1)).cloned();
    // `--policy NAME`: one policy's replays, without the Python reference (to profile it).
    let only_policy = args.iter().position(|a| a == "--policy").and_then(|i| args.get(i + 1)).cloned();
    for (cluster_name, policies) in [("demo", &["fifo", "easy-backfill"][..]), ("philly-2490", &["fifo"][..])] {
        if only.as_deref().is_some_and(|o| o != cluster_name) {
            continue;
        }
        let gpus = cluster(cluster_name).total_capacity().gpus;
        let policies: Vec<&str> =
            policies.iter().copied().filter(|p| only_policy.as_deref().is_none_or(|o| o == *p)).collect();
        // Per policy: the fastest run, and each round's ratios to FIFO and to Python.
        let mut best: Vec<Option<Run>> = policies.iter().map(|_| None).collect();
        let mut vs_fifo: Vec<Vec<f64>> = vec![Vec::new(); policies.len()];
        let mut vs_py: Vec<Vec<f64>> = vec![Vec::new(); policies.len()];
        let mut py_best: Option<(Duration, f64, f64, f64)> = None;
        for _ in 0..runs() {
            let round: Vec<Run> = policies.iter().map(|p| trainyard_once(cluster_name, p, &jobs)).collect();
            let py = if only_policy.is_some() { None } else { reference(&trace, gpus) };
            let fifo_wall = round.first().map(|r| r.wall.as_secs_f64()).unwrap_or(f64::NAN);
            for (i, run) in round.into_iter().enumerate() {
                vs_fifo[i].push(run.wall.as_secs_f64() / fifo_wall);
                if let Some((total, ..)) = py {
                    vs_py[i].push(run.wall.as_secs_f64() / total.as_secs_f64());
                }
                if let Some(b) = &best[i] {
                    assert_eq!(b.digest, run.digest, "two runs of one replay differ");
                }
                if best[i].as_ref().is_none_or(|b| run.wall < b.wall) {
                    best[i] = Some(run);
                }
            }
            if let Some(p) = py
                && py_best.is_none_or(|b| p.0 < b.0)
            {
                py_best = Some(p);
            }
        }
        for (i, policy) in policies.iter().enumerate() {
            let Some(Run { wall, mean_wait: mean, median_wait: p50, visits: (visits, cycles), digest }) = best[i]
            else {
                continue;
            };
            let to_py = if vs_py[i].is_empty() {
                "no python3".to_string()
            } else {
                format!("{:.2}x of Python's whole run", median(vs_py[i].clone()))
            };
            println!(
                "{cluster_name:>12} {gpus:>5} GPUs {policy:>14}: {:>9.3} s best; median of {} rounds {:.1}x FIFO, {to_py}; wait mean {mean:.0} s, median {p50:.0} s; {:.1} gangs looked at per cycle; digest {digest:016x}",
                wall.as_secs_f64(),
                vs_fifo[i].len(),
                median(vs_fifo[i].clone()),
                visits as f64 / cycles.max(1) as f64,
            );
        }
        if let Some((total, sim, mean, median)) = py_best {
            println!(
                "{cluster_name:>12} {gpus:>5} GPUs {:>14}: {:>9.3} s best whole run ({sim:.3} s simulating); wait mean {mean:.0} s, median {median:.0} s",
                "python fifo",
                total.as_secs_f64(),
            );
        }
    }
    if let Some(mib) = peak_rss_mib() {
        println!("peak resident memory: {mib:.1} MiB");
    }
}
