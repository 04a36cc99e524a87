//! The controller process: leadership, the watches, the scheduling task, the status writer and
//! the TrainJob reconcilers, wired together. Nothing here decides: the scheduling task runs the
//! pure live picture, and each reconcile carries out a pure plan.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::{Action as Requeue, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{Notify, mpsc};
use trainyard_bridges::{GANG_LABEL, WorkloadKind};
use trainyard_policies::PolicyConfig;

use super::discovery::{discover_binders, discover_gang_api, dra_served, follow_binders};
use super::triggers::{PodsByGang, SeenViews, gang_of, object_key, owning_trainjob, quiet_triggers, tokio_stream_from};
use crate::api::queue::QueueStatus;
use crate::api::{ClusterTrainingRuntime, SlurmTarget, TrainJob, TrainingRuntime};
use crate::controller::acting::actor::{ActError, Actor, api_resource};
use crate::controller::acting::binders::{BinderKind, BinderSupport};
use crate::controller::acting::gang_api::GangApi;
use crate::controller::acting::status_writer::StatusWriter;
use crate::controller::deciding::intent::IntentContext;
use crate::controller::deciding::plan::{
    Action, FleetInputs, Inputs, Mode, SecretSeen, WorkloadView, judge_ssh_secret, plan,
};
use crate::controller::deciding::scheduling_loop::Decision;
use crate::controller::fleet::copies::own_workload;
use crate::controller::fleet::workers::Fleet;
use crate::controller::serving::http::{self, Health};
use crate::controller::serving::lease::LeaseLock;
use crate::controller::serving::metrics::Metrics;
use crate::controller::slurm::poller::SlurmLink;
use crate::controller::watching::caches::{cache, dynamic_cache, served, without_managed_fields};
use crate::controller::watching::live::Change;
use crate::controller::watching::planner_views::{pod_view, slim_pod, workload_view};
use crate::controller::watching::scheduler_inputs::{Runtimes, intent_of, is_ours};

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Standalone, companion or manager.
    pub mode: Mode,
    /// The namespace the controller runs in (manager mode reads the workers' Secrets there).
    pub namespace: String,
    /// The policy file's text (global settings and queues; Queue objects are added to it).
    pub policy_text: String,
    /// Its name, for errors.
    pub policy_name: String,
    /// Name of the Topology object to use; without one, hosts (and NVLink cliques) only.
    pub topology: String,
    /// The safety-net tick: a cycle runs at least this often (changes start one at once).
    pub cycle: Duration,
    /// Where `/metrics` is served.
    pub metrics_bind: SocketAddr,
    /// Where `/healthz` and `/readyz` are served.
    pub health_bind: SocketAddr,
    /// Leader election; `None` runs as the only replica.
    pub lease: Option<LeaseLock>,
    /// Pod name, for events.
    pub identity: String,
    /// The Slurm cluster that Slurm queues run on, when there is one.
    pub slurm: Option<Arc<SlurmLink>>,
    /// TrainJob reconciles (admission records, launches) carried out at once.
    pub workers: u16,
    /// Who allocates the devices of gangs' DRA claims.
    pub devices: crate::controller::deciding::plan::DeviceCommit,
    /// Seconds an admitted gang may take for all its pods to be bound (`None`: no limit).
    pub start_timeout: Option<u64>,
    /// The researcher API, when it is served.
    pub api: Option<ApiServing>,
    /// The binder of gangs whose runtime names none (standalone mode).
    pub binder: Option<BinderKind>,
}

/// Where and how the researcher API (`trainyard.v1`) is served.
#[derive(Clone, Debug)]
pub struct ApiServing {
    /// Listen address.
    pub bind: SocketAddr,
    /// TLS certificate chain, PEM.
    pub tls_cert: std::path::PathBuf,
    /// Its private key, PEM.
    pub tls_key: std::path::PathBuf,
    /// Each caller's rate limit.
    pub per_caller: crate::grpc::rate::Limit,
}

/// Why a reconcile failed; it is retried with exponential backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// A step failed: the API server or Slurm refused or did not answer.
    #[error(transparent)]
    Act(#[from] ActError),
}

impl ReconcileError {
    /// Whether the API server was away rather than refusing (tried again within seconds).
    pub fn transient(&self) -> bool {
        matches!(self, ReconcileError::Act(ActError::Kube(e)) if crate::controller::process::retry::transient(e))
    }
}

/// What reconciles render intents with, as the scheduling task last had it.
#[derive(Debug)]
pub struct RenderInputs {
    /// The policy in force (priority classes).
    pub policy: PolicyConfig,
    /// Extended resource counted as GPUs.
    pub gpu_resource: String,
    /// Queues whose gangs run on Slurm.
    pub slurm_queues: Arc<BTreeMap<String, SlurmTarget>>,
}

/// What the scheduling task and the reconcilers share.
pub struct Ctx {
    pub(crate) settings: Settings,
    gang_api: Option<GangApi>,
    /// The binders the API server serves, and the default, as last looked for.
    pub(crate) binders: Mutex<BinderSupport>,
    actor: Actor,
    /// The scheduling loop's current decision per TrainJob (`namespace/name`), with the uid of
    /// the TrainJob it is about.
    pub(crate) decisions: Mutex<HashMap<String, (String, Decision)>>,
    /// Arrival orders the loop handed out to TrainJobs that carry none yet, by uid.
    pub(crate) arrivals: Mutex<HashMap<String, u64>>,
    /// When the loop first saw each TrainJob not launched yet, by uid.
    pub(crate) first_seen: Mutex<HashMap<String, Instant>>,
    /// When each admission passed its last stage (decided, then recorded), by uid, until its
    /// workload is applied.
    pub(crate) admission_clock: Mutex<HashMap<String, Instant>>,
    pub(crate) inputs: Mutex<RenderInputs>,
    /// Queue statuses sent to the writer, by name.
    pub(crate) queue_sent: Mutex<BTreeMap<String, QueueStatus>>,
    pub(crate) status: StatusWriter,
    failures: Mutex<HashMap<String, u32>>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) runtimes: Store<TrainingRuntime>,
    pub(crate) cluster_runtimes: Store<ClusterTrainingRuntime>,
    /// The runtimes indexed for rendering, with the fingerprint of the caches they came from.
    runtimes_index: Mutex<(u64, Option<Arc<Runtimes>>)>,
    jobsets: Store<DynamicObject>,
    lws: Option<Store<DynamicObject>>,
    pods: Store<Pod>,
    pods_by_gang: Arc<PodsByGang>,
    configmaps: Store<ConfigMap>,
    /// Watch events of the researcher API, to every open stream.
    pub(crate) api_events: tokio::sync::broadcast::Sender<crate::grpc::v1::Event>,
    /// Manager mode: the worker clusters.
    pub(crate) fleet: Option<Arc<Fleet>>,
}

impl Ctx {
    /// The actor reconciles carry plans out with.
    pub(crate) fn actor(&self) -> &Actor {
        &self.actor
    }

    /// The binders as last looked for.
    pub(crate) fn binders(&self) -> BinderSupport {
        *self.binders.lock().expect("lock")
    }
}

/// Runs the controller until the process is stopped (SIGTERM or Ctrl-C: in-flight reconciles end,
/// then the lease is given up).
/// `metrics` are the ones the client's request counter writes to.
pub async fn run(client: Client, settings: Settings, metrics: Arc<Metrics>) -> anyhow::Result<()> {
    let health = Arc::new(Health::default());
    let (mb, hb) = (settings.metrics_bind, settings.health_bind);
    let mrouter = http::metrics_router(metrics.clone());
    let hrouter = http::health_router(health.clone());
    tokio::spawn(
        async move { http::serve(mb, mrouter).await.map_err(|e| tracing::error!(error = %e, "metrics server")) },
    );
    tokio::spawn(
        async move { http::serve(hb, hrouter).await.map_err(|e| tracing::error!(error = %e, "health server")) },
    );
    let stop = Arc::new(Notify::new());
    tokio::spawn({
        let stop = stop.clone();
        async move {
            shutdown_signal().await;
            tracing::info!("stopping");
            stop.notify_waiters();
            stop.notify_one();
        }
    });

    // The API is served from the start: a standby answers UNAVAILABLE until it leads and its
    // engine is built, so clients retry until they reach the leader.
    let (api_events, _) = tokio::sync::broadcast::channel(API_EVENTS_KEPT);
    let (serving_tx, serving) = tokio::sync::watch::channel(false);
    let (queries_tx, queries) = mpsc::channel(API_QUESTIONS_WAITING);
    if let Some(api) = settings.api.clone() {
        let backend = crate::grpc::service::Backend { queries: queries_tx, events: api_events.clone(), serving };
        serve_api(client.clone(), api, backend, &settings.identity, stop.clone()).await?;
    }

    if let Some(lock) = settings.lease.clone() {
        tokio::select! {
            () = crate::controller::serving::leadership::acquire(client.clone(), lock, metrics.clone(), health.clone()) => {}
            () = stop.notified() => return Ok(()),
        }
    } else {
        metrics.leader.set(1);
    }

    let policy = PolicyConfig::from_yaml(&settings.policy_text, &settings.policy_name)?;
    let gang = watcher::Config::default().labels(GANG_LABEL);
    let runtimes_changed = Arc::new(Notify::new());
    let runtimes = crate::controller::watching::watches::notifying_cache(
        Api::<TrainingRuntime>::all(client.clone()),
        runtimes_changed.clone(),
    );
    let cluster_runtimes = crate::controller::watching::watches::notifying_cache(
        Api::<ClusterTrainingRuntime>::all(client.clone()),
        runtimes_changed.clone(),
    );
    // Unbounded: a trigger must never be dropped, and the Controller keeps one per TrainJob.
    // Gang pods, JobSets and LeaderWorkerSets trigger from the caches the reconciles read.
    let (trigger_tx, trigger_rx) = mpsc::unbounded_channel::<ObjectRef<TrainJob>>();
    let pods_by_gang = Arc::new(PodsByGang::default());
    let (pods, t6) = cache(Api::<Pod>::all(client.clone()), gang.clone(), slim_pod, {
        let (trigger, seen, by_gang) = (trigger_tx.clone(), SeenViews::default(), pods_by_gang.clone());
        move |pod: &Pod, deleted: bool| {
            by_gang.note(pod, deleted);
            // A gang pod appearing (gated), changing as the planner sees it, or going brings its
            // TrainJob's reconcile, which binds it.
            if let Some(job) = gang_of(pod)
                && seen.changed(object_key(&pod.metadata), (!deleted).then(|| pod_view(pod)).as_ref())
            {
                let _ = trigger.send(job);
            }
        }
    });
    let (configmaps, t7) =
        cache(Api::<ConfigMap>::all(client.clone()), gang, without_managed_fields, |_: &ConfigMap, _| {});
    tokio::spawn(t6);
    tokio::spawn(t7);
    let all = watcher::Config::default();
    let jobset_ar = api_resource(trainyard_bridges::jobset::API_VERSION, "JobSet").expect("known kind");
    let lws_ar = api_resource(trainyard_bridges::lws::API_VERSION, "LeaderWorkerSet").expect("known kind");
    let owner_triggers = |kind: WorkloadKind| {
        let (trigger, seen) = (trigger_tx.clone(), SeenViews::default());
        move |workload: &DynamicObject, deleted: bool| {
            let view = || workload_view(kind, &serde_json::to_value(workload).unwrap_or_default());
            if let Some(job) = owning_trainjob(workload)
                && seen.changed(object_key(&workload.metadata), (!deleted).then(view).as_ref())
            {
                let _ = trigger.send(job);
            }
        }
    };
    let (jobsets, t8) =
        dynamic_cache(client.clone(), jobset_ar.clone(), all.clone(), owner_triggers(WorkloadKind::JobSet));
    tokio::spawn(t8);
    let lws = if served(&client, &lws_ar).await {
        let (store, task) =
            dynamic_cache(client.clone(), lws_ar.clone(), all.clone(), owner_triggers(WorkloadKind::LeaderWorkerSet));
        tokio::spawn(task);
        Some(store)
    } else {
        tracing::info!("LeaderWorkerSet is not served; runtimes asking for it will fail to launch");
        None
    };
    let (tx, rx) = mpsc::channel::<Change>(4096);
    let manager = settings.mode == Mode::Manager;
    // A manager's nodes and pods are its workers', merged under a cluster level.
    crate::controller::watching::watches::spawn(&client, &tx, !manager);
    let dra = dra_served(&client).await;
    // A manager's classes and templates are its own; its slices and claims are its workers'.
    if dra {
        crate::controller::watching::watches::spawn_devices(&client, &tx, !manager);
    }
    let (ns, identity) = (settings.namespace.clone(), settings.identity.clone());
    let fleet = match manager {
        true => Some(Fleet::start(client.clone(), ns, tx.clone(), trigger_tx.clone(), dra, identity).await?),
        false => None,
    };
    tracing::info!(served = dra, "resource.k8s.io/v1 (DRA)");

    let gang_api = discover_gang_api(&client).await;
    tracing::info!(version = gang_api.map(GangApi::version), "scheduling.k8s.io gang API");
    let served_binders = discover_binders(&client).await;
    // In companion mode Trainer makes the groups its runtimes name; a default is trainyard's own.
    let default_binder = settings.binder.filter(|_| settings.mode == Mode::Standalone);
    let binders = BinderSupport::new(default_binder, &served_binders);
    tracing::info!(served = ?served_binders.iter().map(|b| b.name()).collect::<Vec<_>>(), default = default_binder.map(BinderKind::name), "binders");
    let status = StatusWriter::default();
    tokio::spawn(status.clone().run(client.clone(), 16));
    let actor = match &settings.slurm {
        Some(link) => Actor::new(client.clone(), Some(settings.identity.clone())).with_slurm(link.bridge.clone()),
        None => Actor::new(client.clone(), Some(settings.identity.clone())),
    }
    .with_status_writer(status.clone());
    let actor = match &fleet {
        Some(f) => actor.with_fleet(f.clone()),
        None => actor,
    };
    let workers = settings.workers;
    let ctx = Arc::new(Ctx {
        gang_api,
        binders: Mutex::new(binders),
        actor,
        inputs: Mutex::new(RenderInputs {
            policy,
            gpu_resource: trainyard_topology::sources::k8s_nodes::DEFAULT_GPU_RESOURCE.to_string(),
            slurm_queues: Arc::new(BTreeMap::new()),
        }),
        settings,
        decisions: Mutex::new(HashMap::new()),
        arrivals: Mutex::new(HashMap::new()),
        first_seen: Mutex::new(HashMap::new()),
        admission_clock: Mutex::new(HashMap::new()),
        queue_sent: Mutex::new(BTreeMap::new()),
        status,
        failures: Mutex::new(HashMap::new()),
        metrics: metrics.clone(),
        runtimes,
        cluster_runtimes,
        runtimes_index: Mutex::new((0, None)),
        jobsets,
        lws,
        pods,
        pods_by_gang,
        configmaps,
        api_events,
        fleet,
    });
    tokio::spawn(follow_binders(client.clone(), ctx.clone(), tx.clone()));
    let started = Arc::new(Notify::new());
    let queries = ctx.settings.api.is_some().then_some(queries);
    tokio::spawn(crate::controller::deciding::scheduling_task::run(
        ctx.clone(),
        rx,
        crate::controller::deciding::scheduling_task::Links {
            trigger: trigger_tx.clone(),
            runtimes_changed,
            started: started.clone(),
            queries,
        },
        dra,
    ));
    if let Some(link) = ctx.settings.slurm.clone() {
        tokio::spawn(crate::controller::slurm::poller::poll(link, trigger_tx.clone(), metrics.clone()));
    }
    // Nothing writes before the engine has adopted every recorded admission and run a cycle.
    tokio::select! {
        () = started.notified() => {}
        () = stop.notified() => return Ok(()),
    }
    for store in [&ctx.jobsets].into_iter().chain(ctx.lws.as_ref()) {
        store.wait_until_ready().await?;
    }
    ctx.pods.wait_until_ready().await?;
    // The planner deletes and re-applies by what these caches show; acting on empty ones would
    // clear admissions without deleting their JobSets, or re-apply running ones.
    ctx.configmaps.wait_until_ready().await?;
    // The TrainJob watch has its own backoff and keeps its errors to itself: kube's shared
    // trigger stream would otherwise pause every trigger (the scheduling loop's and the caches')
    // for one backoff per failure, tens of seconds after an API server restart.
    let (jobs_reader, jobs_writer) = kube::runtime::reflector::store::<TrainJob>();
    let jobs_api = Api::<TrainJob>::all(client.clone());
    if let Some(fleet) = &ctx.fleet {
        fleet.set_jobs(jobs_reader.clone());
    }
    let trainjobs = quiet_triggers(
        jobs_reader.clone(),
        kube::runtime::reflector(
            jobs_writer,
            watcher(jobs_api, watcher::Config::default()).modify(without_managed_fields),
        ),
    );
    let controller = Controller::for_stream(trainjobs, jobs_reader)
        .reconcile_on(tokio_stream_from(trigger_rx))
        .with_config(kube::runtime::controller::Config::default().concurrency(workers))
        .graceful_shutdown_on({
            let stop = stop.clone();
            async move { stop.notified().await }
        });
    // In companion mode Trainer's controller runs searches; their trials are admitted like any
    // TrainJob.
    if ctx.settings.mode == Mode::Standalone {
        tokio::spawn(crate::controller::process::searches::run(client.clone(), stop.clone()));
    }
    health.ready.store(true, Ordering::Relaxed);
    let _ = serving_tx.send(true);
    controller
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "reconcile");
            }
        })
        .await;
    // Open Watch streams end now, so their clients reconnect to the next leader at once.
    let _ = serving_tx.send(false);
    if let Some(lock) = &ctx.settings.lease {
        crate::controller::serving::leadership::release(client, lock).await;
    }
    Ok(())
}

/// Watch events kept for a stream that is slow to read; one further behind is ended and
/// reconnects (reading the state again).
const API_EVENTS_KEPT: usize = 4096;
/// Questions waiting for the scheduling task before callers are told to retry.
const API_QUESTIONS_WAITING: usize = 256;

/// Starts the researcher API on its port: TLS from the mounted files, reviews through the
/// controller's client, Submit and Cancel with each caller's own token.
async fn serve_api(
    client: Client,
    api: ApiServing,
    backend: crate::grpc::service::Backend,
    identity: &str,
    stop: Arc<Notify>,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let tls = crate::grpc::tls::ServerTls::from_files(&api.tls_cert, &api.tls_key)?;
    let base = kube::Config::infer().await.context("the Kubernetes client configuration, for API callers")?;
    let client_for: crate::grpc::service::ClientFor = Arc::new(move |token: &str| {
        let mut config = base.clone();
        config.auth_info = kube::config::AuthInfo { token: Some(token.to_string().into()), ..Default::default() };
        Client::try_from(config).map_err(|e| e.to_string())
    });
    let auth = Arc::new(crate::grpc::auth::Authorizer::new(client));
    let settings = crate::grpc::service::ApiSettings {
        leader: identity.to_string(),
        per_caller: api.per_caller,
        ..Default::default()
    };
    let service = crate::grpc::service::TrainyardApi::new(backend, auth, client_for, settings);
    let listener =
        tokio::net::TcpListener::bind(api.bind).await.with_context(|| format!("binding the API to {}", api.bind))?;
    tracing::info!(bind = %api.bind, "researcher API (trainyard.v1, TLS)");
    tokio::spawn(async move {
        let stopped = async move { stop.notified().await };
        if let Err(e) = crate::grpc::server::serve(listener, service, Some(tls), stopped).await {
            tracing::error!(error = format!("{e:#}"), "API server");
        }
    });
    Ok(())
}

/// SIGTERM (the kubelet stopping the pod) or Ctrl-C.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

/// The runtimes of the caches, indexed again only when one of them changed (each is converted
/// through JSON into the renderer's types, which is not free with many reconciles per second).
fn runtimes_index(ctx: &Ctx) -> (u64, Arc<Runtimes>) {
    let (namespaced, cluster) = (ctx.runtimes.state(), ctx.cluster_runtimes.state());
    let fp = crate::controller::watching::caches::objects_fingerprint(&namespaced)
        ^ crate::controller::watching::caches::objects_fingerprint(&cluster).rotate_left(1);
    let mut cached = ctx.runtimes_index.lock().expect("lock");
    if cached.0 != fp || cached.1.is_none() {
        let index = Runtimes::index(namespaced.iter().map(|r| r.as_ref()), cluster.iter().map(|r| r.as_ref()));
        *cached = (fp, Some(Arc::new(index)));
    }
    (fp, cached.1.clone().expect("set above"))
}

async fn reconcile(job: Arc<TrainJob>, ctx: Arc<Ctx>) -> Result<Requeue, ReconcileError> {
    if !is_ours(&job, ctx.settings.mode) {
        return Ok(Requeue::await_change());
    }
    let (_, runtimes) = runtimes_index(&ctx);
    let (policy, gpu_resource, slurm_queues) = {
        let inputs = ctx.inputs.lock().expect("lock");
        (inputs.policy.clone(), inputs.gpu_resource.clone(), inputs.slurm_queues.clone())
    };
    let intent_ctx = IntentContext {
        policy: &policy,
        gpu_resource: &gpu_resource,
        slurm_queues: &slurm_queues,
        slurm_configured: ctx.settings.slurm.is_some() && ctx.settings.mode == Mode::Standalone,
        binders: ctx.binders(),
        fleet: ctx.settings.mode == Mode::Manager,
    };
    let (intent, runtime) = intent_of(&job, &runtimes, &intent_ctx);
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    let name = job.metadata.name.clone().unwrap_or_default();
    let kind = intent.as_ref().map_or(WorkloadKind::JobSet, |i| i.kind);
    let store = match kind {
        WorkloadKind::JobSet => Some(&ctx.jobsets),
        WorkloadKind::LeaderWorkerSet => ctx.lws.as_ref(),
    };
    let ar = match kind {
        WorkloadKind::JobSet => api_resource(trainyard_bridges::jobset::API_VERSION, "JobSet"),
        WorkloadKind::LeaderWorkerSet => api_resource(trainyard_bridges::lws::API_VERSION, "LeaderWorkerSet"),
    }
    .expect("known kinds");
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let decision =
        ctx.decisions.lock().expect("lock").get(&job.key()).filter(|(u, _)| *u == uid).map(|(_, d)| d.clone());
    let copy = match &ctx.fleet {
        Some(fleet) => fleet.reconcile_inputs(&job, decision.as_ref()).await.map_err(ActError::Kube)?,
        None => None,
    };
    let workload = match (&ctx.fleet, &copy) {
        // A manager's workload is its copy on the worker.
        (Some(_), copy) => copy.as_ref().and_then(|(c, _)| own_workload(c.as_ref(), &job)),
        (None, _) => store
            .and_then(|s| s.get(&ObjectRef::new_with(&name, ar).within(&ns)))
            .map(|o| workload_view(kind, &serde_json::to_value(o.as_ref()).unwrap_or_default())),
    };
    let pods: Vec<_> = ctx
        .pods_by_gang
        .names(&ns, &name)
        .into_iter()
        .filter_map(|pod| ctx.pods.get(&ObjectRef::new(&pod).within(&ns)))
        .filter(|p| p.metadata.labels.as_ref().and_then(|l| l.get(GANG_LABEL)) == Some(&name))
        .map(|p| pod_view(&p))
        .collect();
    let hostfile_exists = ctx.configmaps.get(&ObjectRef::new(&format!("{name}-mpi-hostfile")).within(&ns)).is_some();
    let ssh_secret = look_at_ssh_secret(&ctx, &job, runtime, workload.as_ref()).await?;
    let arrival = ctx.arrivals.lock().expect("lock").get(&uid).copied();
    let slurm_snapshot = ctx.settings.slurm.as_ref().map(|link| link.snapshot());
    let now = Time(Timestamp::now());
    let inputs = Inputs {
        job: &job,
        runtime,
        intent: &intent,
        decision: decision.as_ref(),
        workload: workload.as_ref(),
        hostfile_exists,
        pods: &pods,
        mode: ctx.settings.mode,
        gang_api: ctx.gang_api,
        default_binder: ctx.binders().default,
        now: &now,
        slurm: slurm_snapshot.as_deref(),
        arrival,
        devices: ctx.settings.devices,
        start_timeout: ctx.settings.start_timeout,
        ssh_secret,
        fleet: copy.as_ref().map(|(copy, fleet)| FleetInputs { copy: copy.as_ref(), ..fleet.clone() }),
    };
    let actions = plan(&inputs);
    if !actions.is_empty() {
        tracing::info!(job = %job.key(), steps = actions.len(), "reconcile");
    }
    let ran = match ctx.actor.run(&job, &actions).await {
        // Planned on an older version of the TrainJob: plan again on the one the cache shows next.
        Err(ActError::Conflict) => {
            ctx.metrics.conflicts.inc();
            ctx.metrics.reconciled("conflict");
            return Ok(Requeue::requeue(Duration::from_millis(50)));
        }
        Err(ActError::SlurmRefused { gang, message }) if ctx.settings.slurm.is_some() => {
            // Final: the next plan fails the TrainJob with Slurm's message.
            tracing::warn!(job = %job.key(), %gang, %message, "Slurm refused the gang");
            if let Some(link) = &ctx.settings.slurm {
                link.refused(&gang, &message);
            }
            return Ok(Requeue::requeue(Duration::from_millis(100)));
        }
        other => other?,
    };
    ctx.failures.lock().expect("lock").remove(&job.key());
    ctx.metrics.reconciled(if actions.is_empty() { "idle" } else { "acted" });
    if let Some(committed) = ran.committed
        && let Some(at) = ctx.admission_clock.lock().expect("lock").get_mut(&uid)
    {
        ctx.metrics.stage("decided_to_recorded", committed.saturating_duration_since(*at).as_secs_f64());
        *at = committed;
    }
    let launched = actions.iter().any(|a| {
        matches!(a, Action::Apply(v) if matches!(v["kind"].as_str(), Some("JobSet" | "LeaderWorkerSet")))
            || matches!(a, Action::PatchTrainJob { suspend: false, .. } | Action::Dispatch { .. })
    });
    if launched && let Some(seen) = ctx.first_seen.lock().expect("lock").remove(&uid) {
        ctx.metrics.launch_latency.observe(seen.elapsed().as_secs_f64());
    }
    if launched && let Some(at) = ctx.admission_clock.lock().expect("lock").remove(&uid) {
        ctx.metrics.stage("recorded_to_launched", at.elapsed().as_secs_f64());
    }
    if job.metadata.deletion_timestamp.is_some() {
        ctx.first_seen.lock().expect("lock").remove(&uid);
        ctx.admission_clock.lock().expect("lock").remove(&uid);
        ctx.arrivals.lock().expect("lock").remove(&uid);
    }
    let on_slurm = intent.as_ref().is_ok_and(|i| i.slurm.is_some());
    // A manager binds no pods: its copies' events bring each look; a gang placed with no copy yet
    // (its worker away or lacking the runtime, neither of which is watched) is looked at sooner.
    let next = match &copy {
        Some((None, _)) => 15,
        _ if ctx.fleet.is_some() => 300,
        _ => next_look(&job, &pods, &now, on_slurm),
    };
    Ok(Requeue::requeue(Duration::from_secs(next)))
}

/// The Secret an MPI gang (its SSH key) or a Flux gang (its CURVE certificate) mounts, when it
/// may launch now (standalone, not finished, its JobSet
/// absent or suspended), by its metadata alone: the key itself is never read.
async fn look_at_ssh_secret(
    ctx: &Ctx,
    job: &TrainJob,
    runtime: Option<&trainyard_bridges::trainer::TrainingRuntime>,
    workload: Option<&WorkloadView>,
) -> Result<Option<SecretSeen>, ReconcileError> {
    let ml = runtime.and_then(|r| r.spec.ml_policy.as_ref());
    let (ns, name) =
        (job.metadata.namespace.clone().unwrap_or_default(), job.metadata.name.clone().unwrap_or_default());
    let (secret, mounted_as) = match ml {
        Some(m) if m.mpi.is_some() => (
            format!("{name}{}", trainyard_bridges::render::policy::SSH_SECRET_SUFFIX),
            "the MPI launcher and nodes would mount it as their SSH keys",
        ),
        Some(m) if m.flux.is_some() => (
            trainyard_bridges::render::flux::secret_name(&name),
            "the Flux brokers would mount it as their CURVE certificate",
        ),
        _ => return Ok(None),
    };
    let finished = job.status.as_ref().is_some_and(|s| {
        s.conditions.iter().any(|c| {
            (c.type_ == crate::controller::deciding::conditions::COMPLETE
                || c.type_ == crate::controller::deciding::conditions::FAILED)
                && c.status == "True"
        })
    });
    if ctx.settings.mode != Mode::Standalone
        || finished
        || job.metadata.deletion_timestamp.is_some()
        || workload.is_some_and(|w| !w.suspended)
    {
        return Ok(None);
    }
    let api: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(ctx.actor.client().clone(), &ns);
    let meta = api.get_metadata_opt(&secret).await.map_err(|e| ReconcileError::from(ActError::Kube(e)))?;
    let meta = meta.map(|m| serde_json::to_value(&m.metadata).unwrap_or_default());
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    Ok(Some(judge_ssh_secret(meta.as_ref(), &ns, &secret, &name, uid, mounted_as)))
}

/// Seconds until this TrainJob should be looked at again without an event: soon (5 s) while an
/// admitted gang has pods not yet bound (each pod change brings a reconcile at once; this only
/// keeps a missed one from stranding them, and polling faster made thousands of gangs waiting
/// for the Job controller's pods a reconcile storm of their own), at its
/// `activeDeadlineSeconds` when that comes first, else a slow resync.
fn next_look(
    job: &TrainJob,
    pods: &[crate::controller::deciding::pod_bindings::PodView],
    now: &Time,
    on_slurm: bool,
) -> u64 {
    let Some(record) = crate::controller::deciding::plan::recorded(job) else { return 300 };
    if on_slurm {
        // The poller brings state changes; this catches a submission that waited for Slurm.
        return crate::controller::deciding::plan::deadline_left(job, &record, now)
            .map_or(15, |left| left.clamp(1, 15) as u64);
    }
    let bound = pods.iter().filter(|p| !p.gates.iter().any(|g| g == trainyard_bridges::TOPOLOGY_GATE)).count();
    if record.domain.is_none() && (bound as u64) < u64::from(record.pods()) {
        return 5;
    }
    // Ungated but not bound yet: looked at again so that the start timeout is seen.
    let placed = pods.iter().filter(|p| p.node_name.is_some()).count();
    if record.domain.is_none() && (placed as u64) < u64::from(record.pods()) {
        return crate::controller::deciding::plan::deadline_left(job, &record, now)
            .map_or(15, |left| left.clamp(1, 15) as u64);
    }
    crate::controller::deciding::plan::deadline_left(job, &record, now).map_or(300, |left| left.clamp(1, 300) as u64)
}

fn error_policy(job: Arc<TrainJob>, error: &ReconcileError, ctx: Arc<Ctx>) -> Requeue {
    ctx.metrics.reconcile_errors.inc();
    ctx.metrics.reconciled("error");
    let mut failures = ctx.failures.lock().expect("lock");
    let n = failures.entry(job.key()).or_insert(0);
    *n += 1;
    let delay = crate::controller::process::retry::after(*n, error.transient());
    tracing::warn!(job = %job.key(), error = %error, retry_in_s = delay.as_secs(), "reconcile failed");
    Requeue::requeue(delay)
}
