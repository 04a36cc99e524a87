//! The lifecycle of one TrainJob as a pure function: observed state and the loop's decision in, steps out.
//!
//! Every step is idempotent and derived from what the API server shows, so a reconcile that dies
//! after any prefix of its steps is finished by the next one without doing anything twice. The
//! admission record is written first: it is the commit point of a scheduling decision.

mod binder_group;
mod claims;
mod companion;
mod dispatch;
mod launch;
mod slurm;
mod ssh;

pub use claims::{DELETE_PROTECTION, DeviceCommit, allocation_status, claim_metadata, released_status};
pub use companion::companion_patch;
pub use dispatch::{FleetInputs, acting_on};
pub use slurm::SLURM_REJECTED;
pub use ssh::{SecretSeen, judge as judge_ssh_secret};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::Value;
use trainyard_bridges::WorkloadKind;
use trainyard_bridges::trainer as bridge;

use crate::api::trainer::JobStatus;
use crate::api::{ADMISSION_ANNOTATION, FINALIZER, TrainJob};
use crate::controller::acting::admission_record::AdmissionRecord;
use crate::controller::acting::binders::BinderKind;
use crate::controller::acting::gang_api::GangApi;
use crate::controller::acting::workload_objects::{self, ObjectRef};
use crate::controller::deciding::conditions::{
    self, ADMITTED, COMPANION_OWNED, COMPLETE, FAILED, NODES_READY, QUEUED, STANDALONE_OWNED, SUSPENDED, Want,
};
use crate::controller::deciding::intent::{GangIntent, Problem};
use crate::controller::deciding::pod_bindings::{GangLayout, PodView, Ungate, ungate};
use crate::controller::deciding::scheduling_loop::Decision;
use crate::controller::slurm::cluster_view::SlurmSnapshot;

/// Manager name of trainyard's entry in a TrainJob's `runtimePatches` (companion mode).
pub const PATCH_MANAGER: &str = "trainyard.io/scheduler";

/// Who launches the TrainJob's workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// trainyard renders and applies the JobSet / LeaderWorkerSet itself.
    Standalone,
    /// Kubeflow Trainer launches it; trainyard admits by patching and unsuspending the TrainJob.
    Companion,
    /// A fleet's manager: trainyard places the gang in one of its worker clusters and writes a
    /// copy there, which that cluster's trainyard (standalone) launches.
    Manager,
}

/// The JobSet or LeaderWorkerSet as observed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkloadView {
    /// `spec.suspend` (JobSet) or zero replicas (LeaderWorkerSet).
    pub suspended: bool,
    /// Its `Completed` condition, when True: `(reason, message)`.
    pub completed: Option<(String, String)>,
    /// Its `Failed` condition, when True: `(reason, message)`.
    pub failed: Option<(String, String)>,
    /// Per replicated job counts (JobSet `status.replicatedJobsStatus`).
    pub jobs_status: Vec<JobStatus>,
}

/// What the reconciler sees of one TrainJob.
#[derive(Clone, Debug)]
pub struct Inputs<'a> {
    /// The TrainJob.
    pub job: &'a TrainJob,
    /// Its runtime, when it exists.
    pub runtime: Option<&'a bridge::TrainingRuntime>,
    /// What it asks of the scheduler, or why it cannot ask.
    pub intent: &'a Result<GangIntent, Problem>,
    /// The scheduling loop's verdict, if it has one.
    pub decision: Option<&'a Decision>,
    /// The workload object, when it exists.
    pub workload: Option<&'a WorkloadView>,
    /// Whether the MPI hostfile ConfigMap exists.
    pub hostfile_exists: bool,
    /// Pods labelled with the gang.
    pub pods: &'a [PodView],
    /// Standalone or companion.
    pub mode: Mode,
    /// kube-scheduler's gang API version, when the server serves it (standalone mode uses it).
    pub gang_api: Option<GangApi>,
    /// The binder of gangs whose runtime names none (standalone mode).
    pub default_binder: Option<BinderKind>,
    /// The time to stamp on changed conditions.
    pub now: &'a Time,
    /// The Slurm cluster as last seen, when the controller runs gangs on one.
    pub slurm: Option<&'a SlurmSnapshot>,
    /// The arrival order the scheduling loop handed out, when the TrainJob carries none yet.
    pub arrival: Option<u64>,
    /// Who allocates the devices of the gang's claims.
    pub devices: DeviceCommit,
    /// Seconds an admitted gang may take for all its pods to be bound before it is stopped and
    /// queued again (`None`: no limit).
    pub start_timeout: Option<u64>,
    /// The Secret the gang mounts from launch on (an MPI gang's SSH key, a Flux gang's CURVE
    /// certificate), when the reconciler looked (such a gang not launched yet).
    pub ssh_secret: Option<SecretSeen>,
    /// Manager mode: the gang's copy on the worker its record places it in, and that worker.
    pub fleet: Option<FleetInputs<'a>>,
}

/// One step of a reconcile.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Add trainyard's finalizer, with the arrival order when the TrainJob has none recorded (one
    /// merge patch with the resourceVersion as read).
    AddFinalizer {
        /// The order trainyard first saw the TrainJob in.
        arrival: Option<u64>,
    },
    /// Record the arrival order on a TrainJob that has the finalizer but no order yet.
    MarkArrival(u64),
    /// Remove it.
    RemoveFinalizer,
    /// Write the admission record annotation.
    RecordAdmission(AdmissionRecord),
    /// Remove the admission record annotation.
    ClearAdmission,
    /// Server-side apply of an object (JobSet, LeaderWorkerSet, ConfigMap) by field manager `trainyard`.
    Apply(Value),
    /// Delete an object (background propagation).
    Delete(ObjectRef),
    /// Bind one gated pod to its node and drop the gate.
    Ungate(Ungate),
    /// Create an object unless one of its name exists (a Secret whose content never changes, so
    /// that trainyard needs no right to patch Secrets).
    Create(Value),
    /// Make the MPI gang's SSH key Secret (a new key pair, owned by the TrainJob), unless one of
    /// that name exists.
    CreateSshSecret {
        /// The Secret (in the TrainJob's namespace).
        name: String,
    },
    /// Allocate mode: write a claim's allocation (and the delete-protection finalizer) for the
    /// devices recorded for its pod, on the pod's node.
    AllocateClaim {
        /// The ResourceClaim (in the TrainJob's namespace).
        claim: String,
        /// The node its pod goes to.
        node: String,
        /// `[request, driver, pool, device]` per device.
        results: Vec<[String; 4]>,
        /// When it is allocated (RFC 3339), written as the allocation's `allocationTimestamp`.
        at: String,
    },
    /// Allocate mode: take back the allocation written on a claim whose pod was never bound.
    ReleaseClaim {
        /// The ResourceClaim.
        claim: String,
    },
    /// Server-side apply of the status: trainyard's conditions and, in standalone mode, `jobsStatus`.
    Status {
        /// All conditions trainyard owns on the object, after the change.
        conditions: Vec<Condition>,
        /// Copied from the workload (standalone mode only).
        jobs_status: Option<Vec<JobStatus>>,
    },
    /// Companion mode: apply trainyard's `runtimePatches` entry and the `suspend` flag on the TrainJob.
    PatchTrainJob {
        /// The `runtimePatches` entry, or `None` to leave it out (removing trainyard's entry).
        runtime_patch: Option<Value>,
        /// Value for `spec.suspend`.
        suspend: bool,
    },
    /// Submit the gang's Slurm job, unless Slurm already has a job of the gang.
    SubmitSlurm(Box<trainyard_bridges::slurm::SlurmGang>),
    /// Cancel the gang's Slurm job, if it still runs or waits.
    CancelSlurm {
        /// The gang id its job carries.
        gang: String,
    },
    /// Manager mode: write the gang's copy to a worker cluster (created, or, where a copy of the
    /// same origin is there, its record and `suspend` brought to this body's).
    Dispatch {
        /// The worker cluster.
        cluster: String,
        /// The copy.
        copy: Value,
    },
    /// Manager mode: delete the gang's copy on a worker cluster (nothing when it cannot be
    /// reached: a copy found there later is removed when it comes back).
    Withdraw {
        /// The worker cluster.
        cluster: String,
    },
    /// Record an event on the TrainJob.
    Event {
        /// Warning rather than Normal.
        warning: bool,
        /// CamelCase reason.
        reason: String,
        /// Note.
        note: String,
    },
}

/// The admission record on the object, if any.
pub fn recorded(job: &TrainJob) -> Option<AdmissionRecord> {
    job.metadata.annotations.as_ref()?.get(ADMISSION_ANNOTATION).and_then(|t| AdmissionRecord::decode(t))
}

fn has_finalizer(job: &TrainJob) -> bool {
    job.metadata.finalizers.as_ref().is_some_and(|f| f.iter().any(|x| x == FINALIZER))
}

/// Seconds until an admitted TrainJob's `activeDeadlineSeconds` runs out (negative once it has).
pub fn deadline_left(job: &TrainJob, record: &AdmissionRecord, now: &Time) -> Option<i64> {
    let limit = job.spec.0.active_deadline_seconds?;
    let at = i64::try_from(record.at).unwrap_or(i64::MAX);
    Some(at.saturating_add(limit).saturating_sub(now.0.as_second()))
}

fn deadline_passed(job: &TrainJob, record: &AdmissionRecord, now: &Time) -> bool {
    deadline_left(job, record, now).is_some_and(|left| left <= 0)
}

/// Plans one reconcile of a TrainJob.
pub fn plan(inp: &Inputs<'_>) -> Vec<Action> {
    let mut p = Planner { inp, actions: Vec::new(), wants: Vec::new(), jobs_status: None, released: false };
    p.run();
    p.finish()
}

struct Planner<'a, 'b> {
    inp: &'b Inputs<'a>,
    actions: Vec<Action>,
    wants: Vec<Want>,
    jobs_status: Option<Vec<JobStatus>>,
    /// The claims of unbound pods were released in this plan already.
    released: bool,
}

impl Planner<'_, '_> {
    fn conditions(&self) -> &[Condition] {
        self.inp.job.status.as_ref().map_or(&[], |s| s.conditions.as_slice())
    }

    fn name(&self) -> &str {
        self.inp.job.metadata.name.as_deref().unwrap_or_default()
    }

    fn namespace(&self) -> &str {
        self.inp.job.metadata.namespace.as_deref().unwrap_or_default()
    }

    fn kind(&self) -> WorkloadKind {
        self.inp.intent.as_ref().map_or(WorkloadKind::JobSet, |i| i.kind)
    }

    fn standalone(&self) -> bool {
        self.inp.mode == Mode::Standalone
    }

    fn companion(&self) -> bool {
        self.inp.mode == Mode::Companion
    }

    fn manager(&self) -> bool {
        self.inp.mode == Mode::Manager
    }

    /// trainyard owns the TrainJob's whole lifecycle (Trainer does not run it): standalone or manager.
    fn owns(&self) -> bool {
        !self.companion()
    }

    /// Sets a condition; an event goes with it when its reason changes.
    fn want(&mut self, want: Want, event: Option<bool>) {
        let changed = conditions::reason_of(self.conditions(), want.type_) != Some(want.reason.as_str())
            || conditions::is_true(self.conditions(), want.type_) != want.status;
        if let Some(warning) = event
            && changed
        {
            let note = if want.message.is_empty() { want.reason.clone() } else { want.message.clone() };
            self.actions.push(Action::Event { warning, reason: want.reason.clone(), note });
        }
        self.wants.push(want);
    }

    /// Allocate mode: the allocations of claims whose pods were never bound go back before the
    /// pods do (their claims are deleted with them, and an allocated claim that was never
    /// reserved would keep its devices).
    fn release_claims(&mut self) {
        if self.released || self.inp.devices != DeviceCommit::Allocate {
            return;
        }
        self.released = true;
        let record = recorded(self.inp.job);
        if record.as_ref().is_none_or(|r| r.devices.is_empty()) {
            return;
        }
        let layout = self.layout_of(record.as_ref());
        self.actions.extend(claims::releases(record.as_ref(), layout.as_ref(), self.inp.pods));
    }

    /// The gang's pod layout, rendered without reporting a failure (for releases).
    fn layout_of(&self, record: Option<&AdmissionRecord>) -> Option<GangLayout> {
        let job = self.inp.job.to_bridge().ok()?;
        let placement = workload_objects::placement_of(self.name(), record);
        let opts = trainyard_bridges::RenderOptions { placement, ..Default::default() };
        workload_objects::render(&job, self.inp.runtime?, self.kind(), opts, None, None).ok().map(|r| r.layout)
    }

    fn delete_launched(&mut self) {
        if self.manager() {
            return self.withdraw();
        }
        self.release_claims();
        self.cancel_slurm(recorded(self.inp.job).as_ref());
        if !self.standalone() {
            return;
        }
        if self.inp.workload.is_some() {
            self.actions.push(Action::Delete(workload_objects::workload_ref(
                self.kind(),
                self.namespace(),
                self.name(),
            )));
            self.delete_binder_group();
        }
        if self.inp.hostfile_exists {
            self.actions.push(Action::Delete(workload_objects::hostfile_ref(self.namespace(), self.name())));
        }
    }

    fn run(&mut self) {
        let job = self.inp.job;
        let finished =
            conditions::is_true(self.conditions(), COMPLETE) || conditions::is_true(self.conditions(), FAILED);
        if job.metadata.deletion_timestamp.is_some() {
            if has_finalizer(job) {
                self.delete_launched();
                self.actions.push(Action::RemoveFinalizer);
            }
            return;
        }
        if finished {
            if has_finalizer(job) {
                self.actions.push(Action::RemoveFinalizer);
            }
            return;
        }
        if let Some(w) = self.inp.workload
            && self.owns()
        {
            self.jobs_status = Some(w.jobs_status.clone());
            if let Some((reason, message)) = &w.failed {
                self.delete_binder_group();
                self.want(Want::new(FAILED, true, reason.clone(), message.clone()), Some(true));
                return;
            }
            if let Some((reason, message)) = &w.completed {
                self.delete_binder_group();
                self.want(Want::new(COMPLETE, true, reason.clone(), message.clone()), Some(false));
                return;
            }
        }
        let arrival =
            self.inp.arrival.filter(|_| crate::controller::watching::scheduler_inputs::arrival_of(job).is_none());
        if !has_finalizer(job) {
            self.actions.push(Action::AddFinalizer { arrival });
        } else if let Some(n) = arrival {
            self.actions.push(Action::MarkArrival(n));
        }
        let record = recorded(job);
        // A running gang stays admitted even if its runtime or labels changed underneath it: its
        // pods hold their hosts until it ends, whatever a new look at its spec says.
        if let Err(problem) = self.inp.intent
            && record.is_none()
        {
            return self.problem(problem);
        }
        if self.owns() && job.spec.0.suspend == Some(true) {
            return self.suspended(record.as_ref());
        }
        if self.standalone()
            && let Some(r) = &record
            && deadline_passed(job, r, self.inp.now)
        {
            // As in Trainer: the clock starts at admission (and again on each resume).
            self.delete_launched();
            let message =
                format!("ran past spec.activeDeadlineSeconds ({} s)", job.spec.0.active_deadline_seconds.unwrap_or(0));
            self.want(Want::new(FAILED, true, "DeadlineExceeded", message), Some(true));
            return;
        }
        if let Some(SecretSeen::Foreign(message)) = &self.inp.ssh_secret
            && self.standalone()
        {
            self.delete_launched();
            if record.is_some() {
                self.actions.push(Action::ClearAdmission);
            }
            let flux = self.inp.runtime.and_then(|r| r.spec.ml_policy.as_ref()).is_some_and(|m| m.flux.is_some());
            let reason = if flux { "FluxSecretConflict" } else { "SshSecretConflict" };
            self.want(Want::new(FAILED, true, reason, message.clone()), Some(true));
            return;
        }
        if self.companion() && record.is_none() && job.spec.0.suspend != Some(true) {
            let message = "create the TrainJob with spec.suspend: true so that trainyard admits it";
            self.want(Want::new(QUEUED, false, "NotSuspended", message), Some(true));
            return;
        }
        let Some(record) = self.fleet_record(record) else { return };
        let record = match self.inp.decision {
            Some(Decision::Preempt { by }) => {
                let message = format!("preempted to make room for {by}");
                return self.requeued("Preempted", &message, record.is_some());
            }
            Some(Decision::Requeue { reason, message }) => return self.requeued(reason, message, record.is_some()),
            // Moved off lost nodes: the new record replaces the old one.
            Some(Decision::Move(moved)) if record.as_ref().is_some_and(|r| r != moved) => {
                let old: std::collections::BTreeSet<&str> = record.iter().flat_map(|r| r.slots()).collect();
                let new: Vec<&str> = moved.slots().into_iter().filter(|s| !old.contains(s)).collect();
                self.actions.push(Action::RecordAdmission(moved.clone()));
                let note = format!("pods of lost nodes move to {}", new.join(", "));
                self.actions.push(Action::Event { warning: true, reason: "NodeReplaced".into(), note });
                moved.clone()
            }
            // A record on the object wins over a new decision: its pods may already run there.
            Some(Decision::Admit(decided)) => match record {
                Some(r) => r,
                None => {
                    self.actions.push(Action::RecordAdmission(decided.clone()));
                    let note = format!("placed {} pods on {} nodes", decided.pods(), decided.nodes.len());
                    self.actions.push(Action::Event { warning: false, reason: "Admitted".into(), note });
                    decided.clone()
                }
            },
            Some(Decision::Pending { reason, message }) if record.is_none() => {
                self.want(Want::new(QUEUED, true, reason.clone(), message.clone()), None);
                self.want(Want::new(ADMITTED, false, "Pending", message.clone()), None);
                return;
            }
            Some(Decision::Unschedulable { reason, message }) if record.is_none() => {
                self.want(Want::new(QUEUED, false, reason.clone(), message.clone()), Some(true));
                self.want(Want::new(ADMITTED, false, reason.clone(), message.clone()), None);
                return;
            }
            // No decision yet: the loop decides within moments of seeing the TrainJob, and a
            // placeholder condition would only flap (after a restart, it would undo real ones).
            // Nor is the finalizer added yet: nothing is launched before a decision, and added
            // now it would move the TrainJob's version under the reconcile that records the
            // decision a moment later, which then plans again; it comes with the decision.
            _ => match record {
                Some(r) => r,
                None => {
                    self.actions.retain(|a| !matches!(a, Action::AddFinalizer { .. } | Action::MarkArrival(_)));
                    return;
                }
            },
        };
        self.admitted(&record);
    }

    /// The nodes under an admitted gang: which were lost and why, and when they are all back.
    /// Set only once a node was lost, so that healthy gangs carry no extra condition.
    fn nodes_ready(&mut self) {
        match self.inp.decision {
            Some(Decision::Degraded { message, .. }) => {
                self.want(Want::new(NODES_READY, false, "NodeLost", message.clone()), Some(true));
            }
            _ if conditions::reason_of(self.conditions(), NODES_READY).is_some()
                && !conditions::is_true(self.conditions(), NODES_READY) =>
            {
                let message = "every node under the gang is ready again";
                self.want(Want::new(NODES_READY, true, "NodesRecovered", message), Some(false));
            }
            _ => {}
        }
    }

    fn problem(&mut self, problem: &Problem) {
        if problem.terminal {
            self.want(Want::new(FAILED, true, problem.reason, problem.describe()), Some(true));
            if self.companion() {
                // Kubeflow owns Failed in companion mode; say it as Queued=False instead.
                self.wants.retain(|w| w.type_ != FAILED);
                self.want(Want::new(QUEUED, false, problem.reason, problem.describe()), None);
            }
        } else {
            self.want(Want::new(QUEUED, false, problem.reason, problem.describe()), Some(true));
        }
        self.want(Want::new(ADMITTED, false, problem.reason, problem.describe()), None);
    }

    fn suspended(&mut self, record: Option<&AdmissionRecord>) {
        if let Some(w) = self.inp.workload
            && !w.suspended
        {
            // A JobSet is suspended in place, rendered with the placement it runs with, because the
            // JobSet webhook rejects template changes on a running JobSet; an LWS cannot be suspended.
            match self.kind() {
                _ if self.manager() => self.delete_launched(),
                WorkloadKind::JobSet => {
                    self.apply_rendered(record, false);
                    self.delete_binder_group();
                }
                WorkloadKind::LeaderWorkerSet => self.delete_launched(),
            }
        }
        self.cancel_slurm(record);
        if record.is_some() {
            self.release_claims();
            self.actions.push(Action::ClearAdmission);
        }
        self.want(Want::new(SUSPENDED, true, "Suspended", "TrainJob is suspended"), Some(false));
        self.want(Want::new(QUEUED, false, "Suspended", "TrainJob is suspended"), None);
        self.want(Want::new(ADMITTED, false, "Suspended", "TrainJob is suspended"), None);
    }

    /// Stops an admitted gang and queues it again: preempted, or its nodes were lost.
    fn requeued(&mut self, reason: &str, message: &str, was_admitted: bool) {
        let message = message.to_string();
        self.release_claims();
        if self.owns() {
            self.delete_launched();
        } else if self.inp.job.spec.0.suspend != Some(true) {
            // Trainer's webhook forbids changing runtimePatches while the job runs, so the suspend
            // carries trainyard's entry unchanged; the next admission replaces it while suspended.
            self.actions.push(Action::PatchTrainJob { runtime_patch: self.our_patch(), suspend: true });
        }
        if was_admitted {
            self.actions.push(Action::ClearAdmission);
        }
        self.want(Want::new(ADMITTED, false, reason, message.clone()), Some(true));
        self.want(Want::new(QUEUED, true, reason, message), None);
    }

    fn admitted(&mut self, record: &AdmissionRecord) {
        if self.on_slurm(Some(record)) {
            return self.slurm_admitted(record);
        }
        if self.manager() {
            return self.dispatched(record);
        }
        // The clock starts at admission, and again whenever unbound pods are made anew (a JobSet
        // restart, pods of a lost node recreated): only a gang stuck that long times out.
        let since = self
            .inp
            .pods
            .iter()
            .filter(|p| p.node_name.is_none())
            .filter_map(|p| p.created)
            .fold(i64::try_from(record.at).unwrap_or(i64::MAX), i64::max);
        // A gang waiting for lost nodes to come back follows the policy's `node_loss` instead.
        let degraded = matches!(self.inp.decision, Some(Decision::Degraded { .. }));
        if let Some(limit) = self.inp.start_timeout
            && record.domain.is_none()
            && !degraded
            && self.inp.now.0.as_second().saturating_sub(since) > limit as i64
        {
            let bound = self.inp.pods.iter().filter(|p| p.node_name.is_some()).count();
            if bound < record.pods() as usize {
                let message = format!(
                    "{bound} of {} pods were bound within {limit} s of admission; the gang is queued again",
                    record.pods()
                );
                return self.requeued("StartTimeout", &message, true);
            }
        }
        let layout = if self.standalone() {
            let launch = self.inp.workload.is_none_or(|w| w.suspended);
            let rendered = if launch { self.apply_rendered(Some(record), true) } else { self.render(Some(record)) };
            let Some(rendered) = rendered else { return };
            if !launch && !self.inp.hostfile_exists && rendered.hostfile.is_some() {
                self.actions.push(Action::Apply(rendered.hostfile.clone().expect("checked")));
            }
            rendered.layout
        } else {
            let Some(rendered) = self.render(Some(record)) else { return };
            if self.inp.job.spec.0.suspend != Some(false) || !self.has_our_patch(&rendered.layout, record) {
                let patch = companion_patch(self.name(), &rendered.layout, record);
                self.actions.push(Action::PatchTrainJob { runtime_patch: Some(patch), suspend: false });
            }
            rendered.layout
        };
        if record.domain.is_none() {
            let slots = record.slots();
            let ungates = ungate(&layout, &slots, self.inp.pods);
            match self.inp.devices {
                DeviceCommit::Delegate => self.actions.extend(ungates.into_iter().map(Action::Ungate)),
                DeviceCommit::Allocate => self.actions.extend(claims::allocated_ungates(
                    record,
                    &layout,
                    self.inp.pods,
                    ungates,
                    self.inp.now,
                )),
            }
        }
        let message =
            format!("{} pods on {} nodes (placement cost {})", record.pods(), record.nodes.len(), record.cost);
        self.want(Want::new(ADMITTED, true, "Admitted", message), None);
        self.nodes_ready();
        self.want(Want::new(QUEUED, false, "Admitted", "admitted by trainyard"), None);
        if self.standalone() && conditions::is_true(self.conditions(), SUSPENDED) {
            self.want(Want::new(SUSPENDED, false, "Resumed", "TrainJob is resumed"), Some(false));
        }
    }

    fn finish(mut self) -> Vec<Action> {
        let owned: &[&str] = if self.companion() { &COMPANION_OWNED } else { &STANDALONE_OWNED };
        let generation = self.inp.job.metadata.generation;
        let merged = conditions::merge(self.conditions(), owned, &self.wants, generation, self.inp.now);
        let current_jobs = self.inp.job.status.as_ref().map(|s| s.jobs_status.clone()).unwrap_or_default();
        let jobs_changed = self.jobs_status.as_ref().is_some_and(|j| *j != current_jobs);
        if merged.is_some() || jobs_changed {
            let conditions = merged.unwrap_or_else(|| {
                self.conditions().iter().filter(|c| owned.contains(&c.type_.as_str())).cloned().collect()
            });
            let jobs_status = if self.owns() { self.jobs_status.take() } else { None };
            self.actions.push(Action::Status { conditions, jobs_status });
        }
        self.actions
    }
}
