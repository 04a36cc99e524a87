//! A generated GPU fleet and timing helpers shared by the controller benchmarks: 10,000 nodes in
//! blocks and racks, TrainJobs from the torch fixture, and per-phase counts with quantiles.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::json;
use trainyard::api::topology::Level;
use trainyard::api::{QUEUE_LABEL, REQUIRED_TOPOLOGY, TopologySpec, TrainJob};
use trainyard::controller::deciding::intent::{GangIntent, Problem};
use trainyard::controller::deciding::plan::{FleetInputs, Inputs, Mode};
use trainyard::controller::deciding::scheduling_loop::Decision;
use trainyard_topology::rng::SplitMix64;

pub const TRAINJOB: &str = include_str!("../bridges/tests/fixtures/torch_multinode.trainjob.yaml");
pub const RUNTIME: &str = include_str!("../bridges/tests/fixtures/torch_multinode.runtime.yaml");

pub const BLOCKS: usize = 10;
pub const RACKS_PER_BLOCK: usize = 25;
pub const HOSTS_PER_RACK: usize = 40;
pub const NODES: usize = BLOCKS * RACKS_PER_BLOCK * HOSTS_PER_RACK;
pub const BLOCK_KEY: &str = "example.com/block";
pub const RACK_KEY: &str = "example.com/rack";
pub const HOSTNAME_KEY: &str = "kubernetes.io/hostname";
pub const GPU: &str = "nvidia.com/gpu";
pub const QUEUES: u64 = 8;
/// Creation times start here (2026-01-01T00:00:00Z), one second apart.
pub const EPOCH: i64 = 1_767_225_600;

pub fn node(i: usize) -> Node {
    let block = i / (RACKS_PER_BLOCK * HOSTS_PER_RACK);
    let rack = i / HOSTS_PER_RACK % RACKS_PER_BLOCK;
    let name = format!("gpu-{i:05}");
    let labels = BTreeMap::from([
        (BLOCK_KEY.to_string(), format!("b{block:02}")),
        // Rack names repeat across blocks, as they do in real clusters.
        (RACK_KEY.to_string(), format!("r{rack:02}")),
        (HOSTNAME_KEY.to_string(), name.clone()),
    ]);
    let resources: BTreeMap<String, Quantity> = [(GPU, "8"), ("cpu", "96"), ("memory", "1024Gi"), ("pods", "110")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect();
    let ready = NodeCondition { type_: "Ready".into(), status: "True".into(), ..NodeCondition::default() };
    Node {
        metadata: ObjectMeta { name: Some(name), labels: Some(labels), ..ObjectMeta::default() },
        spec: None,
        status: Some(NodeStatus {
            allocatable: Some(resources.clone()),
            capacity: Some(resources),
            conditions: Some(vec![ready]),
            ..NodeStatus::default()
        }),
    }
}

pub fn topology() -> TopologySpec {
    let levels = [BLOCK_KEY, RACK_KEY].into_iter().map(|k| Level { node_label: k.into() }).collect();
    TopologySpec { levels, ..TopologySpec::default() }
}

/// `n` TrainJobs from the fixture: 1-16 nodes of 8 GPUs, one of eight queues, a quarter of them
/// required to sit in one rack.
pub fn train_jobs(n: usize, rng: &mut SplitMix64) -> Vec<TrainJob> {
    let mut template: TrainJob = serde_saphyr::from_str(TRAINJOB).expect("fixture TrainJob parses");
    // Standalone mode: trainyard holds an unsuspended TrainJob until it admits it.
    template.spec.0.suspend = None;
    (0..n)
        .map(|i| {
            let mut job = template.clone();
            let queue = rng.below(QUEUES);
            let nodes = 1 + rng.below(16) as i32;
            let meta = &mut job.metadata;
            meta.name = Some(format!("train-{i:05}"));
            meta.namespace = Some(format!("team-{queue}"));
            meta.uid = Some(format!("00000000-0000-4000-8000-{i:012}"));
            let created = Timestamp::from_second(EPOCH + i as i64).expect("generated time in range");
            meta.creation_timestamp = Some(Time(created));
            meta.labels.get_or_insert_with(BTreeMap::new).insert(QUEUE_LABEL.into(), format!("team-{queue}"));
            if rng.below(4) == 0 {
                meta.annotations.get_or_insert_with(BTreeMap::new).insert(REQUIRED_TOPOLOGY.into(), RACK_KEY.into());
            }
            let trainer = job.spec.0.trainer.as_mut().expect("fixture has spec.trainer");
            trainer.num_nodes = Some(nodes);
            trainer.resources_per_node = Some(json!({
                "requests": {"cpu": "6500m", GPU: "8"},
                "limits": {"memory": "32Gi", GPU: "8"},
            }));
            job
        })
        .collect()
}

/// Count, total and per-item times of one phase.
pub struct Phase {
    pub count: usize,
    pub total: Duration,
    pub items: Vec<Duration>,
}

impl Phase {
    pub fn once(count: usize, total: Duration) -> Phase {
        Phase { count, total, items: Vec::new() }
    }

    /// Runs `f` on each item, timing each call.
    pub fn each<T, R>(items: &[T], mut f: impl FnMut(&T) -> R) -> (Phase, Vec<R>) {
        let mut out = Vec::with_capacity(items.len());
        let mut times = Vec::with_capacity(items.len());
        let started = Instant::now();
        for item in items {
            let t = Instant::now();
            out.push(black_box(f(item)));
            times.push(t.elapsed());
        }
        let total = started.elapsed();
        (Phase { count: items.len(), total, items: times }, out)
    }

    pub fn per_second(&self) -> String {
        // A rate of one event says nothing.
        if self.count > 1 { format!("{:.0}", self.count as f64 / self.total.as_secs_f64()) } else { "-".into() }
    }

    pub fn mean(&self) -> Duration {
        self.total / u32::try_from(self.count.max(1)).unwrap_or(u32::MAX)
    }

    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let mut sorted = self.items.clone();
        sorted.sort_unstable();
        let last = sorted.len().checked_sub(1)?;
        sorted.get(((last as f64) * q).round() as usize).copied()
    }

    pub fn print(&self, label: &str, note: &str) {
        let q = |p: f64| self.quantile(p).map_or_else(|| "-".to_string(), us);
        println!(
            "{label:<38} {:>6} {:>11} {:>10} {:>10} {:>10}  {note}",
            self.count,
            ms(self.total),
            self.per_second(),
            q(0.5),
            q(0.99)
        );
    }
}

pub fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

pub fn us(d: Duration) -> String {
    format!("{:.1} us", d.as_secs_f64() * 1e6)
}

/// The live-picture benchmarks' policy for a cluster of `nodes` 8-GPU nodes: research's quota is
/// what 80% of the nodes hold, vision's the whole cluster, prod's 100,000 GPUs; priority classes low
/// (the default) and high.
pub fn bench_policy(nodes: usize) -> String {
    let research = (nodes * 8 * 8 / 10) as u64;
    format!(
        "name: bench\nbackfill: easy\nqueues:\n  - {{name: research, nominal: {{gpus: {research}}}}}\n  - {{name: vision, nominal: {{gpus: {}}}}}\n  - {{name: prod, nominal: {{gpus: 100000}}}}\nundeclared_queues: reject\npriority_classes: [{{name: low, value: 0}}, {{name: high, value: 100}}]\ndefault_priority_class: low\n",
        nodes * 8
    )
}

/// A TrainJob of `nodes` nodes of 8 GPUs in `queue`.
pub fn sized_job(template: &TrainJob, name: &str, queue: &str, nodes: i32, created: i64) -> TrainJob {
    let mut job = template.clone();
    job.spec.0.suspend = None;
    let meta = &mut job.metadata;
    meta.name = Some(name.into());
    meta.namespace = Some("bench".into());
    meta.uid = Some(format!("uid-{name}"));
    meta.resource_version = Some("1".into());
    meta.creation_timestamp = Some(Time(Timestamp::from_second(created).expect("time in range")));
    meta.labels.get_or_insert_with(BTreeMap::new).insert(QUEUE_LABEL.into(), queue.into());
    let trainer = job.spec.0.trainer.as_mut().expect("fixture has spec.trainer");
    trainer.num_nodes = Some(nodes);
    trainer.resources_per_node = Some(serde_json::json!({"requests": {GPU: "8"}, "limits": {GPU: "8"}}));
    job
}

/// The planner's inputs of a reconcile before anything is launched (right after `decision`, if
/// any): no workload, pods or Secret seen yet.
pub fn first_look<'a>(
    job: &'a TrainJob,
    runtime: Option<&'a trainyard_bridges::trainer::TrainingRuntime>,
    intent: &'a Result<GangIntent, Problem>,
    decision: Option<&'a Decision>,
    mode: Mode,
    now: &'a Time,
    fleet: Option<FleetInputs<'a>>,
) -> Inputs<'a> {
    Inputs {
        job,
        runtime,
        intent,
        decision,
        workload: None,
        hostfile_exists: false,
        pods: &[],
        mode,
        gang_api: None,
        default_binder: None,
        now,
        slurm: None,
        arrival: None,
        devices: Default::default(),
        start_timeout: None,
        ssh_secret: None,
        fleet,
    }
}
