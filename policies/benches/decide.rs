//! The whole decide step at scale: 10,000 hosts, 200 queues, 50,000 pending gangs.
//!
//! Every gang is submitted at t=0, the lowest priority class first (one cycle fills the
//! cluster with it), then the rest; cycles then run at one-minute steps, each after the
//! gangs due to end have finished, until every gang has run. Reported: admissions per
//! second of `Engine::schedule` time (quota, order, placement, backfill, preemption search)
//! and where the time goes. Each mode runs twice: all gangs of one pod set, then with a fifth
//! of them rich (half a 1-GPU leader with 8-GPU workers inside one rack, half 8-GPU pods cut
//! into slices of 2 inside one rack). `-- --quick` runs a tenth of it; `-- --only TEXT` only
//! the modes whose label contains TEXT; `-- --plain` only the single-set runs, `-- --rich` only the rich ones;
//! `-- --fleet` the same hosts as a fleet of two clusters of 5 blocks (no gang spanning them).

use std::time::Instant;

mod common;

use common::Ends;

use trainyard_policies::{BackfillMode, Engine, FairSharing, GangId, GangRequest, PolicyConfig, PreemptionRules};
use trainyard_topology::rng::SplitMix64;
use trainyard_topology::{Cluster, GangShape, PodSetShape, Resources, SliceRequest, TopologyRequest};

const CLUSTER: &str = "name: bench-10k
levels: [block, rack, host]
generate:
  counts: [10, 25, 40]
  node: {gpus: 8, cpus: 96, memory_gib: 1024}
";

/// The same 10,000 hosts as a fleet of two clusters of 5 blocks each: no gang spans them.
fn fleet() -> Cluster {
    use trainyard_topology::ClusterSpec;
    use trainyard_topology::fleet::{Member, resolve_fleet};
    let half = CLUSTER.replace("counts: [10, 25, 40]", "counts: [5, 25, 40]");
    let members: Vec<Member> = ["east", "west"]
        .iter()
        .map(|name| Member {
            name: name.to_string(),
            spec: ClusterSpec::from_yaml(&half, name).expect("valid member"),
            source: name.to_string(),
        })
        .collect();
    Cluster::from_fleet(&resolve_fleet("bench-fleet", &members, "bench-fleet").expect("valid fleet"), |_| None)
        .expect("valid fleet")
}

struct Scale {
    queues: usize,
    gangs: usize,
    /// Every fifth gang is multi-set or sliced.
    rich: bool,
    /// The hosts as a fleet of two clusters.
    fleet: bool,
}

/// A 3-level tree: 4 organisations > 10 departments each > `leaves / 40` teams each. Teams'
/// nominal quotas add up to the cluster; every queue may borrow idle quota.
fn tree_yaml(leaves: usize, capacity: u64) -> String {
    let per_team = capacity / leaves as u64;
    let teams_per_dept = leaves / 40;
    let mut yaml = String::from("queues:\n");
    for org in 0..4 {
        yaml.push_str(&format!("  - {{name: org{org}}}\n"));
        for dept in 0..10 {
            yaml.push_str(&format!("  - {{name: dept{org}{dept}, parent: org{org}}}\n"));
            for team in 0..teams_per_dept {
                let name = format!("q{:03}", (org * 10 + dept) * teams_per_dept + team);
                yaml.push_str(&format!(
                    "  - {{name: {name}, parent: dept{org}{dept}, nominal: {{gpus: {per_team}}}}}\n"
                ));
            }
        }
    }
    yaml
}

fn gangs(scale: &Scale, rng: &mut SplitMix64) -> Vec<(GangRequest, u64)> {
    (0..scale.gangs)
        .map(|i| {
            let gpus = [1u64, 2, 4, 8][rng.below(4) as usize];
            let pods = if gpus == 8 { 1 + rng.below(8) as u32 } else { 1 };
            let topology = match rng.below(3) {
                0 => TopologyRequest::Unconstrained,
                1 => TopologyRequest::Preferred("rack".into()),
                _ => TopologyRequest::Required("block".into()),
            };
            let runtime = 600 + rng.below(7200);
            let shape = if scale.rich && i % 5 == 4 {
                rich_shape(i, rng)
            } else {
                GangShape::single(pods, Resources::gpus(gpus), topology)
            };
            let request = GangRequest {
                id: GangId(i as u64),
                queue: format!("q{:03}", rng.below(scale.queues as u64)),
                priority: rng.below(3) as i32,
                submit: 0,
                shape,
                runtime_estimate: Some(runtime),
                hosts: Default::default(),
                order: 0,
            };
            (request, runtime)
        })
        .collect()
}

/// A gang of several pod sets or of slices: a 1-GPU leader with 2-8 8-GPU workers inside one
/// rack, or 4-8 8-GPU pods in slices of 2 hosts, each slice inside one rack.
fn rich_shape(i: usize, rng: &mut SplitMix64) -> GangShape {
    let set = |name: &str, pods: u32, gpus: u64| PodSetShape::new(name, pods, Resources::gpus(gpus));
    if i % 10 == 4 {
        let mut workers = set("workers", 2 + rng.below(7) as u32, 8);
        workers.topology = TopologyRequest::Required("rack".into());
        GangShape { sets: vec![set("leader", 1, 1), workers], topology: TopologyRequest::Required("block".into()) }
    } else {
        let mut sliced = set("node", 2 * (2 + rng.below(3) as u32), 8);
        sliced.slice = Some(SliceRequest { level: "rack".into(), size: 2 });
        GangShape { sets: vec![sliced], topology: TopologyRequest::Required("block".into()) }
    }
}

fn run(label: &str, scale: &Scale, fair: bool, preempt: bool, backfill: BackfillMode) {
    let cluster = if scale.fleet { fleet() } else { Cluster::from_yaml(CLUSTER, "bench-10k").expect("valid cluster") };
    let capacity = cluster.total_capacity().gpus;
    let mut policy = PolicyConfig::from_yaml(&tree_yaml(scale.queues, capacity), "bench-queues").expect("valid queues");
    policy.backfill = backfill;
    let mut engine = Engine::new(cluster, policy);
    engine.set_fair_sharing(fair.then_some(FairSharing { half_life_s: Some(3600) }));
    engine.set_preemption(PreemptionRules {
        within_queue: preempt,
        reclaim: preempt,
        checkpoint_interval_s: Some(1800),
    });
    let mut rng = SplitMix64::new(7);
    let work = gangs(scale, &mut rng);
    let runtimes: Vec<u64> = work.iter().map(|(_, r)| *r).collect();
    // Low priority first: they fill the cluster in the first cycle, so the higher classes
    // that arrive next find it full and must wait, backfill or preempt.
    let submit_started = Instant::now();
    let (low, high): (Vec<_>, Vec<_>) = work.into_iter().map(|(g, _)| g).partition(|g| g.priority == 0);
    for g in low {
        engine.submit(g).expect("valid gang");
    }
    let mut submit_time = submit_started.elapsed();
    let t = Instant::now();
    let first = engine.schedule(0).expect("cycle");
    let mut decide = t.elapsed();
    let mut worst = decide;
    let mut ends = Ends::new(runtimes);
    let (mut admitted, _) = ends.record(&first, 0);
    let submit_started = Instant::now();
    for g in high {
        engine.submit(g).expect("valid gang");
    }
    submit_time += submit_started.elapsed();
    let (mut now, mut cycles, mut preempted) = (0u64, 1usize, 0usize);
    while engine.pending_len() > 0 {
        ends.finish_due(&mut engine, now);
        let t = Instant::now();
        let cycle = engine.schedule(now).expect("cycle");
        let spent = t.elapsed();
        decide += spent;
        worst = worst.max(spent);
        cycles += 1;
        let (started, stopped) = ends.record(&cycle, now);
        admitted += started;
        preempted += stopped;
        now += 60;
    }
    let rate = admitted as f64 / decide.as_secs_f64();
    println!(
        "{label:<34} {admitted:>7} admissions in {cycles:>5} cycles, decide {:>7.2} s: {rate:>8.0} admissions/s ({:.2}x of 2,000/s); worst cycle {:.1} ms; {preempted} preemptions; {} gangs looked at per cycle; submit {:.2} s",
        decide.as_secs_f64(),
        rate / 2000.0,
        worst.as_secs_f64() * 1e3,
        engine.visits() / cycles as u64,
        submit_time.as_secs_f64(),
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let gangs = if quick { 5_000 } else { 50_000 };
    let args: Vec<String> = std::env::args().collect();
    let only = args.iter().position(|a| a == "--only").and_then(|i| args.get(i + 1)).cloned();
    let plain = args.iter().any(|a| a == "--plain");
    let rich_only = args.iter().any(|a| a == "--rich");
    let fleet = args.iter().any(|a| a == "--fleet");
    let modes: [(&str, bool, bool, BackfillMode); 4] = [
        ("FIFO order, EASY backfill", false, false, BackfillMode::Easy),
        ("DRF, EASY backfill", true, false, BackfillMode::Easy),
        ("DRF, EASY backfill, preemption", true, true, BackfillMode::Easy),
        ("DRF, strict FIFO, preemption", true, true, BackfillMode::None),
    ];
    let runs: &[bool] = match (plain, rich_only) {
        (true, false) => &[false],
        (false, true) => &[true],
        _ => &[false, true],
    };
    for rich in runs {
        let rich = *rich;
        let scale = Scale { queues: 200, gangs, rich, fleet };
        println!(
            "# Decide step: 10,000 hosts x 8 GPUs{}, {} leaf queues in a 3-level tree, {} gangs pending at t=0{}, one thread\n",
            if fleet { " as a fleet of two clusters" } else { "" },
            scale.queues,
            scale.gangs,
            if rich { ", a fifth of them multi-set or sliced" } else { "" }
        );
        for (label, fair, preempt, backfill) in modes {
            if only.as_ref().is_none_or(|o| label.contains(o.as_str())) {
                run(label, &scale, fair, preempt, backfill);
            }
        }
        println!();
    }
}
