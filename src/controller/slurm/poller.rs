//! The controller's link to its Slurm cluster: a poller that keeps the snapshot of Slurm's jobs and
//! nodes current and brings the TrainJobs whose job changed to their reconcile.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;
use trainyard_slurm::NodeInfo;
use trainyard_slurm::bridge::{Bridge, Retry};

use crate::api::{Queue, TrainJob};
use crate::controller::deciding::scheduling_loop::SchedulingLoop;
use crate::controller::serving::metrics::Metrics;
use crate::controller::slurm::cluster_view::{SlurmSnapshot, slurm_cluster};
use crate::controller::slurm::gang_job::job_key_of;
use crate::controller::watching::scheduler_inputs::{Side, policy_with_queues};

/// Retries inside one step: a reconcile that waits long holds its TrainJob, and the reconcile's
/// own backoff retries what is left.
pub const STEP_RETRY: Retry =
    Retry { attempts: 3, first_wait: Duration::from_millis(200), max_wait: Duration::from_secs(1) };

/// How often nodes and the switch tree are read again, in polls.
const NODES_EVERY: u32 = 6;

/// The Slurm cluster's nodes and switch tree, as last read.
#[derive(Clone, Debug, Default)]
pub struct SlurmShape {
    /// Changes whenever the nodes or switches do.
    pub fingerprint: u64,
    /// The nodes.
    pub nodes: Vec<NodeInfo>,
    /// `topology.conf` lines from `scontrol show topology`; empty without a switch tree.
    pub topology: String,
}

/// Everything the controller shares about its Slurm cluster.
#[derive(Debug)]
pub struct SlurmLink {
    /// Submits, follows and cancels gangs.
    pub bridge: Bridge,
    /// Name of the cluster in the topology model.
    pub cluster_name: String,
    /// Time between looks at Slurm.
    pub poll: Duration,
    /// What the last look found; replaced whole, so a reconcile reads one consistent view.
    pub snapshot: Mutex<Arc<SlurmSnapshot>>,
    /// Nodes and switches, once read.
    pub shape: Mutex<Option<SlurmShape>>,
}

impl SlurmLink {
    /// A link that has not looked at Slurm yet.
    pub fn new(bridge: Bridge, cluster_name: String, poll: Duration) -> SlurmLink {
        SlurmLink {
            bridge,
            cluster_name,
            poll,
            snapshot: Mutex::new(Arc::new(SlurmSnapshot::default())),
            shape: Mutex::new(None),
        }
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<SlurmSnapshot> {
        self.snapshot.lock().expect("lock").clone()
    }

    /// Remembers Slurm's refusal of a gang, so the next plan fails its TrainJob with the message.
    pub fn refused(&self, gang: &str, message: &str) {
        let mut current = self.snapshot.lock().expect("lock");
        let mut next = current.as_ref().clone();
        next.refused.insert(gang.to_string(), message.to_string());
        *current = Arc::new(next);
    }
}

fn shape_fingerprint(nodes: &[NodeInfo], topology: &str) -> u64 {
    let mut h = DefaultHasher::new();
    for n in nodes {
        // Usability, not the state words: those change with every allocation, and a rebuild
        // loses the engine's history.
        (&n.name, n.cpus, n.memory_mib, n.gpus, &n.gpu_type, n.usable(), &n.partitions).hash(&mut h);
    }
    topology.hash(&mut h);
    h.finish()
}

impl SlurmLink {
    /// One look at Slurm: its jobs, and its nodes and switches when `read_nodes` (or never read).
    /// Returns the gangs whose job changed, and every known gang when Slurm stopped or started
    /// answering (their conditions say so).
    pub async fn refresh(&self, read_nodes: bool) -> Vec<String> {
        let read_nodes = read_nodes || self.shape.lock().expect("lock").is_none();
        let before = self.snapshot();
        let looked = look(self, read_nodes).await;
        let mut next = before.as_ref().clone();
        let changed = match looked {
            Ok((jobs, nodes)) => {
                next.observed(&jobs, nodes.as_deref());
                let mut changed = next.changed_gangs(&before);
                if before.unreachable.is_some() {
                    changed.extend(next.jobs.iter().flatten().map(|(g, _)| g.clone()));
                }
                changed
            }
            Err(error) => {
                let was_reachable = before.unreachable.is_none();
                next.unreachable = Some(error.clone());
                tracing::warn!(%error, "cannot reach Slurm; gangs keep their last known state");
                if was_reachable { next.jobs.iter().flatten().map(|(g, _)| g.clone()).collect() } else { vec![] }
            }
        };
        let mut current = self.snapshot.lock().expect("lock");
        // Refusals recorded while Slurm was being asked are kept.
        next.refused.extend(current.refused.iter().map(|(g, m)| (g.clone(), m.clone())));
        *current = Arc::new(next);
        changed
    }
}

/// Looks at Slurm every `link.poll` until the process ends, and brings the TrainJobs whose job
/// changed to their reconcile.
pub async fn poll(link: Arc<SlurmLink>, trigger: mpsc::UnboundedSender<ObjectRef<TrainJob>>, metrics: Arc<Metrics>) {
    let mut interval = tokio::time::interval(link.poll);
    // After a slow round, wait a whole period again rather than catch up in a burst.
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut round: u32 = 0;
    loop {
        interval.tick().await;
        let changed = link.refresh(round.is_multiple_of(NODES_EVERY)).await;
        round = round.wrapping_add(1);
        metrics.observe_slurm(&link.snapshot());
        for gang in changed {
            if let Some(key) = job_key_of(&gang) {
                let (ns, name) = key.split_once('/').unwrap_or(("", &key));
                // A full channel only delays the reconcile to the TrainJob's next requeue.
                let _ = trigger.send(ObjectRef::new(name).within(ns));
            }
        }
    }
}

/// The Slurm cluster's scheduling loop, rebuilt when its nodes, switches or queues change.
#[derive(Default)]
pub struct SlurmLoop {
    /// The loop, once built.
    pub looped: Option<SchedulingLoop>,
    /// Inputs of the last build attempt, so a failing build is not retried every cycle.
    tried: Option<u64>,
    /// Why the last build failed.
    pub problem: Option<String>,
}

impl SlurmLoop {
    /// Builds the loop again when the Slurm cluster's shape or the Queue objects changed; a
    /// failed build keeps the previous loop and says why.
    pub fn rebuild(
        &mut self,
        link: &SlurmLink,
        policy_text: &str,
        policy_name: &str,
        queues: &[&Queue],
        queues_fp: u64,
    ) {
        if !queues.iter().any(|q| q.spec.slurm.is_some()) {
            *self = SlurmLoop::default();
            return;
        }
        let Some(shape) = link.shape.lock().expect("lock").clone() else { return };
        let fingerprint = shape.fingerprint ^ queues_fp.rotate_left(3);
        if self.tried == Some(fingerprint) {
            return;
        }
        self.tried = Some(fingerprint);
        let topology = Some(shape.topology.as_str()).filter(|t| !t.trim().is_empty());
        let built = slurm_cluster(&link.cluster_name, &shape.nodes, topology).and_then(|cluster| {
            let policy = policy_with_queues(policy_text, policy_name, queues, Side::Slurm)?;
            SchedulingLoop::new(cluster, policy).map(SchedulingLoop::with_node_slots).map_err(|e| e.to_string())
        });
        match built {
            Ok(looped) => {
                tracing::info!(nodes = shape.nodes.len(), "Slurm cluster and quotas rebuilt");
                self.looped = Some(looped);
                self.problem = None;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot build the Slurm cluster or its quotas; keeping the previous ones");
                self.problem = Some(format!("Slurm cluster: {e}"));
            }
        }
    }
}

type Looked = (Vec<trainyard_slurm::JobInfo>, Option<Vec<NodeInfo>>);

async fn look(link: &SlurmLink, read_nodes: bool) -> Result<Looked, String> {
    let jobs = link.bridge.jobs().await.map_err(|e| e.to_string())?;
    if !read_nodes {
        return Ok((jobs, None));
    }
    let nodes = link.bridge.nodes().await.map_err(|e| e.to_string())?;
    // `scontrol` may be missing where slurmrestd is reachable (a controller pod): plan without switches.
    let topology = link.bridge.topology().await.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "no Slurm switch tree; placing on nodes only");
        String::new()
    });
    let fingerprint = shape_fingerprint(&nodes, &topology);
    *link.shape.lock().expect("lock") = Some(SlurmShape { fingerprint, nodes: nodes.clone(), topology });
    Ok((jobs, Some(nodes)))
}
