//! Tests of the quota usage tracker on hand-computed samples, its series, and its section.

use trainyard_policies::{PolicyConfig, QuotaTree};
use trainyard_topology::Resources;

use super::*;

fn s(used: u64, borrowed: u64, quota: u64, pending: u64) -> QueueSample {
    QueueSample { used_gpus: used, borrowed_gpus: borrowed, quota_gpus: quota, pending_gangs: pending }
}

/// `a` and `b` have 8 GPUs of quota each; `c` has none and first shows up at 100.
fn hand_made() -> UsageTracker {
    let mut t = UsageTracker::new();
    t.observe(10, [("a", s(8, 0, 8, 1)), ("b", s(4, 0, 8, 0))]); // holds 20 s
    t.observe(30, [("a", s(0, 0, 8, 0)), ("b", s(12, 4, 8, 2))]); // holds 70 s
    t.observe(100, [("a", s(8, 0, 8, 0)), ("b", s(8, 0, 8, 0)), ("c", s(5, 0, UNLIMITED, 3))]); // 50 s
    // The last sample has no duration but counts for the largest values.
    t.observe(150, [("a", s(0, 0, 8, 0)), ("b", s(16, 8, 8, 0)), ("c", s(0, 0, UNLIMITED, 0))]);
    t
}

#[test]
fn time_weighted_statistics_by_hand() {
    let u = hand_made().finish().expect("a and b have quotas");
    assert_eq!((u.observed_s, u.series_step_s), (140, 1));
    let names: Vec<&str> = u.queues.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    let [a, b, c] = &u.queues[..] else { panic!("three queues") };

    // a: 8 x 20 + 8 x 50 = 560 GPU-s; at its quota for those 70 s; one gang waits 20 s.
    assert_eq!((a.quota_gpus, a.mean_used_gpus, a.max_used_gpus), (Some(8), 4.0, 8));
    assert_eq!((a.mean_borrowed_gpus, a.max_borrowed_gpus, a.borrowing_share), (0.0, 0, 0.0));
    assert_eq!(a.at_quota_share, 0.5);
    assert_eq!((a.mean_pending_gangs, a.max_pending_gangs), (0.143, 1));

    // b: 4 x 20 + 12 x 70 + 8 x 50 = 1320 GPU-s; borrows 4 for 70 s; at or over 8 for 120 s.
    assert_eq!((b.mean_used_gpus, b.max_used_gpus), (9.429, 16));
    assert_eq!((b.mean_borrowed_gpus, b.max_borrowed_gpus, b.borrowing_share), (2.0, 8, 0.5));
    assert_eq!(b.at_quota_share, 0.857143);
    assert_eq!((b.mean_pending_gangs, b.max_pending_gangs), (1.0, 2));

    // c: 5 x 50 = 250 GPU-s; no quota, so never at it; 3 gangs wait 50 s.
    assert_eq!((c.quota_gpus, c.mean_used_gpus, c.max_used_gpus), (None, 1.786, 5));
    assert_eq!((c.at_quota_share, c.mean_pending_gangs, c.max_pending_gangs), (0.0, 1.071, 3));

    // All queues: 2130 GPU-s used, 280 borrowed; 8 borrowed at once after the last cycle.
    assert_eq!((u.mean_used_gpus, u.mean_borrowed_gpus, u.max_borrowed_gpus), (15.214, 2.0, 8));
    assert_eq!(u.borrowing_share, 0.5);

    // 140 s at one-second buckets: 140 points per queue, each a plain sample; c is idle
    // before it appears.
    for q in &u.queues {
        assert_eq!(q.series.len(), 140, "{}", q.name);
    }
    let at = |q: &QueueUsage, i: usize| (q.series[i].t, q.series[i].used_gpus, q.series[i].borrowed_gpus);
    assert_eq!(
        (at(a, 0), at(b, 20), at(c, 89), at(c, 90)),
        ((10, 8.0, 0.0), (30, 12.0, 4.0), (99, 0.0, 0.0), (100, 5.0, 0.0))
    );
    assert_eq!(c.series[139].pending_gangs, 3.0);
    assert_eq!(u.queue("b"), Some(b));
}

#[test]
fn a_queue_left_out_counts_as_idle_and_time_never_runs_back() {
    let mut t = UsageTracker::new();
    t.observe(0, [("a", s(8, 0, 8, 2))]);
    t.observe(10, std::iter::empty());
    // An earlier time is the previous one: the sample at 10 holds for nothing.
    t.observe(5, [("a", s(4, 0, 8, 0))]);
    t.observe(20, [("a", s(0, 0, 8, 0))]);
    let a = t.finish().unwrap().queues.remove(0);
    // 8 x 10 + 0 x 0 + 4 x 10 over 20 s.
    assert_eq!((a.mean_used_gpus, a.at_quota_share, a.mean_pending_gangs, a.quota_gpus), (6.0, 0.5, 1.0, Some(8)));
}

#[test]
fn without_a_finite_quota_there_is_nothing_to_report() {
    assert_eq!(UsageTracker::new().finish(), None);
    let mut t = UsageTracker::new();
    t.observe(0, [("x", s(8, 0, UNLIMITED, 1))]);
    t.observe(100, [("x", s(0, 0, UNLIMITED, 0))]);
    assert_eq!(t.finish(), None);
    // A single instant with a quota: all zero but present.
    let mut t = UsageTracker::new();
    t.observe(5, [("a", s(8, 8, 0, 1))]);
    let u = t.finish().unwrap();
    assert_eq!((u.observed_s, u.queues[0].mean_used_gpus, u.queues[0].max_borrowed_gpus), (0, 0.0, 8));
    assert!(u.queues[0].series.is_empty());
    // A quota of 0: at it whenever any GPU is held.
    assert!(s(1, 1, 0, 0).at_or_over_quota() && !s(0, 0, 0, 0).at_or_over_quota());
}

#[test]
fn the_series_is_bounded_deterministic_and_keeps_the_integral() {
    let run = || {
        let mut t = UsageTracker::new();
        let (mut now, mut used_s, mut borrowed_s) = (1000u64, 0u128, 0u128);
        for i in 0..5000u64 {
            let late = (i >= 2500).then_some(("late", s(i % 3, 0, UNLIMITED, 0)));
            let b = s(8 + i % 5, i % 5, 8, i % 2);
            let hold = 1 + i % 13;
            used_s += u128::from(hold) * u128::from(b.used_gpus);
            borrowed_s += u128::from(hold) * u128::from(b.borrowed_gpus);
            t.observe(now, [("b", b)].into_iter().chain(late));
            now += hold;
        }
        t.observe(now, [("b", s(0, 0, 8, 0))]);
        (t.finish().unwrap(), now, used_s, borrowed_s)
    };
    let (u, end, used_s, borrowed_s) = run();
    assert_eq!(u.observed_s, end - 1000);
    let b = &u.queues[0];
    assert!(b.series.len() <= MAX_POINTS && b.series.len() > MAX_POINTS / 2, "{}", b.series.len());
    assert!(u.series_step_s.is_power_of_two() && u.series_step_s > 1);
    for pair in b.series.windows(2) {
        assert_eq!(pair[1].t - pair[0].t, u.series_step_s);
        assert_eq!(pair[0].duration_s, u.series_step_s, "only the last bucket is partial");
    }
    assert_eq!(b.series.iter().map(|p| p.duration_s).sum::<u64>(), u.observed_s);
    assert_eq!(b.mean_used_gpus, round_to(used_s as f64 / u.observed_s as f64, 3));
    assert_eq!(b.mean_borrowed_gpus, round_to(borrowed_s as f64 / u.observed_s as f64, 3));
    let resummed: f64 = b.series.iter().map(|p| p.used_gpus * p.duration_s as f64).sum();
    assert!((resummed - used_s as f64).abs() < 0.001 * b.series.len() as f64 * u.series_step_s as f64);
    // The queue that appeared halfway has the same time axis, idle in its first half.
    let late = u.queue("late").unwrap();
    assert_eq!(late.series.len(), b.series.len());
    assert!(late.series.iter().zip(&b.series).all(|(l, b)| l.t == b.t && l.duration_s == b.duration_s));
    assert_eq!(late.series[0].used_gpus, 0.0);
    assert!(late.series.iter().any(|p| p.used_gpus > 0.0));
    assert_eq!(u, run().0);
}

#[test]
fn samples_of_a_quota_tree() {
    let yaml = "queues: [{name: a, nominal: {gpus: 8}}, {name: b, nominal: {gpus: 8}}]\n";
    let mut tree = QuotaTree::new(&PolicyConfig::from_yaml(yaml, "p.yaml").unwrap());
    let b = tree.find("b").unwrap();
    tree.charge(b, Resources::gpus(12));
    let extra = tree.resolve("extra").unwrap();
    tree.charge(extra, Resources::gpus(3));
    let mut pending = vec![0; 8];
    pending[tree.find("a").unwrap().0] = 2;
    let mut t = UsageTracker::new();
    t.observe_tree(0, &tree, &pending);
    t.observe_tree(10, &tree, &[]);
    let u = t.finish().unwrap();
    let got: Vec<(&str, Option<u64>, f64, f64, f64)> = u
        .queues
        .iter()
        .map(|q| (q.name.as_str(), q.quota_gpus, q.mean_used_gpus, q.mean_borrowed_gpus, q.mean_pending_gangs))
        .collect();
    assert_eq!(got, [("a", Some(8), 0.0, 0.0, 2.0), ("b", Some(8), 12.0, 4.0, 0.0), ("extra", None, 3.0, 0.0, 0.0)]);
}

#[test]
fn the_section_lists_every_queue() {
    let t = render_table(&hand_made().finish().unwrap());
    for needle in [
        "\nQuota usage (3 leaf queues, GPUs and waiting gangs, time-weighted over 2m 20s)\n",
        "  queue  quota  used  used max  borrowed  borrowed max  borrowing  at quota  waiting  waiting max\n",
        "  a          8   4.0         8       0.0             0       0.0%     50.0%      0.1            1\n",
        "  b          8   9.4        16       2.0             8      50.0%     85.7%      1.0            2\n",
        "  c          -   1.8         5       0.0             0       0.0%         -      1.1            3\n",
        "  all queues  used 15.2 GPUs, borrowed 2.0 (max 8 at once), some queue borrowing 50.0% of the time\n",
    ] {
        assert!(t.contains(needle), "missing {needle:?} in\n{t}");
    }
}
