//! The DRA claim allocator at cluster scale: 1,000 nodes of 8 GPUs and 8 RDMA NICs (two of each
//! under every one of 4 PCIe roots, made by `devices::synth`), 2,000 gangs of 1-4 whole-node pods
//! whose claims are either eight GPU+NIC pairs on one PCIe root or eight GPUs of one model.
//!
//! Gangs arrive in a fixed order; each takes the next free nodes (host choice is not measured:
//! it is the engine's job) and `allocate_gang` gives every pod its devices or fails the gang;
//! when too few nodes are free the oldest running gang ends first. Reported: gangs allocated per
//! second of `allocate_gang` time, p50 / p99 / worst per gang, and the CEL cache's hit rate.
//! `-- --quick` runs a tenth of the gangs.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use trainyard_topology::devices::synth::{SynthNode, slices_yaml};
use trainyard_topology::devices::{
    Claim, InUse, PodClaims, PoolView, Selectors, allocate_gang, parse_objects, resolve_claim,
};
use trainyard_topology::rng::SplitMix64;

const NODES: usize = 1_000;

struct Claims {
    pairs: Vec<Claim>,
    eight: Vec<Claim>,
}

fn claims(selectors: &mut Selectors) -> Claims {
    let classes = parse_objects(include_str!("../tests/fixtures/dra/classes.yaml"), "classes.yaml").expect("classes");
    let templates = parse_objects(include_str!("../tests/fixtures/dra/claims.yaml"), "claims.yaml").expect("claims");
    let spec = |name: &str| {
        &templates.claims.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("template {name}")).spec
    };
    let pair = spec("gpu-nic-pair");
    let pairs = (0..8)
        .map(|i| resolve_claim(&format!("pair-{i}"), pair, &classes.classes, selectors).expect("pair resolves"))
        .collect();
    let eight = vec![resolve_claim("gpus", spec("trainer-8gpu"), &classes.classes, selectors).expect("8 GPUs")];
    Claims { pairs, eight }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let gangs = if quick { 200 } else { 2_000 };
    let nodes: Vec<SynthNode> = (0..NODES).map(|n| SynthNode::hgx_h100(format!("node-{n:04}"))).collect();
    let text = slices_yaml(&nodes);
    let started = Instant::now();
    let objects = parse_objects(&text, "bench-slices.yaml").expect("slices");
    let view = PoolView::build(&objects.slices);
    let build = started.elapsed();
    let mut selectors = Selectors::new();
    let claims = claims(&mut selectors);
    let mut rng = SplitMix64::new(11);
    let mut in_use = InUse::default();
    let mut free: VecDeque<usize> = (0..NODES).collect();
    let mut running: VecDeque<(Vec<usize>, Vec<trainyard_topology::devices::PodAllocation>)> = VecDeque::new();
    let (mut times, mut failed) = (Vec::with_capacity(gangs), 0usize);
    for _ in 0..gangs {
        let pods = 1 + rng.below(4) as usize;
        let with_pairs = rng.below(2) == 0;
        while free.len() < pods {
            let (nodes, allocations) = running.pop_front().expect("some gang runs");
            for a in &allocations {
                for c in &a.claims {
                    for r in &c.results {
                        in_use.devices.remove(&r.device);
                    }
                }
            }
            free.extend(nodes);
        }
        let nodes: Vec<usize> = (0..pods).map(|_| free.pop_front().expect("enough free nodes")).collect();
        let pod_claims: Vec<PodClaims> = nodes
            .iter()
            .enumerate()
            .map(|(i, &n)| PodClaims {
                pod: format!("pod-{i}"),
                node: format!("node-{n:04}"),
                claims: if with_pairs { claims.pairs.clone() } else { claims.eight.clone() },
            })
            .collect();
        let t = Instant::now();
        let result = allocate_gang(&view, &pod_claims, &mut in_use, &mut selectors);
        times.push(t.elapsed());
        match result {
            Ok(allocations) => running.push_back((nodes, allocations)),
            Err(_) => {
                failed += 1;
                free.extend(nodes);
            }
        }
    }
    let total: Duration = times.iter().sum();
    times.sort_unstable();
    let hits = selectors.lookups() - selectors.evaluations();
    println!(
        "# DRA allocator: {NODES} nodes x (8 GPUs + 8 NICs), {gangs} gangs of 1-4 whole-node pods (8 GPU+NIC pairs on one PCIe root, or 8 GPUs of one model)\n"
    );
    println!("slices parsed and pooled in {:.0} ms", build.as_secs_f64() * 1e3);
    println!(
        "{} gangs allocated ({failed} failed) in {:.3} s: {:.0} gangs/s; per gang p50 {:.2} ms, p99 {:.2} ms, worst {:.2} ms",
        gangs - failed,
        total.as_secs_f64(),
        gangs as f64 / total.as_secs_f64(),
        percentile(&times, 0.5).as_secs_f64() * 1e3,
        percentile(&times, 0.99).as_secs_f64() * 1e3,
        times.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
    println!(
        "CEL: {} lookups, {} evaluations, hit rate {:.2}%",
        selectors.lookups(),
        selectors.evaluations(),
        100.0 * hits as f64 / selectors.lookups().max(1) as f64
    );
}
