//! Manager mode on random histories: TrainJobs submitted to the manager, workers lost and back,
//! gangs ending on their workers, TrainJobs deleted, and the manager cut short after any step of
//! any reconcile or restarted from what the API servers show. The manager is the real one: the
//! fleet merge, the live picture in manager mode and each TrainJob's plan; the API servers are
//! modelled by applying each step. Invariants: never two copies of a gang on the workers the
//! manager reaches, the gangs it admits never over the fleet quota, and once every worker is back
//! and the manager settles, every TrainJob accounted for: running as exactly one copy where its
//! record says, or waiting with no copy anywhere.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::watcher::Event;
use proptest::prelude::*;
use trainyard::api::worker_cluster::FLEET_MANAGED_BY;
use trainyard::api::{ADMISSION_ANNOTATION, ARRIVAL_ANNOTATION, FINALIZER, TrainJob};
use trainyard::controller::acting::binders::BinderSupport;
use trainyard::controller::deciding::intent::IntentContext;
use trainyard::controller::deciding::plan::{
    Action, DeviceCommit, FleetInputs, Inputs, Mode, acting_on, plan, recorded,
};
use trainyard::controller::deciding::scheduling_loop::Decision;
use trainyard::controller::fleet::copies::{copy_view, origin_of, placed_in, wanted};
use trainyard::controller::fleet::merge::{FleetMerge, WorkerEvent};
use trainyard::controller::watching::live::{Change, Initial, Live, LiveSettings};
use trainyard::controller::watching::scheduler_inputs::{Runtimes, intent_of};
use trainyard_policies::PolicyConfig;

use super::cluster::{T0, listed, node, runtime_yaml, runtimes, trainjob};

const POLICY: &str = "backfill: easy\nqueues:\n  - {name: team, nominal: {gpus: 40}}\nundeclared_queues: reject\nnode_loss: {action: requeue, grace: 30s}\n";
const QUOTA_GPUS: u64 = 40;
const GPUS: u64 = 8;

#[derive(Clone, Debug)]
enum Op {
    Submit {
        job: u8,
        pods: u32,
    },
    /// One TrainJob's reconcile, cut short after `cut` of its steps (all of them when larger).
    Reconcile {
        job: u8,
        cut: u8,
    },
    /// A cycle and a reconcile of every TrainJob in full.
    Settle,
    Lose(u8),
    Return(u8),
    /// The gang's pods end on its worker: the copy is Complete there.
    Finish(u8),
    Delete(u8),
    /// The manager restarts: everything it knew is built again from the API servers.
    Restart,
    Wait(u64),
}

fn op(workers: u8) -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..6, 1u32..4).prop_map(|(job, pods)| Op::Submit { job, pods }),
        4 => (0u8..6, 0u8..8).prop_map(|(job, cut)| Op::Reconcile { job, cut }),
        2 => Just(Op::Settle),
        1 => (0..workers).prop_map(Op::Lose),
        1 => (0..workers).prop_map(Op::Return),
        1 => (0u8..6).prop_map(Op::Finish),
        1 => (0u8..6).prop_map(Op::Delete),
        1 => Just(Op::Restart),
        1 => (1u64..60).prop_map(Op::Wait),
    ]
}

/// A worker cluster as its API server shows it.
struct Worker {
    nodes: Vec<Node>,
    /// Whether the manager reaches it (and has swept it since it came back).
    usable: bool,
    copies: BTreeMap<String, TrainJob>,
}

/// The manager and the API servers it talks to.
struct Fleet {
    live: Live,
    merge: FleetMerge,
    now: u64,
    jobs: BTreeMap<String, TrainJob>,
    workers: BTreeMap<String, Worker>,
    runtimes: Arc<Runtimes>,
    policy: PolicyConfig,
    versions: u64,
    uids: u64,
}

fn settings() -> LiveSettings {
    manager_settings(POLICY)
}

/// A manager's live settings under `policy`.
pub(super) fn manager_settings(policy: &str) -> LiveSettings {
    LiveSettings {
        mode: Mode::Manager,
        policy_text: policy.into(),
        policy_name: "policy.yaml".into(),
        topology: "default".into(),
        slurm_configured: false,
        binders: BinderSupport::ANY,
    }
}

fn worker_name(i: u8) -> String {
    ["east", "west", "north"][i as usize % 3].to_string()
}

impl Fleet {
    fn new(sizes: &[u8]) -> Fleet {
        let workers = sizes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let name = worker_name(i as u8);
                let nodes = (0..*n).map(|h| node(&format!("{name}-h{h}"), GPUS)).collect();
                (name, Worker { nodes, usable: true, copies: BTreeMap::new() })
            })
            .collect();
        let runtimes = runtimes(&[runtime_yaml("torch", "")]);
        let policy = PolicyConfig::from_yaml(POLICY, "policy.yaml").expect("policy");
        let (live, merge) = start(&workers, &BTreeMap::new(), runtimes.clone(), T0);
        Fleet { live, merge, now: T0, jobs: BTreeMap::new(), workers, runtimes, policy, versions: 10, uids: 0 }
    }

    fn feed(&mut self, changes: Vec<Change>) {
        for change in changes {
            self.live.apply(change, self.now);
        }
    }

    /// The manager's TrainJob changed on its API server; its watch brings it.
    fn store(&mut self, mut job: TrainJob) {
        self.versions += 1;
        job.metadata.resource_version = Some(self.versions.to_string());
        let name = job.metadata.name.clone().unwrap_or_default();
        self.live.apply(Change::Job(Box::new(Event::Apply(job.clone()))), self.now);
        self.jobs.insert(name, job);
    }

    fn remove(&mut self, name: &str) {
        if let Some(job) = self.jobs.remove(name) {
            self.live.apply(Change::Job(Box::new(Event::Delete(job))), self.now);
        }
    }

    fn submit(&mut self, name: &str, pods: u32) {
        if self.jobs.contains_key(name) {
            return;
        }
        self.uids += 1;
        let mut job = trainjob(name, "torch", "team", pods, GPUS, self.now - T0);
        job.metadata.uid = Some(format!("uid-{name}-{}", self.uids));
        job.spec.0.managed_by = Some(FLEET_MANAGED_BY.into());
        self.store(job);
    }

    /// One reconcile of `name`, as `run.rs` gathers its inputs; the first `cut` steps applied.
    fn reconcile(&mut self, name: &str, cut: usize) {
        let Some(job) = self.jobs.get(name).cloned() else { return };
        let decision = self.live.decision(&job.key()).cloned();
        let cluster = acting_on(&job, decision.as_ref());
        let copy = cluster
            .as_ref()
            .and_then(|c| self.workers.get(c).and_then(|w| w.copies.get(name)).and_then(|j| copy_view(c, j)));
        let reachable = cluster.as_ref().is_some_and(|c| self.workers.get(c).is_some_and(|w| w.usable));
        let mine = copy.as_ref().filter(|c| Some(&c.origin) == job.metadata.uid.as_ref());
        let ctx = IntentContext::new(&self.policy, "nvidia.com/gpu");
        let (intent, runtime) = intent_of(&job, &self.runtimes, &ctx);
        let now = Time(Timestamp::from_second(self.now as i64).expect("time"));
        let workload = mine.map(|c| c.workload.clone());
        let actions = plan(&Inputs {
            job: &job,
            runtime,
            intent: &intent,
            decision: decision.as_ref(),
            workload: workload.as_ref(),
            hostfile_exists: false,
            pods: &[],
            mode: Mode::Manager,
            gang_api: None,
            default_binder: None,
            now: &now,
            slurm: None,
            arrival: None,
            devices: DeviceCommit::Delegate,
            start_timeout: None,
            ssh_secret: None,
            fleet: cluster.map(|cluster| FleetInputs {
                cluster,
                copy: copy.as_ref(),
                reachable,
                runtime_missing: None,
            }),
        });
        for action in actions.iter().take(cut) {
            self.act(name, action);
            self.check();
        }
    }

    /// One step on the API servers.
    fn act(&mut self, name: &str, action: &Action) {
        let Some(mut job) = self.jobs.get(name).cloned() else { return };
        let annotations = job.metadata.annotations.get_or_insert_with(Default::default);
        match action {
            Action::AddFinalizer { arrival } => {
                job.metadata.finalizers.get_or_insert_with(Vec::new).push(FINALIZER.into());
                if let Some(n) = arrival {
                    annotations.insert(ARRIVAL_ANNOTATION.into(), n.to_string());
                }
            }
            Action::MarkArrival(n) => {
                annotations.insert(ARRIVAL_ANNOTATION.into(), n.to_string());
            }
            Action::RecordAdmission(r) => {
                annotations.insert(ADMISSION_ANNOTATION.into(), r.encode());
            }
            Action::ClearAdmission => {
                annotations.remove(ADMISSION_ANNOTATION);
            }
            Action::RemoveFinalizer => {
                job.metadata.finalizers.get_or_insert_with(Vec::new).retain(|f| f != FINALIZER);
                if job.metadata.deletion_timestamp.is_some() {
                    return self.remove(name);
                }
            }
            Action::Status { conditions, jobs_status } => {
                let status = job.status.get_or_insert_with(Default::default);
                status.conditions = conditions.clone();
                if let Some(j) = jobs_status {
                    status.jobs_status = j.clone();
                }
            }
            Action::Event { .. } => return,
            Action::Dispatch { cluster, copy } => {
                let worker = self.workers.get_mut(cluster).expect("dispatch to a worker of the fleet");
                let body: TrainJob = serde_json::from_value(copy.clone()).expect("a TrainJob");
                // Created unless a TrainJob of the name is there (then the step fails).
                if worker.usable && !worker.copies.contains_key(name) {
                    worker.copies.insert(name.to_string(), body);
                }
                return;
            }
            Action::Withdraw { cluster } => {
                let worker = self.workers.get_mut(cluster).expect("withdraw from a worker of the fleet");
                if worker.usable && worker.copies.get(name).and_then(origin_of) == job.metadata.uid.as_deref() {
                    worker.copies.remove(name);
                }
                return;
            }
            other => panic!("a manager plans no {other:?}"),
        }
        self.store(job);
    }

    /// What the worker copies' watch handler does on a usable worker: copies the manager does not
    /// want are deleted.
    fn sweep(&mut self, cluster: &str) {
        let jobs = &self.jobs;
        if let Some(worker) = self.workers.get_mut(cluster) {
            worker.copies.retain(|name, copy| wanted(origin_of(copy).unwrap_or_default(), cluster, jobs.get(name)));
        }
    }

    fn settle(&mut self) {
        self.live.cycle(self.now);
        let names: Vec<String> = self.jobs.keys().cloned().collect();
        for name in names {
            self.reconcile(&name, usize::MAX);
        }
        let usable: Vec<String> = self.workers.iter().filter(|(_, w)| w.usable).map(|(n, _)| n.clone()).collect();
        for cluster in usable {
            self.sweep(&cluster);
        }
    }

    fn restart(&mut self) {
        let (live, merge) = start(&self.workers, &self.jobs, self.runtimes.clone(), self.now);
        self.live = live;
        self.merge = merge;
        let lost: Vec<String> = self.workers.iter().filter(|(_, w)| !w.usable).map(|(n, _)| n.clone()).collect();
        for cluster in lost {
            let changes = self.merge.apply(&cluster, WorkerEvent::Reachable(false));
            self.feed(changes);
        }
    }

    /// Never two copies of a gang on the workers the manager reaches; the gangs the manager
    /// keeps admitted within the fleet quota (a gang it stops is out of the count from that
    /// decision on: its copy is withdrawn by the reconcile that follows, as a standalone
    /// controller deletes a stopped gang's JobSet).
    fn check(&self) {
        let mut copies: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (cluster, w) in self.workers.iter().filter(|(_, w)| w.usable) {
            for copy in w.copies.values() {
                copies.entry(origin_of(copy).unwrap_or_default()).or_default().push(cluster);
            }
        }
        for (origin, on) in &copies {
            assert!(on.len() <= 1, "gang {origin} has copies on {on:?}");
        }
        let charged: u64 = self
            .jobs
            .values()
            .filter_map(|j| match self.live.decision(&j.key()) {
                Some(Decision::Admit(r) | Decision::Move(r)) => Some(r.pods()),
                Some(Decision::Running | Decision::Degraded { .. }) => recorded(j).map(|r| r.pods()),
                _ => None,
            })
            .map(|pods| u64::from(pods) * GPUS)
            .sum();
        assert!(charged <= QUOTA_GPUS, "{charged} GPUs admitted over the fleet quota of {QUOTA_GPUS}");
    }

    /// Once every worker is back and the manager settles: each TrainJob runs as exactly one copy
    /// where its record says, or waits with none; nothing else runs anywhere.
    fn accounted(&mut self) {
        let names: Vec<String> = self.workers.keys().cloned().collect();
        for cluster in &names {
            self.back(cluster);
        }
        for _ in 0..6 {
            self.now += 60;
            self.settle();
        }
        for (name, job) in &self.jobs {
            let uid = job.metadata.uid.as_deref();
            let on: Vec<&str> = self
                .workers
                .iter()
                .filter(|(_, w)| w.copies.get(name).is_some_and(|c| origin_of(c) == uid))
                .map(|(n, _)| n.as_str())
                .collect();
            match placed_in(job) {
                Some(cluster) if !ended(job) => {
                    assert_eq!(on, vec![cluster.as_str()], "{name} runs as one copy where its record says");
                    let copy = &self.workers[&cluster].copies[name];
                    let theirs = copy_view(&cluster, copy).and_then(|v| v.record);
                    assert_eq!(theirs, recorded(job), "{name}'s copy carries the manager's record");
                }
                Some(_) => {}
                None => {
                    assert!(on.is_empty(), "{name} waits with no copy, yet has copies on {on:?}");
                    assert!(!job.has_true("Admitted"), "{name} has no record, so is not Admitted");
                }
            }
        }
        let mut running = 0;
        for (cluster, w) in &self.workers {
            for (name, copy) in &w.copies {
                let origin = origin_of(copy).unwrap_or_default();
                assert!(wanted(origin, cluster, self.jobs.get(name)), "a stale copy of {name} left on {cluster}");
                if !ended(copy) {
                    running += recorded(copy).map_or(0, |r| u64::from(r.pods()) * GPUS);
                }
            }
        }
        assert!(running <= QUOTA_GPUS, "{running} GPUs run on the workers, over the fleet quota");
    }

    fn lose(&mut self, cluster: &str) {
        if let Some(w) = self.workers.get_mut(cluster) {
            w.usable = false;
        }
        let changes = self.merge.apply(cluster, WorkerEvent::Reachable(false));
        self.feed(changes);
    }

    /// A worker back: its stale copies removed before it is usable again.
    fn back(&mut self, cluster: &str) {
        if self.workers.get(cluster).is_none_or(|w| w.usable) {
            return;
        }
        self.sweep(cluster);
        if let Some(w) = self.workers.get_mut(cluster) {
            w.usable = true;
        }
        let changes = self.merge.apply(cluster, WorkerEvent::Reachable(true));
        self.feed(changes);
    }
}

fn ended(job: &TrainJob) -> bool {
    job.has_true("Complete") || job.has_true("Failed")
}

/// A manager started on what the API servers show: every worker's nodes through the merge (as
/// each worker's first list), the TrainJobs, the runtimes.
fn start(
    workers: &BTreeMap<String, Worker>,
    jobs: &BTreeMap<String, TrainJob>,
    runtimes: Arc<Runtimes>,
    now: u64,
) -> (Live, FleetMerge) {
    let (mut merge, first) = FleetMerge::new(workers.keys().cloned(), false);
    let mut initial = Initial::default();
    for change in first {
        initial.take(change);
    }
    for (name, w) in workers {
        let mut events = vec![WorkerEvent::Node(Box::new(Event::Init))];
        events.extend(w.nodes.iter().map(|n| WorkerEvent::Node(Box::new(Event::InitApply(n.clone())))));
        events.extend([
            WorkerEvent::Node(Box::new(Event::InitDone)),
            WorkerEvent::Pod(Box::new(Event::Init)),
            WorkerEvent::Pod(Box::new(Event::InitDone)),
        ]);
        for event in events {
            for change in merge.apply(name, event) {
                initial.take(change);
            }
        }
    }
    let jobs: Vec<TrainJob> = jobs.values().cloned().collect();
    for change in
        listed(Change::Job, &jobs).into_iter().chain(listed(Change::Queue, &[])).chain(listed(Change::Topology, &[]))
    {
        initial.take(change);
    }
    initial.take(Change::Runtimes(runtimes));
    assert!(initial.complete(), "waiting for {:?}", initial.waiting_for());
    (Live::start(initial, settings(), now).expect("the engine builds").0, merge)
}

fn run(sizes: &[u8], ops: &[Op]) {
    let mut f = Fleet::new(sizes);
    for op in ops {
        match op {
            Op::Submit { job, pods } => f.submit(&format!("j{job}"), *pods),
            Op::Reconcile { job, cut } => {
                f.live.cycle(f.now);
                f.reconcile(&format!("j{job}"), usize::from(*cut));
            }
            Op::Settle => f.settle(),
            Op::Lose(w) => f.lose(&worker_name(*w)),
            Op::Return(w) => f.back(&worker_name(*w)),
            Op::Finish(job) => {
                let name = format!("j{job}");
                let Some(cluster) = f.jobs.get(&name).and_then(placed_in) else { continue };
                if let Some(copy) =
                    f.workers.get_mut(&cluster).filter(|w| w.usable).and_then(|w| w.copies.get_mut(&name))
                {
                    let done = Condition {
                        type_: "Complete".into(),
                        status: "True".into(),
                        reason: "JobSetCompleted".into(),
                        message: "done".into(),
                        last_transition_time: Time(Timestamp::UNIX_EPOCH),
                        observed_generation: None,
                    };
                    copy.status.get_or_insert_with(Default::default).conditions = vec![done];
                }
            }
            Op::Delete(job) => {
                let name = format!("j{job}");
                let Some(mut j) = f.jobs.get(&name).cloned() else { continue };
                if j.metadata.finalizers.as_ref().is_some_and(|x| !x.is_empty()) {
                    j.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(f.now as i64).expect("time")));
                    f.store(j);
                } else {
                    f.remove(&name);
                }
            }
            Op::Restart => f.restart(),
            Op::Wait(s) => f.now += s,
        }
        f.check();
    }
    f.accounted();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn no_gang_twice_never_over_quota_every_trainjob_accounted(
        sizes in prop::collection::vec(1u8..4, 2..=3),
        ops in prop::collection::vec(op(3), 1..60),
    ) {
        run(&sizes, &ops);
    }
}

#[test]
fn a_lost_workers_gang_moves_and_its_stale_copy_goes_when_it_is_back() {
    let mut f = Fleet::new(&[2, 2]);
    f.submit("j0", 2);
    f.settle();
    f.settle();
    let first = placed_in(&f.jobs["j0"]).expect("placed");
    assert!(f.workers[&first].copies.contains_key("j0"), "its copy is written where the record says");
    f.lose(&first);
    for _ in 0..3 {
        f.now += 20;
        f.settle();
    }
    let second = placed_in(&f.jobs["j0"]).expect("placed again");
    assert_ne!(second, first, "past the grace the gang runs on the other worker");
    assert!(f.workers[&second].copies.contains_key("j0"));
    assert!(f.workers[&first].copies.contains_key("j0"), "the lost worker's copy is out of reach");
    f.back(&first);
    assert!(!f.workers[&first].copies.contains_key("j0"), "the stale copy is removed before the worker is used");
    f.check();
}

#[test]
fn a_manager_cut_short_after_its_record_dispatches_on_its_next_look() {
    let mut f = Fleet::new(&[2, 2]);
    f.submit("j0", 1);
    f.live.cycle(f.now);
    // Finalizer and record written, then the manager stops before the copy.
    f.reconcile("j0", 2);
    assert!(recorded(&f.jobs["j0"]).is_some());
    assert!(f.workers.values().all(|w| w.copies.is_empty()));
    f.restart();
    f.settle();
    let cluster = placed_in(&f.jobs["j0"]).expect("placed");
    assert!(f.workers[&cluster].copies.contains_key("j0"), "the restarted manager writes the copy");
    assert_eq!(f.workers.values().map(|w| w.copies.len()).sum::<usize>(), 1);
}
