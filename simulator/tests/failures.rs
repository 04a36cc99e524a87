//! Host failures in replays: the same seed gives the same replay; every job still finishes
//! once and runs at least its runtime; the policy's `node_loss` action decides whether a
//! crashed gang waits for the repair, is requeued or gets a spare host; and a replay without
//! a failure model is the one it always was.

use trainyard_policies::PolicyConfig;
use trainyard_simulator::failures::{FailureModel, FailureSummary};
use trainyard_simulator::trace::{SynthConfig, synthesize};
use trainyard_simulator::{Fate, ReplayOptions, ReplayResult, TraceJob, replay};
use trainyard_topology::Cluster;

fn cluster() -> Cluster {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/clusters/demo.yaml");
    Cluster::from_yaml(&std::fs::read_to_string(path).unwrap(), "demo").unwrap()
}

fn jobs() -> Vec<TraceJob> {
    synthesize(&SynthConfig { seed: 11, jobs: 600, mean_interarrival_s: 60.0, ..SynthConfig::default() })
}

/// EASY backfill with a node-loss section.
fn policy(node_loss: &str) -> PolicyConfig {
    let yaml = format!("name: t\nbackfill: easy\ndefault_runtime_estimate: 1h\n{node_loss}");
    PolicyConfig::from_yaml(&yaml, "t.yaml").unwrap()
}

/// Frequent failures, so a short trace sees many.
fn model(seed: u64) -> FailureModel {
    FailureModel { mtbf_s: 40 * 3600, repair_s: 2 * 3600, checkpoint_interval_s: 1800, restart_s: 300, seed }
}

fn run(policy: PolicyConfig, failures: Option<FailureModel>) -> ReplayResult {
    let options = ReplayOptions { failures, ..ReplayOptions::default() };
    replay(cluster(), policy, jobs(), options, &mut |_| {}).unwrap()
}

fn summary(r: &ReplayResult) -> &FailureSummary {
    r.failures.as_ref().expect("a failure model gives a summary")
}

/// Every job finished once and was given at least its runtime between its last start and
/// its end, or more in all (crashed work is redone, restarts cost time).
#[track_caller]
fn every_job_finished(r: &ReplayResult) {
    for o in &r.outcomes {
        let Fate::Finished { start, end, .. } = o.fate else { panic!("{} did not finish: {:?}", o.job.id, o.fate) };
        assert!(start >= o.job.submit && end > start, "{}: {start}..{end}", o.job.id);
    }
}

#[test]
fn the_same_seed_gives_the_same_replay_and_another_seed_another() {
    let a = run(policy(""), Some(model(1)));
    let b = run(policy(""), Some(model(1)));
    let c = run(policy(""), Some(model(2)));
    assert_eq!(a.outcomes, b.outcomes);
    assert_eq!(a.failures, b.failures);
    assert_ne!(a.failures, c.failures);
}

#[test]
fn waiting_gangs_resume_in_place_and_lose_work() {
    let calm = run(policy(""), None);
    assert!(calm.failures.is_none());
    let r = run(policy(""), Some(model(1)));
    every_job_finished(&r);
    let s = summary(&r);
    assert!(s.host_failures > 10, "{s:?}");
    assert!(s.gang_interruptions > 0, "{s:?}");
    assert_eq!(s.resumed_in_place, s.gang_interruptions, "wait: every crashed gang resumes where it was: {s:?}");
    assert_eq!((s.requeued, s.replaced), (0, 0));
    assert!(s.lost_gpu_hours > 0.0 && s.down_gpu_hours > 0.0 && s.down_share > 0.0, "{s:?}");
    // Crashed gangs take longer: their end comes later than in the calm replay for some job,
    // and the last job ends no earlier.
    let end = |r: &ReplayResult| {
        r.outcomes.iter().map(|o| if let Fate::Finished { end, .. } = o.fate { end } else { 0 }).max().unwrap()
    };
    assert!(end(&r) >= end(&calm));
}

#[test]
fn requeued_gangs_go_back_to_the_queue_after_the_grace() {
    let r = run(policy("node_loss: {action: requeue, grace: 5m}\n"), Some(model(1)));
    every_job_finished(&r);
    let s = summary(&r);
    assert!(s.requeued > 0, "{s:?}");
    // A gang requeued or back in place: every crash ends one way or the other.
    assert_eq!(s.requeued + s.resumed_in_place + s.replaced, s.gang_interruptions, "{s:?}");
}

#[test]
fn spare_hosts_replace_failed_ones() {
    let r = run(policy("node_loss: {action: replace, grace: 5m}\n"), Some(model(1)));
    every_job_finished(&r);
    let s = summary(&r);
    assert!(s.replaced > 0, "{s:?}");
    assert_eq!(s.requeued + s.resumed_in_place + s.replaced, s.gang_interruptions, "{s:?}");
}

#[test]
fn a_replay_without_failures_is_unchanged_by_the_model_code() {
    // A failure model whose hosts never fail within the trace gives the calm replay.
    let calm = run(policy(""), None);
    let never = FailureModel { mtbf_s: u64::MAX / 4, ..model(1) };
    let r = run(policy(""), Some(never));
    assert_eq!(r.outcomes, calm.outcomes);
    assert_eq!(summary(&r).host_failures, 0);
}
