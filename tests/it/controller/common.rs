//! Shared fixtures: a TrainJob with its runtime, and a builder for planner inputs.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use trainyard::api::{FINALIZER, QUEUE_LABEL, SlurmTarget, TrainJob};
use trainyard::controller::acting::admission_record::AdmissionRecord;
use trainyard::controller::deciding::intent::{GangIntent, IntentContext, Problem};
use trainyard::controller::deciding::plan::{Action, Inputs, Mode, WorkloadView, plan};
use trainyard::controller::deciding::pod_bindings::PodView;
use trainyard::controller::deciding::scheduling_loop::Decision;
use trainyard::controller::slurm::cluster_view::SlurmSnapshot;
use trainyard::controller::watching::scheduler_inputs::{Runtimes, intent_of};
use trainyard_bridges::trainer as bridge;
use trainyard_policies::PolicyConfig;

pub const TORCH_JOB: &str = include_str!("../../../bridges/tests/fixtures/torch_multinode.trainjob.yaml");
pub const TORCH_RUNTIME: &str = include_str!("../../../bridges/tests/fixtures/torch_multinode.runtime.yaml");
pub const MPI_JOB: &str = include_str!("../../../bridges/tests/fixtures/mpi_deepspeed.trainjob.yaml");
pub const MPI_RUNTIME: &str = include_str!("../../../bridges/tests/fixtures/mpi_deepspeed.runtime.yaml");

/// A TrainJob from a fixture, running (not suspended), in queue `vision`.
pub fn job(text: &str) -> TrainJob {
    let mut job: TrainJob = serde_saphyr::from_str(text).expect("fixture parses");
    job.spec.0.suspend = Some(false);
    job.metadata.labels.get_or_insert_with(Default::default).insert(QUEUE_LABEL.into(), "vision".into());
    job.metadata.generation = Some(1);
    job
}

/// The same TrainJob carrying trainyard's finalizer.
pub fn with_finalizer(mut job: TrainJob) -> TrainJob {
    job.metadata.finalizers = Some(vec![FINALIZER.into()]);
    job
}

pub fn runtimes(text: &str) -> Runtimes {
    let runtime: bridge::TrainingRuntime = serde_saphyr::from_str(text).expect("fixture parses");
    let mut r = Runtimes::default();
    r.cluster.insert(runtime.metadata.name.clone().unwrap(), runtime);
    r
}

pub fn policy() -> PolicyConfig {
    PolicyConfig::builtin("fifo").unwrap()
}

pub fn now() -> Time {
    Time(Timestamp::from_second(1_800_000_000).unwrap())
}

pub fn record(nodes: &[(&str, u32)]) -> AdmissionRecord {
    AdmissionRecord {
        nodes: nodes.iter().map(|(n, c)| (n.to_string(), *c)).collect(),
        domain: None,
        at: 100,
        cost: 7,
        slurm: false,
        devices: Vec::new(),
    }
}

/// Everything the planner reads, owned, so tests can change one thing at a time.
pub struct World {
    pub job: TrainJob,
    pub runtimes: Runtimes,
    pub decision: Option<Decision>,
    pub workload: Option<WorkloadView>,
    pub hostfile_exists: bool,
    pub pods: Vec<PodView>,
    pub mode: Mode,
    pub gang_api: Option<trainyard::controller::acting::gang_api::GangApi>,
    /// Queues that run on Slurm.
    pub slurm_queues: BTreeMap<String, SlurmTarget>,
    /// The Slurm cluster as last seen; `None`: the controller runs without Slurm.
    pub slurm: Option<SlurmSnapshot>,
    /// The arrival order the loop handed out, when the TrainJob carries none.
    pub arrival: Option<u64>,
    /// Who allocates the devices of DRA claims.
    pub devices: trainyard::controller::deciding::plan::DeviceCommit,
    /// Seconds the gang may take to have every pod bound.
    pub start_timeout: Option<u64>,
    /// What the reconciler found of an MPI gang's SSH key Secret.
    pub ssh_secret: Option<trainyard::controller::deciding::plan::SecretSeen>,
    /// The binders served and the cluster's default.
    pub binders: trainyard::controller::acting::binders::BinderSupport,
    /// Manager mode: what the reconcile sees of the worker it acts on.
    pub fleet: Option<FleetSeen>,
}

/// Manager mode's view of a worker, owned (see `FleetInputs`).
#[derive(Clone, Debug, Default)]
pub struct FleetSeen {
    pub cluster: String,
    pub copy: Option<trainyard::controller::fleet::copies::CopyView>,
    pub reachable: bool,
    pub runtime_missing: Option<String>,
}

impl World {
    pub fn new(job: TrainJob, runtime: &str) -> World {
        World {
            job,
            runtimes: runtimes(runtime),
            decision: None,
            workload: None,
            hostfile_exists: false,
            pods: vec![],
            mode: Mode::Standalone,
            gang_api: None,
            slurm_queues: BTreeMap::new(),
            slurm: None,
            arrival: None,
            devices: Default::default(),
            start_timeout: None,
            ssh_secret: None,
            binders: trainyard::controller::acting::binders::BinderSupport::ANY,
            fleet: None,
        }
    }

    fn context<'a>(&'a self, policy: &'a PolicyConfig) -> IntentContext<'a> {
        IntentContext {
            slurm_queues: &self.slurm_queues,
            slurm_configured: self.slurm.is_some(),
            binders: self.binders,
            ..IntentContext::new(policy, "nvidia.com/gpu")
        }
    }

    pub fn intent(&self) -> Result<GangIntent, Problem> {
        let policy = policy();
        intent_of(&self.job, &self.runtimes, &self.context(&policy)).0
    }

    pub fn plan(&self) -> Vec<Action> {
        self.plan_at(now())
    }

    /// The plan at another time than the tests' fixed clock.
    pub fn plan_at(&self, now: Time) -> Vec<Action> {
        let policy = policy();
        let ctx = self.context(&policy);
        let (intent, runtime) = intent_of(&self.job, &self.runtimes, &ctx);
        plan(&Inputs {
            job: &self.job,
            runtime,
            intent: &intent,
            decision: self.decision.as_ref(),
            workload: self.workload.as_ref(),
            hostfile_exists: self.hostfile_exists,
            pods: &self.pods,
            mode: self.mode,
            gang_api: self.gang_api,
            default_binder: self.binders.default,
            now: &now,
            slurm: self.slurm.as_ref(),
            arrival: self.arrival,
            devices: self.devices,
            start_timeout: self.start_timeout,
            ssh_secret: self.ssh_secret.clone(),
            fleet: self.fleet.as_ref().map(|f| trainyard::controller::deciding::plan::FleetInputs {
                cluster: f.cluster.clone(),
                copy: f.copy.as_ref(),
                reachable: f.reachable,
                runtime_missing: f.runtime_missing.clone(),
            }),
        })
    }
}

/// A short name per action, to compare plans at a glance.
pub fn names(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .map(|a| match a {
            Action::AddFinalizer { .. } => "AddFinalizer".to_string(),
            Action::MarkArrival(n) => format!("MarkArrival {n}"),
            Action::RemoveFinalizer => "RemoveFinalizer".to_string(),
            Action::RecordAdmission(_) => "RecordAdmission".to_string(),
            Action::ClearAdmission => "ClearAdmission".to_string(),
            Action::Apply(v) => format!("Apply {}", v["kind"].as_str().unwrap_or("?")),
            Action::Create(v) => format!("Create {}", v["kind"].as_str().unwrap_or("?")),
            Action::Delete(r) => format!("Delete {}", r.kind),
            Action::Ungate(u) => format!("Ungate {}->{}", u.pod, u.node),
            Action::AllocateClaim { claim, node, .. } => format!("AllocateClaim {claim}@{node}"),
            Action::ReleaseClaim { claim } => format!("ReleaseClaim {claim}"),
            Action::Status { .. } => "Status".to_string(),
            Action::PatchTrainJob { suspend, .. } => format!("PatchTrainJob suspend={suspend}"),
            Action::Event { reason, .. } => format!("Event {reason}"),
            Action::SubmitSlurm(g) => format!("SubmitSlurm {}", g.gang),
            Action::CancelSlurm { gang } => format!("CancelSlurm {gang}"),
            Action::CreateSshSecret { name } => format!("CreateSshSecret {name}"),
            Action::Dispatch { cluster, .. } => format!("Dispatch {cluster}"),
            Action::Withdraw { cluster } => format!("Withdraw {cluster}"),
        })
        .collect()
}

/// The conditions a Status action sets, as `(type, status, reason)`.
pub fn conditions(actions: &[Action]) -> Vec<(String, String, String)> {
    actions
        .iter()
        .find_map(|a| match a {
            Action::Status { conditions, .. } => {
                Some(conditions.iter().map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone())).collect())
            }
            _ => None,
        })
        .unwrap_or_default()
}

/// A gated pod of the `node` replicated job of JobSet `jobset`, with completion index `index`.
pub fn gated_pod(jobset: &str, index: u32, has_node_selector: bool) -> PodView {
    gated_pod_of(jobset, "node", index, has_node_selector)
}

/// A gated pod of replicated job `rjob` (job 0) at completion `index`.
pub fn gated_pod_of(jobset: &str, rjob: &str, index: u32, has_node_selector: bool) -> PodView {
    use trainyard::controller::deciding::pod_bindings::{COMPLETION_INDEX_LABEL, JOB_INDEX_LABEL, RJOB_LABEL};
    let labels =
        [(RJOB_LABEL, rjob.to_string()), (JOB_INDEX_LABEL, "0".into()), (COMPLETION_INDEX_LABEL, index.to_string())]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
    PodView {
        name: format!("{jobset}-{rjob}-0-{index}"),
        labels,
        gates: vec![trainyard_bridges::TOPOLOGY_GATE.into()],
        has_node_selector,
        node_name: None,
        created: None,
        claims: Vec::new(),
    }
}
