//! Tenant benchmark: the Philly trace with its VCs as tenants under FIFO, DRF and DRF with backfill.
//!
//! Run with `cargo bench -p trainyard-simulator --bench tenants`. It replays the full Philly
//! trace (82,247 jobs) when `../shared/traces` is present next to the checkout, otherwise the
//! shipped 3,000-job excerpt, on the 2,490-GPU cluster with the VC quotas of
//! `examples/policies/philly-vcs.yaml`, under three policies:
//!
//! - `FIFO`: the file as is but strict FIFO (`backfill: none`): flat quotas, never exceeded;
//! - `DRF`: the same quotas, but every VC may borrow idle GPUs without limit, pending gangs are
//!   ordered by dominant-resource fair share (usage history halving daily), and a VC below its
//!   quota reclaims lent GPUs by preempting borrowers (gangs checkpoint hourly); strict FIFO;
//! - `DRF + backfill`: DRF with EASY backfill.
//!
//! It prints, per policy, each VC with a quota (and one line for all the others): queueing
//! delay, GPUs used and borrowed, and finish-time fairness; then the policies side by side.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use trainyard_policies::{BackfillMode, FairSharingConfig, PolicyConfig, PreemptionConfig, QuotaAmounts};
use trainyard_simulator::fairness::TenantFairness;
use trainyard_simulator::metrics::{Distribution, Summary};
use trainyard_simulator::quota_usage::QuotaUsage;
use trainyard_simulator::report::human_duration;
use trainyard_simulator::trace::{ReadOptions, TraceFormat, read_trace};
use trainyard_simulator::{Fate, ReplayOptions, ReplayResult, TraceJob, replay_observed};
use trainyard_topology::Cluster;

/// One policy's replay and what was measured of it.
struct Run {
    name: &'static str,
    result: ReplayResult,
    summary: Summary,
    fairness: TenantFairness,
    usage: Option<QuotaUsage>,
    lost_gpu_s: u128,
    replayed: Duration,
    measured: Duration,
}

/// One cell of the side-by-side table, from one policy's run.
type Cell = fn(&Run) -> String;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn opt(x: Option<f64>) -> String {
    x.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"))
}

fn waits(d: &Distribution) -> [String; 3] {
    if d.count == 0 {
        return ["-".into(), "-".into(), "-".into()];
    }
    [human_duration(d.p50), human_duration(d.p95), human_duration(d.p99)]
}

/// The VC quotas with every VC free to borrow, DRF ordering and reclaim.
fn drf(vcs: &PolicyConfig, backfill: BackfillMode) -> PolicyConfig {
    let mut policy = vcs.clone();
    for q in &mut policy.queues {
        // Naming no borrowing limit is "unlimited" (what the `nominal:` form defaults to).
        q.borrowing_limit = QuotaAmounts::UNNAMED;
    }
    policy.backfill = backfill;
    policy.fair_sharing = FairSharingConfig { enabled: true, half_life_s: Some(86_400) };
    policy.preemption = PreemptionConfig { reclaim: true, checkpoint_interval_s: Some(3600), ..Default::default() };
    policy
}

fn run(name: &'static str, cluster: &Cluster, policy: PolicyConfig, jobs: &[TraceJob]) -> Run {
    let mut lost_gpu_s = 0u128;
    let started = Instant::now();
    let result = replay_observed(cluster.clone(), policy, jobs, ReplayOptions::default(), &mut |_| {}, &mut |_, c| {
        for p in &c.preempted {
            lost_gpu_s += u128::from(p.lost_s) * u128::from(jobs[p.victim.0 as usize].gpus());
        }
    })
    .expect("replay");
    let replayed = started.elapsed();
    let gpus = cluster.total_capacity().gpus;
    let started = Instant::now();
    let summary = Summary::new(&result.outcomes, gpus);
    let fairness = TenantFairness::new(&result.outcomes, gpus);
    let measured = started.elapsed();
    let usage = result.quota_usage.clone();
    Run { name, result, summary, fairness, usage, lost_gpu_s, replayed, measured }
}

/// Per VC with a quota, then one line for all VCs without.
fn per_vc(run: &Run, vcs: &PolicyConfig) {
    println!("\n### {}: per VC", run.name);
    println!(
        "{:<14} {:>5} {:>6} | {:>8} {:>8} {:>8} | {:>7} {:>8} {:>8} {:>6} {:>6} | {:>7} {:>7}",
        "VC",
        "quota",
        "jobs",
        "p50",
        "p95",
        "p99",
        "used",
        "borrowed",
        "bor. max",
        "bor. %",
        "full %",
        "ρ mean",
        "ρ max"
    );
    let usage = run.usage.as_ref();
    for q in &vcs.queues {
        let t = run.fairness.by_tenant.iter().find(|t| t.name == q.name);
        let u = usage.and_then(|u| u.queue(&q.name));
        let [p50, p95, p99] = t.map_or_else(|| waits(&Distribution::default()), |t| waits(&t.queueing_delay));
        let num = |f: fn(&trainyard_simulator::quota_usage::QueueUsage) -> String| u.map_or("-".to_string(), f);
        println!(
            "{:<14} {:>5} {:>6} | {:>8} {:>8} {:>8} | {:>7} {:>8} {:>8} {:>6} {:>6} | {:>7} {:>7}",
            q.name,
            q.nominal.gpus.map_or("-".to_string(), |g| g.to_string()),
            t.map_or(0, |t| t.jobs),
            p50,
            p95,
            p99,
            num(|u| format!("{:.1}", u.mean_used_gpus)),
            num(|u| format!("{:.1}", u.mean_borrowed_gpus)),
            num(|u| u.max_borrowed_gpus.to_string()),
            num(|u| format!("{:.1}", u.borrowing_share * 100.0)),
            num(|u| format!("{:.1}", u.at_quota_share * 100.0)),
            opt(t.and_then(|t| t.mean_rho)),
            opt(t.and_then(|t| t.max_rho)),
        );
    }
    let declared: BTreeSet<&str> = vcs.queues.iter().map(|q| q.name.as_str()).collect();
    let rest: Vec<_> = run.fairness.by_tenant.iter().filter(|t| !declared.contains(t.name.as_str())).collect();
    let delays: Vec<u64> = run
        .result
        .outcomes
        .iter()
        .filter(|o| !declared.contains(o.job.tenant.as_str()))
        .filter_map(|o| match o.fate {
            Fate::Finished { start, .. } => Some(start - o.job.submit),
            Fate::Unschedulable { .. } => None,
        })
        .collect();
    let finished: u64 = rest.iter().map(|t| t.finished).sum();
    let rho_sum: f64 = rest.iter().filter_map(|t| t.mean_rho.map(|r| r * t.finished as f64)).sum();
    let used: f64 = usage.map_or(0.0, |u| {
        u.queues.iter().filter(|q| !declared.contains(q.name.as_str())).map(|q| q.mean_used_gpus).sum()
    });
    let [p50, p95, p99] = waits(&Distribution::from_samples(&delays));
    println!(
        "{:<14} {:>5} {:>6} | {:>8} {:>8} {:>8} | {:>7} {:>8} {:>8} {:>6} {:>6} | {:>7} {:>7}",
        format!("{} others", rest.len()),
        "-",
        rest.iter().map(|t| t.jobs).sum::<u64>(),
        p50,
        p95,
        p99,
        format!("{used:.1}"),
        "-",
        "-",
        "-",
        "-",
        opt((finished > 0).then(|| rho_sum / finished as f64)),
        opt(rest.iter().filter_map(|t| t.max_rho).reduce(f64::max)),
    );
}

fn main() {
    // `cargo bench` passes `--bench`; this binary takes no other arguments.
    let full = root().join("../shared/traces/philly/philly.csv");
    let (path, label) = if full.exists() {
        (full, "full Philly trace")
    } else {
        (root().join("data/traces/philly-excerpt.csv"), "Philly excerpt (full trace not found)")
    };
    let file = std::io::BufReader::new(std::fs::File::open(&path).expect("trace file"));
    let jobs = read_trace(TraceFormat::Philly, file, "philly.csv", &ReadOptions::default()).expect("trace").jobs;
    let cluster_text = std::fs::read_to_string(root().join("examples/clusters/philly-2490.yaml")).expect("cluster");
    let cluster = Cluster::from_yaml(&cluster_text, "philly-2490").expect("valid cluster");
    let gpus = cluster.total_capacity().gpus;
    let policy_text = std::fs::read_to_string(root().join("examples/policies/philly-vcs.yaml")).expect("policy");
    let vcs = PolicyConfig::from_yaml(&policy_text, "philly-vcs.yaml").expect("valid policy");

    println!(
        "## Tenants: {label}, {} jobs, philly-2490 ({gpus} GPUs), VC quotas of philly-vcs.yaml ({} VCs, {} GPUs)",
        jobs.len(),
        vcs.queues.len(),
        quota_sum(&vcs)
    );
    scenario(&cluster, &vcs, &jobs);

    // Philly keeps 2,490 GPUs 15% busy: quotas bind, the cluster hardly does. A quarter of the
    // fleet with a quarter of every quota keeps the same oversubscription of the pool (quotas
    // add up to 1.1 to 1.13 times the GPUs) under four times the load.
    let quarter = Cluster::from_yaml(
        "name: philly-640\nlevels: [rack, host]\ngenerate:\n  counts: [10, 8]\n  node: {gpus: 8}\n",
        "philly-640",
    )
    .expect("valid cluster");
    let mut small = vcs.clone();
    for q in &mut small.queues {
        q.nominal.gpus = q.nominal.gpus.map(|g| g / 4);
    }
    println!(
        "\n## Under contention: {label} on philly-640 ({} GPUs), every VC quota divided by 4 ({} GPUs)",
        quarter.total_capacity().gpus,
        quota_sum(&small)
    );
    scenario(&quarter, &small, &jobs);
}

fn quota_sum(vcs: &PolicyConfig) -> u64 {
    vcs.queues.iter().filter_map(|q| q.nominal.gpus).sum()
}

/// The three policies on one cluster with one set of VC quotas.
fn scenario(cluster: &Cluster, vcs: &PolicyConfig, jobs: &[TraceJob]) {
    let policies = [
        ("FIFO", PolicyConfig { backfill: BackfillMode::None, ..vcs.clone() }),
        ("DRF", drf(vcs, BackfillMode::None)),
        ("DRF + backfill", drf(vcs, BackfillMode::Easy)),
    ];
    let mut runs = Vec::new();
    for (name, policy) in policies {
        let r = run(name, cluster, policy, jobs);
        println!(
            "{name:>15}: replay {:.2} s ({} cycles), metrics {:.1} ms",
            r.replayed.as_secs_f64(),
            r.result.cycles,
            r.measured.as_secs_f64() * 1000.0
        );
        runs.push(r);
    }
    for r in &runs {
        per_vc(r, vcs);
    }

    println!("\n### Policies side by side");
    print!("{:<30}", "");
    for r in &runs {
        print!(" {:>15}", r.name);
    }
    println!();
    let rows: [(&str, Cell); 15] = [
        ("finished jobs", |r| r.summary.finished.to_string()),
        ("mean wait", |r| human_duration(r.summary.queueing_delay.mean)),
        ("p50 wait", |r| human_duration(r.summary.queueing_delay.p50)),
        ("p99 wait", |r| human_duration(r.summary.queueing_delay.p99)),
        ("GPU utilisation", |r| format!("{:.2}%", r.summary.gpu_utilisation * 100.0)),
        ("makespan", |r| human_duration(r.summary.makespan_s as f64)),
        ("Jain, service by horizon", |r| opt(r.fairness.jain_service)),
        ("Jain, mean slowdown", |r| opt(r.fairness.jain_slowdown)),
        ("finish-time ρ, max", |r| opt(r.fairness.max_rho)),
        ("finish-time ρ <= 1, jobs", |r| format!("{:.1}%", r.fairness.rho_at_most_one_share * 100.0)),
        ("preemptions", |r| r.result.preemptions.iter().map(|&p| u64::from(p)).sum::<u64>().to_string()),
        ("lost GPU-hours", |r| format!("{:.1}", r.lost_gpu_s as f64 / 3600.0)),
        ("mean borrowed GPUs, all VCs", |r| {
            r.usage.as_ref().map_or("-".into(), |u| format!("{:.1}", u.mean_borrowed_gpus))
        }),
        ("some VC borrowing, time", |r| {
            r.usage.as_ref().map_or("-".into(), |u| format!("{:.1}%", u.borrowing_share * 100.0))
        }),
        ("replay wall time", |r| format!("{:.2} s", r.replayed.as_secs_f64())),
    ];
    for (label, value) in rows {
        print!("{label:<30}");
        for r in &runs {
            print!(" {:>15}", value(r));
        }
        println!();
    }
}
