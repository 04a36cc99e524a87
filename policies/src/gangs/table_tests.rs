//! The gang table's indices agree with its records after any sequence of what the engine is
//! asked to do: submissions, cycles with backfill and preemption, ends, cancellations,
//! unready requeues, lost hosts and policy reloads.

use proptest::prelude::*;
use trainyard_topology::{Cluster, GangShape, HostId, Resources, TopologyRequest};

use crate::gangs::record::GangState;
use crate::{BackfillMode, Engine, GangId, GangRequest, PolicyConfig, PreemptionRules, QueueConfig};

#[derive(Clone, Debug)]
enum Step {
    Submit {
        queue: u8,
        pods: u8,
        gpus: u8,
        priority: u8,
        estimate: u16,
    },
    Schedule,
    Finish(u8),
    Cancel(u8),
    Unready(u8),
    LoseHost(u8),
    Reload,
    /// Files the running gangs by host and by queue, or stops (a scan answers then).
    Index {
        hosts: bool,
        queues: bool,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..3, 1u8..4, 1u8..9, 0u8..3, 1u16..500)
            .prop_map(|(queue, pods, gpus, priority, estimate)| Step::Submit { queue, pods, gpus, priority, estimate }),
        3 => Just(Step::Schedule),
        2 => any::<u8>().prop_map(Step::Finish),
        1 => any::<u8>().prop_map(Step::Cancel),
        1 => any::<u8>().prop_map(Step::Unready),
        1 => any::<u8>().prop_map(Step::LoseHost),
        1 => Just(Step::Reload),
        1 => (any::<bool>(), any::<bool>()).prop_map(|(hosts, queues)| Step::Index { hosts, queues }),
    ]
}

fn policy() -> PolicyConfig {
    let mut p = PolicyConfig::builtin("easy-backfill").unwrap();
    p.backfill = BackfillMode::Easy;
    p.queues = vec![QueueConfig::flat("a", 16), QueueConfig::flat("b", 8), QueueConfig::flat("c", 8)];
    p
}

fn engine() -> Engine {
    let cluster =
        Cluster::from_yaml("name: t\nlevels: [rack, host]\ngenerate:\n  counts: [2, 2]\n  node: {gpus: 8}\n", "t")
            .unwrap();
    let mut e = Engine::new(cluster, policy());
    e.set_preemption(PreemptionRules { within_queue: true, reclaim: true, checkpoint_interval_s: None });
    e
}

/// The `n`-th gang the table holds (by id), in the state `want` says.
fn pick(e: &Engine, n: u8, running: bool) -> Option<GangId> {
    let ids: Vec<GangId> = e
        .state
        .gangs
        .ids()
        .into_iter()
        .filter(|id| matches!(e.state.gangs[id].state, GangState::Running { .. }) == running)
        .collect();
    (!ids.is_empty()).then(|| ids[usize::from(n) % ids.len()])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn indices_agree_with_the_records(steps in prop::collection::vec(step(), 1..60)) {
        let mut e = engine();
        let (mut now, mut next_id) = (0u64, 0u64);
        for step in steps {
            now += 7;
            match step {
                Step::Submit { queue, pods, gpus, priority, estimate } => {
                    let request = GangRequest {
                        id: GangId(next_id),
                        queue: ["a", "b", "c"][usize::from(queue)].into(),
                        priority: i32::from(priority),
                        submit: now,
                        shape: GangShape::single(u32::from(pods), Resources::gpus(u64::from(gpus)), TopologyRequest::Unconstrained),
                        runtime_estimate: Some(u64::from(estimate)),
                        hosts: Default::default(),
                        order: 0,
                    };
                    next_id += 1;
                    e.submit(request).unwrap();
                }
                Step::Schedule => {
                    e.schedule(now).unwrap();
                }
                Step::Finish(n) => {
                    if let Some(id) = pick(&e, n, true) {
                        e.finish(id, now).unwrap();
                    }
                }
                Step::Cancel(n) => {
                    if let Some(id) = pick(&e, n, false) {
                        e.cancel_pending(id).unwrap();
                    }
                }
                Step::Unready(n) => {
                    if let Some(id) = pick(&e, n, true) {
                        e.requeue_unready(id, now).unwrap();
                    }
                }
                Step::LoseHost(n) => {
                    e.set_host_ready(HostId(u32::from(n % 4)), false, now).unwrap();
                    e.schedule(now).unwrap();
                    e.set_host_ready(HostId(u32::from(n % 4)), true, now).unwrap();
                }
                Step::Reload => {
                    e.replace_policy(policy()).unwrap();
                }
                Step::Index { hosts, queues } => {
                    e.file_gangs_by_host(hosts);
                    e.state.gangs.keep_queue_index(queues);
                }
            }
            prop_assert_eq!(e.state.gangs.check(), Ok(()), "after {:?}", step);
            // Filed or scanned, the running gangs by host and by queue are those the records say.
            let running: Vec<(GangId, &crate::gangs::record::GangRecord)> = e
                .state
                .gangs
                .ids()
                .into_iter()
                .map(|id| (id, &e.state.gangs[&id]))
                .filter(|(_, g)| matches!(g.state, GangState::Running { .. }))
                .collect();
            for h in 0..4 {
                let host = HostId(h);
                let want: Vec<GangId> = running
                    .iter()
                    .filter(|(_, g)| matches!(&g.state, GangState::Running { placement, .. } if placement.hosts.contains(&host)))
                    .map(|(id, _)| *id)
                    .collect();
                prop_assert_eq!(e.gangs_on(host).collect::<Vec<_>>(), want, "host {} after {:?}", h, step);
            }
            for q in 0..3 {
                let queue = crate::quota::QueueIdx(q);
                let mut want: Vec<(i32, GangId)> =
                    running.iter().filter(|(_, g)| g.queue == queue).map(|(id, g)| (g.request.priority, *id)).collect();
                want.sort_unstable();
                prop_assert_eq!(e.state.gangs.running_in(queue).collect::<Vec<_>>(), want, "queue {} after {:?}", q, step);
            }
        }
    }
}
