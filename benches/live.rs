//! The live picture at scale: how long a new TrainJob takes from its watch event to the JobSet its
//! admission applies, through the controller's decide path, on a busy 10,000-node cluster with
//! 5,000 TrainJobs pending; and what one node change and one foreign pod change cost.
//!
//! The cluster: 10,000 nodes of 8 GPUs (10 blocks x 25 racks x 40 hosts), 8,000 of them held by
//! 1,000 running gangs of 8 nodes (adopted from their admission records at start). Pending: 2,500
//! TrainJobs of a queue whose quota is used up, and 2,500 of 2,500 nodes each that wait for capacity
//! (the first holds an EASY reservation). Each sample is a high-priority TrainJob of one node
//! arriving: its event applied (intent rendered), a cycle (which visits every pending gang), and
//! the plan of its reconcile up to the JobSet; it is then deleted again, outside the timing. The
//! baseline is what the controller did before, on every change of any node: read the whole
//! cluster from the Node objects again and build the engine anew. `cargo bench --bench live` runs
//! the full size; without `--bench` (as `cargo test --benches` does) a tenth of it.

mod fleet;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleet::*;
use k8s_openapi::api::core::v1::{Container, Node, Pod, PodSpec, PodStatus, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::watcher::Event;
use trainyard::api::{ADMISSION_ANNOTATION, ClusterTrainingRuntime, PRIORITY_CLASS_LABEL, Topology, TrainJob};
use trainyard::controller::acting::admission_record::AdmissionRecord;
use trainyard::controller::deciding::intent::IntentContext;
use trainyard::controller::deciding::plan::{Action, Mode, plan};
use trainyard::controller::deciding::scheduling_loop::{Decision, JobState, SchedulingLoop};
use trainyard::controller::watching::live::{Change, Initial, Live, LiveSettings};
use trainyard::controller::watching::scheduler_inputs::{Runtimes, cluster_from_nodes, intent_of, job_entry};
use trainyard_policies::PolicyConfig;
use trainyard_topology::rng::SplitMix64;

/// Running gangs hold this many nodes each, inside one rack.
const GANG_NODES: usize = 8;

fn foreign_pod(uid: usize, node: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("p{uid}")),
            namespace: Some("other".into()),
            uid: Some(format!("p{uid}")),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    requests: Some([(GPU.to_string(), Quantity("1".into()))].into()),
                    ..Default::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: Some(PodStatus { phase: Some("Running".into()), ..PodStatus::default() }),
    }
}

fn listed<K: Clone>(wrap: fn(Box<Event<K>>) -> Change, items: Vec<K>) -> Vec<Change> {
    let mut out = vec![wrap(Box::new(Event::Init))];
    out.extend(items.into_iter().map(|i| wrap(Box::new(Event::InitApply(i)))));
    out.push(wrap(Box::new(Event::InitDone)));
    out
}

fn main() -> Result<(), String> {
    let full = std::env::args().any(|a| a == "--bench");
    let (nodes_n, pending_n, samples) = if full { (NODES, 5_000, 300) } else { (NODES / 10, 500, 50) };
    let now = EPOCH + 10_000;
    println!(
        "# Live picture: {nodes_n} nodes x 8 GPUs, {} running gangs of {GANG_NODES} nodes (80%), {pending_n} TrainJobs pending \
         (half over quota, half waiting for capacity); one thread.\n",
        nodes_n * 8 / 10 / GANG_NODES
    );
    let template: TrainJob = serde_saphyr::from_str(TRAINJOB).expect("fixture TrainJob parses");
    let runtime: ClusterTrainingRuntime = serde_saphyr::from_str(RUNTIME).expect("fixture runtime parses");
    let runtimes = Arc::new(Runtimes::index([], [&runtime]));
    let nodes: Vec<Node> = (0..nodes_n).map(node).collect();
    let mut jobs = Vec::new();
    // Running gangs: records on 8 consecutive nodes of one rack.
    let running = nodes_n * 8 / 10 / GANG_NODES;
    for g in 0..running {
        let mut j = sized_job(&template, &format!("run-{g:05}"), "research", GANG_NODES as i32, EPOCH + g as i64);
        let slots = (0..GANG_NODES).map(|k| (format!("gpu-{:05}", g * GANG_NODES + k), 1)).collect();
        let record =
            AdmissionRecord { nodes: slots, domain: None, at: now as u64, cost: 0, slurm: false, devices: Vec::new() };
        j.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(ADMISSION_ANNOTATION.into(), record.encode());
        jobs.push(j);
    }
    let mut rng = SplitMix64::new(7);
    for p in 0..pending_n {
        let (queue, size) =
            if p % 2 == 0 { ("research", 1 + rng.below(8) as i32) } else { ("vision", nodes_n as i32 / 4) };
        jobs.push(sized_job(&template, &format!("wait-{p:05}"), queue, size, EPOCH + 20_000 + p as i64));
    }
    let topology_object = Topology::new("default", topology());
    let settings = LiveSettings {
        mode: Mode::Standalone,
        policy_text: bench_policy(nodes_n),
        policy_name: "bench".into(),
        topology: "default".into(),
        slurm_configured: false,
        binders: trainyard::controller::acting::binders::BinderSupport::ANY,
    };

    let started = Instant::now();
    let mut initial = Initial::default();
    let changes = listed(Change::Node, nodes.clone())
        .into_iter()
        .chain(listed(Change::Pod, Vec::new()))
        .chain(listed(Change::Job, jobs.clone()))
        .chain(listed(Change::Queue, Vec::new()))
        .chain(listed(Change::Topology, vec![topology_object]));
    for c in changes {
        initial.take(c);
    }
    initial.take(Change::Runtimes(runtimes.clone()));
    let (mut live, notes) = Live::start(initial, settings, now as u64).map_err(|e| e.to_string())?;
    if !notes.is_empty() {
        return Err(format!("{notes:?}"));
    }
    let (first, _) = live.cycle(now as u64);
    let build = Phase::once(1, started.elapsed());
    // A live cycle leaves the counts to whoever asks (the metrics do, at most once a second).
    let pending = live.scheduling_loop().pending_counts().0.values().sum::<u64>();
    if pending as usize != pending_n {
        return Err(format!("{pending} pending after the first cycle, want {pending_n} ({} decided)", first.len()));
    }

    // 1. Creation to apply, one high-priority TrainJob at a time.
    let policy_cfg = live.policy().0.clone();
    let ctx = IntentContext::new(&policy_cfg, "nvidia.com/gpu");
    let stamp = Time(Timestamp::from_second(now).expect("time in range"));
    let mut latency = Vec::with_capacity(samples);
    let mut t = now as u64;
    for s in 0..samples {
        let mut j = sized_job(&template, &format!("new-{s:04}"), "prod", 1, now);
        j.metadata.labels.get_or_insert_with(BTreeMap::new).insert(PRIORITY_CLASS_LABEL.into(), "high".into());
        t += 1;
        let began = Instant::now();
        live.apply(Change::Job(Box::new(Event::Apply(j.clone()))), t);
        let (changed, _) = live.cycle(t);
        let Some(Some(decision @ Decision::Admit(_))) = changed.get(&j.key()) else {
            return Err(format!("sample {s}: {:?}", changed.get(&j.key())));
        };
        let (intent, rt) = intent_of(&j, &runtimes, &ctx);
        let actions = plan(&first_look(&j, rt, &intent, Some(decision), Mode::Standalone, &stamp, None));
        if !actions.iter().any(|a| matches!(a, Action::Apply(v) if v["kind"] == "JobSet")) {
            return Err(format!("sample {s}: no JobSet in {actions:?}"));
        }
        latency.push(began.elapsed());
        live.apply(Change::Job(Box::new(Event::Delete(j))), t);
        live.cycle(t);
    }
    let latency = Phase { count: samples, total: latency.iter().sum(), items: latency };

    // 2. A cycle with nothing new.
    let (idle, _) = Phase::each(&vec![(); samples], |_| live.cycle(t));

    // 3. One node change: cordon and uncordon free nodes; then a label change (structural).
    let free: Vec<&Node> = nodes[running * GANG_NODES..].iter().collect();
    let toggles: Vec<Node> = (0..samples * 10)
        .map(|i| {
            let mut n = free[i % free.len()].clone();
            n.spec.get_or_insert_with(Default::default).unschedulable = Some((i / free.len()).is_multiple_of(2));
            n
        })
        .collect();
    let (cordon, _) = Phase::each(&toggles, |n| live.apply(Change::Node(Box::new(Event::Apply(n.clone()))), t));
    let relabels: Vec<Node> = (0..samples * 10)
        .map(|i| {
            let mut n = free[i % free.len()].clone();
            n.metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .insert("example.com/maintenance".into(), format!("w{}", i / free.len()));
            n
        })
        .collect();
    let (relabel, _) = Phase::each(&relabels, |n| live.apply(Change::Node(Box::new(Event::Apply(n.clone()))), t));
    live.cycle(t);

    // 4. One foreign pod change: bound to a node, then gone.
    let pods: Vec<Pod> =
        (0..samples * 10).map(|i| foreign_pod(i, free[i % free.len()].metadata.name.as_deref().unwrap())).collect();
    let (pod_add, _) = Phase::each(&pods, |p| live.apply(Change::Pod(Box::new(Event::Apply(p.clone()))), t));
    let (pod_gone, _) = Phase::each(&pods, |p| live.apply(Change::Pod(Box::new(Event::Delete(p.clone()))), t));
    let report = live.scheduling_loop().hosts_report();
    if report.foreign_gpus != 0 {
        return Err(format!("{} foreign GPUs left", report.foreign_gpus));
    }

    // Baseline: the whole cluster read and the engine built anew (the old way, on any node change).
    let node_refs: Vec<&Node> = nodes.iter().collect();
    let spec = topology();
    let base_policy = PolicyConfig::from_yaml(&bench_policy(nodes_n), "bench").map_err(|e| e.to_string())?;
    let rebuilds: Vec<()> = vec![(); 3];
    let (rebuild, _) = Phase::each(&rebuilds, |_| {
        let cluster = cluster_from_nodes(&node_refs, &spec).expect("cluster");
        let mut looped = SchedulingLoop::new(cluster, base_policy.clone()).expect("loop");
        let entries: Vec<_> = jobs
            .iter()
            .map(|j| {
                let (intent, _) = intent_of(j, &runtimes, &ctx);
                job_entry(j, &intent, Mode::Standalone, 0)
            })
            .filter(|e| !matches!(e.state, JobState::Inactive))
            .collect();
        looped.cycle(&entries, now as u64).0.len()
    });

    println!("{:<44} {:>6} {:>11} {:>10} {:>10} {:>10}", "phase", "count", "total", "per s", "p50", "p99");
    build.print("0. start: lists applied, engine built once", "Live::start + first cycle");
    latency.print("1. creation to JobSet (decide path)", "event + cycle + plan, target p99 < 100 ms");
    idle.print("2. a cycle with nothing new", "");
    cordon.print("3a. node change: cordon / uncordon", "target < 50 us");
    relabel.print("3b. node change: a new label", "structural: eligibility judged again");
    pod_add.print("4a. foreign pod bound", "target < 50 us");
    pod_gone.print("4b. foreign pod gone", "target < 50 us");
    rebuild.print("baseline: rebuild from all nodes", "cluster_from_nodes + SchedulingLoop::new + full cycle");
    println!();
    let ratio = |a: Duration, b: Duration| b.as_secs_f64() / a.as_secs_f64().max(1e-9);
    println!(
        "rebuild / one cordon applied in place: {:.0}x ({} vs {})",
        ratio(cordon.mean(), rebuild.mean()),
        ms(rebuild.mean()),
        us(cordon.mean())
    );
    println!(
        "rebuild / one admission end to end:   {:.1}x ({} vs {})",
        ratio(latency.mean(), rebuild.mean()),
        ms(rebuild.mean()),
        us(latency.mean())
    );
    Ok(())
}
