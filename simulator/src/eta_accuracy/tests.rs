//! The accuracy run on the shipped Helios excerpt (its first jobs, on a small cluster so that
//! gangs queue) and on a made-up trace whose estimates are exact.

use trainyard_policies::{EtaAnswer, EtaLimits, PolicyConfig};
use trainyard_topology::{Cluster, GangShape, Resources, TopologyRequest};

use super::*;
use crate::trace::{ReadOptions, TraceFormat, read_trace};
use crate::{Fate, replay};

const HELIOS: &str = include_str!("../../../data/traces/helios-excerpt.csv");

/// 4 racks x 4 hosts x 8 GPUs: 128 GPUs, a fifth of what the excerpt keeps busy.
fn cluster() -> Cluster {
    let yaml = "name: small\nlevels: [rack, host]\ngenerate:\n  counts: [4, 4]\n  node: {gpus: 8, cpus: 64, memory_gib: 512}\n";
    Cluster::from_yaml(yaml, "small").unwrap()
}

/// The excerpt's first `n` jobs, submissions 4x faster so that they queue.
fn helios(n: usize) -> Vec<TraceJob> {
    let options = ReadOptions { gpus_per_host: 8, skip_bad_rows: false };
    let mut jobs = read_trace(TraceFormat::DirLab, HELIOS.as_bytes(), "helios-excerpt.csv", &options).unwrap().jobs;
    jobs.truncate(n);
    for j in &mut jobs {
        j.submit /= 4;
    }
    jobs
}

fn fates(result: &ReplayResult) -> Vec<Fate> {
    result.outcomes.iter().map(|o| o.fate.clone()).collect()
}

#[test]
fn asking_leaves_the_replay_as_it_was_and_the_report_adds_up() {
    let jobs = helios(1_500);
    for name in ["fifo", "easy-backfill"] {
        let policy = PolicyConfig::builtin(name).unwrap();
        let plain = replay(cluster(), policy.clone(), &jobs[..], ReplayOptions::default(), &mut |_| {}).unwrap();
        let options = EtaAccuracyOptions { every: 7, ..EtaAccuracyOptions::default() };
        let report = eta_accuracy(cluster(), policy, &jobs, &options).unwrap();
        assert_eq!(fates(&report.replay), fates(&plain), "{name}: asking changed the replay");
        let queued = plain.outcomes.iter().filter(|o| matches!(o.fate, Fate::Finished { .. })).count();
        assert_eq!(report.samples.len(), queued.div_ceil(7), "{name}: every 7th queued gang is asked");
        assert!(report.samples.iter().all(|s| s.actual.is_some()), "{name}: every asked gang started");
        let all = &report.all;
        assert_eq!(all.jobs + report.unanswered, report.samples.len());
        assert_eq!(all.bands.iter().sum::<usize>(), all.jobs);
        assert!(all.within_range <= all.jobs && all.later + all.earlier <= all.jobs);
        assert!(report.waited.jobs > 50, "{name}: gangs queue on this cluster ({})", report.waited.jobs);
        assert!(report.samples.iter().all(|s| s.estimate().is_none_or(|(e, l)| s.submit <= e && e <= l)));
        let table = report.render_table();
        // Learned runtimes are means by default.
        assert!(table.contains(&format!("| {}, mean | that waited |", report.policy)), "{table}");
        // The same replay asks the same and hears the same.
        let again = eta_accuracy(cluster(), PolicyConfig::builtin(name).unwrap(), &jobs, &options).unwrap();
        assert_eq!(again.samples, report.samples);
    }
}

#[test]
fn exact_estimates_under_strict_fifo_are_met_exactly() {
    // Gangs of 1-4 whole hosts on 16 hosts, each saying exactly how long it runs.
    let jobs: Vec<TraceJob> = (0..300u64)
        .map(|i| {
            let runtime = 300 + (i * 7_919) % 5_000;
            let shape = GangShape::single(1 + (i % 4) as u32, Resources::gpus(8), TopologyRequest::Unconstrained);
            TraceJob {
                id: format!("j{i}"),
                submit: i * 90,
                runtime,
                runtime_estimate: Some(runtime),
                tenant: format!("t{}", i % 3),
                priority: 0,
                gang: shape,
                line: i + 2,
                trial: None,
            }
        })
        .collect();
    let options = EtaAccuracyOptions { every: 1, limits: EtaLimits::exact(), ..EtaAccuracyOptions::default() };
    let report = eta_accuracy(cluster(), PolicyConfig::builtin("fifo").unwrap(), &jobs, &options).unwrap();
    assert_eq!(report.samples.len(), jobs.len());
    assert!(report.waited.jobs > 100, "gangs queue ({})", report.waited.jobs);
    for s in &report.samples {
        let EtaAnswer::Estimated(eta) = &s.answer else { panic!("job {}: {:?}", s.job, s.answer) };
        assert_eq!(Some(eta.likely), s.actual, "job {}", s.job);
    }
    assert_eq!(report.all.bands[0], jobs.len());
    assert_eq!(report.all.within_range, jobs.len());
    // Answers read as JSON with their kind beside their fields, for a CLI or an API.
    let json = serde_json::to_value(&report.samples.last().unwrap().answer).unwrap();
    assert_eq!(json["answer"], "estimated", "{json}");
    assert!(json["likely"].is_u64() && json["waits_for"].is_array(), "{json}");
}
