//! Tenant fairness benchmark: the Philly trace with its VCs as tenants under FIFO and EASY.
//!
//! Run with `cargo bench -p trainyard-simulator --bench tenants`. It replays the full Philly
//! trace (82,247 jobs) when `../shared/traces` is present next to the checkout, otherwise the
//! shipped 3,000-job excerpt, on the 2,490-GPU cluster with the VC quotas of
//! `examples/policies/philly-vcs.yaml`, once with strict FIFO and once with EASY backfill. It
//! prints per-VC waits for the 15 biggest VCs, then the Jain indices and finish-time fairness of
//! both policies side by side, and how long the replays and the fairness metrics took.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use trainyard_policies::{BackfillMode, PolicyConfig};
use trainyard_simulator::fairness::{TenantFairness, TenantStats};
use trainyard_simulator::report::human_duration;
use trainyard_simulator::trace::{ReadOptions, TraceFormat, read_trace};
use trainyard_simulator::{ReplayOptions, replay};
use trainyard_topology::Cluster;

/// One cell of the side-by-side table, from one policy's fairness.
type Cell = fn(&TenantFairness) -> String;

/// VCs listed, the biggest by job count first.
const LISTED: usize = 15;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn opt(x: Option<f64>) -> String {
    x.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"))
}

fn waits(t: Option<&TenantStats>) -> String {
    match t {
        Some(t) if t.finished > 0 => {
            let d = &t.queueing_delay;
            format!("{:>8} {:>8} {:>8}", human_duration(d.p50), human_duration(d.p95), human_duration(d.p99))
        }
        _ => format!("{:>8} {:>8} {:>8}", "-", "-", "-"),
    }
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
        "## Tenant fairness: {label}, {} jobs, philly-2490 ({gpus} GPUs), VC quotas of philly-vcs.yaml",
        jobs.len()
    );
    let mut runs = Vec::new();
    for (name, backfill) in [("fifo", BackfillMode::None), ("easy-backfill", BackfillMode::Easy)] {
        let policy = PolicyConfig { backfill, ..vcs.clone() };
        let started = Instant::now();
        let result = replay(cluster.clone(), policy, &jobs, ReplayOptions::default(), &mut |_| {}).expect("replay");
        let replayed = started.elapsed();
        let started = Instant::now();
        let fairness = TenantFairness::new(&result.outcomes, gpus);
        let measured = started.elapsed();
        println!("{name:>14}: replay {:.1} ms, fairness metrics {:.2} ms", ms(replayed), ms(measured));
        runs.push((name, fairness));
    }
    let (fifo, easy) = (&runs[0].1, &runs[1].1);

    let mut biggest: Vec<&TenantStats> = fifo.by_tenant.iter().collect();
    biggest.sort_by(|a, b| b.jobs.cmp(&a.jobs).then_with(|| a.name.cmp(&b.name)));
    biggest.truncate(LISTED);
    println!("\n### Queueing delay per VC ({} biggest of {} by jobs)", biggest.len(), fifo.tenants);
    println!(
        "{:<8} {:>6} {:>6} | {:>8} {:>8} {:>8} {:>7} {:>7} | {:>8} {:>8} {:>8} {:>7} {:>7}",
        "", "", "", "fifo", "", "", "", "", "easy", "", "", "", ""
    );
    println!(
        "{:<8} {:>6} {:>6} | {:>8} {:>8} {:>8} {:>7} {:>7} | {:>8} {:>8} {:>8} {:>7} {:>7}",
        "VC", "jobs", "quota", "p50", "p95", "p99", "service", "ρ mean", "p50", "p95", "p99", "service", "ρ mean"
    );
    for t in biggest {
        let quota = vcs
            .queues
            .iter()
            .find(|q| q.name == t.name)
            .map_or("-".to_string(), |q| q.nominal.gpus.unwrap_or(0).to_string());
        let e = easy.by_tenant.iter().find(|x| x.name == t.name);
        println!(
            "{:<8} {:>6} {:>6} | {} {:>7} {:>7} | {} {:>7} {:>7}",
            t.name,
            t.jobs,
            quota,
            waits(Some(t)),
            opt(t.service_ratio),
            opt(t.mean_rho),
            waits(e),
            opt(e.and_then(|e| e.service_ratio)),
            opt(e.and_then(|e| e.mean_rho)),
        );
    }

    println!("\n### Fairness across VCs");
    println!("{:<28} {:>14} {:>14}", "", "fifo", "easy-backfill");
    let rows: [(&str, Cell); 5] = [
        ("Jain, service by horizon", |f| opt(f.jain_service)),
        ("Jain, mean slowdown", |f| opt(f.jain_slowdown)),
        ("finish-time ρ, max", |f| opt(f.max_rho)),
        ("finish-time ρ <= 1, jobs", |f| format!("{:.1}%", f.rho_at_most_one_share * 100.0)),
        ("service horizon", |f| human_duration(f.service_horizon_s as f64)),
    ];
    for (label, value) in rows {
        println!("{label:<28} {:>14} {:>14}", value(fifo), value(easy));
    }
}
