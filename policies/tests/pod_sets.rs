//! Gangs of several pod sets through the engine: placed whole or not at all, each set with its
//! own shape and constraint, quota charged for all sets, replays deterministic.

use std::collections::BTreeMap;

use proptest::prelude::*;
use trainyard_policies::{Engine, GangId, GangRequest, PolicyConfig, QueueConfig, Submitted, Unschedulable};
use trainyard_topology::{Cluster, GangShape, HostId, PodSetShape, Resources, SliceRequest, TopologyRequest};

fn set(name: &str, pods: u32, gpus: u64) -> PodSetShape {
    PodSetShape::new(name, pods, Resources::gpus(gpus))
}

fn request(id: u64, queue: &str, submit: u64, shape: GangShape) -> GangRequest {
    GangRequest {
        id: GangId(id),
        queue: queue.into(),
        priority: 0,
        submit,
        shape,
        runtime_estimate: Some(100),
        hosts: Default::default(),
        order: 0,
    }
}

fn racks(racks: u32, hosts: u32, gpus: u64) -> Cluster {
    let yaml =
        format!("name: p\nlevels: [rack, host]\ngenerate:\n  counts: [{racks}, {hosts}]\n  node: {{gpus: {gpus}}}\n");
    Cluster::from_yaml(&yaml, "p.yaml").unwrap()
}

fn policy(backfill: bool, preemption: bool, quota: u64) -> PolicyConfig {
    let yaml = format!(
        "backfill: {}\nqueues:\n  - {{name: org}}\n  - {{name: a, parent: org, nominal: {{gpus: {quota}}}}}\n  - {{name: b, parent: org, nominal: {{gpus: {quota}}}}}\nundeclared_queues: reject\npreemption: {{within_queue: {preemption}, reclaim: {preemption}}}\n",
        if backfill { "easy" } else { "none" }
    );
    PolicyConfig::from_yaml(&yaml, "sets.yaml").unwrap()
}

#[test]
fn a_leader_and_its_workers_start_together_and_their_quota_counts_both() {
    let mut p = PolicyConfig::builtin("fifo").unwrap();
    p.queues = vec![QueueConfig::flat("a", 17)];
    let mut e = Engine::new(racks(2, 2, 8), p);
    let mut workers = set("workers", 2, 8);
    workers.topology = TopologyRequest::Required("rack".into());
    let shape = GangShape { sets: vec![set("leader", 1, 1), workers], topology: TopologyRequest::Unconstrained };
    assert_eq!(e.submit(request(1, "a", 0, shape)).unwrap(), Submitted::Queued);
    let cycle = e.schedule(0).unwrap();
    let [admission] = cycle.admitted.as_slice() else { panic!("{cycle:?}") };
    let p = &admission.placement;
    assert_eq!(p.sets.len(), 2);
    assert_eq!((p.set_hosts(0).len(), p.set_hosts(1).len()), (1, 2));
    let topo = e.cluster().topology();
    let rack = |h: HostId| topo.ancestor_at(topo.host_domain(h), 1);
    assert_eq!(rack(p.set_hosts(1)[0]), rack(p.set_hosts(1)[1]), "the workers share a rack");
    assert_eq!(e.quotas().usage(e.quotas().find("a").unwrap()).gpus, 17);
    assert_eq!(e.cluster().total_free().gpus, 32 - 17);
    e.finish(GangId(1), 10).unwrap();
    assert_eq!(e.cluster().total_free().gpus, 32, "every set's pods are released");
}

#[test]
fn a_gang_over_its_quota_in_sum_waits_though_each_set_alone_fits() {
    let mut p = PolicyConfig::builtin("fifo").unwrap();
    p.queues = vec![QueueConfig::flat("a", 16), QueueConfig::flat("b", 16)];
    let mut e = Engine::new(racks(2, 2, 8), p);
    let shape =
        GangShape { sets: vec![set("leader", 1, 8), set("workers", 1, 8)], topology: TopologyRequest::Unconstrained };
    e.submit(request(1, "a", 0, shape.clone())).unwrap();
    e.submit(request(2, "a", 0, shape)).unwrap();
    let cycle = e.schedule(0).unwrap();
    assert_eq!(cycle.admitted.len(), 1, "16 GPUs of quota hold one gang of two 8-GPU sets");
}

#[test]
fn shapes_that_cannot_be_scheduled_as_written_are_refused_naming_the_set() {
    let mut e = Engine::new(racks(2, 2, 8), PolicyConfig::builtin("fifo").unwrap());
    let twice = GangShape { sets: vec![set("w", 1, 1), set("w", 1, 1)], topology: TopologyRequest::Unconstrained };
    let Submitted::Unschedulable(Unschedulable::InvalidShape { set: named, message }) =
        e.submit(request(1, "a", 0, twice)).unwrap()
    else {
        panic!("a repeated name is refused")
    };
    assert_eq!(named.as_deref(), Some("w"));
    assert!(message.contains("name"), "{message}");
    let mut sliced = set("workers", 6, 1);
    sliced.slice = Some(SliceRequest { level: "rack".into(), size: 4 });
    let shape = GangShape { sets: vec![sliced], topology: TopologyRequest::Unconstrained };
    let got = e.submit(request(2, "a", 0, shape)).unwrap();
    assert!(
        matches!(&got, Submitted::Unschedulable(Unschedulable::InvalidShape { set: Some(s), message }) if s == "workers" && message.contains("6 pods")),
        "{got:?}"
    );
    let mut unknown = set("workers", 2, 1);
    unknown.topology = TopologyRequest::Required("zone".into());
    let shape = GangShape { sets: vec![set("leader", 1, 1), unknown], topology: TopologyRequest::Unconstrained };
    assert!(matches!(
        e.submit(request(3, "a", 0, shape)).unwrap(),
        Submitted::Unschedulable(Unschedulable::UnknownLevel { .. })
    ));
    assert_eq!(e.pending_len(), 0, "nothing refused is kept");
}

#[test]
fn a_gang_of_sets_no_domain_can_hold_is_refused_at_once() {
    let mut e = Engine::new(racks(2, 2, 8), PolicyConfig::builtin("fifo").unwrap());
    // 3 hosts of 8 GPUs inside one rack of 2 hosts: never.
    let shape = GangShape {
        sets: vec![set("leader", 1, 8), set("workers", 2, 8)],
        topology: TopologyRequest::Required("rack".into()),
    };
    assert!(matches!(
        e.submit(request(1, "a", 0, shape)).unwrap(),
        Submitted::Unschedulable(Unschedulable::NeverFits(_))
    ));
}

#[derive(Clone, Debug)]
struct Job {
    request: GangRequest,
    runtime: u64,
}

/// Single-set gangs, leader-and-workers gangs (workers possibly inside one rack) and sliced gangs.
fn arb_jobs() -> impl Strategy<Value = Vec<Job>> {
    let row = (0u64..200, 0usize..4, 1u32..=4, 1u64..=4, 1u64..=8, 1u64..80, 0usize..2, -1i32..=1, any::<bool>());
    prop::collection::vec(row, 1..30).prop_map(|rows| {
        rows.into_iter()
            .enumerate()
            .map(|(i, (submit, kind, pods, small, big, runtime, queue, priority, rack))| {
                let topology =
                    if rack { TopologyRequest::Preferred("rack".into()) } else { TopologyRequest::Unconstrained };
                let shape = match kind {
                    0 => GangShape::single(pods, Resources::gpus(big), topology),
                    1 | 2 => {
                        let mut workers = set("workers", pods, big);
                        if kind == 2 {
                            workers.topology = TopologyRequest::Required("rack".into());
                        }
                        GangShape { sets: vec![set("leader", 1, small), workers], topology }
                    }
                    _ => {
                        let mut sliced = set("workers", pods * 2, small);
                        sliced.slice = Some(SliceRequest { level: "rack".into(), size: 2 });
                        GangShape { sets: vec![sliced], topology: TopologyRequest::Unconstrained }
                    }
                };
                let mut request = request(i as u64, ["a", "b"][queue], submit, shape);
                request.priority = priority;
                request.runtime_estimate = Some(runtime);
                Job { request, runtime }
            })
            .collect()
    })
}

/// Every admission of the replay, `(cycle time, gang, hosts)`, to compare replays by.
type Trace = Vec<(u64, u64, Vec<HostId>)>;

fn replay(cluster: &Cluster, policy: &PolicyConfig, jobs: &[Job], quota: u64) -> Result<Trace, TestCaseError> {
    let topo = cluster.topology().clone();
    let mut engine = Engine::new(cluster.clone(), policy.clone());
    let mut arrivals: Vec<&Job> = jobs.iter().collect();
    arrivals.sort_by_key(|j| (j.request.submit, j.request.id));
    let mut next = 0;
    let mut ends: BTreeMap<(u64, u64), ()> = BTreeMap::new();
    let mut trace = Vec::new();
    let mut steps = 0;
    loop {
        steps += 1;
        prop_assert!(steps < 5_000, "the replay does not settle");
        let arrival = arrivals.get(next).map(|j| j.request.submit);
        let end = ends.keys().next().map(|k| k.0);
        let Some(now) = [arrival, end].into_iter().flatten().min() else { break };
        while let Some(&(t, id)) = ends.keys().next().filter(|k| k.0 == now) {
            ends.remove(&(t, id));
            engine.finish(GangId(id), now).unwrap();
        }
        while arrivals.get(next).is_some_and(|j| j.request.submit == now) {
            engine.submit(arrivals[next].request.clone()).unwrap();
            next += 1;
        }
        let cycle = engine.schedule(now).unwrap();
        for p in &cycle.preempted {
            ends.retain(|&(_, id), _| id != p.victim.0);
        }
        for a in &cycle.admitted {
            let job = &jobs[a.id.0 as usize];
            let shape = &job.request.shape;
            let placement = &a.placement;
            // Every set placed whole, with its own pod shape.
            prop_assert_eq!(placement.sets.len(), shape.sets.len());
            for (k, s) in shape.sets.iter().enumerate() {
                prop_assert_eq!(placement.set_hosts(k).len(), s.pods as usize);
                prop_assert_eq!(placement.sets[k].pod, s.pod);
                let hosts = placement.set_hosts(k);
                let domain = |h: HostId, depth: u8| topo.ancestor_at(topo.host_domain(h), depth);
                if let TopologyRequest::Required(_) = s.topology {
                    prop_assert!(
                        hosts.iter().all(|&h| domain(h, 1) == domain(hosts[0], 1)),
                        "set {} spans racks",
                        s.name
                    );
                }
                if let Some(slice) = &s.slice {
                    for chunk in hosts.chunks(slice.size as usize) {
                        prop_assert!(chunk.iter().all(|&h| domain(h, 1) == domain(chunk[0], 1)), "a slice spans racks");
                    }
                }
            }
            trace.push((now, a.id.0, placement.hosts.clone()));
            ends.insert((now + job.runtime, a.id.0), ());
        }
        // No host over capacity; the engine's free capacity is exactly what running pods leave.
        let mut used: BTreeMap<HostId, u64> = BTreeMap::new();
        let mut by_queue: BTreeMap<String, u64> = BTreeMap::new();
        for (id, placement, _) in engine.running() {
            for (h, pod) in placement.pods() {
                *used.entry(h).or_default() += pod.gpus;
            }
            let job = &jobs[id.0 as usize];
            *by_queue.entry(job.request.queue.clone()).or_default() += job.request.shape.total().gpus;
        }
        for h in topo.hosts() {
            let cap = topo.host_capacity(h).gpus;
            let u = used.get(&h).copied().unwrap_or(0);
            prop_assert!(u <= cap, "host {:?} holds {} of {} GPUs", h, u, cap);
            prop_assert_eq!(engine.cluster().host_free(h).gpus, cap - u);
        }
        // The cohort lends between a and b, but together they never pass their sum.
        prop_assert!(by_queue.values().sum::<u64>() <= 2 * quota, "quota exceeded: {:?}", by_queue);
    }
    for p in engine.pending().collect::<Vec<_>>() {
        prop_assert!(false, "gang {} never ran: {:?}", p, engine.pending_status(p));
    }
    Ok(trace)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(120))]

    #[test]
    fn sets_are_placed_whole_quota_holds_and_replays_repeat(
        hosts in 1u32..=4, gpus in 4u64..=8, jobs in arb_jobs(), backfill in any::<bool>(), preemption in any::<bool>(), quota in 8u64..=48,
    ) {
        let cluster = racks(2, hosts, gpus);
        let policy = policy(backfill, preemption, quota);
        // Gangs that can never run are refused at submission; the rest must all run.
        let first = replay(&cluster, &policy, &jobs, quota)?;
        let second = replay(&cluster, &policy, &jobs, quota)?;
        prop_assert_eq!(first, second);
    }
}

/// A launcher without GPUs and 4-GPU workers that each want one NUMA node, on p4d hosts (two
/// NUMA nodes of four GPUs): the workers get whole NUMA nodes, a second gang the GPUs left, and
/// a gang that asks more than the NUMA nodes hold waits though the GPU count would take it.
#[test]
fn workers_that_ask_for_a_gpu_layout_get_whole_numa_nodes() {
    use trainyard_topology::GpuLayout;
    let yaml = "name: p4d\nlevels: [rack, host]\ngenerate:\n  counts: [1, 2]\n  node: {gpus: 8, cpus: 96}\n  intra_node: aws-p4d\n";
    let mut p = PolicyConfig::builtin("fifo").unwrap();
    p.queues = vec![QueueConfig::flat("a", 16)];
    let mut e = Engine::new(Cluster::from_yaml(yaml, "p4d.yaml").unwrap(), p);
    let launcher = PodSetShape::new("launcher", 1, Resources { cpu_milli: 1000, ..Resources::ZERO });
    let workers = PodSetShape { gpu_layout: Some(GpuLayout::Numa), ..set("workers", 3, 4) };
    let shape = GangShape { sets: vec![launcher, workers], topology: TopologyRequest::Unconstrained };
    assert_eq!(e.submit(request(1, "a", 0, shape)).unwrap(), Submitted::Queued);
    // Three 1-GPU pods next: five GPUs are left, in one NUMA node and a half.
    assert_eq!(
        e.submit(request(2, "a", 1, GangShape::single(3, Resources::gpus(1), TopologyRequest::Unconstrained))).unwrap(),
        Submitted::Queued
    );
    let numa = PodSetShape { gpu_layout: Some(GpuLayout::Numa), ..set("node", 1, 4) };
    let third = GangShape { sets: vec![numa], topology: TopologyRequest::Unconstrained };
    assert_eq!(e.submit(request(3, "a", 2, third)).unwrap(), Submitted::Queued);
    let cycle = e.schedule(0).unwrap();
    let admitted: Vec<u64> = cycle.admitted.iter().map(|a| a.id.0).collect();
    assert_eq!(admitted, [1, 2]);
    let first = &cycle.admitted[0].placement;
    assert_eq!(first.gpus.len(), 4);
    assert_eq!(first.gpus[0], 0, "the launcher asks for no GPU");
    let topo = e.cluster().topology();
    for (&h, &mask) in first.set_hosts(1).iter().zip(&first.gpus[1..]) {
        let layout = e.cluster().host_layout(h).unwrap().layout();
        let numa: std::collections::BTreeSet<i32> =
            (0..8u8).filter(|g| mask & (1 << g) != 0).map(|g| layout.numa_of(g).unwrap().id).collect();
        assert_eq!((mask.count_ones(), numa.len()), (4, 1), "{} GPUs {mask:b}", topo.host_name(h));
    }
    assert_eq!(e.cluster().total_free().gpus, 16 - 12 - 3);
    // 1 GPU is free; the 4-GPU NUMA gang waits, and starts once the workers are gone.
    e.finish(GangId(1), 10).unwrap();
    let cycle = e.schedule(10).unwrap();
    assert_eq!(cycle.admitted.iter().map(|a| a.id.0).collect::<Vec<_>>(), [3]);
    e.finish(GangId(2), 20).unwrap();
    e.finish(GangId(3), 20).unwrap();
    let c = e.cluster();
    assert!(c.topology().hosts().all(|h| c.host_gpus_taken(h) == 0), "every GPU index is given back");
}
