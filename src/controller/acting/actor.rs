//! Carries out a plan against the API server: one request per step, in order, nothing decided here.

use k8s_openapi::api::core::v1::{ObjectReference, Pod, Secret};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};

use trainyard_slurm::SlurmError;
use trainyard_slurm::bridge::Bridge;

use crate::api::{ADMISSION_ANNOTATION, ARRIVAL_ANNOTATION, FIELD_MANAGER, FINALIZER, TrainJob};
use crate::controller::acting::status_writer::{self, StatusWriter, Target};
use crate::controller::acting::workload_objects::ObjectRef;
use crate::controller::deciding::plan::Action;
use crate::controller::deciding::pod_bindings::{HOSTNAME_LABEL, Ungate};

/// Executes plan steps with one client (and the Slurm bridge, for Slurm queues).
#[derive(Clone)]
pub struct Actor {
    client: Client,
    recorder: Recorder,
    slurm: Option<Bridge>,
    status: Option<StatusWriter>,
}

/// Why a step failed.
#[derive(Debug, thiserror::Error)]
pub enum ActError {
    /// The API server refused or failed a request; retried with backoff.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The TrainJob changed since it was read (its resourceVersion precondition failed): the
    /// steps are planned again from what the server shows now, at once.
    #[error("the TrainJob changed since it was read; planning again")]
    Conflict,
    /// Slurm did not answer (or answered nonsense); retried with backoff.
    #[error("Slurm: {0}")]
    Slurm(SlurmError),
    /// Slurm refused the gang's job for good; the TrainJob fails with Slurm's message.
    #[error("Slurm refused gang {gang}: {message}")]
    SlurmRefused {
        /// The gang id.
        gang: String,
        /// Slurm's own message.
        message: String,
    },
    /// An MPI gang's SSH key could not be made.
    #[error("{0}")]
    Key(String),
    /// A Slurm step on a controller without a Slurm cluster.
    #[error("a Slurm step, but trainyard runs without --slurm")]
    NoSlurm,
}

/// The `ApiResource` of an object we create, from its apiVersion and kind.
pub fn api_resource(api_version: &str, kind: &str) -> Option<ApiResource> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let plural = match kind {
        "JobSet" => "jobsets",
        "LeaderWorkerSet" => "leaderworkersets",
        "ConfigMap" => "configmaps",
        "Workload" => "workloads",
        "PodGroup" => "podgroups",
        _ => return None,
    };
    Some(ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural))
}

/// ResourceClaims of one namespace.
fn claims_api(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    let gvk = kube::api::GroupVersionKind::gvk("resource.k8s.io", "v1", "ResourceClaim");
    Api::namespaced_with(client.clone(), namespace, &ApiResource::from_gvk_with_plural(&gvk, "resourceclaims"))
}

fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

fn patch_params() -> PatchParams {
    PatchParams { field_manager: Some(FIELD_MANAGER.to_string()), ..PatchParams::default() }
}

/// A NotFound on delete means the work is done.
fn ignore_not_found<T>(r: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
        Err(e) => Err(e),
    }
}

/// A 409 on a write with a resourceVersion precondition: the object changed since it was read.
fn conflict(e: kube::Error) -> ActError {
    match e {
        kube::Error::Api(s) if s.code == 409 => ActError::Conflict,
        other => ActError::Kube(other),
    }
}

impl Actor {
    /// An actor reporting events as `trainyard` from `instance` (the pod name).
    pub fn new(client: Client, instance: Option<String>) -> Actor {
        let reporter = Reporter { controller: FIELD_MANAGER.to_string(), instance };
        Actor { recorder: Recorder::new(client.clone(), reporter), client, slurm: None, status: None }
    }

    /// The client it acts with.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The same actor, handing TrainJob status to `writer` instead of writing it in line.
    pub fn with_status_writer(mut self, writer: StatusWriter) -> Actor {
        self.status = Some(writer);
        self
    }

    /// The same actor, submitting Slurm gangs through `bridge`.
    pub fn with_slurm(mut self, bridge: Bridge) -> Actor {
        self.slurm = Some(bridge);
        self
    }

    /// Carries out `actions` on `job` in order; the first failure stops the rest (they are planned
    /// again from what the server shows on the next reconcile).
    pub async fn run(&self, job: &TrainJob, actions: &[Action]) -> Result<(), ActError> {
        let mut seen = job.metadata.resource_version.clone();
        for action in actions {
            self.execute_at(job, action, &mut seen).await?;
        }
        Ok(())
    }

    /// Carries out one step.
    pub async fn execute(&self, job: &TrainJob, action: &Action) -> Result<(), ActError> {
        let mut seen = job.metadata.resource_version.clone();
        self.execute_at(job, action, &mut seen).await
    }

    /// Carries out one step; `seen` is the TrainJob's resourceVersion as this reconcile last read
    /// or wrote it, the precondition of the writes that commit a decision.
    async fn execute_at(&self, job: &TrainJob, action: &Action, seen: &mut Option<String>) -> Result<(), ActError> {
        let ns = job.namespace().unwrap_or_default();
        let name = job.name_any();
        let jobs: Api<TrainJob> = Api::namespaced(self.client.clone(), &ns);
        match action {
            Action::AddFinalizer { arrival } => {
                // The whole list with the version it was read at: a concurrent change fails the
                // patch instead of being overwritten.
                let mut finalizers = job.finalizers().to_vec();
                finalizers.push(FINALIZER.to_string());
                let mut patch = json!({"metadata": {"resourceVersion": seen, "finalizers": finalizers}});
                if let Some(n) = arrival {
                    patch["metadata"]["annotations"] = json!({ARRIVAL_ANNOTATION: n.to_string()});
                }
                let written = jobs.patch(&name, &patch_params(), &Patch::Merge(&patch)).await.map_err(conflict)?;
                *seen = written.metadata.resource_version;
            }
            Action::MarkArrival(n) => {
                let patch = json!({"metadata": {"annotations": {ARRIVAL_ANNOTATION: n.to_string()}}});
                let written = jobs.patch(&name, &patch_params(), &Patch::Merge(&patch)).await?;
                *seen = written.metadata.resource_version;
            }
            Action::RemoveFinalizer => {
                let Some(i) = job.finalizers().iter().position(|f| f == FINALIZER) else { return Ok(()) };
                let patch = json!([
                    {"op": "test", "path": format!("/metadata/finalizers/{i}"), "value": FINALIZER},
                    {"op": "remove", "path": format!("/metadata/finalizers/{i}")},
                ]);
                let r = jobs
                    .patch(&name, &patch_params(), &Patch::Json::<()>(serde_json::from_value(patch).expect("a patch")))
                    .await;
                match r {
                    // The `test` failed: the finalizers moved since this TrainJob was read (a
                    // stale cache after a relist); plan again on the one the server shows.
                    Err(kube::Error::Api(s)) if s.code == 422 => return Err(ActError::Conflict),
                    other => ignore_not_found(other)?,
                }
            }
            Action::RecordAdmission(record) => {
                // The commit point: written only over the version the decision was planned on.
                let patch = json!({"metadata": {"resourceVersion": seen, "annotations": {ADMISSION_ANNOTATION: record.encode()}}});
                let written = jobs.patch(&name, &patch_params(), &Patch::Merge(&patch)).await.map_err(conflict)?;
                *seen = written.metadata.resource_version;
            }
            Action::ClearAdmission => {
                let patch = json!({"metadata": {"annotations": {ADMISSION_ANNOTATION: null}}});
                jobs.patch(&name, &patch_params(), &Patch::Merge(&patch)).await?;
            }
            Action::Apply(object) => self.apply(object).await?,
            Action::Delete(target) => self.delete(target).await?,
            Action::Ungate(u) => self.ungate(&ns, u).await?,
            Action::AllocateClaim { claim, node, results, at } => {
                let api = claims_api(&self.client, &ns);
                let params = apply_params();
                // The finalizer first: an allocation must never sit on a claim that can vanish.
                let meta = crate::controller::deciding::plan::claim_metadata(&ns, claim, true);
                ignore_not_found(api.patch(claim, &params, &Patch::Apply(&meta)).await.map(|_| ()))?;
                let status = crate::controller::deciding::plan::allocation_status(&ns, claim, node, results, at);
                ignore_not_found(api.patch_status(claim, &params, &Patch::Apply(&status)).await.map(|_| ()))?;
            }
            Action::ReleaseClaim { claim } => {
                let api = claims_api(&self.client, &ns);
                let params = apply_params();
                let status = crate::controller::deciding::plan::released_status(&ns, claim);
                ignore_not_found(api.patch_status(claim, &params, &Patch::Apply(&status)).await.map(|_| ()))?;
                let meta = crate::controller::deciding::plan::claim_metadata(&ns, claim, false);
                ignore_not_found(api.patch(claim, &params, &Patch::Apply(&meta)).await.map(|_| ()))?;
            }
            Action::Status { conditions, jobs_status } => {
                let mut status = json!({"conditions": conditions});
                if let Some(j) = jobs_status {
                    status["jobsStatus"] = json!(j);
                }
                let body = json!({
                    "apiVersion": TrainJob::api_version(&()),
                    "kind": TrainJob::kind(&()),
                    "status": status,
                });
                let target = Target::TrainJob(ns.clone(), name.clone());
                match &self.status {
                    Some(writer) => writer.send(target, body),
                    None => status_writer::write(&self.client, &target, &body).await?,
                }
            }
            Action::PatchTrainJob { runtime_patch, suspend } => {
                let mut spec = json!({"suspend": suspend});
                if let Some(p) = runtime_patch {
                    spec["runtimePatches"] = json!([p]);
                }
                let body = json!({
                    "apiVersion": TrainJob::api_version(&()),
                    "kind": TrainJob::kind(&()),
                    "metadata": {"name": name, "namespace": ns},
                    "spec": spec,
                });
                jobs.patch(&name, &apply_params(), &Patch::Apply(&body)).await?;
            }
            Action::SubmitSlurm(gang) => {
                let bridge = self.slurm.as_ref().ok_or(ActError::NoSlurm)?;
                match bridge.submit(gang).await {
                    Ok(s) => {
                        tracing::info!(job = %job.key(), gang = %gang.gang, job_id = s.job_id, existing = s.existing, "Slurm job")
                    }
                    Err(e) => return Err(slurm_error(&gang.gang, e)),
                }
            }
            Action::CancelSlurm { gang } => {
                let bridge = self.slurm.as_ref().ok_or(ActError::NoSlurm)?;
                match bridge.cancel(gang).await {
                    Ok(_) => {}
                    // It ended between the look-up and the cancel: over either way.
                    Err(SlurmError::Refused { messages, .. })
                        if messages.iter().any(|m| m.contains("already completing or completed")) => {}
                    Err(e) => return Err(ActError::Slurm(e)),
                }
            }
            Action::CreateSshSecret { name: secret } => {
                let owner = json!({
                    "apiVersion": TrainJob::api_version(&()), "kind": TrainJob::kind(&()), "name": name,
                    "uid": job.uid().unwrap_or_default(), "controller": true, "blockOwnerDeletion": true,
                });
                let pair = crate::controller::acting::mpi_ssh_key::KeyPair::generate().map_err(ActError::Key)?;
                let body: Secret = serde_json::from_value(pair.secret(&ns, secret, &owner)).expect("a Secret");
                let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &ns);
                let params =
                    kube::api::PostParams { field_manager: Some(FIELD_MANAGER.to_string()), ..Default::default() };
                match secrets.create(&params, &body).await {
                    // Made by a concurrent reconcile, or someone else's: the next look tells.
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    other => {
                        other?;
                    }
                }
            }
            Action::Event { warning, reason, note } => {
                let event = Event {
                    type_: if *warning { EventType::Warning } else { EventType::Normal },
                    reason: reason.clone(),
                    note: Some(note.clone()),
                    action: "Schedule".into(),
                    secondary: None,
                };
                let reference: ObjectReference = job.object_ref(&());
                // Events are best effort: a refused event must not stop the lifecycle.
                if let Err(e) = self.recorder.publish(&event, &reference).await {
                    tracing::warn!(job = %job.key(), error = %e, "event not recorded");
                }
            }
        }
        Ok(())
    }

    /// A Warning event on a Node (best effort: a refused event is only logged).
    pub async fn node_event(&self, node: &str, reason: &str, note: &str) {
        let event = Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(note.into()),
            action: "Schedule".into(),
            secondary: None,
        };
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.into()),
            ..ObjectReference::default()
        };
        if let Err(e) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(node, error = %e, "event not recorded");
        }
    }

    async fn apply(&self, object: &Value) -> Result<(), kube::Error> {
        let field = |k: &str| object.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        let meta = |k: &str| object["metadata"].get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        let Some(ar) = api_resource(&field("apiVersion"), &field("kind")) else {
            return Err(kube::Error::Service(format!("no API resource for {}", field("kind")).into()));
        };
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &meta("namespace"), &ar);
        api.patch(&meta("name"), &apply_params(), &Patch::Apply(object)).await?;
        Ok(())
    }

    async fn delete(&self, target: &ObjectRef) -> Result<(), kube::Error> {
        let Some(ar) = api_resource(&target.api_version, &target.kind) else { return Ok(()) };
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &target.namespace, &ar);
        ignore_not_found(api.delete(&target.name, &DeleteParams::background()).await)
    }

    async fn ungate(&self, namespace: &str, u: &Ungate) -> Result<(), kube::Error> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let patch = ungate_patch(u);
        let r = pods
            .patch(&u.pod, &patch_params(), &Patch::Json::<()>(serde_json::from_value(patch).expect("a patch")))
            .await;
        match r {
            // The gate is gone already (a cache that lagged the watch planned it again): done.
            Err(kube::Error::Api(s)) if s.code == 422 => Ok(()),
            // A pod deleted meanwhile is replaced by one the next reconcile sees.
            other => ignore_not_found(other),
        }
    }
}

/// A refusal of the job (Slurm's own, or a job this Slurm cannot express) is final; the rest,
/// including a refused look-up around the submission, is retried.
fn slurm_error(gang: &str, e: SlurmError) -> ActError {
    match e {
        SlurmError::Refused { ref messages, .. } if e.refuses_submission() => {
            ActError::SlurmRefused { gang: gang.into(), message: messages.join("; ") }
        }
        SlurmError::Spec(spec) => ActError::SlurmRefused { gang: gang.into(), message: spec.to_string() },
        other => ActError::Slurm(other),
    }
}

/// The JSON patch that binds a gated pod: the gate is checked by name before it is removed, so a
/// pod whose gates changed meanwhile fails the patch instead of losing another gate.
pub fn ungate_patch(u: &Ungate) -> Value {
    let gate = format!("/spec/schedulingGates/{}", u.gate_index);
    let selector = if u.has_node_selector {
        json!({"op": "add", "path": format!("/spec/nodeSelector/{}", HOSTNAME_LABEL.replace('/', "~1")), "value": u.node})
    } else {
        json!({"op": "add", "path": "/spec/nodeSelector", "value": {HOSTNAME_LABEL: u.node}})
    };
    json!([
        {"op": "test", "path": format!("{gate}/name"), "value": trainyard_bridges::TOPOLOGY_GATE},
        {"op": "remove", "path": gate},
        selector,
    ])
}
