//! The controller's one live picture of the cluster: watch events of Nodes, Pods, TrainJobs,
//! Queues, the Topology and the runtimes, applied to the scheduling loop as they arrive (keyed
//! by name or uid), and the cycle that turns them into decisions. Pure: the I/O side feeds
//! events in and carries decisions out.
//!
//! A fresh start builds the engine once from the first complete list of every kind ([`Initial`]);
//! from then on every change is applied in place. A watch that restarts (a relist after 410 Gone)
//! replays its objects between `Init` and `InitDone`, and whatever it no longer lists is deleted,
//! so it converges to what a fresh start would build.

mod devices;
mod initial;
mod jobs;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::watcher::Event;
use trainyard_policies::{PolicyConfig, UndeclaredQueues};
use trainyard_topology::{Cluster, Topology as Tree};

pub use devices::{DRA_KINDS, DraChange};
pub use initial::Initial;

use crate::api::{Queue, SlurmTarget, Topology, TopologySpec, TrainJob};
use crate::controller::deciding::plan::Mode;
use crate::controller::deciding::scheduling_loop::{CycleStats, Decision, JobEntry, SchedulingLoop};
use crate::controller::watching::facts::{Levels, read_node, read_pod};
use crate::controller::watching::scheduler_inputs::{Runtimes, Side, policy_with_queues};

/// One watch event of a kind the loop follows.
#[derive(Clone, Debug)]
pub enum Change {
    /// A Node.
    Node(Box<Event<Node>>),
    /// A Pod (any pod: foreign ones take capacity too).
    Pod(Box<Event<Pod>>),
    /// A TrainJob.
    Job(Box<Event<TrainJob>>),
    /// A Queue.
    Queue(Box<Event<Queue>>),
    /// A Topology.
    Topology(Box<Event<Topology>>),
    /// The runtimes, indexed again after one of them changed.
    Runtimes(Arc<Runtimes>),
    /// A DRA object (when the server serves `resource.k8s.io/v1`).
    Dra(Box<DraChange>),
    /// The binders the API server serves changed (a binder's CRDs installed or removed).
    Binders(crate::controller::acting::binders::BinderSupport),
}

/// What the live picture needs to know of the controller's settings.
#[derive(Clone, Debug)]
pub struct LiveSettings {
    /// Standalone or companion.
    pub mode: Mode,
    /// The policy file's text and name.
    pub policy_text: String,
    /// Its name, for errors.
    pub policy_name: String,
    /// The Topology object in use.
    pub topology: String,
    /// Whether the controller runs Slurm queues.
    pub slurm_configured: bool,
    /// The binders the API server serves, and the cluster's default.
    pub binders: crate::controller::acting::binders::BinderSupport,
}

impl LiveSettings {
    /// The levels a Topology describes, under the worker clusters in manager mode.
    fn levels_of(&self, spec: &TopologySpec, nodes: &[&Node]) -> Levels {
        let levels = Levels::of(spec, nodes);
        if self.mode == Mode::Manager { levels.under_clusters() } else { levels }
    }
}

/// A note for the operator: a node left out, a setting that needs a restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// The Node it is about, if one.
    pub node: Option<String>,
    /// What happened.
    pub message: String,
}

/// The decisions a cycle changed, by `namespace/name` (`None`: the TrainJob wants nothing now).
pub type Changed = BTreeMap<String, Option<Decision>>;

/// The live picture.
pub struct Live {
    settings: LiveSettings,
    k8s: SchedulingLoop,
    levels: Levels,
    topology: TopologySpec,
    /// Nodes as last seen (without image lists or managed fields), by name.
    nodes: HashMap<String, Arc<Node>>,
    queues: BTreeMap<String, Arc<Queue>>,
    /// Queue names and generations of the policy in force.
    queues_applied: Vec<(String, i64)>,
    policy: PolicyConfig,
    policy_problem: Option<String>,
    /// A policy other than the bootstrap one (no queues) has been taken.
    policy_taken: bool,
    runtimes: Arc<Runtimes>,
    /// Bumped whenever the runtimes change, so that cached intents are rendered again.
    runtimes_generation: u64,
    jobs: jobs::Jobs,
    /// Objects seen since the last `Init` of each kind being relisted.
    relists: HashMap<&'static str, BTreeSet<String>>,
    /// Decisions published, by `namespace/name`.
    decisions: HashMap<String, Decision>,
    /// Decisions changed since the last cycle returned them (a TrainJob deleted between cycles).
    unreturned: Changed,
    /// Times this picture built its engine: once, at start; every later change is applied in place.
    engine_builds: u64,
    /// DRA objects and the devices claims hold.
    devices: devices::Devices,
    /// Times the engine's devices were replaced whole (a class or template changed, or a pool
    /// several nodes share); slices of node-local pools change only their pools.
    device_rebuilds: u64,
}

impl Live {
    /// Builds the engine once from the first complete lists, then applies every object.
    pub fn start(initial: Initial, settings: LiveSettings, now: u64) -> anyhow::Result<(Live, Vec<Note>)> {
        let topology = initial.topology(&settings.topology);
        let node_objects: Vec<Arc<Node>> = initial.nodes.values().cloned().collect();
        let levels = settings.levels_of(&topology, &node_objects.iter().map(|n| n.as_ref()).collect::<Vec<_>>());
        let file = PolicyConfig::from_yaml(&settings.policy_text, &settings.policy_name)?;
        let mut empty = file.clone();
        empty.queues.clear();
        empty.undeclared_queues = UndeclaredQueues::Reject;
        let mut tree = Tree::empty(&settings.topology, levels.names())?;
        if settings.mode == Mode::Manager {
            // A gang never spans two worker clusters.
            tree.set_span_ceiling(1);
        }
        let k8s = SchedulingLoop::new(Cluster::new(tree), empty.clone())?;
        let mut live = Live {
            settings,
            k8s,
            levels,
            topology,
            nodes: HashMap::new(),
            queues: initial.queues.clone(),
            queues_applied: Vec::new(),
            policy: empty,
            policy_problem: None,
            policy_taken: false,
            runtimes: initial.runtimes.clone().unwrap_or_default(),
            runtimes_generation: 0,
            jobs: jobs::Jobs::default(),
            relists: HashMap::new(),
            decisions: HashMap::new(),
            unreturned: Changed::new(),
            engine_builds: 1,
            devices: devices::Devices::default(),
            device_rebuilds: 0,
        };
        let mut notes = Vec::new();
        for change in initial.dra {
            notes.extend(live.devices.apply(change));
        }
        for node in node_objects {
            notes.extend(live.apply_node(node, now));
        }
        for pod in initial.pods.values() {
            live.apply_pod(pod);
        }
        notes.extend(live.sync_devices(now));
        notes.extend(live.refresh_policy(now));
        live.jobs.start(initial.jobs.values().cloned().collect());
        live.apply_all_jobs(now);
        Ok((live, notes))
    }

    /// Times the engine was built (reported as `trainyard_engine_builds_total`).
    pub fn engine_builds(&self) -> u64 {
        self.engine_builds
    }

    /// Times the engine's devices were replaced whole.
    pub fn device_rebuilds(&self) -> u64 {
        self.device_rebuilds
    }

    /// The Kubernetes cluster's scheduling loop.
    pub fn scheduling_loop(&self) -> &SchedulingLoop {
        &self.k8s
    }

    /// The policy in force (the file plus the Queue objects), and why the Queue objects could not
    /// be taken, if they could not.
    pub fn policy(&self) -> (&PolicyConfig, Option<&str>) {
        (&self.policy, self.policy_problem.as_deref())
    }

    /// The extended resource counted as GPUs.
    pub fn gpu_resource(&self) -> &str {
        &self.levels.gpu_resource
    }

    /// The Queue objects, by name.
    pub fn queues(&self) -> &BTreeMap<String, Arc<Queue>> {
        &self.queues
    }

    /// The Slurm queues among the Queue objects, with their targets.
    pub fn slurm_queues(&self) -> BTreeMap<String, SlurmTarget> {
        self.queues.iter().filter_map(|(n, q)| Some((n.clone(), q.spec.slurm.clone()?))).collect()
    }

    /// The runtimes as last indexed.
    pub fn runtimes(&self) -> Arc<Runtimes> {
        self.runtimes.clone()
    }

    /// The decision published for a TrainJob.
    pub fn decision(&self, key: &str) -> Option<&Decision> {
        self.decisions.get(key)
    }

    /// Applies one watch event at `now`.
    pub fn apply(&mut self, change: Change, now: u64) -> Vec<Note> {
        match change {
            Change::Node(e) => self.relisted(
                "node",
                *e,
                now,
                |live, n, now| live.apply_node(Arc::new(n), now),
                |n| n.metadata.name.clone().unwrap_or_default(),
            ),
            Change::Pod(e) => self.relisted(
                "pod",
                *e,
                now,
                |live, p, _| {
                    live.apply_pod(&p);
                    Vec::new()
                },
                |p| p.metadata.uid.clone().unwrap_or_default(),
            ),
            Change::Job(e) => self.relisted(
                "job",
                *e,
                now,
                |live, j, now| {
                    live.apply_job(Arc::new(j), now);
                    Vec::new()
                },
                |j| j.metadata.uid.clone().unwrap_or_default(),
            ),
            Change::Queue(e) => {
                let done = self.relisted(
                    "queue",
                    *e,
                    now,
                    |live, q, _| {
                        let name = q.metadata.name.clone().unwrap_or_default();
                        live.queues.insert(name, Arc::new(q));
                        Vec::new()
                    },
                    |q| q.metadata.name.clone().unwrap_or_default(),
                );
                let mut notes = done;
                notes.extend(self.refresh_policy(now));
                notes
            }
            Change::Topology(e) => self.topology_changed(*e, now),
            Change::Runtimes(runtimes) => {
                self.runtimes = runtimes;
                self.runtimes_generation += 1;
                self.apply_all_jobs(now);
                Vec::new()
            }
            Change::Dra(change) => self.devices.apply(*change),
            Change::Binders(binders) => {
                self.settings.binders = binders;
                self.apply_all_jobs(now);
                Vec::new()
            }
        }
    }

    /// Brings the engine's devices up to the DRA objects and claims applied since the last call:
    /// the devices replaced when slices, classes or templates changed (nodes whose GPUs come
    /// through DRA then count them), the devices of other claims moved when claims changed.
    /// Returns notes on pools left out, once each.
    pub fn sync_devices(&mut self, now: u64) -> Vec<Note> {
        let mut notes = Vec::new();
        let counted = match self.devices.take_update() {
            None => None,
            Some(devices::DeviceUpdate::Pools(keys, slices)) => match self.k8s.replace_pools(&keys, &slices) {
                Some((nodes, reports)) => {
                    notes.extend(self.devices.report_pools(&keys, &reports));
                    Some(Some(nodes))
                }
                None => Some(self.replace_all(&mut notes)),
            },
            Some(devices::DeviceUpdate::Whole(_)) => Some(self.replace_all(&mut notes)),
        };
        if let Some(only) = counted {
            let gpus = self.k8s.gpu_devices(only.as_ref());
            let looked: Vec<String> = match &only {
                Some(nodes) => nodes.iter().cloned().collect(),
                None => gpus.keys().chain(self.devices.gpus.keys()).cloned().collect(),
            };
            let mut changed = Vec::new();
            for name in looked {
                let now_gpus = gpus.get(&name).copied();
                if self.devices.gpus.get(&name).copied() != now_gpus {
                    match now_gpus {
                        Some(g) => self.devices.gpus.insert(name.clone(), g),
                        None => self.devices.gpus.remove(&name),
                    };
                    changed.push(name);
                }
            }
            for name in changed {
                if let Some(node) = self.nodes.get(&name).cloned() {
                    notes.extend(self.apply_node(node, now));
                }
            }
        }
        if let Some(observed) = self.devices.take_observed() {
            self.k8s.set_observed_devices(observed);
        }
        notes
    }

    /// Applies an event of a kind keyed by `key`, tracking a relist: objects not seen between
    /// `Init` and `InitDone` are deleted.
    fn relisted<K>(
        &mut self,
        kind: &'static str,
        event: Event<K>,
        now: u64,
        apply: impl Fn(&mut Live, K, u64) -> Vec<Note>,
        key: impl Fn(&K) -> String,
    ) -> Vec<Note> {
        match event {
            Event::Init => {
                self.relists.insert(kind, BTreeSet::new());
                Vec::new()
            }
            Event::InitApply(obj) | Event::Apply(obj) => {
                if let Some(seen) = self.relists.get_mut(kind) {
                    seen.insert(key(&obj));
                }
                apply(self, obj, now)
            }
            Event::Delete(obj) => {
                self.delete(kind, &key(&obj), now);
                Vec::new()
            }
            Event::InitDone => {
                let seen = self.relists.remove(kind).unwrap_or_default();
                for gone in self.known(kind).into_iter().filter(|k| !seen.contains(k)) {
                    self.delete(kind, &gone, now);
                }
                Vec::new()
            }
        }
    }

    fn known(&self, kind: &str) -> Vec<String> {
        match kind {
            "node" => self.k8s.node_names(),
            "pod" => self.k8s.pod_uids().map(str::to_string).collect(),
            "job" => self.jobs.uids(),
            "queue" => self.queues.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }

    fn delete(&mut self, kind: &str, key: &str, now: u64) {
        match kind {
            "node" => {
                self.nodes.remove(key);
                self.k8s.delete_node(key, now);
            }
            "pod" => {
                self.devices.pod(key, false);
                self.k8s.delete_pod(key)
            }
            "job" => self.delete_job(key, now),
            "queue" => {
                self.queues.remove(key);
            }
            _ => {}
        }
    }

    fn apply_node(&mut self, node: Arc<Node>, now: u64) -> Vec<Note> {
        let name = node.metadata.name.clone().unwrap_or_default();
        let mut view = read_node(&node, &self.levels);
        // A node whose GPUs come through DRA alone advertises none as an extended resource.
        if let (crate::controller::watching::facts::NodeView::Member(facts), Some(&gpus)) =
            (&mut view, self.devices.gpus.get(&name))
        {
            facts.host.capacity.gpus = facts.host.capacity.gpus.max(gpus);
        }
        self.nodes.insert(name.clone(), node);
        self.k8s.apply_node(&name, view, now).map(|message| Note { node: Some(name), message }).into_iter().collect()
    }

    fn apply_pod(&mut self, pod: &Pod) {
        if let Some(uid) = &pod.metadata.uid {
            let finished =
                pod.status.as_ref().and_then(|s| s.phase.as_deref()).is_some_and(|p| p == "Succeeded" || p == "Failed");
            let of_gang = pod.metadata.labels.as_ref().is_some_and(|l| l.contains_key(trainyard_bridges::GANG_LABEL));
            // A pod on its way out keeps its devices until its claims go: counted as any claim.
            let leaving = finished || pod.metadata.deletion_timestamp.is_some();
            self.devices.pod(uid, of_gang && !leaving);
        }
        match read_pod(pod, &self.levels.gpu_resource) {
            Some(facts) => self.k8s.apply_pod(facts),
            None => {
                if let Some(uid) = &pod.metadata.uid {
                    self.k8s.delete_pod(uid);
                }
            }
        }
    }

    /// The Topology changed: a new node selector is applied to every node at once; new levels
    /// or a new GPU resource need a restart (the tree's levels are fixed when it is built).
    fn topology_changed(&mut self, event: Event<Topology>, now: u64) -> Vec<Note> {
        let name = self.settings.topology.clone();
        let spec = match &event {
            Event::Apply(t) | Event::InitApply(t) if t.metadata.name.as_deref() == Some(name.as_str()) => {
                t.spec.clone()
            }
            Event::Delete(t) if t.metadata.name.as_deref() == Some(name.as_str()) => TopologySpec::hosts_only(),
            _ => return Vec::new(),
        };
        if spec == self.topology {
            return Vec::new();
        }
        let levels = self.settings.levels_of(&spec, &[]);
        let mut notes = Vec::new();
        if levels.upper != self.levels.upper || levels.gpu_resource != self.levels.gpu_resource {
            notes.push(Note {
                node: None,
                message: format!(
                    "Topology {name}: new levels or GPU resource take effect when the controller restarts; the node selector applies now"
                ),
            });
        }
        self.topology = spec.clone();
        self.levels.node_selector = spec.node_selector.clone();
        let nodes: Vec<Arc<Node>> = self.nodes.values().cloned().collect();
        for node in nodes {
            notes.extend(self.apply_node(node, now));
        }
        notes
    }

    /// The policy file plus the Queue objects, taken in place when the Queue specs changed. A
    /// tree that cannot be built keeps the one in force and says why.
    fn refresh_policy(&mut self, now: u64) -> Vec<Note> {
        let applied: Vec<(String, i64)> =
            self.queues.iter().map(|(n, q)| (n.clone(), q.metadata.generation.unwrap_or_default())).collect();
        if applied == self.queues_applied && !self.queues_applied.is_empty() {
            return Vec::new();
        }
        self.queues_applied = applied;
        let refs: Vec<&Queue> = self.queues.values().map(|q| q.as_ref()).collect();
        let built = policy_with_queues(&self.settings.policy_text, &self.settings.policy_name, &refs, Side::Kubernetes)
            .and_then(|policy| self.k8s.replace_policy(policy.clone(), now).map(|_| policy).map_err(|e| e.to_string()));
        match built {
            Ok(policy) => {
                self.policy = policy;
                self.policy_problem = None;
                self.policy_taken = true;
                self.apply_all_jobs(now);
                Vec::new()
            }
            Err(e) => {
                self.policy_problem = Some(e.clone());
                let message = format!("cannot take the Queue objects; the quota tree in force stays: {e}");
                let mut notes = vec![Note { node: None, message }];
                // At start nothing is in force yet but the bootstrap: take the file's own queues.
                if !self.policy_taken {
                    let (text, name) = (&self.settings.policy_text, &self.settings.policy_name);
                    let file_only = policy_with_queues(text, name, &[], Side::Kubernetes)
                        .and_then(|p| self.k8s.replace_policy(p.clone(), now).map(|_| p).map_err(|e| e.to_string()));
                    match file_only {
                        Ok(policy) => {
                            self.policy = policy;
                            self.policy_taken = true;
                            self.apply_all_jobs(now);
                        }
                        Err(e) => {
                            notes.push(Note { node: None, message: format!("the policy file's own queues: {e}") })
                        }
                    }
                }
                notes
            }
        }
    }

    /// Replaces the engine's devices with every DRA object; every node's GPUs are counted again.
    fn replace_all(&mut self, notes: &mut Vec<Note>) -> Option<std::collections::BTreeSet<String>> {
        self.device_rebuilds += 1;
        match self.k8s.replace_devices(self.devices.all_objects()) {
            Ok(reports) => notes.extend(self.devices.report(&reports)),
            Err(e) => notes.push(Note { node: None, message: format!("DRA devices not taken: {e}") }),
        }
        None
    }

    /// Runs one cycle of the Kubernetes loop at `now` and returns the decisions that changed.
    pub fn cycle(&mut self, now: u64) -> (Changed, CycleStats) {
        self.jobs.age_gone();
        for note in self.sync_devices(now) {
            tracing::warn!(node = ?note.node, "{}", note.message);
        }
        let (changed, stats) = self.k8s.step(now);
        for (key, decision) in changed {
            self.publish(&key, decision);
        }
        (self.take_published(), stats)
    }

    /// Records a decision as published; it is returned by the next [`Live::take_published`] (or
    /// cycle) when it differs from the last one.
    pub fn publish(&mut self, key: &str, decision: Option<Decision>) {
        if self.decisions.get(key) == decision.as_ref() {
            return;
        }
        match &decision {
            Some(d) => self.decisions.insert(key.to_string(), d.clone()),
            None => self.decisions.remove(key),
        };
        self.unreturned.insert(key.to_string(), decision);
    }

    /// The decisions changed since the last call.
    pub fn take_published(&mut self) -> Changed {
        std::mem::take(&mut self.unreturned)
    }

    /// The uid of the TrainJob a decision is about, by `namespace/name`.
    pub fn uid_of(&self, key: &str) -> Option<&str> {
        self.jobs.uid_of(key)
    }

    /// A TrainJob's creation time (seconds), by `namespace/name`.
    pub fn created_of(&self, key: &str) -> Option<u64> {
        self.jobs.uid_of(key).and_then(|uid| self.jobs.entry(uid)).map(|e| e.created)
    }

    /// The entries of the TrainJobs whose gangs run (or would run) on Slurm.
    pub fn slurm_entries(&self) -> Vec<JobEntry> {
        self.jobs.slurm_entries()
    }

    /// One TrainJob's entry, by `namespace/name`.
    pub fn entry(&self, key: &str) -> Option<&JobEntry> {
        self.jobs.uid_of(key).and_then(|uid| self.jobs.entry(uid))
    }

    /// The queue a TrainJob's label names, by `namespace/name`; for one deleted before the last
    /// cycle began too, so that its end is reported with its queue.
    pub fn queue_label(&self, key: &str) -> Option<&str> {
        self.jobs.queue_label(key)
    }

    /// The hyperparameter search a TrainJob is a trial of, by `namespace/name`.
    pub fn search_of(&self, key: &str) -> Option<jobs::TrialOf> {
        self.jobs.search_of(key)
    }

    /// Every entry, for Queue status.
    pub fn entries(&self) -> impl Iterator<Item = &JobEntry> + '_ {
        self.jobs.entries()
    }

    /// Arrival orders handed out since the last call (TrainJobs that carry none yet), by uid.
    pub fn take_new_arrivals(&mut self) -> Vec<(String, u64)> {
        self.jobs.take_new_arrivals()
    }

    fn intent_inputs(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        // What an intent reads of the policy: priority classes and which queues run on Slurm.
        serde_json::to_string(&(&self.policy.priority_classes, &self.policy.default_priority_class))
            .unwrap_or_default()
            .hash(&mut h);
        self.slurm_queues()
            .iter()
            .map(|(n, t)| (n, serde_json::to_string(t).unwrap_or_default()))
            .collect::<Vec<_>>()
            .hash(&mut h);
        self.levels.gpu_resource.hash(&mut h);
        self.runtimes_generation.hash(&mut h);
        self.settings.binders.hash(&mut h);
        h.finish()
    }
}
