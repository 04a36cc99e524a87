//! Placement quality benchmark: every placement policy on the Helios excerpt, per gang on
//! the same free capacity and in full replays, on the Lingjun fabric and a generated cluster.
//!
//! Run with `cargo bench -p trainyard-simulator --bench placement_quality`. Clusters:
//! (a) the Lingjun fabric (`data/topologies/lingjun-topo.csv`, 847 hosts, 8 GPUs each
//!     assumed), (b) a generated 1,024-host cluster of 4 blocks x 16 racks x 16 hosts x 8 GPUs,
//! (c) the congested `examples/clusters/helios-704.yaml`, where backfill reservations bite.
//! Scheduling is EASY backfill with exact runtime estimates; runtimes are stretched by the
//! default slowdown (1.05 for a rack, 1.15 one level up, 1.25 beyond).

use std::path::PathBuf;
use std::time::Instant;

use trainyard_policies::PolicyConfig;
use trainyard_simulator::EstimateSource;
use trainyard_simulator::compare::{CompareOptions, Comparison, compare, default_slowdown};
use trainyard_simulator::trace::{ReadOptions, TraceFormat, read_trace};
use trainyard_topology::sources::{HostDefaults, lingjun};
use trainyard_topology::{Cluster, Topology};

/// 4 blocks x 16 racks x 16 hosts = 1,024 hosts of 8 GPUs.
const GENERATED: &str = include_str!("../../examples/clusters/generated-1024.yaml");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

fn lingjun_cluster() -> Cluster {
    let loaded = lingjun::parse(&read("data/topologies/lingjun-topo.csv"), "lingjun", HostDefaults::default())
        .expect("the shipped Lingjun file parses");
    for w in &loaded.warnings {
        println!("lingjun: line {:?}: {}: {}", w.line, w.item, w.message);
    }
    Cluster::new(Topology::build(&loaded.spec).expect("a valid tree"))
}

/// One line per baseline: does trainyard span no more domains on every gang, fewer overall?
fn verdict(c: &Comparison) -> String {
    let s = &c.shadow;
    let mut out = format!(
        "verdict: {} gangs; trainyard costlier on {} and wider on {} (gang, baseline) pairs\n",
        s.gangs, s.costlier_pairs, s.spans_more_pairs
    );
    for p in &s.policies[1..] {
        out.push_str(&format!(
            "  vs {:<15} domains above hosts {} vs {} ({}), total cost {} vs {} ({:.2}% lower), wider on {} gangs, narrower on {}\n",
            p.policy,
            p.trainyard_domains_above_hosts,
            p.domains_above_hosts,
            if p.trainyard_domains_above_hosts < p.domains_above_hosts { "fewer" } else { "NOT fewer" },
            p.trainyard_total_cost,
            p.total_cost,
            100.0 * (1.0 - p.trainyard_total_cost as f64 / p.total_cost as f64),
            p.trainyard_spans_more,
            p.trainyard_spans_fewer,
        ));
    }
    out
}

fn main() {
    // `cargo bench` passes `--bench`; this binary takes no other arguments.
    let options = ReadOptions { gpus_per_host: 8, skip_bad_rows: false };
    let helios = read("data/traces/helios-excerpt.csv");
    let jobs = read_trace(TraceFormat::DirLab, helios.as_bytes(), "helios-excerpt.csv", &options)
        .expect("the shipped excerpt parses")
        .jobs;
    let generated = || Cluster::from_yaml(GENERATED, "generated-1024").expect("valid YAML");
    // The excerpt was recorded on a 704-GPU cluster, so on these bigger ones it leaves them
    // mostly idle; the compressed runs scale arrivals by the GPU ratio (about 10x) so that
    // the cluster is as busy as the one the trace came from.
    let clusters = [
        ("(a) Lingjun fabric", lingjun_cluster(), 1),
        ("(b) generated 1,024-host cluster", generated(), 1),
        (
            "(c) congested helios-704",
            Cluster::from_yaml(&read("examples/clusters/helios-704.yaml"), "helios-704").expect("valid YAML"),
            1,
        ),
        ("(d) Lingjun fabric, arrivals 10x faster", lingjun_cluster(), 10),
        ("(e) generated 1,024-host cluster, arrivals 12x faster", generated(), 12),
    ];
    for (label, cluster, speedup) in clusters {
        let jobs: Vec<_> = jobs
            .iter()
            .cloned()
            .map(|mut j| {
                j.submit /= speedup;
                j
            })
            .collect();
        let policy = PolicyConfig::builtin("easy-backfill").expect("built-in policy");
        let slowdown = default_slowdown(cluster.topology()).expect("level names fit the slowdown syntax");
        let mut opts = CompareOptions::new(policy, slowdown);
        opts.estimates = EstimateSource::Actual;
        let started = Instant::now();
        let mut comparison = compare(cluster, &jobs, &opts, &mut |_, _| {}).expect("comparison");
        let elapsed = started.elapsed();
        comparison.trace = "data/traces/helios-excerpt.csv".to_string();
        println!("## {label}\n");
        print!("{}", comparison.render_table());
        print!("\n{}", verdict(&comparison));
        println!(
            "time: {:.2} s for the shadow replay and {} full replays\n",
            elapsed.as_secs_f64(),
            comparison.replays.len()
        );
    }
}
