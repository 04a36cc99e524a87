//! Tests of the fairness metrics on hand-computed replays, and their invariants.

use proptest::prelude::*;
use trainyard_topology::Resources;

use super::*;
use crate::job::TraceJob;

fn job(id: &str, tenant: &str, gpus: u64, submit: u64, runtime: u64) -> TraceJob {
    TraceJob::recorded(id.to_string(), submit, runtime, tenant.to_string(), (1, Resources::gpus(gpus)), 0)
}

fn done(job: TraceJob, start: u64, end: u64) -> JobOutcome {
    JobOutcome { job, fate: Fate::Finished { start, end, backfilled: false, span_level: String::new() } }
}

/// On 16 GPUs: `a` and `b` each start an 8-GPU job at 0; `b` then queues a 16-GPU job at 50
/// that runs 100..200, and `a` a 1-GPU job at 100 that waits behind it. `c` asks for 32 GPUs
/// and is turned away. The horizon is the last submission, 100.
fn sample() -> Vec<JobOutcome> {
    vec![
        done(job("a1", "a", 8, 0, 100), 0, 100),
        done(job("b1", "b", 8, 0, 100), 0, 100),
        JobOutcome { job: job("c1", "c", 32, 20, 50), fate: Fate::Unschedulable { reason: "too big".into() } },
        done(job("b2", "b", 16, 50, 100), 100, 200),
        done(job("a2", "a", 1, 100, 10), 200, 210),
    ]
}

#[test]
fn hand_computed_sample() {
    let f = TenantFairness::new(&sample(), 16);
    assert_eq!((f.tenants, f.service_horizon_s), (3, 100));
    let names: Vec<&str> = f.by_tenant.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    let [a, b, c] = &f.by_tenant[..] else { panic!("three tenants") };

    // a asked for and got 8 x 100 GPU-s by 100; a2 was submitted at the horizon and asks nothing.
    // b got b1's 800 of the 800 + 16 x 50 it asked for. c got none of its 32 x 50.
    assert_eq!((a.service_ratio, b.service_ratio, c.service_ratio), (Some(1.0), Some(0.5), Some(0.0)));
    // (1 + 0.5 + 0)^2 / (3 * 1.25)
    assert_eq!(f.jain_service, Some(0.6));

    // Slowdowns: a1 1, a2 110/10 = 11; b1 1, b2 150/100 = 1.5.
    assert_eq!((a.mean_slowdown, b.mean_slowdown, c.mean_slowdown), (Some(6.0), Some(1.25), None));
    // (6 + 1.25)^2 / (2 * (36 + 1.5625))
    assert_eq!(f.jain_slowdown, Some(0.699667));

    // Alone, each tenant has 16 / 3 = 5 GPUs. a1 holds all 5 for 100 x 8/5 = 160 s, so a2 starts
    // at 160 and ends at 170, 70 s after its submission; b1 likewise takes 160 s and b2 runs
    // 100 x 16/5 = 320 s from 160, 430 s after its submission. ρ: a1 100/160, a2 110/70,
    // b1 100/160, b2 150/430.
    assert_eq!((a.mean_rho, a.max_rho), (Some(1.098214), Some(1.571429)));
    assert_eq!((b.mean_rho, b.max_rho), (Some(0.486919), Some(0.625)));
    assert_eq!((c.mean_rho, c.max_rho), (None, None));
    assert_eq!((f.max_rho, f.rho_at_most_one_share), (Some(1.571429), 0.75));

    assert_eq!((a.jobs, a.finished, b.jobs, b.finished, c.jobs, c.finished), (2, 2, 2, 2, 1, 0));
    assert_eq!((a.gpu_hours, a.gpu_hours_demanded), (0.225, 0.225));
    assert_eq!((b.gpu_hours, c.gpu_hours, c.gpu_hours_demanded), (0.667, 0.0, 0.444));
    assert_eq!((a.mean_jct_s, b.mean_jct_s, c.mean_jct_s), (105.0, 125.0, 0.0));
    assert_eq!(a.queueing_delay, Distribution::from_samples(&[0, 100]));
    assert_eq!(c.queueing_delay.count, 0);
}

#[test]
fn a_stretched_run_counts_only_its_useful_work() {
    // 4 GPUs for 100 s of trace runtime, run at slowdown 2 from 0 to 200: by the horizon 100 it
    // has done half of its 200 s, i.e. 50 s of its work, out of the 100 s it asked for.
    let outcomes = [done(job("s", "a", 4, 0, 100), 0, 200), done(job("t", "b", 1, 100, 10), 100, 110)];
    let f = TenantFairness::new(&outcomes, 8);
    assert_eq!(f.by_tenant[0].service_ratio, Some(0.5));
    assert_eq!((f.by_tenant[0].gpu_hours, f.by_tenant[0].gpu_hours_demanded), (0.222, 0.111));
    // Slowdown uses the time it ran; ρ the trace runtime, so the stretch counts against ρ.
    assert_eq!((f.by_tenant[0].mean_slowdown, f.by_tenant[0].mean_rho), (Some(1.0), Some(2.0)));
    // b asks for nothing before the horizon and is left out of the service index.
    assert_eq!((f.by_tenant[1].service_ratio, f.jain_service), (None, Some(1.0)));
}

#[test]
fn the_private_partition_runs_strict_fifo() {
    // On 4 GPUs: two full-width jobs run back to back; the 1-GPU job behind them may not pass
    // the second one, so it starts at 20. The CPU-only job holds nothing but keeps its place.
    // The last 1-GPU job finds all 4 GPUs held by the two before it and waits for one to end.
    let jobs = [(0, 10, 4), (0, 10, 4), (1, 5, 1), (2, 3, 0), (30, 10, 2), (31, 10, 2), (32, 10, 1)];
    assert_eq!(fifo_ends(&jobs, 4), [10, 20, 25, 23, 40, 41, 50]);
    // A gang twice as wide as the partition runs twice as long on all of it.
    assert_eq!(fifo_ends(&[(0, 10, 8), (0, 10, 1)], 4), [20, 30]);
    assert_eq!(fifo_ends(&[(0, 7, 3)], 2), [11], "10.5 s rounds up");
}

#[test]
fn alone_jcts_split_the_cluster_between_all_tenants() {
    // Two tenants on 8 GPUs: 4 each. t's 4-GPU jobs queue behind each other; u's do not.
    let outcomes = [
        done(job("t1", "t", 4, 0, 10), 0, 10),
        done(job("u1", "u", 2, 0, 10), 0, 10),
        done(job("t2", "t", 4, 0, 10), 0, 10),
        done(job("u2", "u", 2, 5, 10), 5, 15),
    ];
    assert_eq!(alone_jcts(&outcomes, 8), [10, 10, 20, 10]);
    // The shared cluster ran t2 at once: half the time it would have taken alone.
    let f = TenantFairness::new(&outcomes, 8);
    assert_eq!((f.by_tenant[0].mean_rho, f.by_tenant[0].max_rho), (Some(0.75), Some(1.0)));
    // Without GPUs in the cluster the reference is the runtime.
    assert_eq!(alone_jcts(&outcomes, 0), [10, 10, 10, 10]);
}

#[test]
fn jain_edge_cases() {
    assert_eq!(jain(&[]), None);
    assert_eq!(jain(&[0.0, 0.0]), Some(1.0));
    assert_eq!(jain(&[3.0, 3.0, 3.0]), Some(1.0));
    assert_eq!(jain(&[1.0, 0.0, 0.0, 0.0]), Some(0.25));
    assert_eq!(jain(&[7.0]), Some(1.0));
}

#[test]
fn fairness_needs_two_tenants() {
    assert_eq!(TenantFairness::when_shared(&[], 16), None);
    let one = [done(job("x", "a", 1, 0, 5), 0, 5), done(job("y", "a", 1, 0, 5), 0, 5)];
    assert_eq!(TenantFairness::when_shared(&one, 16), None);
    let two = sample();
    assert_eq!(TenantFairness::when_shared(&two, 16), Some(TenantFairness::new(&two, 16)));
    let empty = TenantFairness::new(&[], 16);
    assert_eq!((empty.tenants, empty.jain_service, empty.max_rho, empty.rho_at_most_one_share), (0, None, None, 0.0));
}

#[test]
fn table_lists_tenants_and_the_indices() {
    let t = render_table(&TenantFairness::new(&sample(), 16));
    for needle in [
        "\nTenants (3; service = GPU time received / asked for by the horizon)\n",
        "  Jain index     service 0.600, slowdown 0.700 (1 = equal)\n",
        "  finish-time ρ  max 1.571; ρ <= 1 for 75.0% of finished jobs\n",
        "  horizon        last submission, 1m 40s\n",
    ] {
        assert!(t.contains(needle), "missing {needle:?} in\n{t}");
    }
    let lines: Vec<&str> = t.lines().collect();
    let header = lines[2];
    assert!(header.trim_start().starts_with("tenant") && header.ends_with("ρ max"), "{header}");
    let rows = &lines[4..7];
    for row in rows {
        assert_eq!(row.chars().count(), header.chars().count(), "misaligned {row:?}");
    }
    assert!(rows[0].trim_start().starts_with("a "), "{}", rows[0]);
    assert!(rows[0].ends_with("6.000   1.098  1.571"), "{}", rows[0]);
    assert!(rows[2].trim_start().starts_with("c ") && rows[2].ends_with("-       -      -"), "{}", rows[2]);
}

/// A random replay: each job finishes after waiting, possibly stretched, or is turned away.
fn outcomes_strategy() -> impl Strategy<Value = Vec<JobOutcome>> {
    let one = (0u8..4, 0u64..9, 0u64..1000, 1u64..500, 0u64..300, 1u64..3, any::<bool>());
    prop::collection::vec(one, 0..40).prop_map(|jobs| {
        jobs.into_iter()
            .enumerate()
            .map(|(i, (tenant, gpus, submit, runtime, wait, stretch, turned_away))| {
                let j = job(&format!("j{i}"), &format!("t{tenant}"), gpus, submit, runtime);
                if turned_away && gpus > 6 {
                    JobOutcome { job: j, fate: Fate::Unschedulable { reason: "no".into() } }
                } else {
                    done(j, submit + wait, submit + wait + runtime * stretch)
                }
            })
            .collect()
    })
}

proptest! {
    #[test]
    fn invariants_hold_for_any_replay(outcomes in outcomes_strategy()) {
        let f = TenantFairness::new(&outcomes, 16);
        prop_assert_eq!(f.by_tenant.iter().map(|t| t.jobs).sum::<u64>(), outcomes.len() as u64);
        let finished = outcomes.iter().filter(|o| matches!(o.fate, Fate::Finished { .. })).count() as u64;
        prop_assert_eq!(f.by_tenant.iter().map(|t| t.finished).sum::<u64>(), finished);
        for index in [f.jain_service, f.jain_slowdown].into_iter().flatten() {
            let n = f.tenants as f64;
            prop_assert!(index > 0.0 && index <= 1.0 + 1e-9, "Jain {} out of (0, 1]", index);
            prop_assert!(index >= 1.0 / n - 1e-6, "Jain {} below 1/n", index);
        }
        for t in &f.by_tenant {
            if let Some(s) = t.service_ratio {
                prop_assert!((0.0..=1.0).contains(&s), "service {} of {}", s, t.name);
            }
            if let Some(s) = t.mean_slowdown {
                prop_assert!(s >= 1.0);
            }
            prop_assert_eq!(t.mean_rho.is_some(), t.finished > 0);
            prop_assert!(t.mean_rho <= t.max_rho);
        }
        prop_assert!((0.0..=1.0).contains(&f.rho_at_most_one_share));
        prop_assert_eq!(f.max_rho.is_some(), finished > 0);
        let json = serde_json::to_string(&f).unwrap();
        prop_assert_eq!(json, serde_json::to_string(&TenantFairness::new(&outcomes, 16)).unwrap());
    }

    #[test]
    fn jain_is_scale_free_and_between_one_over_n_and_one(
        values in prop::collection::vec(0.0f64..1e6, 1..20),
        scale in 0.001f64..1000.0,
    ) {
        let j = jain(&values).unwrap();
        prop_assert!(j <= 1.0 + 1e-12 && j >= 1.0 / values.len() as f64 - 1e-12, "{}", j);
        let scaled: Vec<f64> = values.iter().map(|v| v * scale).collect();
        prop_assert!((jain(&scaled).unwrap() - j).abs() < 1e-9);
    }
}
