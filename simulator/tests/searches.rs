//! Hyperparameter searches in replays: at most `parallel` trials of a search live at once,
//! every trial accounted for, the best one found, held trials let in as slots free (also when a
//! trial is unschedulable, not when one is preempted), in the result and in the report.

use std::collections::{BTreeSet, BinaryHeap};
use std::path::PathBuf;

use proptest::prelude::*;
use trainyard_policies::PolicyConfig;
use trainyard_simulator::report::{Report, ReportContext};
use trainyard_simulator::searches::SearchSummary;
use trainyard_simulator::trace::{ReadOptions, TraceFormat, read_trace};
use trainyard_simulator::{
    Direction, Fate, JobOutcome, Objective, ReplayOptions, ReplayResult, Search, TraceJob, Trial, replay,
};
use trainyard_topology::{Cluster, Resources};

fn demo() -> Cluster {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/clusters/demo.yaml");
    Cluster::from_yaml(&std::fs::read_to_string(path).unwrap(), "demo").unwrap()
}

/// `hosts` hosts of 8 GPUs in one rack.
fn hosts(hosts: u32) -> Cluster {
    let yaml = format!("name: h\nlevels: [rack, host]\ngenerate:\n  counts: [1, {hosts}]\n  node: {{gpus: 8}}\n");
    Cluster::from_yaml(&yaml, "h.yaml").unwrap()
}

fn fixture() -> Vec<TraceJob> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/traces/search.csv");
    let file = std::fs::File::open(path).unwrap();
    read_trace(TraceFormat::Csv, file, "search.csv", &ReadOptions::default()).unwrap().jobs
}

/// The research queue holds two trials' worth of GPUs; the data queue is not limited.
const CAPPED: &str = "backfill: easy\nqueues: [{name: research, nominal_gpus: 16}]\n";

fn run(cluster: Cluster, policy: PolicyConfig, jobs: &[TraceJob]) -> ReplayResult {
    replay(cluster, policy, jobs, ReplayOptions::default(), &mut |_| {}).unwrap()
}

fn outcome<'a>(result: &'a ReplayResult, id: &str) -> &'a JobOutcome {
    result.outcomes.iter().find(|o| o.job.id == id).unwrap()
}

/// `(released, start, end)` of a finished job.
fn span(result: &ReplayResult, id: &str) -> (u64, u64, u64) {
    let o = outcome(result, id);
    match o.fate {
        Fate::Finished { start, end, .. } => (o.job.submit, start, end),
        Fate::Unschedulable { .. } => panic!("{id} did not run"),
    }
}

/// Checks, from the outcomes alone, each search of `jobs` (the replay's input): its trials were
/// released in trace order, no earlier than their trace submit times, never more than
/// `parallel` live at once, never later than a slot was free, and each got a fate, as the
/// summary says.
fn check_searches(jobs: &[TraceJob], result: &ReplayResult) {
    let names: BTreeSet<&str> = jobs.iter().filter_map(|j| j.trial.as_ref().map(|t| t.search.name.as_str())).collect();
    assert_eq!(result.searches.len(), names.len());
    for summary in &result.searches {
        let mut trials: Vec<usize> = (0..jobs.len())
            .filter(|&i| jobs[i].trial.as_ref().is_some_and(|t| t.search.name == summary.name))
            .collect();
        trials.sort_by_key(|&i| (jobs[i].submit, jobs[i].line, i));
        let parallel = summary.parallel as usize;
        let end = |i: usize| match result.outcomes[i].fate {
            Fate::Finished { end, .. } => end,
            Fate::Unschedulable { .. } => result.outcomes[i].job.submit,
        };
        // Ends of the trials released so far, latest on top of a min-heap.
        let mut live: BinaryHeap<std::cmp::Reverse<u64>> = BinaryHeap::new();
        let mut last_release = 0;
        for &i in &trials {
            let released = result.outcomes[i].job.submit;
            assert!(released >= jobs[i].submit && released >= last_release, "{} released out of order", jobs[i].id);
            last_release = released;
            while live.peek().is_some_and(|e| e.0 <= released) {
                live.pop();
            }
            live.push(std::cmp::Reverse(end(i)));
            assert!(live.len() <= parallel, "{}: {} trials live at {released}", summary.name, live.len());
            if released > jobs[i].submit {
                let freed = trials.iter().any(|&j| j != i && end(j) == released);
                assert!(freed, "{} held until {released}, when no trial of its search ended", jobs[i].id);
            }
        }
        let unschedulable =
            trials.iter().filter(|&&i| matches!(result.outcomes[i].fate, Fate::Unschedulable { .. })).count();
        assert_eq!(summary.trials as usize, trials.len());
        assert_eq!((summary.finished + summary.unschedulable) as usize, trials.len());
        assert_eq!(summary.unschedulable as usize, unschedulable);
        assert!(summary.max_live >= 1 && summary.max_live <= summary.parallel, "{summary:?}");
        let last_end = trials.iter().map(|&i| end(i)).max().unwrap();
        assert_eq!((summary.last_end_s, summary.makespan_s), (last_end, last_end - summary.first_submit_s));
    }
}

#[test]
fn the_fixture_search_runs_two_trials_at_a_time_and_finds_its_best() {
    let jobs = fixture();
    let result = run(demo(), PolicyConfig::from_yaml(CAPPED, "capped.yaml").unwrap(), &jobs);
    check_searches(&jobs, &result);
    let [search] = &result.searches[..] else { panic!("{:?}", result.searches) };
    assert_eq!((search.name.as_str(), search.parallel, search.direction), ("lr-sweep", 2, Direction::Min));
    assert_eq!((search.trials, search.finished, search.unschedulable, search.max_live), (6, 6, 0, 2));
    let best = search.best.as_ref().unwrap();
    assert_eq!((best.id.as_str(), best.objective), ("trial-3", Objective::new(0.351).unwrap()));
    // trial-2 ends at 3000 and lets trial-3 in; `eval`, queued since 1200, takes research's
    // free 8 GPUs first, so trial-3 starts when trial-1 ends, and trial-4 when `eval` does.
    assert_eq!([span(&result, "trial-1"), span(&result, "trial-2")], [(0, 0, 3600), (0, 0, 3000)]);
    assert_eq!(span(&result, "eval"), (1200, 3000, 3900));
    assert_eq!(span(&result, "trial-3"), (3000, 3600, 7800));
    assert_eq!(span(&result, "trial-4"), (3600, 3900, 6300));
    assert_eq!((search.first_submit_s, search.last_end_s), (0, 10_500));
    // Ordinary jobs go as they always do.
    assert_eq!(span(&result, "prep"), (0, 0, 600));
    assert_eq!(result.outcomes.iter().map(|o| o.job.id.as_str()).collect::<Vec<_>>()[..2], ["prep", "trial-1"]);
}

#[test]
fn the_report_shows_searches_only_when_there_are_some() {
    let jobs = fixture();
    let result = run(demo(), PolicyConfig::from_yaml(CAPPED, "capped.yaml").unwrap(), &jobs);
    let report = Report::new(ReportContext::default(), &result.outcomes, 512).with_searches(result.searches.clone());
    let json = report.to_json();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let search = &v["searches"][0];
    assert_eq!((search["name"].as_str(), search["max_live"].as_u64()), (Some("lr-sweep"), Some(2)));
    assert_eq!((search["best"]["id"].as_str(), search["best"]["objective"].as_f64()), (Some("trial-3"), Some(0.351)));
    let back: Vec<SearchSummary> = serde_json::from_value(v["searches"].clone()).unwrap();
    assert_eq!(back, result.searches);
    let table = report.render_table();
    assert!(table.contains("\nSearches (trials of a hyperparameter search, at most `parallel` live at once)\n"));
    let row = table.lines().find(|l| l.trim_start().starts_with("lr-sweep")).unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells, ["lr-sweep", "2", "6", "6", "0", "2", "2h", "55m", "00s", "trial-3", "(min", "0.351)"]);

    let plain: Vec<TraceJob> = jobs.into_iter().map(|j| TraceJob { trial: None, ..j }).collect();
    let result = run(demo(), PolicyConfig::from_yaml(CAPPED, "capped.yaml").unwrap(), &plain);
    assert!(result.searches.is_empty());
    let report = Report::new(ReportContext::default(), &result.outcomes, 512).with_searches(result.searches);
    assert!(!report.to_json().contains("searches") && !report.render_table().contains("Searches"));
}

fn trial(id: &str, submit: u64, runtime: u64, gpus: u64, search: &Search, objective: Option<f64>) -> TraceJob {
    let mut job = TraceJob::recorded(id.into(), submit, runtime, "t".into(), (1, Resources::gpus(gpus)), 0);
    job.trial = Some(Trial { search: search.clone(), objective: objective.and_then(Objective::new) });
    job
}

fn search(name: &str, parallel: u32, direction: Direction) -> Search {
    Search { name: name.into(), parallel, direction }
}

#[test]
fn an_unschedulable_trial_frees_its_slot_at_once_and_reports_nothing() {
    let s = search("acc", 1, Direction::Max);
    let jobs = vec![
        trial("huge", 0, 100, 64, &s, Some(0.99)),
        trial("a", 0, 100, 8, &s, Some(0.7)),
        trial("b", 0, 100, 8, &s, Some(0.8)),
        trial("c", 50, 100, 8, &s, Some(0.8)),
        trial("d", 50, 100, 8, &s, None),
    ];
    let result = run(hosts(2), PolicyConfig::builtin("fifo").unwrap(), &jobs);
    check_searches(&jobs, &result);
    assert!(matches!(outcome(&result, "huge").fate, Fate::Unschedulable { .. }));
    assert_eq!(outcome(&result, "huge").job.submit, 0);
    assert_eq!(
        ["a", "b", "c", "d"].map(|id| span(&result, id)),
        [(0, 0, 100), (100, 100, 200), (200, 200, 300), (300, 300, 400)]
    );
    let s = &result.searches[0];
    assert_eq!((s.finished, s.unschedulable, s.max_live, s.makespan_s), (4, 1, 1, 400));
    // The largest objective wins, the first of equals; `huge` never ran, so its 0.99 is not one.
    assert_eq!(s.best.as_ref().map(|b| b.id.as_str()), Some("b"));
}

#[test]
fn a_preempted_trial_keeps_its_slot() {
    let policy = "backfill: none\npreemption: {within_queue: true}\n";
    let s = search("lr", 1, Direction::Min);
    let mut urgent = TraceJob::recorded("urgent".into(), 100, 50, "t".into(), (1, Resources::gpus(8)), 0);
    urgent.priority = 10;
    let jobs = vec![trial("first", 0, 300, 8, &s, Some(1.0)), trial("second", 0, 300, 8, &s, Some(2.0)), urgent];
    let result = run(hosts(1), PolicyConfig::from_yaml(policy, "p.yaml").unwrap(), &jobs);
    check_searches(&jobs, &result);
    assert_eq!(result.preemptions, [1, 0, 0]);
    // `first` starts over when `urgent` ends at 150; `second` waits for `first` to end,
    // although the host was free of trials while `first` was preempted.
    assert_eq!(span(&result, "first"), (0, 150, 450));
    assert_eq!(span(&result, "second"), (450, 450, 750));
    assert_eq!(result.searches[0].max_live, 1);
}

#[test]
fn searches_are_replayed_the_same_every_time() {
    let jobs = fixture();
    let policy = || PolicyConfig::from_yaml(CAPPED, "capped.yaml").unwrap();
    let (a, b) = (run(demo(), policy(), &jobs), run(demo(), policy(), &jobs));
    assert_eq!((a.outcomes, a.searches), (b.outcomes, b.searches));
}

/// A random search: parallel 1-4, 1-10 trials of 1 pod of 1-8 GPUs (16 now and then: never
/// fits the two hosts' 8-GPU pods), submitted over the first 200 s, each running 1-500 s.
fn search_jobs() -> impl Strategy<Value = Vec<TraceJob>> {
    let trials =
        (0u64..200, 1u64..500, prop_oneof![8 => 1u64..=8, 1 => Just(16u64)], proptest::option::of(-5.0f64..5.0));
    let one = (1u32..=4, prop::bool::ANY, prop::collection::vec(trials, 1..=10));
    (prop::collection::vec(one, 1..=3), prop::collection::vec((0u64..200, 1u64..500), 0..4)).prop_map(
        |(searches, plain)| {
            let mut jobs = Vec::new();
            for (k, (parallel, max, trials)) in searches.into_iter().enumerate() {
                let direction = if max { Direction::Max } else { Direction::Min };
                let s = search(&format!("s{k}"), parallel, direction);
                for (n, (submit, runtime, gpus, objective)) in trials.into_iter().enumerate() {
                    jobs.push(trial(&format!("s{k}-{n}"), submit, runtime, gpus, &s, objective));
                }
            }
            for (n, (submit, runtime)) in plain.into_iter().enumerate() {
                jobs.push(TraceJob::recorded(format!("p{n}"), submit, runtime, "t".into(), (1, Resources::gpus(4)), 0));
            }
            for (line, job) in jobs.iter_mut().enumerate() {
                job.line = line as u64 + 2;
            }
            jobs.sort_by_key(|j| (j.submit, j.line));
            jobs
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn no_search_ever_has_more_live_trials_than_it_allows(jobs in search_jobs()) {
        for policy in ["fifo", "easy-backfill"] {
            let result = run(hosts(2), PolicyConfig::builtin(policy).unwrap(), &jobs);
            prop_assert_eq!(result.outcomes.len(), jobs.len());
            check_searches(&jobs, &result);
            for s in &result.searches {
                // The best trial is a finished trial of the search with the best objective.
                let reported: Vec<(String, Objective)> = result
                    .outcomes
                    .iter()
                    .filter(|o| matches!(o.fate, Fate::Finished { .. }))
                    .filter_map(|o| o.job.trial.as_ref().filter(|t| t.search.name == s.name).and_then(|t| t.objective.map(|v| (o.job.id.clone(), v))))
                    .collect();
                let best = reported.iter().map(|(_, v)| v.value()).fold(None, |b: Option<f64>, v| {
                    Some(b.map_or(v, |b| if s.direction == Direction::Max { b.max(v) } else { b.min(v) }))
                });
                prop_assert_eq!(s.best.as_ref().map(|b| b.objective.value()), best);
            }
        }
    }
}
