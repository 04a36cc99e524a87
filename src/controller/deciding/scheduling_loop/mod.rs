//! The one scheduling loop: the engine, the table of tracked gangs, and the cluster as the
//! engine sees it, all changed in place by the events of a live cluster.
//!
//! Each TrainJob is one row of the table (keyed by uid), applied when it changes
//! ([`SchedulingLoop::apply`]); nodes and pods are applied the same way (`hosts.rs`). A cycle
//! ([`SchedulingLoop::step`]) runs the engine and reports the decisions that changed, so its cost
//! follows what changed, not the number of TrainJobs. [`SchedulingLoop::cycle`] takes a whole
//! snapshot instead (the Slurm loop and tests). Nothing here does I/O.

mod codes;
mod hosts;
mod table;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use trainyard_policies::{Engine, GangId, PolicyConfig};
use trainyard_topology::Cluster;

use crate::controller::acting::admission_record::AdmissionRecord;
use crate::controller::deciding::intent::GangIntent;
use hosts::Hosts;
pub use hosts::HostsReport;
use table::Tracked;

/// A TrainJob as the loop sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct JobEntry {
    /// `namespace/name`.
    pub key: String,
    /// Object uid: a TrainJob deleted and created again is a new gang.
    pub uid: String,
    /// Creation time, seconds since the epoch (the submit time).
    pub created: u64,
    /// Breaks ties between TrainJobs created in the same second: the order trainyard first saw
    /// them (kept on the object, so it survives restarts).
    pub order: u64,
    /// What it wants.
    pub state: JobState,
}

/// What a TrainJob wants from the scheduler.
#[derive(Clone, Debug, PartialEq)]
pub enum JobState {
    /// Waiting for admission.
    Waiting(GangIntent),
    /// Admitted (its record is on the object) and not finished.
    Admitted(GangIntent, AdmissionRecord),
    /// Admitted, but its spec no longer gives a gang (runtime deleted, label changed): it keeps
    /// what the engine charges for it until it ends; a loop that never saw it cannot take it back.
    Kept,
    /// Nothing: suspended, finished, invalid or being deleted.
    Inactive,
}

/// The loop's verdict on one TrainJob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Start it here (the record is written first: the commit point).
    Admit(AdmissionRecord),
    /// Still admitted; nothing to change.
    Running,
    /// Still admitted, but nodes under it are lost (cordoned, not ready, removed or evicting).
    Degraded {
        /// The lost nodes' names.
        nodes: Vec<String>,
        /// Which and why, for the condition.
        message: String,
    },
    /// Admitted, and moved off lost nodes: write this record over the old one.
    Move(AdmissionRecord),
    /// Waiting; `reason` is a condition reason, `message` the engine's explanation.
    Pending {
        /// CamelCase condition reason.
        reason: String,
        /// Human-readable explanation.
        message: String,
    },
    /// Can never run as asked (until the cluster or quota changes).
    Unschedulable {
        /// CamelCase condition reason.
        reason: String,
        /// Human-readable explanation.
        message: String,
    },
    /// Stop it: another gang needs its place. It is queued again once stopped.
    Preempt {
        /// The gang it makes room for.
        by: String,
    },
    /// Stop it and queue it again in its old place (its nodes were lost).
    Requeue {
        /// CamelCase condition reason.
        reason: String,
        /// Human-readable explanation.
        message: String,
    },
}

/// Admission counts of one cycle, for metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CycleStats {
    /// Gangs admitted.
    pub admitted: u64,
    /// Gangs preempted.
    pub preempted: u64,
    /// Gangs requeued or moved because their nodes were lost.
    pub node_losses: u64,
    /// Placement cost of each admission.
    pub costs: Vec<u64>,
    /// Pending gangs per queue after the cycle.
    pub pending_by_queue: BTreeMap<String, u64>,
    /// Pending gangs per condition reason after the cycle.
    pub pending_by_reason: BTreeMap<String, u64>,
    /// Whether the engine ran a full cycle (something had changed).
    pub ran: bool,
}

/// The scheduling loop's state.
#[derive(Debug)]
pub struct SchedulingLoop {
    engine: Engine,
    /// Every tracked TrainJob by uid.
    table: BTreeMap<String, Tracked>,
    /// uid of each gang id in the engine (looked up only).
    by_id: HashMap<GangId, String>,
    /// uid of each `namespace/name` (looked up only).
    by_key: HashMap<String, String>,
    /// Rows whose decision must be looked at again.
    stale: BTreeSet<String>,
    /// Rows the engine refused or could not place, to look at again when the cluster or the
    /// quotas change (kept apart so that doing so costs what they are, not the whole table).
    refused: BTreeSet<String>,
    /// Rows held out of the engine until their TrainJob shows them stopped.
    stopping: BTreeSet<String>,
    /// Nodes and pods.
    hosts: Hosts,
    next_id: u64,
    last_now: u64,
    /// Charges each pod a node slot (the Slurm loop; see [`crate::controller::slurm::cluster_view`]).
    node_slots: bool,
    /// The cluster generation refused gangs were last looked at for.
    seen_generation: u64,
}

impl SchedulingLoop {
    /// A loop over `cluster` under `policy`; a policy that does not fit the cluster (a quota in
    /// topology units of a level it lacks, a flavor no node has) is an error.
    pub fn new(cluster: Cluster, policy: PolicyConfig) -> Result<SchedulingLoop, trainyard_policies::Error> {
        let hosts = Hosts::of(&cluster);
        Ok(SchedulingLoop {
            engine: Engine::try_new(cluster, policy)?,
            table: BTreeMap::new(),
            by_id: HashMap::new(),
            by_key: HashMap::new(),
            stale: BTreeSet::new(),
            refused: BTreeSet::new(),
            stopping: BTreeSet::new(),
            hosts,
            next_id: 0,
            last_now: 0,
            node_slots: false,
            seen_generation: 0,
        })
    }

    /// The loop of a Slurm cluster: one pod per node, on a cluster from
    /// [`crate::controller::slurm::cluster_view::slurm_cluster`].
    pub fn with_node_slots(mut self) -> SchedulingLoop {
        self.node_slots = true;
        self
    }

    /// The engine, for status reporting.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The last decision on a TrainJob, by uid.
    pub fn decision(&self, uid: &str) -> Option<&Decision> {
        self.table.get(uid).and_then(|t| t.decision.as_ref())
    }

    /// The engine's gang of a TrainJob, by uid, while it waits or runs there.
    pub fn gang_of(&self, uid: &str) -> Option<GangId> {
        self.table.get(uid).and_then(|t| t.gang.id())
    }

    /// The `namespace/name` of the TrainJob an engine gang stands for.
    pub fn key_of_gang(&self, id: GangId) -> Option<&str> {
        self.by_id.get(&id).and_then(|uid| self.table.get(uid)).map(|t| t.key.as_str())
    }

    /// Whether a TrainJob's gang is held out of the engine until the TrainJob shows it stopped.
    pub fn is_stopping(&self, uid: &str) -> bool {
        self.stopping.contains(uid)
    }

    /// The uids of every tracked TrainJob.
    pub fn job_uids(&self) -> impl Iterator<Item = &str> + '_ {
        self.table.keys().map(String::as_str)
    }

    /// Runs one cycle at `now` and returns the decisions that changed since the last one, by
    /// `namespace/name` (a TrainJob that wants nothing any more has none).
    pub fn step(&mut self, now: u64) -> (BTreeMap<String, Option<Decision>>, CycleStats) {
        let now = now.max(self.last_now);
        self.last_now = now;
        let mut stats = CycleStats::default();
        // The cluster changed what could ever fit: refused gangs are looked at again, once a cycle.
        let generation = self.engine.cluster().generation();
        if generation != self.seen_generation {
            self.seen_generation = generation;
            self.retry_rejected(now);
        }
        self.release_stale_holds(now);
        match self.engine.schedule(now) {
            Ok(cycle) => self.take_cycle(cycle, now, &mut stats),
            Err(e) => {
                // An accounting error inside the engine: logged, and the gangs it had started
                // before it failed are found from the engine rather than lost.
                tracing::error!(error = %e, "scheduling cycle failed");
                self.recover_started(now);
            }
        }
        self.forget_reaped();
        let changed = self.engine.take_changed();
        for id in changed {
            if let Some(uid) = self.by_id.get(&id) {
                self.stale.insert(uid.clone());
            }
        }
        (self.settle(), stats)
    }

    /// Brings every TrainJob of a snapshot into the table (those missing leave), runs one cycle
    /// at `now`, and returns the decision on each TrainJob of the snapshot that has one.
    pub fn cycle(&mut self, jobs: &[JobEntry], now: u64) -> (BTreeMap<String, Decision>, CycleStats) {
        let now = now.max(self.last_now);
        let live: BTreeSet<&str> = jobs.iter().map(|j| j.uid.as_str()).collect();
        let gone: Vec<String> = self.table.keys().filter(|u| !live.contains(u.as_str())).cloned().collect();
        for uid in gone {
            self.remove(&uid, now);
        }
        for job in jobs {
            self.apply(job, now);
        }
        let (_, mut stats) = self.step(now);
        (stats.pending_by_queue, stats.pending_by_reason) = self.pending_counts();
        let out = jobs
            .iter()
            .filter_map(|j| self.table.get(&j.uid).and_then(|t| t.decision.clone()).map(|d| (j.key.clone(), d)))
            .collect();
        (out, stats)
    }

    /// Waiting TrainJobs by queue and by condition reason (walks the whole table).
    pub fn pending_counts(&self) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
        let (mut by_queue, mut by_reason) = (BTreeMap::new(), BTreeMap::new());
        for t in self.table.values() {
            if let (JobState::Waiting(intent), Some(Decision::Pending { reason, .. })) = (&t.state, &t.decision) {
                *by_queue.entry(intent.queue.clone()).or_default() += 1;
                *by_reason.entry(reason.clone()).or_default() += 1;
            }
        }
        (by_queue, by_reason)
    }

    /// Replaces the quota tree and settings in place; waiting TrainJobs the new tree refuses (their
    /// queue went) wait with the reason, and refused ones are looked at again.
    pub fn replace_policy(&mut self, policy: PolicyConfig, now: u64) -> Result<(), trainyard_policies::Error> {
        let dropped = self.engine.replace_policy(policy)?;
        for (id, why) in dropped {
            let Some(uid) = self.by_id.remove(&id) else { continue };
            let Some(JobState::Waiting(intent)) = self.table.get(&uid).map(|t| t.state.clone()) else { continue };
            let decision = codes::refusal_decision(&why, &intent, self.engine.cluster().topology());
            if let Some(row) = self.table.get_mut(&uid) {
                row.gang = table::Gang::Rejected { intent, decision };
            }
            self.refused.insert(uid.clone());
            self.stale.insert(uid);
        }
        self.retry_rejected(now);
        Ok(())
    }

    /// What the cluster view holds: eligible and unusable hosts, foreign usage, left-out nodes.
    pub fn hosts_report(&self) -> HostsReport {
        self.hosts.report(&self.engine)
    }
}
