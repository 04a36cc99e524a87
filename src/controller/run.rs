//! The controller process: caches, leader election, the scheduling loop and the TrainJob reconcilers.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::{Action as Requeue, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, Resource};
use tokio::sync::mpsc;
use trainyard_bridges::{GANG_LABEL, WorkloadKind};
use trainyard_policies::PolicyConfig;

use super::act::{ActError, Actor, api_resource};
use super::caches::{cache, dynamic_cache, nodes_fingerprint, objects_fingerprint, served};
use super::gang_api::GangApi;
use super::http::{self, Health};
use super::intent::IntentContext;
use super::lease::LeaseLock;
use super::metrics::{Metrics, QueueLabel};
use super::plan::{Inputs, Mode, plan};
use super::queue_status::queue_statuses;
use super::scheduler::CycleStats;
use super::scheduler::{Decision, JobEntry, SchedulingLoop};
use super::slurm_run::{SlurmLink, SlurmLoop};
use super::slurm_side::split_cycle;
use super::snapshot::{
    IntentCache, Runtimes, Side, cluster_from_nodes, created_s, intent_of, job_entry, policy_with_queues,
};
use super::views::{pod_view, workload_view};
use crate::api::{
    ClusterTrainingRuntime, FIELD_MANAGER, Queue, SlurmTarget, Topology, TopologySpec, TrainJob, TrainingRuntime,
};

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Standalone or companion.
    pub mode: Mode,
    /// The policy file's text (global settings and queues; Queue objects are added to it).
    pub policy_text: String,
    /// Its name, for errors.
    pub policy_name: String,
    /// Name of the Topology object to use; without one, hosts (and NVLink cliques) only.
    pub topology: String,
    /// Time between scheduling cycles.
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
}

/// Why a reconcile failed; it is retried with exponential backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// A step failed: the API server or Slurm refused or did not answer.
    #[error(transparent)]
    Act(#[from] ActError),
}

struct Ctx {
    client: Client,
    settings: Settings,
    gang_api: Option<GangApi>,
    actor: Actor,
    decisions: Mutex<BTreeMap<String, Decision>>,
    /// Queues whose gangs run on Slurm, as of the last cycle.
    slurm_queues: Mutex<Arc<BTreeMap<String, SlurmTarget>>>,
    policy: Mutex<PolicyConfig>,
    gpu_resource: Mutex<String>,
    failures: Mutex<HashMap<String, u32>>,
    metrics: Arc<Metrics>,
    runtimes: Store<TrainingRuntime>,
    cluster_runtimes: Store<ClusterTrainingRuntime>,
    /// The runtimes indexed for rendering, with the fingerprint of the caches they came from.
    runtimes_index: Mutex<(u64, Option<Arc<Runtimes>>)>,
    jobsets: Store<DynamicObject>,
    lws: Option<Store<DynamicObject>>,
    pods: Store<Pod>,
    configmaps: Store<ConfigMap>,
}

/// The gang API version the server offers, by a versioned discovery of `scheduling.k8s.io` (the
/// group's preferred version is v1 PriorityClass, so the alpha and beta versions must be asked for).
async fn discover_gang_api(client: &Client) -> Option<GangApi> {
    let group = kube::discovery::group(client, super::gang_api::GROUP).await.ok()?;
    let served: Vec<(String, Vec<String>)> = group
        .versions()
        .map(|v| (v.to_string(), group.versioned_resources(v).into_iter().map(|(ar, _)| ar.plural).collect()))
        .collect();
    GangApi::pick(&served)
}

/// Runs the controller until the process is stopped.
pub async fn run(client: Client, settings: Settings) -> anyhow::Result<()> {
    let metrics = Arc::new(Metrics::default());
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

    if let Some(lock) = settings.lease.clone() {
        acquire_leadership(client.clone(), lock, metrics.clone()).await;
    } else {
        metrics.leader.set(1);
    }

    let policy = PolicyConfig::from_yaml(&settings.policy_text, &settings.policy_name)?;
    let all = watcher::Config::default();
    let gang = watcher::Config::default().labels(GANG_LABEL);
    let (runtimes, t1) = cache(Api::<TrainingRuntime>::all(client.clone()), all.clone());
    let (cluster_runtimes, t2) = cache(Api::<ClusterTrainingRuntime>::all(client.clone()), all.clone());
    let (queues, t3) = cache(Api::<Queue>::all(client.clone()), all.clone());
    let (topologies, t4) = cache(Api::<Topology>::all(client.clone()), all.clone());
    let (nodes, t5) = cache(Api::<Node>::all(client.clone()), all.clone());
    let (pods, t6) = cache(Api::<Pod>::all(client.clone()), gang.clone());
    let (configmaps, t7) = cache(Api::<ConfigMap>::all(client.clone()), gang);
    tokio::spawn(t1);
    tokio::spawn(t2);
    tokio::spawn(t3);
    tokio::spawn(t4);
    tokio::spawn(t5);
    tokio::spawn(t6);
    tokio::spawn(t7);
    let jobset_ar = api_resource(trainyard_bridges::jobset::API_VERSION, "JobSet").expect("known kind");
    let lws_ar = api_resource(trainyard_bridges::lws::API_VERSION, "LeaderWorkerSet").expect("known kind");
    let (jobsets, t8) = dynamic_cache(client.clone(), jobset_ar.clone(), all.clone());
    tokio::spawn(t8);
    let lws = if served(&client, &lws_ar).await {
        let (store, task) = dynamic_cache(client.clone(), lws_ar.clone(), all.clone());
        tokio::spawn(task);
        Some(store)
    } else {
        tracing::info!("LeaderWorkerSet is not served; runtimes asking for it will fail to launch");
        None
    };
    for ready in [runtimes.wait_until_ready().await, cluster_runtimes.wait_until_ready().await] {
        ready?;
    }
    queues.wait_until_ready().await?;
    topologies.wait_until_ready().await?;
    nodes.wait_until_ready().await?;
    pods.wait_until_ready().await?;
    // The planner deletes and re-applies by what these caches show; acting on empty ones would
    // clear admissions without deleting their JobSets, or re-apply running ones.
    configmaps.wait_until_ready().await?;
    jobsets.wait_until_ready().await?;
    if let Some(store) = &lws {
        store.wait_until_ready().await?;
    }

    let ctx_lws_served = lws.is_some();
    let gang_api = discover_gang_api(&client).await;
    tracing::info!(version = gang_api.map(GangApi::version), "scheduling.k8s.io gang API");
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        gang_api,
        actor: match &settings.slurm {
            Some(link) => Actor::new(client.clone(), Some(settings.identity.clone())).with_slurm(link.bridge.clone()),
            None => Actor::new(client.clone(), Some(settings.identity.clone())),
        },
        // Before the first cycle, so that no reconcile mistakes a Slurm gang for a Kubernetes one.
        slurm_queues: Mutex::new(Arc::new(slurm_targets(&queues.state()))),
        settings,
        decisions: Mutex::new(BTreeMap::new()),
        policy: Mutex::new(policy),
        gpu_resource: Mutex::new(trainyard_topology::sources::k8s_nodes::DEFAULT_GPU_RESOURCE.to_string()),
        failures: Mutex::new(HashMap::new()),
        metrics: metrics.clone(),
        runtimes,
        cluster_runtimes,
        runtimes_index: Mutex::new((0, None)),
        jobsets,
        lws,
        pods,
        configmaps,
    });
    let (trigger_tx, trigger_rx) = mpsc::channel::<ObjectRef<TrainJob>>(1024);
    let jobs_api = Api::<TrainJob>::all(client.clone());
    let mut controller = Controller::new(jobs_api, watcher::Config::default())
        .owns_with(
            Api::<DynamicObject>::all_with(client.clone(), &jobset_ar),
            jobset_ar.clone(),
            watcher::Config::default(),
        )
        // A gang pod appearing (gated) or changing brings its TrainJob's reconcile, which binds it.
        .watches(Api::<Pod>::all(client.clone()), watcher::Config::default().labels(GANG_LABEL), |pod: Pod| {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            pod.metadata.labels.as_ref().and_then(|l| l.get(GANG_LABEL)).map(|gang| ObjectRef::new(gang).within(&ns))
        })
        .reconcile_on(tokio_stream_from(trigger_rx))
        .shutdown_on_signal();
    if ctx_lws_served {
        controller = controller.owns_with(
            Api::<DynamicObject>::all_with(client.clone(), &lws_ar),
            lws_ar.clone(),
            watcher::Config::default(),
        );
    }
    let jobs = controller.store();
    health.ready.store(true, Ordering::Relaxed);
    if let Some(link) = ctx.settings.slurm.clone() {
        tokio::spawn(super::slurm_run::poll(link, trigger_tx.clone(), metrics.clone()));
    }
    tokio::spawn(scheduling_loop(ctx.clone(), jobs, nodes, queues, topologies, trigger_tx));
    controller
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "reconcile");
            }
        })
        .await;
    Ok(())
}

/// An mpsc receiver as a stream.
fn tokio_stream_from<T: Send + 'static>(mut rx: mpsc::Receiver<T>) -> impl futures::Stream<Item = T> + Send {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// Blocks until this replica holds the lease, then keeps renewing it in the background; a replica
/// that cannot renew before the lease runs out exits so that it never acts without the lease.
async fn acquire_leadership(client: Client, lock: LeaseLock, metrics: Arc<Metrics>) {
    let retry = Duration::from_secs(u64::try_from(lock.duration_s / 3).unwrap_or(5).max(1));
    loop {
        match lock.try_acquire(client.clone(), Timestamp::now()).await {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "lease"),
        }
        tokio::time::sleep(retry).await;
    }
    tracing::info!(identity = %lock.identity, "leading");
    metrics.leader.set(1);
    // Give up well before another replica may take over (at renewal + duration), and never let a
    // hung request stretch that: each attempt is bounded by what is left of the deadline.
    let renew_deadline = Duration::from_millis(u64::try_from(lock.duration_s).unwrap_or(15) * 2000 / 3);
    tokio::spawn(async move {
        let mut last_renewal = Instant::now();
        loop {
            tokio::time::sleep(retry).await;
            let left = renew_deadline.saturating_sub(last_renewal.elapsed());
            match tokio::time::timeout(left, lock.try_acquire(client.clone(), Timestamp::now())).await {
                Ok(Ok(true)) => last_renewal = Instant::now(),
                Ok(Ok(false)) => {
                    tracing::error!("lost the lease to another replica; exiting");
                    std::process::exit(1);
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "lease renewal failed"),
                Err(_) => tracing::warn!("lease renewal timed out"),
            }
            if last_renewal.elapsed() >= renew_deadline {
                tracing::error!("could not renew the lease in time; exiting");
                std::process::exit(1);
            }
        }
    });
}

async fn scheduling_loop(
    ctx: Arc<Ctx>,
    jobs: Store<TrainJob>,
    nodes: Store<Node>,
    queues: Store<Queue>,
    topologies: Store<Topology>,
    trigger: mpsc::Sender<ObjectRef<TrainJob>>,
) {
    let mut sched: Option<(u64, SchedulingLoop)> = None;
    let mut problem: Option<String> = None;
    let mut slurm = SlurmLoop::default();
    let mut intents = IntentCache::default();
    let mut interval = tokio::time::interval(ctx.settings.cycle);
    // After a slow round, wait a whole period again rather than catch up in a burst.
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let started = Instant::now();
        let node_list = nodes.state();
        let queue_list = queues.state();
        let topology_list = topologies.state();
        let queues_fp = objects_fingerprint(&queue_list);
        let fingerprint = nodes_fingerprint(&node_list)
            ^ queues_fp.rotate_left(1)
            ^ objects_fingerprint(&topology_list).rotate_left(2);
        let queue_refs: Vec<&Queue> = queue_list.iter().map(|q| q.as_ref()).collect();
        if let Some(link) = &ctx.settings.slurm {
            slurm.rebuild(link, &ctx.settings.policy_text, &ctx.settings.policy_name, &queue_refs, queues_fp);
        }
        if sched.as_ref().is_none_or(|(fp, _)| *fp != fingerprint) {
            let spec = topology_list
                .iter()
                .find(|t| t.metadata.name.as_deref() == Some(ctx.settings.topology.as_str()))
                .map(|t| t.spec.clone())
                .unwrap_or_else(|| TopologySpec { levels: vec![], ..TopologySpec::default() });
            let node_refs: Vec<&Node> = node_list.iter().map(|n| n.as_ref()).collect();
            let built = cluster_from_nodes(&node_refs, &spec).and_then(|cluster| {
                let (text, name) = (&ctx.settings.policy_text, &ctx.settings.policy_name);
                let policy = policy_with_queues(text, name, &queue_refs, Side::Kubernetes)?;
                let looped = SchedulingLoop::new(cluster, policy.clone()).map_err(|e| e.to_string())?;
                Ok((policy, looped))
            });
            match built {
                Ok((policy, looped)) => {
                    *ctx.policy.lock().expect("lock") = policy;
                    *ctx.gpu_resource.lock().expect("lock") = spec.node_list_options().gpu_resource;
                    sched = Some((fingerprint, looped));
                    problem = None;
                    tracing::info!(nodes = node_list.len(), queues = queue_list.len(), "cluster and quotas rebuilt");
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot build the cluster or quotas; keeping the previous ones");
                    problem = Some(e);
                    if let Some((fp, _)) = sched.as_mut() {
                        *fp = fingerprint;
                    }
                }
            }
        }
        // Reconciles need to know Slurm queues even while no cluster could be built.
        let slurm_queues = slurm_targets(&queue_list);
        *ctx.slurm_queues.lock().expect("lock") = Arc::new(slurm_queues.clone());
        let Some((_, looped)) = sched.as_mut() else { continue };
        let (runtimes_fp, runtimes) = runtimes_index(&ctx);
        let policy = ctx.policy.lock().expect("lock").clone();
        let gpu_resource = ctx.gpu_resource.lock().expect("lock").clone();
        let intent_ctx = intent_context(&ctx, &policy, &gpu_resource, &slurm_queues);
        let job_list = jobs.state();
        let inputs = runtimes_fp ^ fingerprint.rotate_left(7);
        let entries: Vec<JobEntry> = job_list
            .iter()
            .map(|j| job_entry(j, &intents.intent(j, &runtimes, &intent_ctx, inputs), ctx.settings.mode))
            .collect();
        intents.retain(&entries.iter().map(|e| e.uid.as_str()).collect());
        let now = u64::try_from(Timestamp::now().as_second()).unwrap_or(0);
        let missing = slurm.problem.clone().unwrap_or_else(|| "waiting for the first answer from Slurm".into());
        let (decisions, stats) = split_cycle(looped, slurm.looped.as_mut(), &entries, now, &missing);
        record_metrics(&ctx.metrics, &stats, &job_list, &decisions, now);
        ctx.metrics.cycle_seconds.observe(started.elapsed().as_secs_f64());
        let now_time = Time(Timestamp::now());
        let (hpc_queues, k8s_queues): (Vec<&Queue>, Vec<&Queue>) =
            queue_refs.iter().partition(|q| q.spec.slurm.is_some());
        let mut statuses =
            queue_statuses(&k8s_queues, looped.engine(), &entries, &decisions, problem.as_deref(), &now_time);
        if let Some(hpc) = &slurm.looped {
            let hpc_problem = slurm.problem.as_deref().or(problem.as_deref());
            statuses.extend(queue_statuses(&hpc_queues, hpc.engine(), &entries, &decisions, hpc_problem, &now_time));
        }
        for (name, status) in statuses {
            let current = queue_list.iter().find(|q| q.metadata.name.as_deref() == Some(name.as_str()));
            if current.and_then(|q| q.status.as_ref()) == Some(&status) {
                continue;
            }
            let body = serde_json::json!({"apiVersion": Queue::api_version(&()), "kind": "Queue", "status": status});
            let api: Api<Queue> = Api::all(ctx.client.clone());
            if let Err(e) =
                api.patch_status(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&body)).await
            {
                tracing::warn!(queue = %name, error = %e, "queue status not written");
            }
        }
        let changed: Vec<String> = {
            let mut current = ctx.decisions.lock().expect("lock");
            let changed =
                decisions.iter().filter(|(k, d)| current.get(*k) != Some(*d)).map(|(k, _)| k.clone()).collect();
            *current = decisions;
            changed
        };
        for key in changed {
            let (ns, name) = key.split_once('/').unwrap_or(("", &key));
            // A full channel only delays the reconcile to the next change or resync.
            let _ = trigger.try_send(ObjectRef::new(name).within(ns));
        }
    }
}

/// The Slurm queues among the Queue objects, with their targets.
fn slurm_targets(queues: &[Arc<Queue>]) -> BTreeMap<String, SlurmTarget> {
    queues.iter().filter_map(|q| Some((q.metadata.name.clone()?, q.spec.slurm.clone()?))).collect()
}

/// The intents' view of the queues: which run on Slurm, and whether this controller can run them.
fn intent_context<'a>(
    ctx: &Ctx,
    policy: &'a PolicyConfig,
    gpu_resource: &'a str,
    slurm_queues: &'a BTreeMap<String, SlurmTarget>,
) -> IntentContext<'a> {
    IntentContext {
        policy,
        gpu_resource,
        slurm_queues,
        slurm_configured: ctx.settings.slurm.is_some() && ctx.settings.mode == Mode::Standalone,
    }
}

fn record_metrics(
    metrics: &Metrics,
    all_stats: &[CycleStats],
    jobs: &[Arc<TrainJob>],
    decisions: &BTreeMap<String, Decision>,
    now: u64,
) {
    for stats in all_stats {
        metrics.admissions.inc_by(stats.admitted);
        metrics.preemptions.inc_by(stats.preempted);
        for cost in &stats.costs {
            metrics.placement_cost.observe(*cost as f64);
        }
    }
    for job in jobs {
        if let Some(Decision::Admit(r)) = decisions.get(&job.key())
            && r.at == now
        {
            metrics.admission_latency.observe(now.saturating_sub(created_s(job)) as f64);
        }
    }
    metrics.queue_depth.clear();
    for (queue, n) in all_stats.iter().flat_map(|s| &s.pending_by_queue) {
        metrics
            .queue_depth
            .get_or_create(&QueueLabel { queue: queue.clone() })
            .set(i64::try_from(*n).unwrap_or(i64::MAX));
    }
}

/// The runtimes of the caches, indexed again only when one of them changed (each is converted
/// through JSON into the renderer's types, which is not free with many reconciles per second).
fn runtimes_index(ctx: &Ctx) -> (u64, Arc<Runtimes>) {
    let (namespaced, cluster) = (ctx.runtimes.state(), ctx.cluster_runtimes.state());
    let fp = objects_fingerprint(&namespaced) ^ objects_fingerprint(&cluster).rotate_left(1);
    let mut cached = ctx.runtimes_index.lock().expect("lock");
    if cached.0 != fp || cached.1.is_none() {
        let index = Runtimes::index(namespaced.iter().map(|r| r.as_ref()), cluster.iter().map(|r| r.as_ref()));
        *cached = (fp, Some(Arc::new(index)));
    }
    (fp, cached.1.clone().expect("set above"))
}

async fn reconcile(job: Arc<TrainJob>, ctx: Arc<Ctx>) -> Result<Requeue, ReconcileError> {
    let (_, runtimes) = runtimes_index(&ctx);
    let policy = ctx.policy.lock().expect("lock").clone();
    let gpu_resource = ctx.gpu_resource.lock().expect("lock").clone();
    let slurm_queues = ctx.slurm_queues.lock().expect("lock").clone();
    let (intent, runtime) = intent_of(&job, &runtimes, &intent_context(&ctx, &policy, &gpu_resource, &slurm_queues));
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
    let workload = store
        .and_then(|s| s.get(&ObjectRef::new_with(&name, ar).within(&ns)))
        .map(|o| workload_view(kind, &serde_json::to_value(o.as_ref()).unwrap_or_default()));
    let pods: Vec<_> = ctx
        .pods
        .state()
        .iter()
        .filter(|p| {
            p.metadata.namespace.as_deref() == Some(ns.as_str())
                && p.metadata.labels.as_ref().and_then(|l| l.get(GANG_LABEL)) == Some(&name)
        })
        .map(|p| pod_view(p))
        .collect();
    let hostfile_exists = ctx.configmaps.get(&ObjectRef::new(&format!("{name}-mpi-hostfile")).within(&ns)).is_some();
    let decision = ctx.decisions.lock().expect("lock").get(&job.key()).cloned();
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
        now: &now,
        slurm: slurm_snapshot.as_deref(),
    };
    let actions = plan(&inputs);
    if !actions.is_empty() {
        tracing::info!(job = %job.key(), steps = actions.len(), "reconcile");
    }
    match ctx.actor.run(&job, &actions).await {
        Err(ActError::SlurmRefused { gang, message }) if ctx.settings.slurm.is_some() => {
            // Final: the next plan fails the TrainJob with Slurm's message.
            tracing::warn!(job = %job.key(), %gang, %message, "Slurm refused the gang");
            if let Some(link) = &ctx.settings.slurm {
                link.refused(&gang, &message);
            }
            return Ok(Requeue::requeue(Duration::from_millis(100)));
        }
        other => other?,
    }
    ctx.failures.lock().expect("lock").remove(&job.key());
    let on_slurm = intent.as_ref().is_ok_and(|i| i.slurm.is_some());
    Ok(Requeue::requeue(Duration::from_secs(next_look(&job, &pods, &now, on_slurm))))
}

/// Seconds until this TrainJob should be looked at again without an event: soon while an
/// admitted gang has pods not yet bound (a missed pod event must not strand them), at its
/// `activeDeadlineSeconds` when that comes first, else a slow resync.
fn next_look(job: &TrainJob, pods: &[super::pods::PodView], now: &Time, on_slurm: bool) -> u64 {
    let Some(record) = super::plan::recorded(job) else { return 300 };
    if on_slurm {
        // The poller brings state changes; this catches a submission that waited for Slurm.
        return super::plan::deadline_left(job, &record, now).map_or(15, |left| left.clamp(1, 15) as u64);
    }
    let bound = pods.iter().filter(|p| !p.gates.iter().any(|g| g == trainyard_bridges::TOPOLOGY_GATE)).count();
    if record.domain.is_none() && (bound as u64) < u64::from(record.pods()) {
        return 2;
    }
    super::plan::deadline_left(job, &record, now).map_or(300, |left| left.clamp(1, 300) as u64)
}

fn error_policy(job: Arc<TrainJob>, error: &ReconcileError, ctx: Arc<Ctx>) -> Requeue {
    ctx.metrics.reconcile_errors.inc();
    let mut failures = ctx.failures.lock().expect("lock");
    let n = failures.entry(job.key()).or_insert(0);
    *n += 1;
    let delay = backoff(*n);
    tracing::warn!(job = %job.key(), error = %error, retry_in_s = delay.as_secs(), "reconcile failed");
    Requeue::requeue(delay)
}

/// Exponential backoff: 1 s, 2 s, 4 s ... capped at 5 minutes.
pub fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64.checked_shl(failures.saturating_sub(1)).unwrap_or(u64::MAX).min(300))
}
