//! Invariants of the live picture on random histories: node changes, foreign pods, gangs that
//! arrive, are admitted (their record written and pods bound, as reconciles do) and end. After
//! every step the incremental engine holds what one built from scratch on the same objects holds,
//! and a cycle never puts a gang on a host beyond its capacity, foreign usage counted.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;
use trainyard::controller::deciding::scheduling_loop::Decision;

use super::cluster::*;

#[derive(Clone, Debug)]
enum Op {
    AddNode(u8),
    DeleteNode(u8),
    Cordon(u8, bool),
    NotReady(u8, bool),
    Taint(u8, bool),
    Foreign {
        pod: u8,
        node: u8,
        gpus: u64,
    },
    ForeignGone(u8),
    Submit {
        job: u8,
        pods: u32,
        gpus: u64,
    },
    Finish(u8),
    Relist,
    /// The watches break: what follows reaches the objects but not the live picture.
    Outage,
    /// Every watch lists again, in this order of kinds, after an outage.
    Recover([u8; 3]),
    Wait(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => (0u8..6).prop_map(Op::AddNode),
        1 => (0u8..6).prop_map(Op::DeleteNode),
        1 => (0u8..6, any::<bool>()).prop_map(|(n, b)| Op::Cordon(n, b)),
        1 => (0u8..6, any::<bool>()).prop_map(|(n, b)| Op::NotReady(n, b)),
        1 => (0u8..6, any::<bool>()).prop_map(|(n, b)| Op::Taint(n, b)),
        1 => (0u8..6, 0u8..6, 1u64..9).prop_map(|(pod, node, gpus)| Op::Foreign { pod, node, gpus }),
        1 => (0u8..6).prop_map(Op::ForeignGone),
        3 => (0u8..8, 1u32..4, prop::sample::select(vec![2u64, 4, 8])).prop_map(|(job, pods, gpus)| Op::Submit { job, pods, gpus }),
        2 => (0u8..8).prop_map(Op::Finish),
        1 => (0u8..1).prop_map(|_| Op::Relist),
        1 => Just(Op::Outage),
        1 => Just(vec![0u8, 1, 2]).prop_shuffle().prop_map(|o| Op::Recover([o[0], o[1], o[2]])),
        1 => (1u64..120).prop_map(Op::Wait),
    ]
}

/// The node `n{i}` as the history has left it.
#[derive(Clone, Copy, Default)]
struct Shape {
    cordoned: bool,
    not_ready: bool,
    tainted: bool,
}

fn build(i: u8, s: Shape) -> Node {
    let mut n = node(&format!("n{i}"), 8);
    if s.cordoned {
        n = cordoned(n);
    }
    if s.not_ready {
        n = not_ready(n);
    }
    if s.tainted {
        n = tainted(n, "maintenance", "", "NoSchedule");
    }
    n
}

/// Reconciles write the record of every admission or move, the pods of an admission bind, and a
/// stopped gang's pods go and its record is cleared; until nothing is left to carry out.
fn reconcile(h: &mut Harness, gpus: &BTreeMap<String, u64>) {
    for _ in 0..8 {
        if !reconcile_once(h, gpus) {
            return;
        }
    }
}

fn reconcile_once(h: &mut Harness, gpus: &BTreeMap<String, u64>) -> bool {
    let names: Vec<String> = h.jobs.values().map(|j| j.metadata.name.clone().unwrap()).collect();
    let mut acted = false;
    for name in names {
        let decision = h.decision(&name);
        acted |= matches!(
            decision,
            Some(Decision::Admit(_) | Decision::Move(_) | Decision::Requeue { .. } | Decision::Preempt { .. })
        );
        match h.decision(&name) {
            Some(Decision::Admit(r)) => {
                h.record(&name, &r);
                for (i, slot) in r.slots().iter().enumerate() {
                    h.pod(pod(&format!("{name}-{i}"), slot, gpus[&name], Some(&name)));
                }
            }
            Some(Decision::Move(r)) => h.record(&name, &r),
            // The JobSet is deleted (its pods go) and the record cleared.
            Some(Decision::Requeue { .. } | Decision::Preempt { .. }) => {
                let gone: Vec<String> = h.pods.keys().filter(|k| k.starts_with(&format!("{name}-"))).cloned().collect();
                for uid in gone {
                    h.delete_pod(&uid);
                }
                h.clear_record(&name);
            }
            _ => {}
        }
    }
    h.cycle();
    acted
}

fn step(h: &mut Harness, shapes: &mut [Option<Shape>; 6], gpus: &mut BTreeMap<String, u64>, op: &Op) {
    match *op {
        Op::AddNode(i) if shapes[i as usize].is_none() => {
            shapes[i as usize] = Some(Shape::default());
            h.node(build(i, Shape::default()));
        }
        Op::DeleteNode(i) if shapes[i as usize].is_some() => {
            shapes[i as usize] = None;
            h.delete_node(&format!("n{i}"));
        }
        Op::Cordon(i, b) | Op::NotReady(i, b) | Op::Taint(i, b) => {
            let Some(s) = shapes[i as usize].as_mut() else { return };
            match op {
                Op::Cordon(..) => s.cordoned = b,
                Op::NotReady(..) => s.not_ready = b,
                _ => s.tainted = b,
            }
            let s = *s;
            h.node(build(i, s));
        }
        Op::Foreign { pod: p, node: n, gpus } => h.pod(pod(&format!("f{p}"), &format!("n{n}"), gpus, None)),
        Op::ForeignGone(p) if h.pods.contains_key(&format!("f{p}")) => h.delete_pod(&format!("f{p}")),
        Op::Submit { job, pods, gpus: per_pod } if !h.jobs.contains_key(&format!("uid-j{job}")) => {
            gpus.insert(format!("j{job}"), per_pod);
            h.job(trainjob(&format!("j{job}"), "gpu", "team", pods, per_pod, h.now - T0));
        }
        Op::Finish(job) if h.jobs.contains_key(&format!("uid-j{job}")) => {
            let mut j = h.jobs[&format!("uid-j{job}")].clone();
            let done = Condition {
                type_: "Complete".into(),
                status: "True".into(),
                reason: "JobSetCompleted".into(),
                message: String::new(),
                last_transition_time: Time(Timestamp::from_second(h.now as i64).unwrap()),
                observed_generation: None,
            };
            j.status.get_or_insert_with(Default::default).conditions.push(done);
            h.job(j);
            let gone: Vec<String> = h.pods.keys().filter(|k| k.starts_with(&format!("j{job}-"))).cloned().collect();
            for uid in gone {
                h.delete_pod(&uid);
            }
        }
        Op::Relist => h.relist(),
        Op::Outage => h.missed = true,
        Op::Recover(order) => {
            h.missed = false;
            h.relist_in(&order);
        }
        Op::Wait(dt) => {
            h.advance(dt);
        }
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn the_incremental_engine_equals_a_fresh_one_and_never_overcommits(ops in prop::collection::vec(op(), 1..40)) {
        let mut h = Harness::with_policy(
            &format!("{POLICY}node_loss: {{action: replace, grace: 30s}}\n"),
            &[node("n0", 8), node("n1", 8)],
            runtimes(&[runtime_yaml("gpu", "")]),
        );
        let mut shapes: [Option<Shape>; 6] = [Some(Shape::default()), Some(Shape::default()), None, None, None, None];
        let mut gpus = BTreeMap::new();
        for op in &ops {
            step(&mut h, &mut shapes, &mut gpus, op);
            // A controller whose watches are broken decides nothing anyone sees; it is held to
            // the fresh start once every watch listed again, whatever their order.
            if h.missed {
                continue;
            }
            let before = h.live.scheduling_loop().engine().cluster().overcommitted();
            h.cycle();
            let after = h.live.scheduling_loop().engine().cluster().overcommitted();
            prop_assert!(after.iter().all(|x| before.contains(x)), "after {op:?} a cycle over-committed {after:?} (was {before:?})");
            reconcile(&mut h, &gpus);
            // Every decision is written: a fresh start on the objects holds the same hosts...
            prop_assert_eq!(Harness::hosts(&h.live), Harness::hosts(&h.listed()), "after {:?}", op);
            // ...and says the same of every gang that runs or can never run. Where waiting gangs
            // go next may differ between equally good hosts (ties go by host index, which a
            // live cluster hands out in the order nodes came).
            let fresh = h.restarted();
            for j in h.jobs.values() {
                let key = format!("team/{}", j.metadata.name.as_deref().unwrap());
                let (ours, theirs) = (h.live.decision(&key), fresh.decision(&key));
                if matches!(ours, Some(Decision::Running | Decision::Degraded { .. } | Decision::Unschedulable { .. })) {
                    prop_assert_eq!(ours, theirs, "{} after {:?}", key, op);
                }
            }
        }
    }
}
