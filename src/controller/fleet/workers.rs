//! The manager's links to its worker clusters: one per WorkerCluster object, made from its
//! Secret, each with watches of the worker's nodes, pods and copies feeding the one merged
//! picture, its warnings about copies mirrored ([`super::events`]), and a probe that tells when
//! the worker is lost and when it is back.
//!
//! A worker that comes back (or is first reached) has the copies it should no longer run
//! removed before anything is written there: its links are not usable for dispatch until then.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

use super::copies::{CopyView, copy_view, origin_of, surely_stale, wanted};
use super::credentials::{Refusal, client_config, kubeconfig_of, refused};
use super::feeds::{feed_devices, spawn_feed};
use super::merge::{FleetMerge, WorkerEvent};
use crate::api::worker_cluster::ORIGIN_LABEL;
use crate::api::{ClusterTrainingRuntime, FIELD_MANAGER, TrainJob, TrainingRuntime, WorkerCluster};
use crate::controller::deciding::plan::{FleetInputs, acting_on};
use crate::controller::deciding::scheduling_loop::Decision;
use crate::controller::process::retry::WatchBackoff;
use crate::controller::watching::caches::without_managed_fields;
use crate::controller::watching::facts::slim_node;
use crate::controller::watching::live::Change;

/// How often each worker is probed.
const PROBE_EVERY: Duration = Duration::from_millis(500);
/// Probes failed in a row before a worker counts as lost.
const LOST_AFTER_FAILURES: u32 = 3;
/// Probes between two looks at a worker's counts for its status.
const COUNTS_EVERY_PROBES: u64 = 6;
/// Longest a sweep may take before it counts as failed (and is tried again).
const SWEEP_TIMEOUT: Duration = Duration::from_secs(10);
/// How often WorkerClusters whose credentials failed are tried again.
const RETRY_REFUSED: Duration = Duration::from_secs(10);

/// One worker the manager reaches.
struct Link {
    client: Client,
    /// What the link was made from (the Secret's version and the key), to notice a change.
    made_from: String,
    copies: Store<TrainJob>,
    /// Reached, and every copy it should not run removed: dispatch may write there.
    usable: Arc<AtomicBool>,
    tasks: Vec<tokio::task::AbortHandle>,
}

impl Drop for Link {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The manager's workers.
pub struct Fleet {
    manager: Client,
    namespace: String,
    links: Mutex<BTreeMap<String, Arc<Link>>>,
    merge: mpsc::UnboundedSender<(String, WorkerEvent)>,
    trigger: mpsc::UnboundedSender<ObjectRef<TrainJob>>,
    jobs: OnceLock<Store<TrainJob>>,
    /// Each worker's nodes as the merge last counted them.
    node_counts: Arc<Mutex<BTreeMap<String, usize>>>,
    /// Workers left out, with what they were refused on (their Secret's version and key).
    refused: Mutex<BTreeMap<String, String>>,
    /// The workers' ResourceSlices and ResourceClaims are followed too.
    devices: bool,
    /// Publishes the workers' warnings about copies on the manager's TrainJobs.
    recorder: Recorder,
}

impl Fleet {
    /// Lists the WorkerClusters, starts the merged node and pod stream (with `devices`, slices
    /// and claims too) into `live` (its first list waits for each of them) and follows them from
    /// then on.
    pub async fn start(
        manager: Client,
        namespace: String,
        live: mpsc::Sender<Change>,
        trigger: mpsc::UnboundedSender<ObjectRef<TrainJob>>,
        devices: bool,
        identity: String,
    ) -> anyhow::Result<Arc<Fleet>> {
        let listed = Api::<WorkerCluster>::all(manager.clone()).list(&ListParams::default()).await?;
        let names: Vec<String> = listed.items.iter().map(|w| w.name_any()).collect();
        tracing::info!(workers = ?names, "fleet manager");
        let (merge_tx, merge_rx) = mpsc::unbounded_channel();
        let (merge, first) = FleetMerge::new(names, devices);
        let node_counts = Arc::new(Mutex::new(BTreeMap::new()));
        tokio::spawn(run_merge(merge, first, merge_rx, live, node_counts.clone()));
        let reporter = Reporter { controller: FIELD_MANAGER.to_string(), instance: Some(identity) };
        let fleet = Arc::new(Fleet {
            recorder: Recorder::new(manager.clone(), reporter),
            manager,
            namespace,
            links: Mutex::new(BTreeMap::new()),
            merge: merge_tx,
            trigger,
            jobs: OnceLock::new(),
            node_counts,
            refused: Mutex::new(BTreeMap::new()),
            devices,
        });
        tokio::spawn(follow(fleet.clone()));
        Ok(fleet)
    }

    /// The manager's TrainJob cache, which sweeps read; set once it exists.
    pub fn set_jobs(&self, jobs: Store<TrainJob>) {
        let _ = self.jobs.set(jobs);
    }

    fn link(&self, cluster: &str) -> Option<Arc<Link>> {
        self.links.lock().expect("lock").get(cluster).cloned()
    }

    /// The copy of `namespace/name` on `cluster`, as last seen there.
    pub fn copy(&self, cluster: &str, namespace: &str, name: &str) -> Option<Arc<TrainJob>> {
        self.link(cluster)?.copies.get(&ObjectRef::new(name).within(namespace))
    }

    /// Whether dispatch may write to `cluster` now.
    pub fn usable(&self, cluster: &str) -> bool {
        self.link(cluster).is_some_and(|l| l.usable.load(Ordering::Relaxed))
    }

    /// The client of a usable worker.
    pub fn client(&self, cluster: &str) -> Option<Client> {
        self.link(cluster).filter(|l| l.usable.load(Ordering::Relaxed)).map(|l| l.client.clone())
    }

    /// The runtime `job` names, as `Kind name`, when `cluster` does not have it (looked up there).
    pub async fn runtime_missing(&self, cluster: &str, job: &TrainJob) -> Result<Option<String>, kube::Error> {
        let Some(client) = self.client(cluster) else { return Ok(None) };
        let reference = &job.spec.0.runtime_ref;
        let kind = reference.kind.as_deref().unwrap_or("ClusterTrainingRuntime");
        let found = if kind == "TrainingRuntime" {
            let ns = job.metadata.namespace.as_deref().unwrap_or_default();
            Api::<TrainingRuntime>::namespaced(client, ns).get_metadata_opt(&reference.name).await?.is_some()
        } else {
            Api::<ClusterTrainingRuntime>::all(client).get_metadata_opt(&reference.name).await?.is_some()
        };
        Ok((!found).then(|| format!("{kind} {}", reference.name)))
    }

    /// The manager's TrainJob a copy copies, as the cache shows it (`None`: not listed yet).
    pub(super) fn manager_job(&self, copy: &TrainJob) -> Option<Option<Arc<TrainJob>>> {
        let jobs = self.jobs.get()?;
        Some(jobs.get(&ObjectRef::new(&copy.name_any()).within(&copy.namespace().unwrap_or_default())))
    }

    /// What a reconcile of `job` reads of the worker it acts on (see [`acting_on`]): the copy
    /// there, whether the worker can be written, and (before the copy is written) whether it has
    /// the TrainJob's runtime. `None` for a TrainJob neither placed nor being placed.
    pub async fn reconcile_inputs(
        &self,
        job: &TrainJob,
        decision: Option<&Decision>,
    ) -> Result<Option<(Option<CopyView>, FleetInputs<'static>)>, kube::Error> {
        let Some(cluster) = acting_on(job, decision) else { return Ok(None) };
        let (ns, name) = (job.namespace().unwrap_or_default(), job.name_any());
        let copy = self.copy(&cluster, &ns, &name).and_then(|c| copy_view(&cluster, &c));
        let reachable = self.usable(&cluster);
        let mine = copy.as_ref().is_some_and(|c| Some(&c.origin) == job.metadata.uid.as_ref());
        let runtime_missing = match reachable && !mine && job.metadata.deletion_timestamp.is_none() {
            true => self.runtime_missing(&cluster, job).await?,
            false => None,
        };
        Ok(Some((copy, FleetInputs { cluster, copy: None, reachable, runtime_missing })))
    }

    /// Publishes a worker's event on the manager's object `reference` (best effort).
    pub(super) async fn publish(&self, reference: &k8s_openapi::api::core::v1::ObjectReference, event: &Event) {
        if let Err(e) = self.recorder.publish(event, reference).await {
            tracing::warn!(object = ?reference.name, error = %e, "a worker's event not mirrored");
        }
    }

    /// Whether the manager wants the copy `copy` on `cluster` (its TrainJob's record places it there).
    fn wanted(&self, cluster: &str, copy: &TrainJob) -> Option<bool> {
        let origin = origin_of(copy)?;
        Some(wanted(origin, cluster, self.manager_job(copy)?.as_deref()))
    }

    /// Links (or relinks, when its Secret changed) one worker; a refusal leaves it out.
    async fn ensure(self: &Arc<Self>, worker: &WorkerCluster) {
        let cluster = worker.name_any();
        let secrets: Api<Secret> = Api::namespaced(self.manager.clone(), &self.namespace);
        let secret = match secrets.get_opt(&worker.spec.kubeconfig_secret.name).await {
            Ok(s) => s,
            Err(e) => return tracing::warn!(%cluster, error = %e, "reading the worker's Secret"),
        };
        let made_from = format!(
            "{}@{}/{}",
            worker.spec.kubeconfig_secret.name,
            secret.as_ref().and_then(|s| s.metadata.resource_version.clone()).unwrap_or_default(),
            worker.spec.kubeconfig_secret.key()
        );
        if self.link(&cluster).is_some_and(|l| l.made_from == made_from)
            || self.refused.lock().expect("lock").get(&cluster) == Some(&made_from)
        {
            return;
        }
        match self.connect(&cluster, worker, secret.as_ref()).await {
            Ok(client) => {
                self.refused.lock().expect("lock").remove(&cluster);
                let link = self.spawn_link(&cluster, client, made_from);
                self.links.lock().expect("lock").insert(cluster.clone(), link);
                tracing::info!(%cluster, "worker cluster linked");
            }
            Err(refusal) => {
                tracing::warn!(%cluster, reason = refusal.reason, message = %refusal.message, "worker cluster left out");
                self.unlink(&cluster);
                self.write_status(&cluster, false, refusal.reason, &refusal.message).await;
                // Tried again when the Secret or the WorkerCluster changes, or every
                // RETRY_REFUSED when credentials were refused (the server may accept them later).
                if refusal.reason != "CredentialsRefused" {
                    self.refused.lock().expect("lock").insert(cluster.clone(), made_from);
                }
            }
        }
    }

    async fn connect(&self, cluster: &str, worker: &WorkerCluster, secret: Option<&Secret>) -> Result<Client, Refusal> {
        let kubeconfig = kubeconfig_of(worker, secret, &self.namespace)?;
        let config = client_config(cluster, kubeconfig).await?;
        let client = Client::try_from(config).map_err(|e| Refusal {
            reason: "InvalidKubeconfig",
            message: format!("worker cluster {cluster}: spec.kubeconfigSecret: no client can be made from it: {e}"),
        })?;
        // Refused credentials, or ones that may not list what the manager follows there (its
        // first list would wait for them), leave the worker out; an unreachable server is linked
        // and probed.
        let one = ListParams::default().limit(1);
        let (jobs, nodes, pods) =
            (Api::<TrainJob>::all(client.clone()), Api::<Node>::all(client.clone()), Api::<Pod>::all(client.clone()));
        let asks = [
            jobs.list_metadata(&one).map(|r| r.map(drop)).boxed(),
            nodes.list_metadata(&one).map(|r| r.map(drop)).boxed(),
            pods.list_metadata(&one).map(|r| r.map(drop)).boxed(),
        ];
        for ask in asks {
            if let Ok(Err(e)) = tokio::time::timeout(Duration::from_secs(5), ask).await
                && let Some(refusal) = refused(cluster, &e)
            {
                return Err(refusal);
            }
        }
        Ok(client)
    }

    fn unlink(&self, cluster: &str) {
        if self.links.lock().expect("lock").remove(cluster).is_some() {
            tracing::info!(%cluster, "worker cluster unlinked");
        }
        let _ = self.merge.send((cluster.to_string(), WorkerEvent::Gone));
    }

    fn spawn_link(self: &Arc<Self>, cluster: &str, client: Client, made_from: String) -> Arc<Link> {
        let mut tasks = Vec::new();
        let name = cluster.to_string();
        let nodes = watcher(Api::<Node>::all(client.clone()), watcher::Config::default()).modify(slim_node);
        tasks.push(spawn_feed(
            nodes,
            self.merge.clone(),
            move |e| (name.clone(), WorkerEvent::Node(Box::new(e))),
            cluster,
        ));
        let name = cluster.to_string();
        let pods = watcher(Api::<Pod>::all(client.clone()), watcher::Config::default()).modify(without_managed_fields);
        tasks.push(spawn_feed(
            pods,
            self.merge.clone(),
            move |e| (name.clone(), WorkerEvent::Pod(Box::new(e))),
            cluster,
        ));
        if self.devices {
            tasks.push(
                tokio::spawn(feed_devices(client.clone(), self.merge.clone(), cluster.to_string())).abort_handle(),
            );
        }
        let events = super::events::follow(self.clone(), cluster.to_string(), client.clone());
        tasks.push(tokio::spawn(events).abort_handle());
        let (copies, writer) = kube::runtime::reflector::store();
        let usable = Arc::new(AtomicBool::new(false));
        let copies_task = {
            let (fleet, cluster, usable) = (self.clone(), cluster.to_string(), usable.clone());
            let config = watcher::Config::default().labels(ORIGIN_LABEL);
            let stream = kube::runtime::reflector(
                writer,
                watcher(Api::<TrainJob>::all(client.clone()), config).modify(without_managed_fields),
            )
            .backoff(WatchBackoff::default());
            tokio::spawn(stream.for_each(move |event| {
                let (fleet, cluster, usable) = (fleet.clone(), cluster.clone(), usable.clone());
                async move {
                    let touched = match event {
                        Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c) | watcher::Event::Delete(c)) => c,
                        _ => return,
                    };
                    // The manager's TrainJob of that name reads its copy again (status mirrored).
                    let _ = fleet
                        .trigger
                        .send(ObjectRef::new(&touched.name_any()).within(&touched.namespace().unwrap_or_default()));
                    // The cache of the manager's TrainJobs may not show a record just written yet:
                    // only a copy surely stale goes here (a worker coming back is swept whole).
                    let stale =
                        fleet.manager_job(&touched).is_some_and(|m| surely_stale(&touched, &cluster, m.as_deref()));
                    if usable.load(Ordering::Relaxed) && stale {
                        fleet.remove_copy(&cluster, &touched).await;
                    }
                }
            }))
        };
        tasks.push(copies_task.abort_handle());
        tasks.push(
            tokio::spawn(probe(self.clone(), cluster.to_string(), client.clone(), usable.clone())).abort_handle(),
        );
        Arc::new(Link { client, made_from, copies, usable, tasks })
    }

    /// Deletes a copy the manager does not want, if it is still the one read (uid precondition).
    async fn remove_copy(&self, cluster: &str, copy: &TrainJob) {
        let Some(link) = self.link(cluster) else { return };
        if let Err(e) = remove_copy_with(&link.client, cluster, copy).await {
            tracing::warn!(%cluster, copy = %copy.key(), error = %e, "removing a stale copy");
        }
    }

    /// Removes every copy on `cluster` the manager does not want, from a fresh list.
    async fn sweep(&self, cluster: &str, client: &Client) -> Result<(), String> {
        let jobs = self.jobs.get().ok_or("the manager's TrainJobs are not listed yet")?;
        jobs.wait_until_ready().await.map_err(|e| e.to_string())?;
        let copies = Api::<TrainJob>::all(client.clone())
            .list(&ListParams::default().labels(ORIGIN_LABEL))
            .await
            .map_err(|e| e.to_string())?;
        for copy in &copies.items {
            if self.wanted(cluster, copy) == Some(false) {
                remove_copy_with(client, cluster, copy).await.map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }

    /// The worker's nodes and the gangs running there (copies not ended), for its status.
    fn counts(&self, cluster: &str) -> (usize, usize) {
        let nodes = self.node_counts.lock().expect("lock").get(cluster).copied().unwrap_or(0);
        use crate::controller::deciding::conditions::{COMPLETE, FAILED};
        let gangs = self
            .link(cluster)
            .map_or(0, |l| l.copies.state().iter().filter(|c| !c.has_true(COMPLETE) && !c.has_true(FAILED)).count());
        (nodes, gangs)
    }

    /// Writes the worker's counts to its WorkerCluster's status when they changed.
    async fn write_counts(&self, cluster: &str, last: &mut Option<(usize, usize)>) {
        let now = self.counts(cluster);
        if *last == Some(now) {
            return;
        }
        let api: Api<WorkerCluster> = Api::all(self.manager.clone());
        let patch = json!({"status": {"nodes": now.0, "gangs": now.1}});
        let params = PatchParams { field_manager: Some(FIELD_MANAGER.to_string()), ..PatchParams::default() };
        if api.patch_status(cluster, &params, &Patch::Merge(&patch)).await.is_ok() {
            *last = Some(now);
        }
    }

    /// Says on the WorkerCluster whether the manager places gangs there, and why not.
    async fn write_status(&self, cluster: &str, connected: bool, reason: &str, message: &str) {
        let api: Api<WorkerCluster> = Api::all(self.manager.clone());
        let previous = api.get_status(cluster).await.ok();
        let old = previous
            .as_ref()
            .and_then(|w| w.status.as_ref())
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Connected").cloned());
        let status = if connected { "True" } else { "False" };
        if old.as_ref().is_some_and(|c| c.status == status && c.reason == reason && c.message == message) {
            return;
        }
        let since = old
            .filter(|c| c.status == status)
            .map_or_else(|| Time(k8s_openapi::jiff::Timestamp::now()), |c| c.last_transition_time);
        let condition = Condition {
            type_: "Connected".into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: since,
            observed_generation: previous.and_then(|w| w.metadata.generation),
        };
        let patch = json!({"status": {"conditions": [condition]}});
        let params = PatchParams { field_manager: Some(FIELD_MANAGER.to_string()), ..PatchParams::default() };
        if let Err(e) = api.patch_status(cluster, &params, &Patch::Merge(&patch)).await {
            tracing::warn!(%cluster, error = %e, "writing the WorkerCluster's status");
        }
    }
}

/// Deletes a copy if it is still the one read (uid precondition); gone already is done.
async fn remove_copy_with(client: &Client, cluster: &str, copy: &TrainJob) -> Result<(), kube::Error> {
    if copy.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let api: Api<TrainJob> = Api::namespaced(client.clone(), &copy.namespace().unwrap_or_default());
    let params = DeleteParams {
        preconditions: Some(Preconditions { uid: copy.uid(), resource_version: None }),
        ..DeleteParams::background()
    };
    match api.delete(&copy.name_any(), &params).await {
        Ok(_) => {
            tracing::info!(%cluster, copy = %copy.key(), "stale copy removed");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.is_not_found() || s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// The merge task: the first list, then every worker event, into the live picture.
async fn run_merge(
    mut merge: FleetMerge,
    first: Vec<Change>,
    mut events: mpsc::UnboundedReceiver<(String, WorkerEvent)>,
    live: mpsc::Sender<Change>,
    node_counts: Arc<Mutex<BTreeMap<String, usize>>>,
) {
    for change in first {
        if live.send(change).await.is_err() {
            return;
        }
    }
    while let Some((cluster, event)) = events.recv().await {
        for change in merge.apply(&cluster, event) {
            if live.send(change).await.is_err() {
                return;
            }
        }
        node_counts.lock().expect("lock").insert(cluster.clone(), merge.node_count(&cluster));
    }
}

/// Follows the WorkerCluster objects: each linked as it comes or changes, unlinked when deleted;
/// those left out are tried again every [`RETRY_REFUSED`].
async fn follow(fleet: Arc<Fleet>) {
    let api: Api<WorkerCluster> = Api::all(fleet.manager.clone());
    let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).backoff(WatchBackoff::default()));
    let mut known: BTreeMap<String, WorkerCluster> = BTreeMap::new();
    let mut listing: Option<BTreeMap<String, WorkerCluster>> = None;
    let mut tick = tokio::time::interval(RETRY_REFUSED);
    loop {
        tokio::select! {
            event = events.next() => match event {
                None => return,
                Some(Err(e)) => tracing::debug!(error = %e, "WorkerCluster watch failed; retrying"),
                Some(Ok(watcher::Event::Init)) => listing = Some(BTreeMap::new()),
                Some(Ok(watcher::Event::InitApply(w))) => {
                    if let Some(l) = listing.as_mut() {
                        l.insert(w.name_any(), w);
                    }
                }
                Some(Ok(watcher::Event::InitDone)) => {
                    let listed = listing.take().unwrap_or_default();
                    for gone in known.keys().filter(|k| !listed.contains_key(*k)).cloned().collect::<Vec<_>>() {
                        fleet.unlink(&gone);
                    }
                    known = listed;
                    for w in known.values() {
                        fleet.ensure(w).await;
                    }
                }
                Some(Ok(watcher::Event::Apply(w))) => {
                    fleet.ensure(&w).await;
                    known.insert(w.name_any(), w);
                }
                Some(Ok(watcher::Event::Delete(w))) => {
                    known.remove(&w.name_any());
                    fleet.refused.lock().expect("lock").remove(&w.name_any());
                    fleet.unlink(&w.name_any());
                }
            },
            _ = tick.tick() => {
                for w in known.values() {
                    fleet.ensure(w).await;
                }
            }
        }
    }
}

/// Probes a worker: lost after [`LOST_AFTER_FAILURES`] failed probes in a row; usable again only
/// once every copy it should not run is removed, and then each TrainJob placed there is looked at.
async fn probe(fleet: Arc<Fleet>, cluster: String, client: Client, usable: Arc<AtomicBool>) {
    let mut failures = 0u32;
    let mut reached: Option<bool> = None;
    let mut counts = None;
    let mut probes = 0u64;
    let (mut sweep_failing, mut sweep_said) = (None, false);
    loop {
        probes += 1;
        // Counts every few seconds: they are for people, not for decisions.
        if reached == Some(true) && probes.is_multiple_of(COUNTS_EVERY_PROBES) {
            fleet.write_counts(&cluster, &mut counts).await;
        }
        let answer = tokio::time::timeout(Duration::from_secs(2), client.apiserver_version()).await;
        let ok = matches!(answer, Ok(Ok(_)));
        if ok {
            failures = 0;
            if reached != Some(true) {
                let swept = tokio::time::timeout(SWEEP_TIMEOUT, fleet.sweep(&cluster, &client)).await;
                match swept.unwrap_or_else(|_| Err(format!("no answer within {} s", SWEEP_TIMEOUT.as_secs()))) {
                    Ok(()) => {
                        (sweep_failing, sweep_said) = (None, false);
                        reached = Some(true);
                        usable.store(true, Ordering::Relaxed);
                        let _ = fleet.merge.send((cluster.clone(), WorkerEvent::Reachable(true)));
                        fleet.write_status(&cluster, true, "Connected", "the manager places gangs here").await;
                        retrigger(&fleet, &cluster);
                    }
                    Err(e) => {
                        // Said once it has lasted: the worker is reached but not used until then.
                        let since = *sweep_failing.get_or_insert_with(std::time::Instant::now);
                        if since.elapsed() >= SWEEP_TIMEOUT && !std::mem::replace(&mut sweep_said, true) {
                            tracing::warn!(%cluster, error = %e, "the worker's copies cannot be swept; it is not used until they are");
                        } else {
                            tracing::debug!(%cluster, error = %e, "sweeping the worker's copies; trying again");
                        }
                    }
                }
            }
        } else {
            failures += 1;
            if failures >= LOST_AFTER_FAILURES && reached != Some(false) {
                reached = Some(false);
                usable.store(false, Ordering::Relaxed);
                let _ = fleet.merge.send((cluster.clone(), WorkerEvent::Reachable(false)));
                let message = format!("the manager cannot reach worker cluster {cluster}'s API server");
                fleet.write_status(&cluster, false, "Unreachable", &message).await;
            }
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
}

/// Every manager TrainJob placed on `cluster` looked at again (dispatch held for it goes out).
fn retrigger(fleet: &Fleet, cluster: &str) {
    let Some(jobs) = fleet.jobs.get() else { return };
    for job in jobs.state() {
        if super::copies::placed_in(&job).as_deref() == Some(cluster) {
            let _ = fleet.trigger.send(ObjectRef::from_obj(job.as_ref()));
        }
    }
}
