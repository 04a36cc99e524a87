//! Placement benchmark: decisions per second, latency and model memory on a 10,000-host cluster.
//!
//! Run with `cargo bench -p trainyard-topology --bench placement`; add `-- --quick` for a run
//! of a few seconds (CI). The cluster is 10 blocks x 25 racks x 40 hosts x 8 GPUs. A
//! deterministic churn of gangs brings it to about 65% GPU load, then every policy answers
//! the same stream of gang requests from that state, allocating what it places and releasing
//! random running gangs so the load stays steady. Only the `place_with` call is timed, on one
//! thread, as the fastest of three identical calls (the first call's figures are printed
//! too); ratios are against the greedy policy measured in the same run, so one run is
//! self-contained. The joint section answers requests on the loaded state without allocating
//! them; its solver stops on a wall-clock limit, so its optimality share depends on the
//! machine's load. Without `--bench` on the command line (`cargo test --benches`) the quick
//! counts are used, so a test run stays short.

use std::time::{Duration, Instant};

use trainyard_topology::rng::SplitMix64;

use trainyard_topology::{
    Cluster, JointOptions, JointRequest, LevelConstraint, Placement, PlacementFailure, PlacementPolicy,
    PlacementRequest, PodSet, Resources, SearchPath, TopologyRequest,
};

const CLUSTER_YAML: &str = "name: bench-10k
levels: [block, rack, host]
generate:
  counts: [10, 25, 40]
  node: {gpus: 8, cpus: 96, memory_gib: 1024}
";

/// Issue target: greedy decisions per second for 8-64 pod gangs on one core.
const TARGET_PER_SEC: f64 = 10_000.0;
/// GPU load the churn holds: a success above it releases random gangs until it is back.
const LOAD_TARGET: f64 = 0.65;
/// Seed of every random stream; requests and releases use separate streams so that every
/// policy sees the same requests even though its releases differ.
const SEED: u64 = 0x7261_696e_7961_7264;
/// Each decision is timed this many times and the fastest counts (see `run_policy`).
const REPEATS: usize = 3;

/// How much work each part does.
#[derive(Clone, Copy)]
struct Counts {
    /// Churn steps (one release, then refill to the target) after first reaching the load.
    churn: usize,
    /// Decisions timed for greedy and the baselines.
    fast: usize,
    /// Decisions timed for trainyard (greedy plus the exact tree search).
    trainyard: usize,
    /// Joint (leader + workers) requests.
    joint: usize,
}

// Joint requests are few because each one the solver cannot close costs its whole 2 s limit.
const FULL: Counts = Counts { churn: 2_000, fast: 10_000, trainyard: 400, joint: 20 };
const QUICK: Counts = Counts { churn: 200, fast: 1_000, trainyard: 20, joint: 3 };

/// Seeded streams of the shared SplitMix64.
struct Rng(SplitMix64);

impl Rng {
    fn new(stream: u64) -> Rng {
        Rng(SplitMix64::new(SEED ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
    }

    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `0..n` (the modulo bias is irrelevant at these sizes).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Uniform in `lo..=hi`.
    fn between(&mut self, lo: u32, hi: u32) -> u32 {
        lo + self.below((hi - lo + 1) as usize) as u32
    }
}

/// A pod of `gpus` GPUs with the node's CPU and memory per GPU, so GPUs bind first.
fn pod(gpus: u64) -> Resources {
    Resources { gpus, cpu_milli: gpus * 12_000, memory_mib: gpus * 128 * 1024 }
}

/// The three topology requests of the mix, resolved once.
struct Workload {
    kinds: [(&'static str, LevelConstraint); 3],
}

impl Workload {
    fn new(cluster: &Cluster) -> Workload {
        let topo = cluster.topology();
        let resolve = |text: &str| topo.resolve(&text.parse::<TopologyRequest>().expect("request")).expect("level");
        Workload {
            kinds: [
                ("unconstrained", resolve("unconstrained")),
                ("preferred:rack", resolve("preferred:rack")),
                ("required:block", resolve("required:block")),
            ],
        }
    }

    /// A gang of 8-64 pods of 1, 2, 4 or 8 GPUs under one of the three requests; also the
    /// index of the request kind.
    fn request(&self, rng: &mut Rng) -> (PlacementRequest, usize) {
        let pods = rng.between(8, 64);
        let gpus = [1, 2, 4, 8][rng.below(4)];
        let kind = rng.below(self.kinds.len());
        (PlacementRequest::new(pods, pod(gpus), self.kinds[kind].1), kind)
    }
}

/// A cluster with its running gangs.
#[derive(Clone)]
struct Loaded {
    cluster: Cluster,
    running: Vec<(Placement, Resources)>,
}

impl Loaded {
    fn load(&self) -> f64 {
        1.0 - self.cluster.total_free().gpus as f64 / self.cluster.total_capacity().gpus as f64
    }

    fn admit(&mut self, mut placement: Placement, pod: Resources) {
        self.cluster.allocate_placement(&mut placement).expect("a fresh placement fits");
        self.running.push((placement, pod));
    }

    /// Releases random running gangs until the load is at most the target.
    fn shed(&mut self, rng: &mut Rng) {
        while self.load() > LOAD_TARGET && !self.running.is_empty() {
            self.release_one(rng);
        }
    }

    fn release_one(&mut self, rng: &mut Rng) {
        let (placement, _) = self.running.swap_remove(rng.below(self.running.len()));
        self.cluster.release_placement(&placement).expect("a running gang releases");
    }
}

/// Fills the empty cluster to the target load with greedy placements, then churns: each
/// step releases one random gang and refills, so free space is fragmented as in a busy fleet.
fn warm_up(cluster: Cluster, workload: &Workload, counts: Counts) -> Loaded {
    let mut loaded = Loaded { cluster, running: Vec::new() };
    let (mut requests, mut releases) = (Rng::new(1), Rng::new(2));
    let mut refill = |loaded: &mut Loaded| {
        let mut misses = 0;
        while loaded.load() < LOAD_TARGET && misses < 50 {
            let (request, _) = workload.request(&mut requests);
            match loaded.cluster.place_with(PlacementPolicy::Greedy, &request) {
                Ok(p) => loaded.admit(p, request.pod),
                Err(_) => misses += 1,
            }
        }
    };
    refill(&mut loaded);
    for _ in 0..counts.churn {
        loaded.release_one(&mut releases);
        refill(&mut loaded);
    }
    loaded
}

/// Sorted latencies with nearest-rank percentiles.
struct Latencies(Vec<Duration>);

impl Latencies {
    fn new(mut v: Vec<Duration>) -> Latencies {
        v.sort_unstable();
        Latencies(v)
    }

    fn pct(&self, p: f64) -> Duration {
        if self.0.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * self.0.len() as f64).ceil() as usize;
        self.0[rank.clamp(1, self.0.len()) - 1]
    }

    fn max(&self) -> Duration {
        self.0.last().copied().unwrap_or_default()
    }

    fn total(&self) -> Duration {
        self.0.iter().sum()
    }

    fn per_sec(&self) -> f64 {
        self.0.len() as f64 / self.total().as_secs_f64().max(1e-12)
    }
}

/// What one policy did over the timed loop.
struct PolicyRun {
    policy: PlacementPolicy,
    all: Latencies,
    by_kind: Vec<Latencies>,
    placed: usize,
    capacity_failures: usize,
    topology_failures: usize,
    mean_load: f64,
    /// The first timing of every decision (no repeats, preemption included).
    first_calls: Latencies,
    /// Trainyard only: decisions the exact search won, and the cost saved on each placed gang
    /// (percent of the greedy cost; 0 when greedy was kept).
    exact_wins: usize,
    exact_bounded: usize,
    savings: Vec<f64>,
}

fn run_policy(base: &Loaded, workload: &Workload, policy: PlacementPolicy, decisions: usize) -> PolicyRun {
    let mut loaded = base.clone();
    let (mut requests, mut releases) = (Rng::new(3), Rng::new(4));
    let mut all = Vec::with_capacity(decisions);
    let mut first_calls = Vec::with_capacity(decisions);
    let mut by_kind: Vec<Vec<Duration>> = vec![Vec::new(); workload.kinds.len()];
    let mut run = PolicyRun {
        policy,
        all: Latencies(Vec::new()),
        by_kind: Vec::new(),
        placed: 0,
        capacity_failures: 0,
        topology_failures: 0,
        mean_load: 0.0,
        first_calls: Latencies(Vec::new()),
        exact_wins: 0,
        exact_bounded: 0,
        savings: Vec::new(),
    };
    let mut load_sum = 0.0;
    for _ in 0..decisions {
        let (request, kind) = workload.request(&mut requests);
        load_sum += loaded.load();
        let started = Instant::now();
        let result = loaded.cluster.place_with(policy, &request);
        let mut took = started.elapsed();
        first_calls.push(took);
        // Placing does not allocate, so a repeat is the same decision; the fastest of the
        // repeats filters out preemption by other processes on a shared machine.
        for _ in 1..REPEATS {
            let started = Instant::now();
            let again = loaded.cluster.place_with(policy, &request);
            took = took.min(started.elapsed());
            debug_assert_eq!(again, result);
        }
        all.push(took);
        by_kind[kind].push(took);
        match result {
            Ok(p) => {
                if policy == PlacementPolicy::Trainyard {
                    // Same free capacity as the timed call: placing does not allocate.
                    let greedy = loaded.cluster.place_with(PlacementPolicy::Greedy, &request).expect("greedy fits too");
                    run.exact_wins += usize::from(p.path == SearchPath::Exact);
                    run.exact_bounded += usize::from(p.lower_bound.is_some());
                    run.savings.push(100.0 * greedy.cost.saturating_sub(p.cost) as f64 / greedy.cost as f64);
                }
                run.placed += 1;
                loaded.admit(p, request.pod);
                loaded.shed(&mut releases);
            }
            Err(PlacementFailure::Topology { .. }) => run.topology_failures += 1,
            Err(_) => run.capacity_failures += 1,
        }
    }
    run.mean_load = load_sum / decisions.max(1) as f64;
    run.all = Latencies::new(all);
    run.first_calls = Latencies::new(first_calls);
    run.by_kind = by_kind.into_iter().map(Latencies::new).collect();
    run
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Resident set size in bytes, from `/proc/self/statm` (4 KiB pages); `None` off Linux.
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// The 1-minute load average, to judge how much other work shared the machine.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".to_string())
}

fn build() -> (Cluster, Duration) {
    let started = Instant::now();
    let cluster = Cluster::from_yaml(CLUSTER_YAML, "bench-10k").expect("valid cluster");
    (cluster, started.elapsed())
}

/// Builds the cluster twice and reports the second build's growth of resident memory: the
/// first build warms the allocator (its temporaries' pages stay mapped and are reused).
fn memory_section() -> Cluster {
    let (first, first_time) = build();
    let before = resident_bytes();
    let (second, second_time) = build();
    let after = resident_bytes();
    let topo = second.topology();
    let gpus = second.total_capacity().gpus;
    println!("## Topology model: {} hosts, {} domains, {gpus} GPUs", topo.host_count(), topo.domain_count());
    println!("build (Cluster::from_yaml): {:.1} ms first, {:.1} ms second", ms(first_time), ms(second_time));
    match (before, after) {
        (Some(b), Some(a)) => {
            let delta = a.saturating_sub(b);
            println!(
                "resident memory of one Cluster: {:.2} MiB ({:.0} bytes per host, {:.0} per domain)",
                delta as f64 / (1024.0 * 1024.0),
                delta as f64 / topo.host_count() as f64,
                delta as f64 / topo.domain_count() as f64,
            );
        }
        _ => println!("resident memory: /proc/self/statm not readable, skipped"),
    }
    drop(first);
    second
}

fn print_policy_table(runs: &[PolicyRun]) {
    let greedy_rate = runs.iter().find(|r| r.policy == PlacementPolicy::Greedy).map_or(1.0, |r| r.all.per_sec());
    println!(
        "{:>15} {:>9} {:>7} {:>7} {:>6} {:>12} {:>9} {:>9} {:>10} {:>10} {:>12} {:>10}",
        "policy",
        "decisions",
        "placed",
        "no-cap",
        "no-top",
        "decisions/s",
        "p50 us",
        "p99 us",
        "max us",
        "vs greedy",
        "1st-call/s",
        "1st p50 us"
    );
    for r in runs {
        println!(
            "{:>15} {:>9} {:>7} {:>7} {:>6} {:>12.0} {:>9.1} {:>9.1} {:>10.1} {:>9.3}x {:>12.0} {:>10.1}",
            r.policy.name(),
            r.all.0.len(),
            r.placed,
            r.capacity_failures,
            r.topology_failures,
            r.all.per_sec(),
            us(r.all.pct(50.0)),
            us(r.all.pct(99.0)),
            us(r.all.max()),
            r.all.per_sec() / greedy_rate,
            r.first_calls.per_sec(),
            us(r.first_calls.pct(50.0)),
        );
    }
}

fn print_by_kind(run: &PolicyRun, workload: &Workload) {
    for (l, (name, _)) in run.by_kind.iter().zip(&workload.kinds) {
        println!(
            "  {:>15} {:>6} decisions, p50 {:>9.1} us, p99 {:>9.1} us, max {:>9.1} us",
            name,
            l.0.len(),
            us(l.pct(50.0)),
            us(l.pct(99.0)),
            us(l.max())
        );
    }
}

/// Leader (1 x 1 GPU) plus 8-32 whole-host workers that must share a rack; the gang itself is
/// unconstrained or required within a block, alternately.
fn joint_section(base: &Loaded, workload: &Workload, requests: usize) {
    let mut cluster = base.cluster.clone();
    let rack = cluster.topology().level_depth("rack").expect("rack level");
    let options = JointOptions::default();
    let mut rng = Rng::new(5);
    let mut times = Vec::new();
    let (mut placed, mut optimal, mut from_mip, mut failed) = (0, 0, 0, 0);
    for i in 0..requests {
        let workers = rng.between(8, 32);
        let request = JointRequest {
            sets: vec![
                PodSet { name: "leader".into(), pods: 1, pod: pod(1), within: None, slice: None },
                PodSet { name: "workers".into(), pods: workers, pod: pod(8), within: Some(rack), slice: None },
            ],
            constraint: workload.kinds[if i % 2 == 0 { 0 } else { 2 }].1,
            ..JointRequest::new(Vec::new(), trainyard_topology::LevelConstraint::UNCONSTRAINED)
        };
        let started = Instant::now();
        let result = cluster.place_joint(&request, &options);
        times.push(started.elapsed());
        match result {
            Ok(p) => {
                placed += 1;
                optimal += usize::from(p.lower_bound.is_some());
                from_mip += usize::from(p.path == SearchPath::Exact);
            }
            Err(_) => failed += 1,
        }
    }
    let l = Latencies::new(times);
    println!(
        "\n## Joint (MIP) path: {requests} leader + 8-32 x 8-GPU worker gangs (workers within a rack), \
         time limit {} ms, at most {} hosts per model",
        options.time_limit_ms, options.max_hosts
    );
    println!(
        "latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms, total {:.2} s",
        ms(l.pct(50.0)),
        ms(l.pct(99.0)),
        ms(l.max()),
        l.total().as_secs_f64()
    );
    let share = |n: usize| 100.0 * n as f64 / placed.max(1) as f64;
    println!(
        "placed {placed}, failed {failed}; proven optimal {optimal} ({:.0}% of placed); answer from the MIP {from_mip} ({:.0}%)",
        share(optimal),
        share(from_mip)
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes `--bench`; without it this is a `cargo test --benches` run.
    let quick = args.iter().any(|a| a == "--quick") || !args.iter().any(|a| a == "--bench");
    let counts = if quick { QUICK } else { FULL };
    let mode = if quick { "quick" } else { "full" };
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("# Placement benchmark ({mode} mode, one thread; {cores} cores, load average {})\n", load_average());

    let cluster = memory_section();
    let workload = Workload::new(&cluster);
    let started = Instant::now();
    let base = warm_up(cluster, &workload, counts);
    println!(
        "\nwarm-up: {} churn steps in {:.2} s; {} gangs running, GPU load {:.1}%",
        counts.churn,
        started.elapsed().as_secs_f64(),
        base.running.len(),
        100.0 * base.load()
    );

    println!(
        "\n## Decisions on the loaded cluster: gangs of 8-64 pods of 1/2/4/8 GPUs, \
         unconstrained / preferred:rack / required:block, load held at {:.0}%",
        100.0 * LOAD_TARGET
    );
    let started = Instant::now();
    let mut runs = Vec::new();
    for policy in [
        PlacementPolicy::Greedy,
        PlacementPolicy::Trainyard,
        PlacementPolicy::FirstFit,
        PlacementPolicy::KueueBestFit,
        PlacementPolicy::SlurmTree,
    ] {
        let n = if policy == PlacementPolicy::Trainyard { counts.trainyard } else { counts.fast };
        runs.push(run_policy(&base, &workload, policy, n));
    }
    let loops = started.elapsed();
    print_policy_table(&runs);
    println!(
        "(time of place_with only, fastest of {REPEATS} calls per decision; 1st-call: first call of each \
         decision only, preemption included; no-cap / no-top: refused for capacity / for the required level)"
    );
    let greedy = &runs[0];
    println!(
        "\ngreedy: {:.0} decisions/s = {:.2}x of the {:.0}/s target; mean load {:.1}%; all loops took {:.1} s",
        greedy.all.per_sec(),
        greedy.all.per_sec() / TARGET_PER_SEC,
        TARGET_PER_SEC,
        100.0 * greedy.mean_load,
        loops.as_secs_f64()
    );
    print_by_kind(greedy, &workload);

    let t = &runs[1];
    println!("\n## Exact path: trainyard = greedy, then the exact tree search ({} decisions)", t.all.0.len());
    println!(
        "latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; mean load {:.1}%",
        ms(t.all.pct(50.0)),
        ms(t.all.pct(99.0)),
        ms(t.all.max()),
        100.0 * t.mean_load
    );
    print_by_kind(t, &workload);
    let placed = t.placed.max(1) as f64;
    let wins: Vec<f64> = t.savings.iter().copied().filter(|&s| s > 0.0).collect();
    println!(
        "exact cheaper than greedy: {} of {} placed ({:.1}%); exact finished within its step budget: {:.1}%",
        t.exact_wins,
        t.placed,
        100.0 * t.exact_wins as f64 / placed,
        100.0 * t.exact_bounded as f64 / placed
    );
    println!(
        "mean cost improvement: {:.2}% over all placed gangs, {:.2}% where exact won",
        t.savings.iter().sum::<f64>() / placed,
        wins.iter().sum::<f64>() / wins.len().max(1) as f64
    );

    joint_section(&base, &workload, counts.joint);
    println!("\nload average at the end: {}", load_average());
}
