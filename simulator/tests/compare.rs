//! Placement policy comparison on the shipped Helios excerpt: trainyard never places a gang at
//! a higher cost than a baseline on the same free capacity, and the tables are deterministic.

use proptest::prelude::*;
use trainyard_policies::PolicyConfig;
use trainyard_simulator::compare::{
    CompareOptions, Comparison, compare, default_slowdown, replay_policy, shadow_replay,
};
use trainyard_simulator::trace::{ReadOptions, TraceFormat, read_trace};
use trainyard_simulator::{EstimateSource, TraceJob};
use trainyard_topology::sources::{HostDefaults, lingjun};
use trainyard_topology::{Cluster, GangShape, PlacementPolicy, Resources, Topology, TopologyRequest};

const HELIOS: &str = include_str!("../../data/traces/helios-excerpt.csv");
const LINGJUN: &str = include_str!("../../data/topologies/lingjun-topo.csv");

fn helios(jobs: usize) -> Vec<TraceJob> {
    let mut all =
        read_trace(TraceFormat::DirLab, HELIOS.as_bytes(), "helios-excerpt.csv", &ReadOptions::default()).unwrap().jobs;
    all.truncate(jobs);
    all
}

fn generated(levels: &str, counts: &str) -> Cluster {
    let yaml = format!("name: gen\nlevels: {levels}\ngenerate:\n  counts: {counts}\n  node: {{gpus: 8, cpus: 48}}\n");
    Cluster::from_yaml(&yaml, "gen.yaml").unwrap()
}

fn options(cluster: &Cluster, policy: &str) -> CompareOptions {
    let slowdown = default_slowdown(cluster.topology()).unwrap();
    let mut o = CompareOptions::new(PolicyConfig::builtin(policy).unwrap(), slowdown);
    o.estimates = EstimateSource::Actual;
    o
}

/// Trainyard is never costlier on any gang and strictly cheaper in total than each baseline.
fn assert_trainyard_wins(c: &Comparison) {
    let s = &c.shadow;
    assert!(s.gangs > 0);
    assert_eq!(s.costlier_pairs, 0, "trainyard was costlier on some gangs: {:#?}", s.losses);
    assert_eq!(s.spans_more_pairs, 0, "trainyard spanned more domains on some gangs: {:#?}", s.losses);
    let own = &s.policies[0];
    assert_eq!(own.policy, "trainyard");
    for p in &s.policies[1..] {
        assert_eq!(p.trainyard_costlier, 0, "{}", p.policy);
        assert_eq!(p.not_placed, 0, "{} failed where trainyard placed", p.policy);
        assert!(p.trainyard_total_cost < p.total_cost, "{}: {} vs {}", p.policy, p.trainyard_total_cost, p.total_cost);
    }
}

#[test]
fn helios_on_a_congested_generated_cluster_trainyard_is_never_costlier() {
    // 2 blocks x 4 racks x 11 hosts x 8 GPUs = 704 GPUs: the excerpt keeps about 740 busy,
    // so gangs queue, backfill reserves hosts and the free capacity is fragmented.
    let cluster = generated("[block, rack, host]", "[2, 4, 11]");
    let jobs = helios(15_000);
    let opts = options(&cluster, "easy-backfill");
    let c = compare(cluster, &jobs, &opts, &mut |_, _| {}).unwrap();
    assert_trainyard_wins(&c);
    assert_eq!(c.shadow.gangs, 15_000);
    assert_eq!(c.replays.len(), 5);
    assert!(c.replays.iter().all(|r| r.finished == 15_000), "{:?}", c.replays);
    let names: Vec<&str> = c.replays.iter().map(|r| r.policy.as_str()).collect();
    assert_eq!(names, ["trainyard", "greedy", "first-fit", "kueue-best-fit", "slurm-tree"]);
    // The topology-blind first fit spreads gangs over more racks than trainyard.
    let above: Vec<u64> = c.shadow.policies.iter().map(|p| p.domains_above_hosts).collect();
    assert!(above[0] < above[2], "{above:?}");
    // Backfill moved some admissions off reserved hosts; the table says so.
    assert!(c.shadow.moved_by_reservation > 0);
    assert!(c.shadow.moved_losses.iter().all(|l| l.moved_by_reservation));
    let table = c.render_table();
    assert!(table.contains("Shadow comparison") && table.contains("kueue-best-fit"), "{table}");
    assert!(table.contains(&format!("Backfill moved {} trainyard admissions", c.shadow.moved_by_reservation)));
}

#[test]
fn helios_on_lingjun_trainyard_is_never_costlier() {
    let loaded = lingjun::parse(LINGJUN, "lingjun-topo.csv", HostDefaults::default()).unwrap();
    let cluster = Cluster::new(Topology::build(&loaded.spec).unwrap());
    let jobs = helios(4_000);
    let opts = options(&cluster, "easy-backfill");
    assert_eq!(opts.slowdown.to_string(), "host=1,tor=1.05,psw=1.15,dsw=1.25,cluster=1.25");
    let (shadow, run) = shadow_replay(cluster, &jobs, &opts, &mut |_| {}).unwrap();
    assert_eq!(shadow.costlier_pairs, 0, "{:#?}", shadow.losses);
    assert_eq!(shadow.gangs, 4_000);
    assert_eq!(run.rack_level, "tor");
    for p in &shadow.policies[1..] {
        // Greedy is trainyard's own fast path: it may tie, never win. The baselines must lose.
        assert!(p.trainyard_total_cost <= p.total_cost, "{}", p.policy);
        if p.policy != "greedy" {
            assert!(p.trainyard_total_cost < p.total_cost, "{}", p.policy);
        }
    }
}

#[test]
fn observing_does_not_change_the_replay_and_rebuilt_states_match_the_engine() {
    let cluster = generated("[rack, host]", "[8, 8]");
    let jobs = helios(2_000);
    // Without backfill no placement is ever moved off reserved hosts, so the engine's
    // placement must be exactly what trainyard answers on each rebuilt free state.
    let opts = options(&cluster, "fifo");
    let (shadow, observed) = shadow_replay(cluster.clone(), &jobs, &opts, &mut |_| {}).unwrap();
    assert_eq!(shadow.moved_by_reservation, 0);
    let plain = replay_policy(cluster, &jobs, &opts, PlacementPolicy::Trainyard, &mut |_| {}).unwrap();
    assert_eq!(observed, plain);
    // The first gang meets an empty cluster.
    let first = &shadow.detail[0];
    assert_eq!((first.free_gpus, first.idle_hosts), (512, 64));
}

#[test]
fn the_comparison_is_deterministic() {
    let cluster = generated("[block, rack, host]", "[2, 4, 8]");
    let jobs = helios(1_500);
    let opts = options(&cluster, "easy-backfill");
    let first = compare(cluster.clone(), &jobs, &opts, &mut |_, _| {}).unwrap();
    let second = compare(cluster, &jobs, &opts, &mut |_, _| {}).unwrap();
    assert_eq!(first.to_json(), second.to_json());
    assert_eq!(first.render_table(), second.render_table());
    assert!(first.to_json().contains("\"comparison_version\": 1"));
}

#[test]
fn default_slowdown_follows_the_levels_from_the_hosts_up() {
    let three = generated("[block, rack, host]", "[2, 2, 2]");
    assert_eq!(default_slowdown(three.topology()).unwrap().to_string(), "host=1,rack=1.05,block=1.15,cluster=1.25");
    let two = generated("[rack, host]", "[2, 2]");
    assert_eq!(default_slowdown(two.topology()).unwrap().to_string(), "host=1,rack=1.05,cluster=1.15");
}

/// Two racks of two 8-GPU hosts.
fn tiny() -> Cluster {
    generated("[rack, host]", "[2, 2]")
}

fn job(i: usize, submit: u64, runtime: u64, pods: u32, gpus: u64) -> TraceJob {
    TraceJob {
        id: format!("j{i}"),
        submit,
        runtime,
        runtime_estimate: Some(runtime),
        tenant: "t".into(),
        priority: 0,
        gang: GangShape::single(pods, Resources::gpus(gpus), TopologyRequest::Unconstrained),
        line: i as u64 + 2,
        trial: None,
    }
}

#[test]
fn admissions_of_one_cycle_are_judged_on_the_state_before_each() {
    // Three gangs arrive together and start in one cycle: 8, then 4, then 2 GPUs.
    let jobs = vec![job(0, 0, 10, 1, 8), job(1, 0, 10, 1, 4), job(2, 0, 10, 1, 2)];
    let cluster = tiny();
    let opts = options(&cluster, "fifo");
    let (shadow, _) = shadow_replay(cluster, &jobs, &opts, &mut |_| {}).unwrap();
    let free: Vec<(usize, u64, u64)> = shadow.detail.iter().map(|g| (g.job, g.free_gpus, g.idle_hosts)).collect();
    assert_eq!(free, [(0, 32, 4), (1, 24, 3), (2, 20, 2)]);
    // The 2-GPU gang joins the half-used host: nothing stranded beyond its 2 free GPUs.
    let third = &shadow.detail[2];
    assert_eq!(third.trainyard.cost, 4096 + 1024 + 2 * 64);
    // First fit takes the first host with room, also the half-used one here.
    assert_eq!(third.baselines[1].as_ref().unwrap().cost, third.trainyard.cost);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// On random small traces no baseline ever beats trainyard's cost on the same state.
    #[test]
    fn trainyard_is_never_costlier_on_random_traces(
        shapes in prop::collection::vec((0u64..40, 1u64..200, 1u32..5, prop::sample::select(vec![1u64, 2, 4, 8])), 1..40)
    ) {
        let mut submit = 0;
        let jobs: Vec<TraceJob> = shapes
            .iter()
            .enumerate()
            .map(|(i, &(gap, runtime, pods, gpus))| {
                submit += gap;
                job(i, submit, runtime, pods, gpus)
            })
            .collect();
        let cluster = generated("[block, rack, host]", "[2, 2, 2]");
        let opts = options(&cluster, "easy-backfill");
        let (shadow, _) = shadow_replay(cluster, &jobs, &opts, &mut |_| {}).unwrap();
        prop_assert_eq!(shadow.gangs as usize, jobs.len());
        prop_assert_eq!(shadow.costlier_pairs, 0, "{:#?}", shadow.losses);
    }
}
