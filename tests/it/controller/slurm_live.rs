//! The controller's Slurm front end against a real local Slurm (started by
//! `scripts/slurm/with-slurm.sh`, which `scripts/test.sh` runs these under): a TrainJob of a Slurm
//! queue is placed on the imported Slurm cluster, submitted, followed to its end, cancelled on
//! delete, and failed with Slurm's words when Slurm refuses it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use trainyard::api::{ADMISSION_ANNOTATION, FINALIZER, Queue, QueueSpec, TrainJobStatus};
use trainyard::controller::acting::actor::{ActError, Actor};
use trainyard::controller::deciding::plan::Mode;
use trainyard::controller::deciding::plan::{Action, recorded};
use trainyard::controller::deciding::scheduling_loop::{Decision, SchedulingLoop};
use trainyard::controller::slurm::cluster_view::slurm_cluster;
use trainyard::controller::slurm::poller::{STEP_RETRY, SlurmLink};
use trainyard::controller::watching::scheduler_inputs::{Side, job_entry, policy_with_queues};
use trainyard_bridges::slurm::GangState;
use trainyard_slurm::bridge::Bridge;
use trainyard_slurm::rest::{RestClient, RestConfig};

use super::common::World;
use super::slurm::{JOB, RUNTIME, target, world};

const NEEDS: &str = "needs a local Slurm: run through scripts/slurm/with-slurm.sh (scripts/test.sh does)";

fn jobs_dir(test: &str) -> PathBuf {
    let dir = PathBuf::from(std::env::var("TRAINYARD_SLURM_STATE").expect(NEEDS)).join("jobs").join(test);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The controller's pieces for one TrainJob: the link to Slurm, an actor that reaches Slurm (its
/// Kubernetes client is never used: Kubernetes steps are applied to the in-memory object), and
/// the Slurm scheduling loop over the imported cluster.
struct Harness {
    link: Arc<SlurmLink>,
    actor: Actor,
    looped: SchedulingLoop,
    world: World,
    _api: tower_test::mock::Handle<Request<Body>, Response<Body>>,
}

async fn harness(test: &str, job_text: &str, partition: Option<&str>) -> Harness {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = RestConfig::from_env().expect("token").expect(NEEDS);
    let rest = RestClient::connect(config).await.expect("slurmrestd answers");
    let bridge = Bridge::new(Some(rest), STEP_RETRY);
    let link = Arc::new(SlurmLink::new(bridge.clone(), "local".into(), Duration::from_millis(200)));
    link.refresh(true).await;
    let shape = link.shape.lock().unwrap().clone().expect("nodes read");
    let topology = Some(shape.topology.as_str()).filter(|t| !t.trim().is_empty());
    let cluster = slurm_cluster("local", &shape.nodes, topology).unwrap();
    let dir = jobs_dir(test);
    let mut spec = target();
    spec.partition = partition.map(String::from);
    spec.workdir = dir.display().to_string();
    let queue = Queue::new("hpc", QueueSpec { slurm: Some(spec.clone()), ..QueueSpec::default() });
    let policy = policy_with_queues("", "none", &[&queue], Side::Slurm).unwrap();
    let looped = SchedulingLoop::new(cluster, policy).unwrap().with_node_slots();
    // A uid of its own per run, so the gang id is new even on a Slurm that kept older jobs.
    let uid = format!("{}-{}", std::process::id(), std::time::UNIX_EPOCH.elapsed().unwrap().as_nanos());
    let mut w = world(&job_text.replace("uid: 0f3c", &format!("uid: {uid}")), RUNTIME);
    w.job.metadata.name = Some(test.into());
    w.slurm_queues.insert("hpc".into(), spec);
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let actor = Actor::new(Client::new(service, "default"), None).with_slurm(bridge);
    Harness { link, actor, looped, world: w, _api: handle }
}

fn now_s() -> u64 {
    std::time::UNIX_EPOCH.elapsed().unwrap().as_secs()
}

impl Harness {
    /// One scheduling cycle, then one reconcile: Slurm steps go to the real Slurm through the
    /// actor, Kubernetes steps change the in-memory TrainJob as the API server would.
    async fn step(&mut self) -> Vec<Action> {
        self.link.refresh(false).await;
        self.world.slurm = Some(self.link.snapshot().as_ref().clone());
        let intent = self.world.intent();
        let entry = job_entry(&self.world.job, &intent, Mode::Standalone, 0);
        let (decisions, _) = self.looped.cycle(&[entry], now_s());
        self.world.decision =
            decisions.get(&format!("research/{}", self.world.job.metadata.name.clone().unwrap())).cloned();
        let now = k8s_openapi::jiff::Timestamp::from_second(now_s() as i64).unwrap();
        let actions = self.world.plan_at(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
        for action in &actions {
            match action {
                Action::SubmitSlurm(_) | Action::CancelSlurm { .. } => {
                    match self.actor.execute(&self.world.job, action).await {
                        Err(ActError::SlurmRefused { gang, message }) => self.link.refused(&gang, &message),
                        other => other.unwrap(),
                    }
                }
                Action::AddFinalizer { .. } => self.world.job.metadata.finalizers = Some(vec![FINALIZER.into()]),
                Action::RemoveFinalizer => self.world.job.metadata.finalizers = Some(vec![]),
                Action::RecordAdmission(r) => {
                    let annotations = self.world.job.metadata.annotations.get_or_insert_with(Default::default);
                    annotations.insert(ADMISSION_ANNOTATION.into(), r.encode());
                }
                Action::ClearAdmission => {
                    self.world
                        .job
                        .metadata
                        .annotations
                        .get_or_insert_with(Default::default)
                        .remove(ADMISSION_ANNOTATION);
                }
                Action::Status { conditions, .. } => {
                    self.world.job.status.get_or_insert_with(TrainJobStatus::default).conditions = conditions.clone();
                }
                Action::Event { .. } => {}
                other => panic!("a Slurm gang needs no {other:?}"),
            }
        }
        actions
    }

    /// Steps until the TrainJob has a True condition of `type_`, at most 60 s.
    async fn until(&mut self, type_: &str) -> String {
        for _ in 0..300 {
            self.step().await;
            if self.world.job.has_true(type_) {
                return self.condition(type_);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("no {type_} condition: {:?}", self.world.job.status);
    }

    fn condition(&self, type_: &str) -> String {
        let status = self.world.job.status.as_ref();
        let c = status.and_then(|s| s.conditions.iter().find(|c| c.type_ == type_));
        c.map(|c| format!("{}: {}", c.reason, c.message)).unwrap_or_default()
    }

    fn gang(&self) -> String {
        let r = recorded(&self.world.job).expect("admitted");
        let m = &self.world.job.metadata;
        trainyard::controller::slurm::gang_job::gang_id(
            "research",
            m.name.as_deref().unwrap(),
            m.uid.as_deref().unwrap(),
            &r,
        )
    }
}

#[tokio::test]
#[ignore = "needs a local Slurm"]
async fn a_trainjob_of_a_slurm_queue_runs_to_completion_with_ranks_and_master() {
    let mut h = harness("tj-ranks", JOB, None).await;
    let first = h.step().await;
    let Some(Decision::Admit(record)) = h.world.decision.clone() else {
        panic!("not admitted: {:?}", h.world.decision)
    };
    assert_eq!(record.nodes.len(), 2, "two Slurm nodes: {record:?}");
    assert!(first.iter().any(|a| matches!(a, Action::SubmitSlurm(_))), "{first:?}");
    let done = h.until("Complete").await;
    assert!(done.starts_with("Completed: Slurm job "), "{done}");
    let job = h.link.snapshot().job(&h.gang()).cloned().expect("Slurm reports the job");
    let out = std::fs::read_to_string(jobs_dir("tj-ranks").join(format!("tj-ranks-{}.out", job.id))).unwrap();
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    let (first, second) = (&record.nodes[0].0, &record.nodes[1].0);
    let master = first.min(second);
    assert_eq!(lines.len(), 2, "{out}");
    // Slurm orders the allocation by name, so the first host is the lower one, whatever the record's order.
    assert_eq!(lines[0], format!("rank=0 master={master} host={master} nnodes=2 seed=42"));
    assert_eq!(lines[1], format!("rank=1 master={master} host={} nnodes=2 seed=42", first.max(second)));
    // Finished: the finalizer goes, and nothing more is submitted.
    let last = h.step().await;
    assert!(!last.iter().any(|a| matches!(a, Action::SubmitSlurm(_))), "{last:?}");
    let jobs = h.link.bridge.jobs().await.unwrap();
    assert_eq!(jobs.iter().filter(|j| j.gang.as_deref() == Some(h.gang().as_str())).count(), 1);
}

#[tokio::test]
#[ignore = "needs a local Slurm"]
async fn a_restarted_controller_submits_nothing_twice_and_delete_cancels() {
    let sleeper = JOB.replace(r#"args: ['echo "#, r#"args: ['sleep 120; echo "#);
    let mut h = harness("tj-restart", &sleeper, None).await;
    h.until("Admitted").await;
    for _ in 0..100 {
        if h.condition("Admitted").starts_with("SlurmRunning") {
            break;
        }
        h.step().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(h.condition("Admitted").starts_with("SlurmRunning"), "{}", h.condition("Admitted"));
    // A new controller process: a fresh link that has not seen Slurm, over the same TrainJob.
    let restarted = harness("tj-restart", &sleeper, None).await;
    h.link = restarted.link;
    h.actor = restarted.actor;
    let gang = h.gang();
    // Even an explicit submission finds the job instead of submitting it again.
    let job = h.world.job.clone();
    let (intent, runtime) = (h.world.intent().unwrap(), h.world.runtimes.cluster.get("torch-slurm").unwrap().clone());
    let again = trainyard::controller::slurm::gang_job::slurm_gang(
        &job.to_bridge().unwrap(),
        &runtime,
        intent.slurm.as_ref().unwrap(),
        &intent.shape.sets[0].pod,
        &recorded(&job).unwrap(),
    )
    .unwrap();
    h.actor.execute(&job, &Action::SubmitSlurm(Box::new(again))).await.unwrap();
    h.step().await;
    let jobs = h.link.bridge.jobs().await.unwrap();
    assert_eq!(jobs.iter().filter(|j| j.gang.as_deref() == Some(gang.as_str())).count(), 1, "{jobs:?}");

    h.world.job.metadata.deletion_timestamp = Some(super::common::now());
    let actions = h.step().await;
    assert!(actions.iter().any(|a| matches!(a, Action::CancelSlurm { .. })), "{actions:?}");
    assert!(h.world.job.metadata.finalizers.as_ref().is_some_and(|f| f.is_empty()), "finalizer removed");
    for _ in 0..50 {
        h.link.refresh(false).await;
        if h.link.snapshot().job(&gang).is_some_and(|j| j.state == GangState::Cancelled) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("not cancelled: {:?}", h.link.snapshot().job(&gang));
}

#[tokio::test]
#[ignore = "needs a local Slurm"]
async fn a_trainjob_slurm_refuses_fails_with_slurms_message() {
    let mut h = harness("tj-refused", JOB, Some("no-such-partition")).await;
    let failed = h.until("Failed").await;
    assert!(failed.starts_with("SlurmRejected: Slurm refused the job: "), "{failed}");
    assert!(failed.contains("Invalid partition name"), "{failed}");
    let after = h.step().await;
    assert!(!after.iter().any(|a| matches!(a, Action::SubmitSlurm(_))), "{after:?}");
    assert!(h.world.job.metadata.finalizers.as_ref().is_some_and(|f| f.is_empty()), "finished: finalizer removed");
}

#[tokio::test]
#[ignore = "needs a local Slurm"]
async fn while_slurmrestd_is_down_the_gang_says_so_and_runs_once_it_is_back() {
    let mut h = harness("tj-outage", JOB, None).await;
    let state = PathBuf::from(std::env::var("TRAINYARD_SLURM_STATE").expect(NEEDS));
    let pid = std::fs::read_to_string(state.join("run/slurmrestd.pid")).unwrap().trim().to_string();
    assert!(std::process::Command::new("kill").arg(&pid).status().unwrap().success());
    let mut said = String::new();
    for _ in 0..50 {
        let actions = h.step().await;
        assert!(!actions.iter().any(|a| matches!(a, Action::SubmitSlurm(_))), "submitted while down: {actions:?}");
        said = h.condition("Admitted");
        if said.starts_with("SlurmUnreachable") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(said.starts_with("SlurmUnreachable: admitted; waiting for Slurm to answer before submitting"), "{said}");
    assert!(recorded(&h.world.job).is_some(), "the admission is kept while Slurm is away");
    // start.sh starts only the daemons that are not running.
    let start = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/slurm/start.sh");
    let status = std::process::Command::new("bash").arg(start).arg(&state).stdout(std::process::Stdio::null()).status();
    assert!(status.unwrap().success());
    let done = h.until("Complete").await;
    assert!(done.starts_with("Completed: "), "{done}");
    let jobs = h.link.bridge.jobs().await.unwrap();
    assert_eq!(jobs.iter().filter(|j| j.gang.as_deref() == Some(h.gang().as_str())).count(), 1, "submitted once");
}
