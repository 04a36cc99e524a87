//! Quota usage in replays: a queue borrowing its cohort's idle GPUs and the owner reclaiming
//! them, checked in the replay result, the JSON report and the table.

use trainyard_policies::PolicyConfig;
use trainyard_simulator::report::{Report, ReportContext};
use trainyard_simulator::{Fate, ReplayOptions, ReplayResult, TraceJob, replay};
use trainyard_topology::{Cluster, Resources};

/// Two hosts of 8 GPUs.
fn tiny() -> Cluster {
    let yaml = "name: tiny\nlevels: [rack, host]\ngenerate:\n  counts: [1, 2]\n  node: {gpus: 8, cpus: 64}\n";
    Cluster::from_yaml(yaml, "tiny.yaml").unwrap()
}

fn job(id: &str, tenant: &str, submit: u64, runtime: u64) -> TraceJob {
    TraceJob::recorded(id.into(), submit, runtime, tenant.into(), (1, Resources::gpus(8)), 0)
}

/// `b` starts two 8-GPU jobs at 0, one of them on `a`'s idle quota; `a` asks for its 8 GPUs at 100.
fn jobs() -> Vec<TraceJob> {
    vec![job("b1", "b", 0, 1000), job("b2", "b", 0, 1000), job("a1", "a", 100, 200)]
}

fn run(policy_yaml: &str) -> ReplayResult {
    let policy = PolicyConfig::from_yaml(policy_yaml, "policy.yaml").unwrap();
    replay(tiny(), policy, jobs(), ReplayOptions::default(), &mut |_| {}).unwrap()
}

fn span(result: &ReplayResult, i: usize) -> (u64, u64) {
    match result.outcomes[i].fate {
        Fate::Finished { start, end, .. } => (start, end),
        Fate::Unschedulable { .. } => panic!("{} did not run", result.outcomes[i].job.id),
    }
}

const COHORT: &str = "backfill: none
root_cohort: true
queues: [{name: a, nominal: {gpus: 8}}, {name: b, nominal: {gpus: 8}}]
fair_sharing: {}
preemption: {reclaim: true}
";

#[test]
fn a_borrower_is_reclaimed_and_the_report_shows_it_over_time() {
    let result = run(COHORT);
    // a1 takes its quota back from b1 at 100; b1 starts over (no checkpoints) when a1 ends.
    assert_eq!(result.preemptions, [1, 0, 0]);
    assert_eq!((span(&result, 0), span(&result, 1), span(&result, 2)), ((300, 1300), (0, 1000), (100, 300)));

    let usage = result.quota_usage.clone().expect("both queues have quotas");
    // Cycles at 0, 100, 300, 1000 and 1300.
    assert_eq!(usage.observed_s, 1300);
    let (a, b) = (usage.queue("a").unwrap(), usage.queue("b").unwrap());
    // b borrows 8 GPUs over [0, 100) and again over [300, 1000), when a is idle.
    assert_eq!((b.quota_gpus, b.max_borrowed_gpus, b.mean_borrowed_gpus), (Some(8), 8, 4.923));
    assert_eq!((b.borrowing_share, b.max_used_gpus), (0.615385, 16));
    // b1 waits over [100, 300) while a1 runs on a's own quota, never borrowing.
    assert_eq!((b.mean_pending_gangs, b.max_pending_gangs), (0.154, 1));
    assert_eq!((a.mean_used_gpus, a.at_quota_share, a.max_borrowed_gpus), (1.231, 0.153846, 0));
    assert_eq!((usage.max_borrowed_gpus, usage.borrowing_share), (8, 0.615385));

    // Over time (1300 s in 163 buckets of 8 s): b borrows from the start, a reclaims its
    // quota at 100, b borrows again once a1 ends at 300 and stops when b2 ends at 1000.
    assert_eq!((usage.series_step_s, b.series.len(), a.series.len()), (8, 163, 163));
    let at = |t: u64| {
        let i = (t / 8) as usize;
        assert_eq!(b.series[i].t, t);
        (b.series[i].borrowed_gpus, a.series[i].used_gpus, b.series[i].pending_gangs)
    };
    assert_eq!(
        [at(0), at(96), at(200), at(296), at(304), at(1000)],
        [(8.0, 0.0, 0.0), (4.0, 4.0, 0.5), (0.0, 8.0, 1.0), (4.0, 4.0, 0.5), (8.0, 0.0, 0.0), (0.0, 0.0, 0.0)]
    );
    assert_eq!(b.series.iter().map(|p| p.duration_s).sum::<u64>(), 1300);

    let report = Report::new(ReportContext::default(), &result.outcomes, 16).with_quota_usage(result.quota_usage);
    let json = report.to_json();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    // Appended after the existing sections: no top-level key follows it.
    let at = json.find("\n  \"quota_usage\": {").unwrap();
    assert!(json.find("\n  \"tenants\": {").unwrap() < at);
    assert!(!json[at + 1..].contains("\n  \""), "a key after quota_usage");
    assert_eq!(v["quota_usage"]["queues"][1]["name"], "b");
    assert_eq!(v["quota_usage"]["queues"][1]["max_borrowed_gpus"], 8);
    assert!(v["quota_usage"]["queues"][1]["series"][0]["borrowed_gpus"].as_f64().unwrap() > 0.0);
    let table = report.render_table();
    assert!(table.contains("\nQuota usage (2 leaf queues, "), "{table}");
    let row = "\n  b          8  12.9        16       4.9             8      61.5%    100.0%      0.2            1\n";
    assert!(table.contains(row), "{table}");
    assert!(table.find("\nTenants (").unwrap() < table.find("\nQuota usage").unwrap());
}

#[test]
fn flat_quotas_never_borrow_and_no_quota_means_no_section() {
    // The old flat form cannot exceed its quota: b2 waits for b1 instead of borrowing.
    let flat = run("backfill: none\nqueues: [{name: a, nominal_gpus: 8}, {name: b, nominal_gpus: 8}]\n");
    assert_eq!(flat.preemptions, [0, 0, 0]);
    assert_eq!(span(&flat, 1), (1000, 2000));
    let usage = flat.quota_usage.expect("quotas are finite");
    let b = usage.queue("b").unwrap();
    assert_eq!((b.max_borrowed_gpus, b.max_used_gpus, b.at_quota_share), (0, 8, 1.0));
    assert_eq!((b.mean_pending_gangs, usage.borrowing_share), (0.5, 0.0));

    let open = run("backfill: none\n");
    assert_eq!(open.quota_usage, None);
    let report = Report::new(ReportContext::default(), &open.outcomes, 16).with_quota_usage(open.quota_usage);
    assert!(!report.to_json().contains("quota_usage"));
    assert!(!report.render_table().contains("Quota usage"));
}

#[test]
fn a_borrower_admitted_this_instant_is_not_reclaimed_at_once() {
    // Fair sharing puts `b` (share 0) ahead of `a` (8 of 16 GPUs) at 10: b1 starts on a's idle
    // quota. a2 may not undo that admission in the same cycle (it would waste the start), so
    // it waits for b1 to end; b1 runs once, from 10 to 110.
    let policy = "backfill: none
root_cohort: true
queues: [{name: a, nominal: {gpus: 16}}, {name: b, nominal: {gpus: 4}}]
fair_sharing: {}
preemption: {reclaim: true}
";
    let jobs = [job("a1", "a", 0, 1000), job("b1", "b", 10, 100), job("a2", "a", 10, 100)];
    let policy = PolicyConfig::from_yaml(policy, "policy.yaml").unwrap();
    let result = replay(tiny(), policy, &jobs, ReplayOptions::default(), &mut |_| {}).unwrap();
    assert_eq!(result.preemptions, [0, 0, 0]);
    assert_eq!((span(&result, 0), span(&result, 1), span(&result, 2)), ((0, 1000), (10, 110), (110, 210)));
    let usage = result.quota_usage.unwrap();
    let b = usage.queue("b").unwrap();
    // b borrows 4 GPUs while b1 runs, 100 of the 1000 s, and never waits.
    assert_eq!((b.max_borrowed_gpus, b.mean_borrowed_gpus, b.borrowing_share), (4, 0.4, 0.1));
    assert_eq!(b.max_pending_gangs, 0);
}
