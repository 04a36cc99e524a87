//! The decide step on a device-level cluster: 1,000 nodes of 8 GPUs and 8 RDMA NICs published as
//! DRA ResourceSlices (two of each under every one of 4 PCIe roots), 2,000 gangs pending at t=0
//! whose pods carry claims: a GPU+NIC pair on one root (1 GPU), two GPUs and a NIC on one root
//! (2 GPUs), or a whole node's 8 GPUs of one model and 8 NICs.
//!
//! Cycles run at one-minute steps, each after the gangs due to end have finished, until every
//! gang has run. Reported: admissions per second of `Engine::schedule` time, p50 / p99 / worst
//! cycle, the time submissions took (the first gang of each claim shape counts every host's
//! pods), and the CEL cache's hit rate. The same gangs without claims, on the same cluster
//! without devices, run first as the baseline. `-- --quick` runs a tenth of the gangs.

use std::time::{Duration, Instant};

mod common;

use common::Ends;

use trainyard_policies::{Engine, GangId, GangRequest, PolicyConfig, PreemptionRules};
use trainyard_topology::devices::synth::{TEMPLATES, hgx_h100_objects};
use trainyard_topology::rng::SplitMix64;
use trainyard_topology::{Cluster, GangShape, PodSetShape, Resources, TopologyRequest};

const CLUSTER: &str = "name: dra-1k
levels: [block, rack, host]
generate:
  counts: [5, 25, 8]
  node: {gpus: 8, cpus: 192, memory_gib: 2048}
";

const QUEUES: usize = 20;

fn cluster(devices: bool) -> Cluster {
    let mut cluster = Cluster::from_yaml(CLUSTER, "dra-1k").expect("valid cluster");
    if devices {
        let topo = cluster.topology();
        let objects = hgx_h100_objects(topo.hosts().map(|h| topo.host_name(h).to_string()));
        let left_out = cluster.set_devices(objects).expect("devices");
        assert!(left_out.is_empty(), "{left_out:?}");
    }
    cluster
}

fn policy() -> PolicyConfig {
    let mut yaml = String::from("backfill: easy\nqueues:\n");
    for q in 0..QUEUES {
        yaml.push_str(&format!("  - {{name: q{q:02}, nominal: {{gpus: {}}}}}\n", 8_000 / QUEUES));
    }
    PolicyConfig::from_yaml(&yaml, "dra-queues").expect("valid queues")
}

/// `(request, runtime)`; `claims` gives the pods their templates.
fn gangs(count: usize, claims: bool) -> Vec<(GangRequest, u64)> {
    let mut rng = SplitMix64::new(11);
    (0..count)
        .map(|i| {
            let kind = match rng.below(10) {
                0..=3 => 0,
                4..=6 => 1,
                _ => 2,
            };
            let (template, gpus) = TEMPLATES[kind];
            let pods = match kind {
                0 => 1 + rng.below(8) as u32,
                1 => 1 + rng.below(4) as u32,
                _ => 1 + rng.below(8) as u32,
            };
            let mut set = PodSetShape::new(
                "workers",
                pods,
                Resources { gpus, cpu_milli: gpus * 16_000, memory_mib: gpus * 128 * 1024 },
            );
            if claims {
                set.claims = vec![template.to_string()];
            }
            let topology = match rng.below(2) {
                0 => TopologyRequest::Preferred("rack".into()),
                _ => TopologyRequest::Required("block".into()),
            };
            let runtime = 600 + rng.below(7200);
            let request = GangRequest {
                id: GangId(i as u64),
                queue: format!("q{:02}", rng.below(QUEUES as u64)),
                priority: 0,
                submit: 0,
                shape: GangShape { sets: vec![set], topology },
                runtime_estimate: Some(runtime),
                hosts: Default::default(),
                order: 0,
            };
            (request, runtime)
        })
        .collect()
}

struct Outcome {
    rate: f64,
}

fn run(label: &str, count: usize, devices: bool, baseline: Option<&Outcome>) -> Outcome {
    let mut engine = Engine::new(cluster(devices), policy());
    engine.set_preemption(PreemptionRules { within_queue: false, reclaim: false, checkpoint_interval_s: None });
    let work = gangs(count, devices);
    let runtimes: Vec<u64> = work.iter().map(|(_, r)| *r).collect();
    let submit_started = Instant::now();
    for (g, _) in work {
        engine.submit(g).expect("valid gang");
    }
    let submit = submit_started.elapsed();
    let mut ends = Ends::new(runtimes);
    let (mut now, mut admitted) = (0u64, 0usize);
    let mut cycles: Vec<Duration> = Vec::new();
    while engine.pending_len() > 0 {
        ends.finish_due(&mut engine, now);
        let t = Instant::now();
        let cycle = engine.schedule(now).expect("cycle");
        cycles.push(t.elapsed());
        admitted += ends.record(&cycle, now).0;
        now += 60;
        assert!(now < 100 * 86_400, "every gang fits the cluster, so all of them run");
    }
    let decide: Duration = cycles.iter().sum();
    let rate = admitted as f64 / decide.as_secs_f64();
    cycles.sort_unstable();
    let at = |q: f64| cycles[((cycles.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e3;
    let (lookups, evaluations) = engine.cluster().selector_counts();
    let cel = if lookups > 0 {
        format!(
            "; CEL cache {:.1}% of {lookups} lookups",
            100.0 * lookups.saturating_sub(evaluations) as f64 / lookups as f64
        )
    } else {
        String::new()
    };
    let ratio = baseline.map(|b| format!(" ({:.2}x of the baseline)", rate / b.rate)).unwrap_or_default();
    println!(
        "{label:<26} {admitted:>5} admissions in {:>4} cycles, decide {:>6.2} s: {rate:>7.0} admissions/s{ratio}; cycle p50 {:.2} ms, p99 {:.2} ms, worst {:.2} ms; submit {:.2} s{cel}",
        cycles.len(),
        decide.as_secs_f64(),
        at(0.5),
        at(0.99),
        cycles.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
        submit.as_secs_f64(),
    );
    Outcome { rate }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let count = if quick { 200 } else { 2_000 };
    println!(
        "# Decide step with DRA claims: 1,000 nodes x (8 GPUs + 8 NICs), {count} gangs pending at t=0, FIFO + EASY backfill, one thread\n"
    );
    let baseline = run("GPU counts only (baseline)", count, false, None);
    run("DRA claims", count, true, Some(&baseline));
}
