//! Carries out a plan against the API server: one request per step, in order, nothing decided here.

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ObjectReference, Pod, Secret};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};

use std::sync::{Arc, Mutex};

use trainyard_slurm::SlurmError;
use trainyard_slurm::bridge::Bridge;

use crate::api::{ADMISSION_ANNOTATION, ARRIVAL_ANNOTATION, FIELD_MANAGER, FINALIZER, TrainJob};
use crate::controller::acting::recent_applies::RecentApplies;
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
    applied: Arc<Mutex<RecentApplies>>,
    fleet: Option<Arc<crate::controller::fleet::workers::Fleet>>,
}

/// What a run of steps did that its caller times.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ran {
    /// When the admission record landed, if the run wrote one.
    pub committed: Option<std::time::Instant>,
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
    /// Manager mode: a worker holds a TrainJob of the name that is not the gang's copy (or one
    /// still being deleted); tried again with backoff.
    #[error("{0}")]
    Foreign(String),
}

/// The `ApiResource` of an object we create, from its apiVersion and kind.
pub fn api_resource(api_version: &str, kind: &str) -> Option<ApiResource> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let plural = match kind {
        "JobSet" => "jobsets",
        "LeaderWorkerSet" => "leaderworkersets",
        "ConfigMap" => "configmaps",
        "Secret" => "secrets",
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
        Actor {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            slurm: None,
            status: None,
            applied: Arc::default(),
            fleet: None,
        }
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

    /// The same actor, writing gangs' copies to the fleet's workers (manager mode).
    pub fn with_fleet(mut self, fleet: Arc<crate::controller::fleet::workers::Fleet>) -> Actor {
        self.fleet = Some(fleet);
        self
    }

    /// The same actor, submitting Slurm gangs through `bridge`.
    pub fn with_slurm(mut self, bridge: Bridge) -> Actor {
        self.slurm = Some(bridge);
        self
    }

    /// Carries out `actions` on `job` in order; the first failure stops the rest (they are planned
    /// again from what the server shows on the next reconcile). Where order does not matter the
    /// requests go together: the objects a workload's pods need (gang objects, hostfile) are
    /// applied at once and before the workload, a gang's pods are bound at once, events go out
    /// beside the steps, and a finalizer added with the admission record is one patch.
    pub async fn run(&self, job: &TrainJob, actions: &[Action]) -> Result<Ran, ActError> {
        let mut seen = job.metadata.resource_version.clone();
        let mut ran = Ran::default();
        let mut rest = actions;
        while let Some(first) = rest.first() {
            match (first, rest.get(1)) {
                (Action::AddFinalizer { arrival }, Some(Action::RecordAdmission(record))) => {
                    self.commit_with_finalizer(job, *arrival, record, &mut seen).await?;
                    ran.committed = Some(std::time::Instant::now());
                    rest = &rest[2..];
                }
                (Action::Event { .. }, _) => {
                    let (actor, job, event) = (self.clone(), job.clone(), first.clone());
                    tokio::spawn(async move { actor.execute(&job, &event).await });
                    rest = &rest[1..];
                }
                (Action::Apply(_), _) => {
                    let n = rest.iter().take_while(|a| matches!(a, Action::Apply(_))).count();
                    self.apply_together(&rest[..n]).await?;
                    rest = &rest[n..];
                }
                (Action::Ungate(_), _) => {
                    let n = rest.iter().take_while(|a| matches!(a, Action::Ungate(_))).count();
                    self.bind_together(&job.namespace().unwrap_or_default(), &rest[..n]).await?;
                    rest = &rest[n..];
                }
                _ => {
                    self.execute_at(job, first, &mut seen).await?;
                    if matches!(first, Action::RecordAdmission(_)) {
                        ran.committed = Some(std::time::Instant::now());
                    }
                    rest = &rest[1..];
                }
            }
        }
        Ok(ran)
    }

    /// Applies a run of objects in the order they need one another, each rank's objects at
    /// once: kube-scheduler's Workload and the MPI hostfile, then the PodGroup (the API server
    /// refuses one whose Workload does not exist yet), then the workloads (JobSet,
    /// LeaderWorkerSet), whose pods must find their group. An object applied moments ago with the
    /// same body is not applied again while the caches catch up with it.
    async fn apply_together(&self, applies: &[Action]) -> Result<(), ActError> {
        let objects: Vec<&Value> = applies
            .iter()
            .filter_map(|a| match a {
                Action::Apply(o) => Some(o),
                _ => None,
            })
            .filter(|o| !self.applied.lock().expect("lock").recent(o))
            .collect();
        let rank = |o: &Value| match o["kind"].as_str() {
            Some("JobSet" | "LeaderWorkerSet") => 2,
            Some("PodGroup") => 1,
            _ => 0,
        };
        let mut ranks: [Vec<&Value>; 3] = Default::default();
        for object in objects {
            ranks[rank(object)].push(object);
        }
        for group in ranks {
            let mut applies: Vec<BoxFuture<'_, Result<(), kube::Error>>> = Vec::with_capacity(group.len());
            for object in &group {
                applies.push(Box::pin(self.apply(object)));
            }
            together(applies).await?;
            let mut applied = self.applied.lock().expect("lock");
            for o in group {
                applied.note(o);
            }
        }
        Ok(())
    }

    /// Binds a gang's gated pods at once; a pod bound moments ago to the same node (the cache
    /// has not seen it yet) is not bound again.
    async fn bind_together(&self, namespace: &str, ungates: &[Action]) -> Result<(), ActError> {
        let fresh: Vec<&Ungate> = ungates
            .iter()
            .filter_map(|a| match a {
                Action::Ungate(u) => Some(u),
                _ => None,
            })
            .filter(|u| !self.applied.lock().expect("lock").bound(namespace, &u.pod, &u.node))
            .collect();
        let mut binds: Vec<BoxFuture<'_, Result<(), kube::Error>>> = Vec::with_capacity(fresh.len());
        for u in &fresh {
            binds.push(Box::pin(self.ungate(namespace, u)));
        }
        together(binds).await?;
        let mut applied = self.applied.lock().expect("lock");
        for u in fresh {
            applied.note_bound(namespace, &u.pod, &u.node);
        }
        Ok(())
    }

    /// The finalizer, the arrival order and the admission record in one merge patch over the
    /// version read: the commit point and what makes it safe land together or not at all.
    async fn commit_with_finalizer(
        &self,
        job: &TrainJob,
        arrival: Option<u64>,
        record: &crate::controller::acting::admission_record::AdmissionRecord,
        seen: &mut Option<String>,
    ) -> Result<(), ActError> {
        let jobs: Api<TrainJob> = Api::namespaced(self.client.clone(), &job.namespace().unwrap_or_default());
        let mut finalizers = job.finalizers().to_vec();
        finalizers.push(FINALIZER.to_string());
        let mut annotations = json!({ADMISSION_ANNOTATION: record.encode()});
        if let Some(n) = arrival {
            annotations[ARRIVAL_ANNOTATION] = json!(n.to_string());
        }
        let patch =
            json!({"metadata": {"resourceVersion": seen, "finalizers": finalizers, "annotations": annotations}});
        let written = jobs.patch(&job.name_any(), &patch_params(), &Patch::Merge(&patch)).await.map_err(conflict)?;
        *seen = written.metadata.resource_version;
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
                if let Some(writer) = &self.status {
                    writer.forget(&Target::TrainJob(ns.clone(), name.clone()));
                }
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
                // The commit point: written only over what the decision was planned on.
                let written = match checked_record_patch(job, record) {
                    // The spec (generation), labels and annotations as read, tested by the
                    // server: a status written meanwhile does not void the decision.
                    Some(patch) => {
                        let patch = Patch::Json::<()>(serde_json::from_value(patch).expect("a patch"));
                        match jobs.patch(&name, &patch_params(), &patch).await {
                            Err(kube::Error::Api(s)) if s.code == 422 => return Err(ActError::Conflict),
                            other => other.map_err(conflict)?,
                        }
                    }
                    // Nothing to test a missing map against: the whole version as read.
                    None => {
                        let patch = json!({"metadata": {"resourceVersion": seen, "annotations": {ADMISSION_ANNOTATION: record.encode()}}});
                        jobs.patch(&name, &patch_params(), &Patch::Merge(&patch)).await.map_err(conflict)?
                    }
                };
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
                    // The same status this writer wrote moments ago, planned on a cache that has
                    // not seen that write yet: nothing to write.
                    Some(writer) if writer.echo(&target, &body, job.metadata.resource_version.as_deref()) => {}
                    Some(writer) => writer.send(target, body),
                    None => {
                        status_writer::write(&self.client, &target, &body).await?;
                    }
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
            Action::Create(object) => self.create(object).await?,
            Action::Dispatch { cluster, copy } => {
                // A worker that cannot be written now is looked at again once it can.
                if let Some(worker) = self.fleet.as_ref().and_then(|f| f.client(cluster)) {
                    crate::controller::acting::worker_writes::dispatch(&worker, cluster, copy).await?;
                }
            }
            Action::Withdraw { cluster } => {
                // An unreachable worker's copy is removed when the worker comes back.
                if let Some(worker) = self.fleet.as_ref().and_then(|f| f.client(cluster)) {
                    crate::controller::acting::worker_writes::withdraw(&worker, job).await?;
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

    /// Creates `object` unless one of its name exists (whoever made it: the next look tells).
    async fn create(&self, object: &Value) -> Result<(), kube::Error> {
        let field = |k: &str| object.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        let namespace = object["metadata"].get("namespace").and_then(Value::as_str).unwrap_or_default();
        let Some(ar) = api_resource(&field("apiVersion"), &field("kind")) else {
            return Err(kube::Error::Service(format!("no API resource for {}", field("kind")).into()));
        };
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), namespace, &ar);
        let body: DynamicObject = serde_json::from_value(object.clone()).map_err(kube::Error::SerdeError)?;
        let params = kube::api::PostParams { field_manager: Some(FIELD_MANAGER.to_string()), ..Default::default() };
        match api.create(&params, &body).await {
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            other => other.map(|_| ()),
        }
    }

    async fn delete(&self, target: &ObjectRef) -> Result<(), kube::Error> {
        // Made again after this, it is applied again whatever was applied before.
        self.applied.lock().expect("lock").forget(&target.kind, &target.namespace, &target.name);
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

/// Runs requests together and returns the first failure once all have ended.
async fn together<E>(requests: Vec<BoxFuture<'_, Result<(), E>>>) -> Result<(), ActError>
where
    ActError: From<E>,
{
    let results: Vec<Result<(), E>> = futures::stream::iter(requests).buffered(MAX_TOGETHER).collect().await;
    results.into_iter().collect::<Result<Vec<()>, E>>().map(|_| ()).map_err(ActError::from)
}

/// Requests of one reconcile in flight at once.
const MAX_TOGETHER: usize = 16;

/// The JSON patch that writes an admission record only if the TrainJob is the one the decision
/// was planned on: the same object (uid), spec (generation), labels and annotations, the
/// annotations holding no record yet. `None` when labels or annotations were absent as read (a
/// JSON patch cannot test for a missing map; the caller falls back to the resourceVersion).
fn checked_record_patch(
    job: &TrainJob,
    record: &crate::controller::acting::admission_record::AdmissionRecord,
) -> Option<Value> {
    let meta = &job.metadata;
    let (labels, annotations) = (meta.labels.as_ref()?, meta.annotations.as_ref()?);
    if annotations.contains_key(ADMISSION_ANNOTATION) {
        return None;
    }
    Some(json!([
        {"op": "test", "path": "/metadata/uid", "value": meta.uid},
        {"op": "test", "path": "/metadata/generation", "value": meta.generation},
        {"op": "test", "path": "/metadata/labels", "value": labels},
        {"op": "test", "path": "/metadata/annotations", "value": annotations},
        {"op": "add", "path": format!("/metadata/annotations/{}", ADMISSION_ANNOTATION.replace('/', "~1")), "value": record.encode()},
    ]))
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
