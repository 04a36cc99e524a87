//! A small live cluster for the controller's scenario tests: Nodes, Pods, GPU TrainJobs and a
//! runtime as the API server would show them, and a harness that feeds them to the live picture
//! as watch events and can restart it from the objects as they stand.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Container, Node, NodeCondition, NodeSpec, NodeStatus, Pod, PodSpec, PodStatus, ResourceRequirements, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::watcher::Event;
use trainyard::api::{ADMISSION_ANNOTATION, ARRIVAL_ANNOTATION, QUEUE_LABEL, TrainJob};
use trainyard::controller::acting::admission_record::AdmissionRecord;
use trainyard::controller::deciding::plan::Mode;
use trainyard::controller::deciding::scheduling_loop::Decision;
use trainyard::controller::watching::live::{Change, Initial, Live, LiveSettings};
use trainyard::controller::watching::scheduler_inputs::Runtimes;
use trainyard_bridges::trainer as bridge;

pub const T0: u64 = 1_800_000_000;

/// A GPU node of `gpus` GPUs, Ready and schedulable.
pub fn node(name: &str, gpus: u64) -> Node {
    let quantity = |s: &str| Quantity(s.to_string());
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("kubernetes.io/hostname".to_string(), name.to_string())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec::default()),
        status: Some(NodeStatus {
            allocatable: Some(
                [
                    ("nvidia.com/gpu".to_string(), quantity(&gpus.to_string())),
                    ("cpu".to_string(), quantity("96")),
                    ("memory".to_string(), quantity("1024Gi")),
                ]
                .into(),
            ),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..NodeStatus::default()
        }),
    }
}

/// The node with a label.
pub fn labelled(mut n: Node, key: &str, value: &str) -> Node {
    n.metadata.labels.get_or_insert_with(Default::default).insert(key.into(), value.into());
    n
}

/// The node with a taint.
pub fn tainted(mut n: Node, key: &str, value: &str, effect: &str) -> Node {
    let taint = Taint { key: key.into(), value: Some(value.into()), effect: effect.into(), time_added: None };
    n.spec.get_or_insert_with(Default::default).taints.get_or_insert_with(Vec::new).push(taint);
    n
}

/// The node cordoned.
pub fn cordoned(mut n: Node) -> Node {
    n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
    n
}

/// The node NotReady.
pub fn not_ready(mut n: Node) -> Node {
    let conditions = n.status.get_or_insert_with(Default::default).conditions.get_or_insert_with(Vec::new);
    conditions.retain(|c| c.type_ != "Ready");
    conditions.push(NodeCondition { type_: "Ready".into(), status: "Unknown".into(), ..Default::default() });
    n
}

/// A running pod bound to `node` asking for `gpus` GPUs; `gang` is the TrainJob name it belongs to.
pub fn pod(uid: &str, node: &str, gpus: u64, gang: Option<&str>) -> Pod {
    let requests = [("nvidia.com/gpu".to_string(), Quantity(gpus.to_string()))].into();
    let mut labels = BTreeMap::new();
    if let Some(g) = gang {
        labels.insert(trainyard_bridges::GANG_LABEL.to_string(), g.to_string());
    }
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("pod-{uid}")),
            namespace: Some("team".into()),
            uid: Some(uid.into()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            containers: vec![Container {
                name: "main".into(),
                resources: Some(ResourceRequirements { requests: Some(requests), ..Default::default() }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: Some(PodStatus { phase: Some("Running".into()), ..PodStatus::default() }),
    }
}

/// The GPU runtime: one `node` replicated job whose pods may carry a toleration or an affinity.
pub fn runtime_yaml(name: &str, pod_extra: &str) -> String {
    format!(
        "apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {{name: {name}, labels: {{trainer.kubeflow.org/framework: torch}}}}
spec:
  mlPolicy: {{numNodes: 1, torch: {{}}}}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata: {{labels: {{trainer.kubeflow.org/trainjob-ancestor-step: trainer}}}}
          spec:
            template:
              spec:
{pod_extra}                containers:
                - name: node
                  image: example.org/torch:2.9
                  command: [torchrun, train.py]
"
    )
}

/// Runtimes from YAML texts.
pub fn runtimes(texts: &[String]) -> Arc<Runtimes> {
    let mut r = Runtimes::default();
    for text in texts {
        let runtime: bridge::TrainingRuntime = serde_saphyr::from_str(text).expect("runtime parses");
        r.cluster.insert(runtime.metadata.name.clone().unwrap(), runtime);
    }
    Arc::new(r)
}

/// A TrainJob of `nodes` pods of `gpus` GPUs each in queue `queue`, on `runtime`, created at
/// `T0 + created`.
pub fn trainjob(name: &str, runtime: &str, queue: &str, nodes: u32, gpus: u64, created: u64) -> TrainJob {
    let yaml = format!(
        "apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {{name: {name}, namespace: team, uid: uid-{name}}}
spec:
  runtimeRef: {{name: {runtime}, kind: ClusterTrainingRuntime}}
  trainer:
    numNodes: {nodes}
    resourcesPerNode: {{requests: {{nvidia.com/gpu: {gpus}}}, limits: {{nvidia.com/gpu: {gpus}}}}}
"
    );
    let mut job: TrainJob = serde_saphyr::from_str(&yaml).expect("trainjob parses");
    job.metadata.labels.get_or_insert_with(Default::default).insert(QUEUE_LABEL.into(), queue.into());
    job.metadata.creation_timestamp = Some(Time(Timestamp::from_second((T0 + created) as i64).unwrap()));
    job.metadata.generation = Some(1);
    job.metadata.resource_version = Some("1".into());
    job
}

/// The policy of the scenarios: one queue `team` of 64 GPUs.
pub const POLICY: &str = "backfill: easy\nqueues:\n  - {name: team, nominal: {gpus: 64}}\nundeclared_queues: reject\n";

/// The live picture with the objects it was fed, so it can be restarted from them.
pub struct Harness {
    pub live: Live,
    pub now: u64,
    policy: String,
    pub nodes: BTreeMap<String, Node>,
    pub pods: BTreeMap<String, Pod>,
    pub jobs: BTreeMap<String, TrainJob>,
    runtimes: Arc<Runtimes>,
    /// While set, changes reach the objects but not the live picture: its watches are broken
    /// (an API server away, a frozen controller) and only a relist brings it up to date.
    pub missed: bool,
}

fn settings(policy: &str) -> LiveSettings {
    LiveSettings {
        mode: Mode::Standalone,
        policy_text: policy.into(),
        policy_name: "policy.yaml".into(),
        topology: "default".into(),
        slurm_configured: false,
        binders: trainyard::controller::acting::binders::BinderSupport::ANY,
    }
}

/// A fresh start on objects: every kind listed once, then the engine built.
pub fn start(policy: &str, nodes: &[Node], pods: &[Pod], jobs: &[TrainJob], runtimes: Arc<Runtimes>, now: u64) -> Live {
    start_on(policy, &[], nodes, pods, jobs, runtimes, now)
}

/// [`start`] with Topology objects (the one named `default` is used).
pub fn start_on(
    policy: &str,
    topologies: &[trainyard::api::Topology],
    nodes: &[Node],
    pods: &[Pod],
    jobs: &[TrainJob],
    runtimes: Arc<Runtimes>,
    now: u64,
) -> Live {
    let mut initial = Initial::default();
    let changes = listed(Change::Node, nodes)
        .into_iter()
        .chain(listed(Change::Pod, pods))
        .chain(listed(Change::Job, jobs))
        .chain(listed(Change::Queue, &[]))
        .chain(listed(Change::Topology, topologies));
    for c in changes {
        initial.take(c);
    }
    initial.take(Change::Runtimes(runtimes));
    assert!(initial.complete(), "waiting for {:?}", initial.waiting_for());
    Live::start(initial, settings(policy), now).expect("the engine builds").0
}

/// The events of a first list of `items`.
pub fn listed<K: Clone>(wrap: fn(Box<Event<K>>) -> Change, items: &[K]) -> Vec<Change> {
    let mut out = vec![wrap(Box::new(Event::Init))];
    out.extend(items.iter().map(|i| wrap(Box::new(Event::InitApply(i.clone())))));
    out.push(wrap(Box::new(Event::InitDone)));
    out
}

impl Harness {
    pub fn new(nodes: &[Node], runtimes: Arc<Runtimes>) -> Harness {
        Harness::with_policy(POLICY, nodes, runtimes)
    }

    pub fn with_policy(policy: &str, nodes: &[Node], runtimes: Arc<Runtimes>) -> Harness {
        let live = start(policy, nodes, &[], &[], runtimes.clone(), T0);
        let mut h = Harness {
            live,
            now: T0,
            policy: policy.into(),
            nodes: BTreeMap::new(),
            pods: BTreeMap::new(),
            jobs: BTreeMap::new(),
            runtimes,
            missed: false,
        };
        for n in nodes {
            h.nodes.insert(n.metadata.name.clone().unwrap(), n.clone());
        }
        h.cycle();
        h
    }

    /// A node added or changed.
    pub fn node(&mut self, n: Node) {
        self.nodes.insert(n.metadata.name.clone().unwrap(), n.clone());
        self.deliver(Change::Node(Box::new(Event::Apply(n))));
    }

    pub fn delete_node(&mut self, name: &str) {
        let n = self.nodes.remove(name).expect("a known node");
        self.deliver(Change::Node(Box::new(Event::Delete(n))));
    }

    pub fn pod(&mut self, p: Pod) {
        self.pods.insert(p.metadata.uid.clone().unwrap(), p.clone());
        self.deliver(Change::Pod(Box::new(Event::Apply(p))));
    }

    pub fn delete_pod(&mut self, uid: &str) {
        let p = self.pods.remove(uid).expect("a known pod");
        self.deliver(Change::Pod(Box::new(Event::Delete(p))));
    }

    pub fn job(&mut self, j: TrainJob) {
        self.jobs.insert(j.metadata.uid.clone().unwrap(), j.clone());
        self.deliver(Change::Job(Box::new(Event::Apply(j))));
    }

    /// A TrainJob deleted (its finalizer gone), by name in `team`.
    pub fn delete_job(&mut self, name: &str) {
        let j = self.jobs.remove(&format!("uid-{name}")).expect("a known TrainJob");
        self.deliver(Change::Job(Box::new(Event::Delete(j))));
    }

    /// Runs a cycle `dt` seconds later and returns the decisions it changed; the arrival order of
    /// TrainJobs seen for the first time is written on them, as their first reconcile does.
    pub fn advance(&mut self, dt: u64) -> trainyard::controller::watching::live::Changed {
        self.now += dt;
        let changed = self.live.cycle(self.now).0;
        for (uid, n) in self.live.take_new_arrivals() {
            let Some(mut j) = self.jobs.get(&uid).cloned() else { continue };
            j.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(ARRIVAL_ANNOTATION.into(), n.to_string());
            self.job(j);
        }
        changed
    }

    pub fn cycle(&mut self) -> trainyard::controller::watching::live::Changed {
        self.advance(0)
    }

    pub fn decision(&self, name: &str) -> Option<Decision> {
        self.live.decision(&format!("team/{name}")).cloned()
    }

    /// The record a TrainJob was admitted with.
    pub fn admitted(&self, name: &str) -> AdmissionRecord {
        match self.decision(name) {
            Some(Decision::Admit(r)) => r,
            other => panic!("{name} is not being admitted: {other:?}"),
        }
    }

    /// Writes the admission record on the TrainJob, as the reconcile does, and feeds it back.
    pub fn record(&mut self, name: &str, record: &AdmissionRecord) {
        let uid = format!("uid-{name}");
        let mut j = self.jobs[&uid].clone();
        j.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(ADMISSION_ANNOTATION.into(), record.encode());
        let rv = j.metadata.resource_version.as_deref().unwrap_or("1").parse::<u64>().unwrap_or(1) + 1;
        j.metadata.resource_version = Some(rv.to_string());
        self.job(j);
    }

    /// Removes the admission record from the TrainJob, as a reconcile that stopped it does.
    pub fn clear_record(&mut self, name: &str) {
        let uid = format!("uid-{name}");
        let mut j = self.jobs[&uid].clone();
        if let Some(a) = j.metadata.annotations.as_mut() {
            a.remove(ADMISSION_ANNOTATION);
        }
        self.job(j);
    }

    /// Admits a waiting TrainJob all the way: its decision, then its record on the object.
    pub fn admit(&mut self, name: &str) -> AdmissionRecord {
        let r = self.admitted(name);
        self.record(name, &r);
        self.cycle();
        assert!(matches!(self.decision(name), Some(Decision::Running)), "{name}: {:?}", self.decision(name));
        r
    }

    /// A fresh start on the objects as they stand now (a restart of the controller), before its
    /// first cycle: every recorded admission adopted, nothing decided.
    pub fn listed(&self) -> Live {
        let nodes: Vec<Node> = self.nodes.values().cloned().collect();
        let pods: Vec<Pod> = self.pods.values().cloned().collect();
        let jobs: Vec<TrainJob> = self.jobs.values().cloned().collect();
        start(&self.policy, &nodes, &pods, &jobs, self.runtimes.clone(), self.now)
    }

    /// A fresh start after its first cycle.
    pub fn restarted(&self) -> Live {
        let mut live = self.listed();
        live.cycle(self.now);
        live
    }

    /// A watch event, unless the watches are broken.
    fn deliver(&mut self, change: Change) {
        if !self.missed {
            self.live.apply(change, self.now);
        }
    }

    /// Relists the kinds in `order` (0 nodes, 1 pods, 2 TrainJobs), as watches that each
    /// expired do, one after another.
    pub fn relist_in(&mut self, order: &[u8]) {
        for kind in order {
            let changes = match kind {
                0 => listed(Change::Node, &self.nodes.values().cloned().collect::<Vec<_>>()),
                1 => listed(Change::Pod, &self.pods.values().cloned().collect::<Vec<_>>()),
                _ => listed(Change::Job, &self.jobs.values().cloned().collect::<Vec<_>>()),
            };
            for c in changes {
                self.live.apply(c, self.now);
            }
        }
    }

    /// Replays every kind as a relist would: `Init`, every object, `InitDone`.
    pub fn relist(&mut self) {
        let nodes: Vec<Node> = self.nodes.values().cloned().collect();
        let pods: Vec<Pod> = self.pods.values().cloned().collect();
        let jobs: Vec<TrainJob> = self.jobs.values().cloned().collect();
        let changes = listed(Change::Node, &nodes)
            .into_iter()
            .chain(listed(Change::Pod, &pods))
            .chain(listed(Change::Job, &jobs));
        for c in changes {
            self.live.apply(c, self.now);
        }
    }

    /// Hosts of the cluster with their free GPUs and usability, by host path.
    pub fn hosts(live: &Live) -> BTreeMap<String, (u64, u64, bool)> {
        live.scheduling_loop()
            .engine()
            .cluster()
            .canonical()
            .into_iter()
            .map(|(k, h)| (k, (h.free.gpus, h.used.gpus + h.foreign.gpus, h.usable)))
            .collect()
    }
}

/// The hosts of a record, in slot order.
pub fn hosts_of(r: &AdmissionRecord) -> Vec<String> {
    r.nodes.iter().map(|(n, _)| n.clone()).collect()
}
