//! Start-time estimates (`Engine::eta`): how long one answer takes, and how close it comes.
//!
//! (a) Latency: a synthetic 10,000-host cluster (10 blocks x 25 racks x 40 hosts x 8 GPUs) filled
//! by running gangs, with 5,000 gangs of mixed sizes and topology requests pending behind them;
//! `eta` is timed for the gang at the front, in the middle and at the back of the line, under
//! strict FIFO and EASY backfill: min / median / max over several runs, and the median's ratio
//! to the 50 ms target; beside them one run with [`EtaLimits::exact`] (every cycle the engine
//! would run, no ends taken together), the start each run found, and the default run's error
//! against the exact one (its answer minus the exact answer).
//!
//! (b) Accuracy: the start-time report (`trainyard_simulator::eta_accuracy`) of the shipped
//! Helios excerpt on the congested `helios-704` cluster, and, when `../shared/traces/philly/`
//! is there, of the Philly trace on the 2,490-GPU Philly fleet and on the built-in 512-GPU
//! cluster, under FIFO and EASY, with learned runtimes as means (the default) and as medians,
//! and with the oracle that knows every runtime (how much of the error is the runtimes').
//!
//! `cargo bench -p trainyard-simulator --bench eta` (`-- --runs N`: latency runs per gang,
//! 7 by default; `-- --only latency` or `-- --only accuracy`; `-- --every K`: sample every K-th
//! gang queued in (b), 20 by default, and proportionally fewer of the 82,247 Philly jobs;
//! `-- --policy fifo|easy`: one policy's latency, to profile it; `-- --place front|middle|back`:
//! one gang's; `-- --no-exact`: without the exact runs; `-- --exact-host-cycles N` and
//! `-- --coarse-divisor N`: the latency runs with those `EtaLimits` instead of the defaults).

/// The `trainyard` binary's allocator, so that the timings are those of the command.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use trainyard_policies::{
    BackfillMode, Engine, EtaAnswer, EtaLimits, GangId, GangRequest, PolicyConfig, RuntimeHistory, RuntimeStatistic,
};
use trainyard_simulator::EstimateSource;
use trainyard_simulator::eta_accuracy::{EtaAccuracyOptions, eta_accuracy, render_table};
use trainyard_simulator::trace::{ReadOptions, TraceFormat, read_trace};
use trainyard_topology::rng::SplitMix64;
use trainyard_topology::{Cluster, GangShape, Resources, TopologyRequest};

const CLUSTER: &str = "name: bench-10k
levels: [block, rack, host]
generate:
  counts: [10, 25, 40]
  node: {gpus: 8, cpus: 96, memory_gib: 1024}
";

/// Pending gangs the latency is measured at.
const PENDING: usize = 5_000;

/// The latency target for one answer.
const TARGET: Duration = Duration::from_millis(50);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned()
}

/// A gang of mixed size: 1-8 GPUs on one host, or 1-8 whole hosts; a third inside one rack
/// (preferred), a third inside one block (required); a quarter without a runtime estimate.
fn gang(id: u64, rng: &mut SplitMix64) -> GangRequest {
    let gpus = [1u64, 2, 4, 8][rng.below(4) as usize];
    let pods = if gpus == 8 { 1 + rng.below(8) as u32 } else { 1 };
    let topology = match rng.below(3) {
        0 => TopologyRequest::Unconstrained,
        1 => TopologyRequest::Preferred("rack".into()),
        _ => TopologyRequest::Required("block".into()),
    };
    let runtime = 600 + rng.below(4 * 3600);
    GangRequest {
        id: GangId(id),
        queue: format!("team-{}", rng.below(8)),
        priority: 0,
        submit: 0,
        shape: GangShape::single(pods, Resources::gpus(gpus), topology),
        runtime_estimate: (rng.below(4) != 0).then_some(runtime),
        hosts: Default::default(),
        order: 0,
    }
}

/// The engine of (a): gangs submitted at t=0 until one cycle leaves the cluster full, then more
/// until `PENDING` wait. No cycle runs after the last submissions: asking right after a
/// submission, the estimate's first cycle is the one the engine would run next.
fn contended_engine(mode: BackfillMode) -> Engine {
    let mut policy = PolicyConfig::builtin("fifo").expect("built-in policy");
    policy.backfill = mode;
    let mut engine = Engine::new(Cluster::from_yaml(CLUSTER, "bench-10k").expect("valid cluster"), policy);
    engine.ignore_changes();
    let mut rng = SplitMix64::new(11);
    let mut next = 0u64;
    let capacity = engine.cluster().total_capacity().gpus;
    let mut submitted = 0u64;
    while submitted < capacity + capacity / 10 {
        let g = gang(next, &mut rng);
        submitted += g.shape.total().gpus;
        engine.submit(g).expect("valid gang");
        next += 1;
    }
    engine.schedule(0).expect("cycle");
    while engine.pending_len() < PENDING {
        engine.submit(gang(next, &mut rng)).expect("valid gang");
        next += 1;
    }
    engine
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Times `eta` for one gang over `runs` runs: sorted times and the last answer.
fn time_eta(engine: &Engine, id: GangId, limits: EtaLimits, runs: usize) -> (Vec<Duration>, EtaAnswer) {
    let history = RuntimeHistory::default();
    let mut times = Vec::with_capacity(runs);
    let mut answer = EtaAnswer::Unknown;
    for _ in 0..runs {
        let t = Instant::now();
        answer = engine.eta_within(id, 0, Some(&history), limits);
        times.push(t.elapsed());
    }
    times.sort();
    (times, answer)
}

fn latency(runs: usize) {
    println!("# (a) Latency of one estimate: 10,000 hosts (80,000 GPUs) full, {PENDING} gangs pending\n");
    println!(
        "| policy | gang | ahead | left out behind | cycles | min ms | median ms | max ms | median / 50 ms | exact run: cycles | ms | likely, exact | likely | error |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let only_policy = arg("--policy");
    let only_place = arg("--place");
    let with_exact = !std::env::args().any(|a| a == "--no-exact");
    let mut limits = EtaLimits::default();
    if let Some(n) = arg("--exact-host-cycles").and_then(|n| n.parse().ok()) {
        limits.exact_host_cycles = n;
    }
    if let Some(n) = arg("--coarse-divisor").and_then(|n| n.parse().ok()) {
        limits.coarse_divisor = n;
    }
    for (label, mode) in [("strict FIFO", BackfillMode::None), ("EASY backfill", BackfillMode::Easy)] {
        if only_policy.as_deref().is_some_and(|p| !label.to_lowercase().contains(&p.to_lowercase())) {
            continue;
        }
        let built = Instant::now();
        let engine = contended_engine(mode);
        let built = built.elapsed();
        let pending: Vec<GangId> = engine.pending().collect();
        // The fixed cost of every answer: one copy of the engine (median of a few).
        let mut clones: Vec<Duration> = (0..runs)
            .map(|_| {
                let t = Instant::now();
                let copy = engine.clone();
                let spent = t.elapsed();
                drop(copy);
                spent
            })
            .collect();
        clones.sort();
        for (place, i) in [("front", 0), ("middle", pending.len() / 2), ("back", pending.len() - 1)] {
            if only_place.as_deref().is_some_and(|p| p != place) {
                continue;
            }
            let (times, answer) = time_eta(&engine, pending[i], limits, runs);
            let (exact_times, exact) = if with_exact {
                time_eta(&engine, pending[i], EtaLimits::exact(), 1)
            } else {
                (times.clone(), answer.clone())
            };
            let median = times[times.len() / 2];
            let (EtaAnswer::Estimated(eta), EtaAnswer::Estimated(exact)) = (&answer, &exact) else {
                println!("| {label} | {place} | no estimate: {answer:?} / {exact:?} |");
                continue;
            };
            // The default run's answer against the exact run's (0 when they agree).
            let error = eta.likely as i64 - exact.likely as i64;
            let error_pct = 100.0 * error as f64 / exact.likely.max(1) as f64;
            println!(
                "| {label} | {place} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.2}x | {} | {:.1} | {} s | {} s | {error:+} s ({error_pct:+.1}%) |",
                eta.ahead,
                eta.left_out_behind,
                eta.cycles,
                ms(times[0]),
                ms(median),
                ms(times[times.len() - 1]),
                median.as_secs_f64() / TARGET.as_secs_f64(),
                exact.cycles,
                ms(exact_times[0]),
                exact.likely,
                eta.likely,
            );
        }
        println!(
            "\n{label}: engine built in {:.0} ms, {} gangs running; one copy of it {:.1} ms (median)\n",
            ms(built),
            engine.running_len(),
            ms(clones[clones.len() / 2]),
        );
    }
}

fn accuracy(every: usize) {
    println!("# (b) Accuracy: estimated against actual starts\n");
    let read = |path: PathBuf, format: TraceFormat| {
        let text = std::fs::read_to_string(&path).expect("trace file");
        let options = ReadOptions { gpus_per_host: 8, skip_bad_rows: true };
        read_trace(format, text.as_bytes(), &path.display().to_string(), &options).expect("valid trace").jobs
    };
    let cluster = |name: &str| {
        let path = root().join(format!("examples/clusters/{name}.yaml"));
        Cluster::from_yaml(&std::fs::read_to_string(path).expect("cluster file"), name).expect("valid cluster")
    };
    let helios = read(root().join("data/traces/helios-excerpt.csv"), TraceFormat::DirLab);
    let mut runs = vec![("Helios excerpt", "helios-704", helios, every)];
    let philly = root().join("../shared/traces/philly/philly.csv");
    if philly.exists() {
        let jobs = read(philly, TraceFormat::Philly);
        // The 2,490-GPU fleet the trace ran on leaves it uncontended; the built-in 512-GPU
        // cluster queues it for days (contended.rs).
        // About as many estimates per replay as on the excerpt: an estimate on the 512-GPU
        // cluster runs days of a deep line forward.
        let sparse = every * jobs.len().div_ceil(15_000);
        runs.push(("Philly", "philly-2490", jobs.clone(), sparse));
        runs.push(("Philly", "demo", jobs, sparse));
    } else {
        println!("(../shared/traces/philly/philly.csv not found: Philly skipped)\n");
    }
    for (trace, cluster_name, jobs, every) in runs {
        let mut reports = Vec::new();
        let started = Instant::now();
        for policy in ["fifo", "easy-backfill"] {
            // The learned means (the default), medians, and the oracle that knows every runtime.
            let variants = [
                (RuntimeStatistic::Mean, EstimateSource::Trace),
                (RuntimeStatistic::Median, EstimateSource::Trace),
                (RuntimeStatistic::default(), EstimateSource::Actual),
            ];
            for (statistic, estimates) in variants {
                let p = PolicyConfig::builtin(policy).expect("built-in policy");
                let options = EtaAccuracyOptions { every, statistic, estimates, ..EtaAccuracyOptions::default() };
                reports.push(eta_accuracy(cluster(cluster_name), p, &jobs, &options).expect("replay"));
            }
        }
        let wall = started.elapsed();
        let asked: usize = reports.iter().map(|r| r.samples.len()).sum();
        println!(
            "## {trace} ({} jobs) on {cluster_name}, every {every}th gang queued asked: {} replays, {asked} estimates, {:.1} s\n",
            jobs.len(),
            reports.len(),
            wall.as_secs_f64()
        );
        let refs: Vec<&trainyard_simulator::eta_accuracy::EtaAccuracy> = reports.iter().collect();
        println!("{}", render_table(&refs));
    }
}

fn main() {
    let runs = arg("--runs").and_then(|n| n.parse().ok()).unwrap_or(7usize).max(1);
    let every = arg("--every").and_then(|n| n.parse().ok()).unwrap_or(20usize).max(1);
    let only = arg("--only");
    if only.as_deref().is_none_or(|o| o == "latency") {
        latency(runs);
    }
    if only.as_deref().is_none_or(|o| o == "accuracy") {
        accuracy(every);
    }
}
