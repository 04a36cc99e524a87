//! Start-time estimates (`estimates/eta.rs`) against the engine itself: when estimates are exact, the
//! real engine starts a gang when its estimate said; the lower bound never passes the estimate;
//! asking changes nothing; and the answers for gangs that are unknown, running, or never fit.

use proptest::prelude::*;
use trainyard_topology::{Cluster, GangShape, Resources, TopologyRequest};

use crate::gangs::record::GangState;
use crate::{
    BackfillMode, Engine, EtaAnswer, EtaLimits, GangId, GangRequest, PolicyConfig, QueueConfig, RuntimeHistory,
};

/// A gang: (pods, GPUs per pod, runtime, whether it says its runtime, queue); a queue number
/// of 2 or more asks for its pods inside one rack, and of 4 or more for priority 1.
type Spec = (u8, u8, u16, bool, u8);

fn cluster(racks: u8, hosts: u8) -> Cluster {
    let yaml = format!("name: t\nlevels: [rack, host]\ngenerate:\n  counts: [{racks}, {hosts}]\n  node: {{gpus: 8}}\n");
    Cluster::from_yaml(&yaml, "t").unwrap()
}

fn policy(mode: BackfillMode, quota: Option<u64>) -> PolicyConfig {
    let mut p = PolicyConfig::builtin("fifo").unwrap();
    p.backfill = mode;
    p.default_runtime_estimate_s = 3_600;
    if let Some(gpus) = quota {
        p.queues = vec![QueueConfig::flat("q0", gpus), QueueConfig::flat("q1", gpus)];
    }
    p
}

fn request(id: u64, (pods, gpus, runtime, says, queue): Spec, submit: u64) -> GangRequest {
    let topology = if queue >= 2 { TopologyRequest::Required("rack".into()) } else { TopologyRequest::Unconstrained };
    GangRequest {
        id: GangId(id),
        queue: format!("q{}", queue % 2),
        priority: i32::from(queue >= 4),
        submit,
        shape: GangShape::single(u32::from(pods), Resources::gpus(u64::from(gpus)), topology),
        runtime_estimate: says.then_some(u64::from(runtime)),
        hosts: Default::default(),
        order: 0,
    }
}

/// Runs the real engine until `target` starts, each gang ending exactly `end_of` after its
/// start, a cycle at every instant something ends; returns when it started, and every
/// admission (gang, time, hosts) on the way.
fn drive(e: &mut Engine, mut now: u64, target: GangId, end_of: impl Fn(GangId) -> u64) -> (Option<u64>, Vec<String>) {
    let mut log = Vec::new();
    let mut ends: std::collections::BTreeSet<(u64, GangId)> = std::collections::BTreeSet::new();
    for (id, _, start) in e.running() {
        ends.insert((start + end_of(id), id));
    }
    loop {
        let cycle = e.schedule(now).unwrap();
        for a in &cycle.admitted {
            ends.insert((now + end_of(a.id), a.id));
            log.push(format!("{} at {now} on {:?}", a.id, a.placement.hosts));
        }
        if let Some(start) = e.running().find(|(id, _, _)| *id == target).map(|(_, _, s)| s) {
            return (Some(start), log);
        }
        let Some(&(end, _)) = ends.first() else { return (None, log) };
        now = end.max(now);
        while let Some(&(end, id)) = ends.first()
            && end <= now
        {
            ends.pop_first();
            e.finish(id, now).unwrap();
        }
    }
}

/// An engine with `specs` submitted at t=0 and one cycle run; the gangs that still wait.
fn engine(mode: BackfillMode, quota: Option<u64>, specs: &[Spec]) -> (Engine, Vec<GangId>) {
    let mut e = Engine::new(cluster(2, 3), policy(mode, quota));
    for (i, &s) in specs.iter().enumerate() {
        e.submit(request(i as u64, s, 0)).unwrap();
    }
    e.schedule(0).unwrap();
    let waiting = e.pending().collect();
    (e, waiting)
}

fn spec() -> impl Strategy<Value = Spec> {
    (1u8..4, prop_oneof![Just(1u8), Just(2), Just(4), Just(8)], 1u16..600, any::<bool>(), 0u8..6)
}

#[test]
fn with_exact_estimates_the_gang_starts_when_its_estimate_said() {
    let specs: Vec<Spec> =
        (0u8..12).map(|i| (1 + i % 3, [8, 4, 2][usize::from(i % 3)], 100 + 37 * u16::from(i), true, i % 2)).collect();
    for mode in [BackfillMode::None, BackfillMode::Easy] {
        let (e, waiting) = engine(mode, None, &specs);
        assert!(waiting.len() > 4, "{mode:?}: gangs wait");
        for &target in &waiting {
            let EtaAnswer::Estimated(eta) = e.eta_within(target, 0, None, EtaLimits::exact()) else {
                panic!("{mode:?}: an estimate")
            };
            assert!(eta.earliest <= eta.likely);
            let mut real = e.clone();
            let (start, _) = drive(&mut real, 0, target, |id| u64::from(specs[id.0 as usize].2));
            assert_eq!(start, Some(eta.likely), "{mode:?}: gang {target}");
        }
    }
}

#[test]
fn the_queue_median_stands_in_for_a_missing_estimate() {
    // One gang fills the cluster without saying how long it runs; its queue's gangs ran 600 s.
    let mut e = Engine::new(cluster(1, 2), policy(BackfillMode::None, None));
    e.submit(request(0, (2, 8, 0, false, 0), 0)).unwrap();
    e.submit(request(1, (1, 8, 50, true, 1), 0)).unwrap();
    e.schedule(0).unwrap();
    let mut history = RuntimeHistory::new(16, 3);
    let without = e.eta(GangId(1), 10, Some(&history));
    for s in [500, 600, 700] {
        history.record("q0", s);
    }
    let EtaAnswer::Estimated(default) = without else { panic!("an estimate") };
    assert_eq!((default.earliest, default.likely), (3_600, 3_600), "the policy's default before");
    let EtaAnswer::Estimated(learned) = e.eta(GangId(1), 10, Some(&history)) else { panic!("an estimate") };
    assert_eq!((learned.earliest, learned.likely), (600, 600));
    assert_eq!((learned.waits_for.as_slice(), learned.waits_for_total), (&[GangId(0)][..], 1));
    // A gang past its expected end is assumed to end at once.
    let EtaAnswer::Estimated(late) = e.eta(GangId(1), 900, Some(&history)) else { panic!("an estimate") };
    assert_eq!(late.likely, 900);
}

#[test]
fn unknown_running_and_unschedulable_gangs_say_so() {
    let mut e = Engine::new(cluster(1, 2), policy(BackfillMode::None, None));
    e.submit(request(0, (1, 8, 100, true, 0), 0)).unwrap();
    e.submit(request(1, (1, 8, 100, true, 0), 0)).unwrap();
    e.submit(request(2, (2, 8, 100, true, 0), 0)).unwrap();
    e.schedule(0).unwrap();
    assert_eq!(e.eta(GangId(9), 0, None), EtaAnswer::Unknown);
    assert_eq!(e.eta(GangId(0), 5, None), EtaAnswer::Running { start: 0 });
    let EtaAnswer::Estimated(eta) = e.eta(GangId(2), 0, None) else { panic!("an estimate") };
    assert_eq!(eta.likely, 100);
    // Both hosts run a gang; once one is gone, gang 2 can never fit.
    let host = e.cluster().topology().hosts().next().unwrap();
    e.remove_host(host, 1).unwrap();
    let EtaAnswer::Unschedulable { reason } = e.eta(GangId(2), 1, None) else { panic!("unschedulable") };
    assert!(reason.contains("empty cluster"), "{reason}");
}

#[test]
fn a_run_past_its_limits_gives_up() {
    let (e, waiting) = engine(BackfillMode::None, None, &[(4, 8, 500, true, 0), (4, 8, 500, true, 0)]);
    let limits = EtaLimits { horizon_s: 100, max_cycles: 10, ..EtaLimits::default() };
    let answer = e.eta_within(waiting[0], 0, None, limits);
    assert_eq!(answer, EtaAnswer::BeyondHorizon { searched_until: 0, cycles: 1, ahead: 0 });
}

#[test]
fn asking_changes_nothing_and_answers_the_same_twice() {
    let specs: Vec<Spec> = (0u8..10).map(|i| (1 + i % 2, 8, 100 + 10 * u16::from(i), i % 3 != 0, i)).collect();
    let (asked, waiting) = engine(BackfillMode::Easy, Some(24), &specs);
    let mut history = RuntimeHistory::new(8, 1);
    history.record("q0", 40);
    let first: Vec<EtaAnswer> = waiting.iter().map(|&id| asked.eta(id, 0, Some(&history))).collect();
    let again: Vec<EtaAnswer> = waiting.iter().map(|&id| asked.eta(id, 0, Some(&history))).collect();
    assert_eq!(first, again);
    assert!(first.iter().all(|a| matches!(a, EtaAnswer::Estimated(_))), "{first:?}");
    let (mut fresh, _) = engine(BackfillMode::Easy, Some(24), &specs);
    let mut asked = asked;
    let runtime = |id: GangId| u64::from(specs[id.0 as usize].2);
    let last = *waiting.last().unwrap();
    assert_eq!(drive(&mut asked, 0, last, runtime), drive(&mut fresh, 0, last, runtime));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// The lower bound never passes the estimate, under either policy, with or without quotas
    /// and learned runtimes; and with exact estimates the real engine starts the gang exactly
    /// then (under EASY as far as its reservation holds, which it does in these small clusters).
    #[test]
    fn earliest_is_at_most_likely_and_exact_estimates_are_kept(
        specs in proptest::collection::vec(spec(), 2..24),
        easy in any::<bool>(),
        quota in prop_oneof![Just(None), (8u64..40).prop_map(Some)],
        pick in any::<prop::sample::Index>(),
        learned in proptest::collection::vec(1u64..900, 0..6),
    ) {
        let mode = if easy { BackfillMode::Easy } else { BackfillMode::None };
        let (e, waiting) = engine(mode, quota, &specs);
        prop_assume!(!waiting.is_empty());
        let target = waiting[pick.index(waiting.len())];
        let mut history = RuntimeHistory::new(8, 1);
        learned.iter().for_each(|&s| history.record("q1", s));
        match e.eta(target, 0, Some(&history)) {
            EtaAnswer::Estimated(eta) => prop_assert!(eta.earliest <= eta.likely, "{:?}", eta),
            other => prop_assert!(false, "no estimate: {:?}", other),
        }
        // Ends taken together from the first cycle on, in steps of a quarter of the time run.
        let coarse = EtaLimits { exact_host_cycles: 0, coarse_divisor: 4, ..EtaLimits::default() };
        match e.eta_within(target, 0, Some(&history), coarse) {
            EtaAnswer::Estimated(eta) => prop_assert!(eta.earliest <= eta.likely, "{:?}", eta),
            other => prop_assert!(false, "no estimate: {:?}", other),
        }
        {
            let EtaAnswer::Estimated(eta) = e.eta_within(target, 0, None, EtaLimits::exact()) else {
                unreachable!("answered above")
            };
            // Gangs without an estimate run the policy's default, as the engine assumes.
            let runtime = |id: GangId| {
                let (_, _, r, says, _) = specs[id.0 as usize];
                if says { u64::from(r) } else { 3_600 }
            };
            prop_assert!(eta.exact);
            let mut real = e.clone();
            prop_assert_eq!(drive(&mut real, 0, target, runtime).0, Some(eta.likely));
            let running = matches!(real.state.gangs[&target].state, GangState::Running { .. });
            prop_assert!(running);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// A what-if copy that infers failures and refusals from other requests', carries failures
    /// across ends and passes over settled gangs by what it kept answers exactly as one that
    /// searches every placement and says why every gang waits, exact or not, with quotas and
    /// learned runtimes, for every gang waiting.
    #[test]
    fn inferring_copies_answer_as_searching_ones(
        specs in proptest::collection::vec(spec(), 8..40),
        easy in any::<bool>(),
        quota in prop_oneof![Just(None), (8u64..40).prop_map(Some)],
        learned in proptest::collection::vec(1u64..900, 0..6),
        coarse in any::<bool>(),
    ) {
        let mode = if easy { BackfillMode::Easy } else { BackfillMode::None };
        let (e, waiting) = engine(mode, quota, &specs);
        let mut history = RuntimeHistory::new(8, 1);
        learned.iter().for_each(|&s| history.record("q1", s));
        let limits = if coarse {
            EtaLimits { exact_host_cycles: 8, coarse_divisor: 4, ..EtaLimits::default() }
        } else {
            EtaLimits::exact()
        };
        for &target in &waiting {
            let inferred = e.eta_within(target, 0, Some(&history), limits);
            prop_assert_eq!(&inferred, &e.eta_searching_all(target, 0, Some(&history), limits), "gang {}", target);
        }
    }
}

#[test]
fn ends_taken_together_say_so_and_stay_close() {
    // Twenty one-host gangs on four hosts: the last waits for sixteen ends at many instants.
    let specs: Vec<Spec> = (0u8..20).map(|i| (1, 8, 100 + (u16::from(i) * 37) % 200, true, 0)).collect();
    let mut e = Engine::new(cluster(1, 4), policy(BackfillMode::None, None));
    for (i, &s) in specs.iter().enumerate() {
        e.submit(request(i as u64, s, 0)).unwrap();
    }
    e.schedule(0).unwrap();
    let target = GangId(19);
    let EtaAnswer::Estimated(exact) = e.eta_within(target, 0, None, EtaLimits::exact()) else { panic!("estimate") };
    assert!(exact.exact);
    let mut real = e.clone();
    assert_eq!(drive(&mut real, 0, target, |id| u64::from(specs[id.0 as usize].2)).0, Some(exact.likely));
    // Two cycles (times four hosts) at each end, then steps of half the time run so far.
    let coarse = EtaLimits { exact_host_cycles: 8, coarse_divisor: 2, ..EtaLimits::default() };
    let EtaAnswer::Estimated(eta) = e.eta_within(target, 0, None, coarse) else { panic!("estimate") };
    assert!(!eta.exact);
    assert!(eta.cycles < exact.cycles, "{} cycles, {} exact", eta.cycles, exact.cycles);
    assert!(eta.likely.abs_diff(exact.likely) <= exact.likely / 2, "{eta:?} against {exact:?}");
}
