//! Contended replays against a plain reference: the full Philly trace on the built-in 512-GPU
//! cluster (`examples/clusters/demo.yaml`) under strict FIFO and EASY backfill, and on the
//! 2,490-GPU Philly fleet under FIFO, each timed beside `reference_fifo.py` (one pool of GPUs,
//! strict FIFO, in Python) on the same trace and GPU count, in the same run.
//!
//! Run with `cargo bench -p trainyard-simulator --bench contended` (`-- --quick`: the shipped
//! 3,000-job excerpt instead of `../shared/traces/philly/philly.csv`). Prints each replay's wall
//! time (after parsing), the ratios EASY / FIFO and trainyard / Python, the queueing delays each
//! gives, and peak resident memory.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use trainyard_policies::PolicyConfig;
use trainyard_simulator::report::{Report, ReportContext};
use trainyard_simulator::trace::{ReadOptions, TraceFormat, read_trace};
use trainyard_simulator::{EstimateSource, ReplayOptions, TraceJob, replay};
use trainyard_topology::Cluster;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn cluster(name: &str) -> Cluster {
    let path = root().join(format!("examples/clusters/{name}.yaml"));
    Cluster::from_yaml(&std::fs::read_to_string(path).expect("cluster file"), name).expect("valid cluster")
}

/// One trainyard replay: wall time, mean and median queueing delay.
fn trainyard(cluster_name: &str, policy: &str, jobs: &[TraceJob]) -> (Duration, f64, f64) {
    let c = cluster(cluster_name);
    let gpus = c.total_capacity().gpus;
    let p = PolicyConfig::builtin(policy).expect("built-in policy");
    let started = Instant::now();
    let options = ReplayOptions { estimates: EstimateSource::Trace, ..ReplayOptions::default() };
    let result = replay(c, p, jobs, options, &mut |_| {}).expect("replay");
    let wall = started.elapsed();
    let summary = Report::new(ReportContext::default(), &result.outcomes, gpus).summary;
    (wall, summary.queueing_delay.mean, summary.queueing_delay.p50)
}

/// The Python reference on `trace` with `gpus`: its whole process time (parsing included), its
/// simulation time, and its mean and median wait; `None` without python3.
fn reference(trace: &PathBuf, gpus: u64) -> Option<(Duration, f64, f64, f64)> {
    let script = root().join("simulator/benches/reference_fifo.py");
    let started = Instant::now();
    let out = Command::new("python3").arg(script).arg(trace).arg(gpus.to_string()).output().ok()?;
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
    for (cluster_name, policies) in [("demo", &["fifo", "easy-backfill"][..]), ("philly-2490", &["fifo"][..])] {
        let gpus = cluster(cluster_name).total_capacity().gpus;
        let py = reference(&trace, gpus);
        let mut fifo = None;
        for policy in policies {
            let (wall, mean, p50) = trainyard(cluster_name, policy, &jobs);
            let fifo_wall = *fifo.get_or_insert(wall);
            let vs_fifo = wall.as_secs_f64() / fifo_wall.as_secs_f64();
            let vs_py = py.map(|(total, ..)| format!("{:.2}x", wall.as_secs_f64() / total.as_secs_f64()));
            println!(
                "{cluster_name:>12} {gpus:>5} GPUs {policy:>14}: {:>9.3} s ({vs_fifo:.1}x FIFO, {} of Python's whole run); wait mean {mean:.0} s, median {p50:.0} s",
                wall.as_secs_f64(),
                vs_py.unwrap_or_else(|| "no python3".into()),
            );
        }
        if let Some((total, sim, mean, median)) = py {
            println!(
                "{cluster_name:>12} {gpus:>5} GPUs {:>14}: {:>9.3} s whole run ({sim:.3} s simulating); wait mean {mean:.0} s, median {median:.0} s",
                "python fifo",
                total.as_secs_f64(),
            );
        }
    }
    if let Some(mib) = peak_rss_mib() {
        println!("peak resident memory: {mib:.1} MiB");
    }
}
