//! The scheduling task: takes watch events as they come, applies them to the live picture, and
//! runs a cycle as soon as something changed (events of one burst coalesced over a few
//! milliseconds), with the tick as a safety net. It never waits on the API server: decisions go
//! to the reconcilers through a channel, Queue status to the status writer.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::{Notify, mpsc};

use crate::api::{Queue, TrainJob};
use crate::controller::acting::status_writer::Target;
use crate::controller::deciding::queue_status::queue_statuses;
use crate::controller::deciding::scheduling_loop::JobState;
use crate::controller::deciding::scheduling_loop::{CycleStats, Decision};
use crate::controller::process::run::Ctx;
use crate::controller::serving::api_answers::{Asked, answer};
use crate::controller::serving::api_events::events_of;
use crate::controller::serving::metrics::{PendingLabel, QueueLabel};
use crate::controller::slurm::cluster_view::slurm_cycle;
use crate::controller::slurm::poller::SlurmLoop;
use crate::controller::watching::live::{Change, Changed, Initial, Live, LiveSettings, Note};
use crate::controller::watching::scheduler_inputs::finished_run;
use trainyard_policies::RuntimeHistory;

/// How long a burst of events is gathered before the cycle runs.
const COALESCE: Duration = Duration::from_millis(5);
/// The longest a burst may hold the cycle back.
const COALESCE_MAX: Duration = Duration::from_millis(50);
/// Queue status is written at most this often.
const QUEUE_STATUS_EVERY: Duration = Duration::from_secs(1);

/// Seconds since the epoch, now.
fn now_s() -> u64 {
    u64::try_from(Timestamp::now().as_second()).unwrap_or(0)
}

/// What the loop is wired to besides the watch events.
pub struct Links {
    /// Reconciles to run.
    pub trigger: mpsc::UnboundedSender<ObjectRef<TrainJob>>,
    /// Woken when a training runtime changed.
    pub runtimes_changed: Arc<Notify>,
    /// Woken after the engine is built, every recorded admission adopted and the first cycle
    /// run: only then may anything write status.
    pub started: Arc<Notify>,
    /// Questions of the researcher API, when it is served.
    pub queries: Option<mpsc::Receiver<Asked>>,
}

/// The next question, or never when the API is not served.
async fn next_question(queries: &mut Option<mpsc::Receiver<Asked>>) -> Option<Asked> {
    match queries {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// What the finished TrainJobs the API server still holds ran, learned oldest end first: a
/// restarted controller or a new leader estimates from the same history the last one had.
pub fn history_of<'a>(jobs: impl Iterator<Item = &'a TrainJob>) -> RuntimeHistory {
    let mut runs: Vec<(u64, String, u64)> = jobs.filter_map(finished_run).collect();
    runs.sort();
    let mut history = RuntimeHistory::default();
    for (_, queue, seconds) in runs {
        history.record(&queue, seconds);
    }
    history
}

/// Runs the loop until the event channel closes.
pub async fn run(ctx: Arc<Ctx>, mut rx: mpsc::Receiver<Change>, links: Links, dra: bool) {
    let Links { trigger, runtimes_changed, started, mut queries } = links;
    let mut initial = Initial::default();
    initial.expect_dra = dra;
    ctx.runtimes.wait_until_ready().await.ok();
    ctx.cluster_runtimes.wait_until_ready().await.ok();
    initial.take(Change::Runtimes(crate::controller::watching::watches::index_runtimes(
        &ctx.runtimes,
        &ctx.cluster_runtimes,
    )));
    let waiting_since = Instant::now();
    while !initial.complete() {
        match tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
            Ok(Some(change)) => initial.take(change),
            Ok(None) => return,
            Err(_) => {
                tracing::info!(waiting_for = ?initial.waiting_for(), since_s = waiting_since.elapsed().as_secs(), "listing")
            }
        }
    }
    let settings = LiveSettings {
        mode: ctx.settings.mode,
        policy_text: ctx.settings.policy_text.clone(),
        policy_name: ctx.settings.policy_name.clone(),
        topology: ctx.settings.topology.clone(),
        slurm_configured: ctx.settings.slurm.is_some()
            && ctx.settings.mode == crate::controller::deciding::plan::Mode::Standalone,
        binders: ctx.binders(),
    };
    let history = history_of(initial.jobs.values().map(|job| &**job));
    let (mut live, notes) = match Live::start(initial, settings, now_s()) {
        Ok(built) => built,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the scheduling engine");
            std::process::exit(1);
        }
    };
    ctx.metrics.engine_builds.inc_by(live.engine_builds());
    report(&ctx, &notes);
    let mut task = Task {
        ctx: ctx.clone(),
        trigger,
        slurm: SlurmLoop::default(),
        queue_status_at: None,
        gauges_at: None,
        history,
        admitted_at: HashMap::new(),
    };
    task.cycle(&mut live);
    started.notify_one();
    tracing::info!("engine built, recorded admissions adopted, first cycle done");

    let mut tick = tokio::time::interval(ctx.settings.cycle);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let mut notes = Vec::new();
        tokio::select! {
            change = rx.recv() => {
                let Some(change) = change else { return };
                task.seen(&change);
                notes.extend(live.apply(change, now_s()));
                // Gather the rest of the burst: a cycle per event would waste work.
                let until = Instant::now() + COALESCE;
                let hard = Instant::now() + COALESCE_MAX;
                loop {
                    match rx.try_recv() {
                        Ok(change) => {
                            task.seen(&change);
                            notes.extend(live.apply(change, now_s()));
                            if Instant::now() >= hard {
                                break;
                            }
                        }
                        Err(mpsc::error::TryRecvError::Empty) => {
                            let left = until.saturating_duration_since(Instant::now());
                            if left.is_zero() {
                                break;
                            }
                            match tokio::time::timeout(left, rx.recv()).await {
                                Ok(Some(change)) => {
                                    task.seen(&change);
                                    notes.extend(live.apply(change, now_s()));
                                }
                                Ok(None) => return,
                                Err(_) => break,
                            }
                        }
                        Err(mpsc::error::TryRecvError::Disconnected) => return,
                    }
                }
            }
            _ = runtimes_changed.notified() => {
                let index = crate::controller::watching::watches::index_runtimes(&ctx.runtimes, &ctx.cluster_runtimes);
                notes.extend(live.apply(Change::Runtimes(index), now_s()));
            }
            _ = tick.tick() => {}
            Some(asked) = next_question(&mut queries) => {
                // A question changes nothing: answered from the last cycle, no cycle follows.
                let answer = answer(&live, &asked.query, &task.history, now_s());
                let _ = asked.reply.send(answer);
                continue;
            }
        }
        notes.extend(live.sync_devices(now_s()));
        report(&ctx, &notes);
        task.cycle(&mut live);
    }
}

/// Logs each note; a note about a Node also becomes a Warning event on it (sent aside: the loop
/// does not wait for it).
fn report(ctx: &Ctx, notes: &[Note]) {
    for note in notes {
        match &note.node {
            Some(node) => {
                tracing::warn!(node = %node, "{}", note.message);
                let (actor, node, message) = (ctx.actor().clone(), node.clone(), note.message.clone());
                tokio::spawn(async move { actor.node_event(&node, "NodeLeftOut", &message).await });
            }
            None => tracing::warn!("{}", note.message),
        }
    }
}

/// What the loop carries between cycles.
struct Task {
    ctx: Arc<Ctx>,
    trigger: mpsc::UnboundedSender<ObjectRef<TrainJob>>,
    slurm: SlurmLoop,
    queue_status_at: Option<Instant>,
    /// When the gauges that walk every TrainJob were last set.
    gauges_at: Option<Instant>,
    /// Runtimes of the gangs that ended, per queue, for start-time estimates.
    history: RuntimeHistory,
    /// Queue and admission time of each admitted TrainJob, by `namespace/name`, until it ends.
    admitted_at: HashMap<String, (String, u64)>,
}

impl Task {
    /// Notes when a TrainJob was first seen, for the launch latency.
    fn seen(&self, change: &Change) {
        if let Change::Job(event) = change
            && let kube::runtime::watcher::Event::Apply(job) | kube::runtime::watcher::Event::InitApply(job) =
                event.as_ref()
            && let Some(uid) = &job.metadata.uid
            && crate::controller::deciding::plan::recorded(job).is_none()
        {
            self.ctx.first_seen.lock().expect("lock").entry(uid.clone()).or_insert_with(Instant::now);
        }
    }

    fn cycle(&mut self, live: &mut Live) {
        let started = Instant::now();
        let now = now_s();
        let (mut changed, stats) = live.cycle(now);
        let mut all_stats = vec![stats];
        if let Some(link) = self.ctx.settings.slurm.clone() {
            let queues: Vec<&Queue> = live.queues().values().map(|q| q.as_ref()).collect();
            let fp = queues_fingerprint(&queues);
            self.slurm.rebuild(&link, &self.ctx.settings.policy_text, &self.ctx.settings.policy_name, &queues, fp);
            let missing =
                self.slurm.problem.clone().unwrap_or_else(|| "waiting for the first answer from Slurm".into());
            let (decisions, stats) = slurm_cycle(self.slurm.looped.as_mut(), &live.slurm_entries(), now, &missing);
            for (key, d) in decisions {
                live.publish(&key, Some(d));
            }
            changed.extend(live.take_published());
            all_stats.extend(stats);
        }
        let admitted: Vec<u64> = changed
            .iter()
            .filter(|(_, d)| matches!(d, Some(Decision::Admit(_))))
            .filter_map(|(key, _)| live.created_of(key))
            .collect();
        self.publish(live, changed);
        self.metrics(live, &all_stats, &admitted, now);
        self.queue_status(live);
        self.ctx.metrics.cycle_seconds.observe(started.elapsed().as_secs_f64());
    }

    /// Hands the changed decisions to the reconcilers, and the inputs they render with.
    fn publish(&mut self, live: &mut Live, changed: Changed) {
        {
            let mut inputs = self.ctx.inputs.lock().expect("lock");
            let (policy, _) = live.policy();
            if inputs.policy != *policy || inputs.gpu_resource != live.gpu_resource() {
                inputs.policy = policy.clone();
                inputs.gpu_resource = live.gpu_resource().to_string();
            }
            let slurm = live.slurm_queues();
            if *inputs.slurm_queues != slurm {
                inputs.slurm_queues = Arc::new(slurm);
            }
        }
        self.learn_runtimes(live, &changed);
        if self.ctx.api_events.receiver_count() > 0 && !changed.is_empty() {
            for event in events_of(live, &changed, &self.ctx.settings.identity, now_s()) {
                let _ = self.ctx.api_events.send(event);
            }
        }
        let arrivals = live.take_new_arrivals();
        if !arrivals.is_empty() {
            self.ctx.arrivals.lock().expect("lock").extend(arrivals);
        }
        if changed.is_empty() {
            return;
        }
        {
            // With the TrainJob's uid: one created again under the same name never reads it.
            let mut decisions = self.ctx.decisions.lock().expect("lock");
            let first_seen = self.ctx.first_seen.lock().expect("lock");
            let mut clock = self.ctx.admission_clock.lock().expect("lock");
            for (key, d) in &changed {
                if let (Some(Decision::Admit(_)), Some(uid)) = (d, live.uid_of(key))
                    && let Some(seen) = first_seen.get(uid)
                {
                    self.ctx.metrics.stage("seen_to_decided", seen.elapsed().as_secs_f64());
                    clock.insert(uid.to_string(), Instant::now());
                }
                match (d, live.uid_of(key)) {
                    (Some(d), Some(uid)) => decisions.insert(key.clone(), (uid.to_string(), d.clone())),
                    _ => decisions.remove(key),
                };
            }
        }
        for key in changed.keys() {
            let (ns, name) = key.split_once('/').unwrap_or(("", key));
            let _ = self.trigger.send(ObjectRef::new(name).within(ns));
        }
    }

    /// Notes when each TrainJob was admitted, and how long it ran once it ends (preempted and
    /// moved gangs end early, so their runtimes are not learned).
    fn learn_runtimes(&mut self, live: &Live, changed: &Changed) {
        for (key, decision) in changed {
            match decision {
                Some(Decision::Admit(_) | Decision::Running) => {
                    let Some(entry) = live.entry(key) else { continue };
                    let at = match (decision, &entry.state) {
                        (Some(Decision::Admit(record)), _) | (_, JobState::Admitted(_, record)) => record.at,
                        _ => continue,
                    };
                    if let JobState::Waiting(intent) | JobState::Admitted(intent, _) = &entry.state {
                        self.admitted_at.entry(key.clone()).or_insert_with(|| (intent.queue.clone(), at));
                    }
                }
                Some(Decision::Preempt { .. } | Decision::Requeue { .. } | Decision::Move(_)) => {
                    self.admitted_at.remove(key);
                }
                None => {
                    if let Some((queue, at)) = self.admitted_at.remove(key) {
                        self.history.record(&queue, now_s().saturating_sub(at));
                    }
                }
                Some(_) => {}
            }
        }
    }

    fn metrics(&mut self, live: &Live, all: &[CycleStats], admitted: &[u64], now: u64) {
        let m = &self.ctx.metrics;
        for created in admitted {
            m.admission_latency.observe(now.saturating_sub(*created) as f64);
        }
        for stats in all {
            m.admissions.inc_by(stats.admitted);
            m.preemptions.inc_by(stats.preempted);
            for cost in &stats.costs {
                m.placement_cost.observe(*cost as f64);
            }
        }
        let looped = live.scheduling_loop();
        let cluster = looped.engine().cluster();
        m.cluster_gpus.set(gauge(cluster.total_capacity().gpus));
        m.cluster_free_gpus.set(gauge(cluster.total_free().gpus));
        if self.ctx.settings.mode == crate::controller::deciding::plan::Mode::Manager {
            // The tree's first level is the worker clusters: a few series, read off the sums.
            let topo = cluster.topology();
            m.worker_gpus.clear();
            m.worker_free_gpus.clear();
            for &child in topo.children(trainyard_topology::DomainId::ROOT) {
                let d = trainyard_topology::DomainId(child);
                let label = crate::controller::serving::metrics::ClusterLabel { cluster: topo.domain(d).name.clone() };
                m.worker_gpus.get_or_create(&label).set(gauge(topo.capacity(d).gpus));
                m.worker_free_gpus.get_or_create(&label).set(gauge(cluster.free(d).gpus));
            }
        }
        m.status_backlog.set(gauge(self.ctx.status.backlog() as u64));
        // The gauges below walk every host and every TrainJob: at most once a second.
        if self.gauges_at.is_some_and(|at| at.elapsed() < QUEUE_STATUS_EVERY) {
            return;
        }
        self.gauges_at = Some(Instant::now());
        let hosts = looped.hosts_report();
        m.hosts_eligible.set(gauge(hosts.eligible));
        m.hosts_unusable.set(gauge(hosts.unusable));
        m.foreign_gpus.set(gauge(hosts.foreign_gpus));
        m.queue_depth.clear();
        m.pending.clear();
        let mut by_reason: BTreeMap<(String, String), u64> = BTreeMap::new();
        for entry in live.entries() {
            let intent = match &entry.state {
                crate::controller::deciding::scheduling_loop::JobState::Waiting(i)
                | crate::controller::deciding::scheduling_loop::JobState::Admitted(i, _) => i,
                _ => continue,
            };
            if let Some(Decision::Pending { reason, .. }) = live.decision(&entry.key) {
                *by_reason.entry((intent.queue.clone(), reason.clone())).or_default() += 1;
            }
        }
        for ((queue, reason), n) in by_reason {
            m.queue_depth.get_or_create(&QueueLabel { queue: queue.clone() }).inc_by(gauge(n));
            m.pending.get_or_create(&PendingLabel { queue, reason }).set(gauge(n));
        }
        let quotas = looped.engine().quotas();
        m.queue_used_gpus.clear();
        m.queue_nominal_gpus.clear();
        for q in quotas.queues().filter(|&q| q != quotas.root()) {
            let label = QueueLabel { queue: quotas.name(q).to_string() };
            m.queue_used_gpus.get_or_create(&label).set(gauge(quotas.usage(q).gpus));
            let nominal = quotas.nominal(q).gpus;
            if nominal != u64::MAX {
                m.queue_nominal_gpus.get_or_create(&label).set(gauge(nominal));
            }
        }
    }

    /// Sends each Queue's status to the writer when it changed, at most once a second.
    fn queue_status(&mut self, live: &Live) {
        if self.queue_status_at.is_some_and(|at| at.elapsed() < QUEUE_STATUS_EVERY) {
            return;
        }
        self.queue_status_at = Some(Instant::now());
        let now = Time(Timestamp::now());
        let queues: Vec<&Queue> = live.queues().values().map(|q| q.as_ref()).collect();
        let (hpc, k8s): (Vec<&Queue>, Vec<&Queue>) = queues.iter().partition(|q| q.spec.slurm.is_some());
        let decisions = |key: &str| live.decision(key).cloned();
        let entries: Vec<_> = live.entries().collect();
        let (_, problem) = live.policy();
        let mut statuses = queue_statuses(&k8s, live.scheduling_loop().engine(), &entries, &decisions, problem, &now);
        if let Some(looped) = &self.slurm.looped {
            let hpc_problem = self.slurm.problem.as_deref().or(problem);
            statuses.extend(queue_statuses(&hpc, looped.engine(), &entries, &decisions, hpc_problem, &now));
        }
        for (name, status) in statuses {
            let current = live.queues().get(&name).and_then(|q| q.status.as_ref());
            if current == Some(&status) || self.ctx.queue_sent.lock().expect("lock").get(&name) == Some(&status) {
                continue;
            }
            self.ctx.queue_sent.lock().expect("lock").insert(name.clone(), status.clone());
            let body = serde_json::json!({"apiVersion": Queue::api_version(&()), "kind": "Queue", "status": status});
            self.ctx.status.send(Target::Queue(name), body);
        }
    }
}

fn gauge(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn queues_fingerprint(queues: &[&Queue]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut keyed: Vec<(String, i64)> = queues
        .iter()
        .map(|q| (q.metadata.name.clone().unwrap_or_default(), q.metadata.generation.unwrap_or_default()))
        .collect();
    keyed.sort();
    keyed.hash(&mut h);
    h.finish()
}
