//! The one scheduling loop: feeds the engine the TrainJobs of a cache snapshot and reads back decisions.
//!
//! The engine keeps its state between cycles (fair-share history, running gangs). Each cycle
//! reconciles it with the snapshot first: gangs that left (deleted, finished, suspended) are
//! finished or withdrawn, new ones are submitted, and gangs admitted by an earlier process (found
//! through their admission record) are adopted on their recorded hosts. Nothing here does I/O.

use std::collections::{BTreeMap, HashMap};

use trainyard_policies::{Engine, GangId, GangRequest, PolicyConfig, Submitted};
use trainyard_topology::{Cluster, HostId};

use super::admission::AdmissionRecord;
use super::intent::GangIntent;

/// A TrainJob as the loop sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct JobEntry {
    /// `namespace/name`.
    pub key: String,
    /// Object uid: a TrainJob deleted and created again is a new gang.
    pub uid: String,
    /// Creation time, seconds since the epoch (the submit time; ties keep arrival order).
    pub created: u64,
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
    /// Start it here (also repeated until the record is on the object).
    Admit(AdmissionRecord),
    /// Still admitted; nothing to change.
    Running,
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
}

#[derive(Clone, Debug)]
enum Tracked {
    Pending,
    /// Running in the engine; `decided` is the record to write when the object has none yet.
    Running {
        decided: Option<AdmissionRecord>,
    },
    /// Preempted in the engine (pending again) while the object still carries its old record.
    Preempted {
        by: String,
    },
}

/// Admission counts of one cycle, for metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CycleStats {
    /// Gangs admitted.
    pub admitted: u64,
    /// Gangs preempted.
    pub preempted: u64,
    /// Placement cost of each admission.
    pub costs: Vec<u64>,
    /// Pending gangs per queue after the cycle.
    pub pending_by_queue: BTreeMap<String, u64>,
}

/// The scheduling loop's state.
#[derive(Debug)]
pub struct SchedulingLoop {
    engine: Engine,
    hosts: HashMap<String, HostId>,
    ids: BTreeMap<String, (GangId, Tracked)>,
    /// uid and `namespace/name` of each gang.
    keys: BTreeMap<GangId, (String, String)>,
    /// Gangs the engine refused, with the intent refused: a changed TrainJob is looked at again.
    rejected: BTreeMap<String, (GangIntent, Decision)>,
    /// The intent each pending gang was submitted with.
    submitted: BTreeMap<GangId, GangIntent>,
    /// Gangs whose pods get a domain node selector: the required level.
    domain_level: BTreeMap<GangId, String>,
    next_id: u64,
    last_now: u64,
    /// Charges each pod a node slot (the Slurm loop; see [`super::slurm_side`]).
    node_slots: bool,
}

impl SchedulingLoop {
    /// A loop over `cluster` under `policy`; a policy that does not fit the cluster (a quota in
    /// topology units of a level it lacks, a flavor no node has) is an error.
    pub fn new(cluster: Cluster, policy: PolicyConfig) -> Result<SchedulingLoop, trainyard_policies::Error> {
        let topo = cluster.topology();
        let hosts = topo.hosts().map(|h| (topo.host_name(h).to_string(), h)).collect();
        Ok(SchedulingLoop {
            engine: Engine::try_new(cluster, policy)?,
            hosts,
            ids: BTreeMap::new(),
            keys: BTreeMap::new(),
            rejected: BTreeMap::new(),
            submitted: BTreeMap::new(),
            domain_level: BTreeMap::new(),
            next_id: 0,
            last_now: 0,
            node_slots: false,
        })
    }

    /// The loop of a Slurm cluster: one pod per node, on a cluster from
    /// [`super::slurm_side::slurm_cluster`].
    pub fn with_node_slots(mut self) -> SchedulingLoop {
        self.node_slots = true;
        self
    }

    /// The engine, for status reporting.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Runs one cycle at `now` (seconds; never earlier than the last call's) over every TrainJob
    /// of the snapshot, and returns a decision for each one that is not inactive.
    pub fn cycle(&mut self, jobs: &[JobEntry], now: u64) -> (BTreeMap<String, Decision>, CycleStats) {
        let now = now.max(self.last_now);
        self.last_now = now;
        let mut out = BTreeMap::new();
        let live: BTreeMap<&str, &JobEntry> = jobs.iter().map(|j| (j.uid.as_str(), j)).collect();
        self.withdraw_gone(&live, now);
        self.rejected.retain(|uid, (refused, _)| {
            live.get(uid.as_str()).is_some_and(|j| matches!(&j.state, JobState::Waiting(i) if i == refused))
        });
        for job in jobs {
            if let Some(decision) = self.sync(job, now) {
                out.insert(job.key.clone(), decision);
            }
        }
        let mut stats = CycleStats::default();
        match self.engine.schedule(now) {
            Ok(cycle) => {
                for p in &cycle.preempted {
                    let by = self.keys.get(&p.by).map(|(_, key)| key.clone()).unwrap_or_default();
                    if let Some((_, key)) = self.keys.get(&p.victim).cloned() {
                        self.set_tracked(p.victim, Tracked::Preempted { by: by.clone() });
                        out.insert(key, Decision::Preempt { by });
                        stats.preempted += 1;
                    }
                }
                for a in &cycle.admitted {
                    let record = self.record(a.id, &a.placement, now);
                    stats.admitted += 1;
                    stats.costs.push(record.cost);
                    self.set_tracked(a.id, Tracked::Running { decided: Some(record.clone()) });
                    if let Some((_, key)) = self.keys.get(&a.id) {
                        out.insert(key.clone(), Decision::Admit(record));
                    }
                }
            }
            Err(e) => {
                // An accounting error inside the engine: report it on every waiting gang rather than crash.
                for job in jobs.iter().filter(|j| matches!(j.state, JobState::Waiting(_))) {
                    let message = format!("scheduler error: {e}");
                    out.insert(job.key.clone(), Decision::Pending { reason: "SchedulerError".into(), message });
                }
                return (out, stats);
            }
        }
        for job in jobs {
            let Some((id, Tracked::Pending)) = self.ids.get(&job.uid) else { continue };
            if let Some(status) = self.engine.pending_status(*id) {
                let reason = reason_code(&status.reason);
                out.insert(job.key.clone(), Decision::Pending { reason, message: status.reason.to_string() });
            }
            if let JobState::Waiting(intent) = &job.state {
                *stats.pending_by_queue.entry(intent.queue.clone()).or_default() += 1;
            }
        }
        (out, stats)
    }

    /// Finishes or withdraws the gangs whose TrainJob is gone or no longer wants to run.
    fn withdraw_gone(&mut self, live: &BTreeMap<&str, &JobEntry>, now: u64) {
        let gone: Vec<String> = self
            .ids
            .keys()
            .filter(|uid| live.get(uid.as_str()).is_none_or(|j| j.state == JobState::Inactive))
            .cloned()
            .collect();
        for uid in gone {
            let Some((id, _)) = self.ids.remove(&uid) else { continue };
            self.keys.remove(&id);
            self.domain_level.remove(&id);
            self.submitted.remove(&id);
            // Either call may find the gang in the other state; the one that matches releases it.
            if self.engine.finish(id, now).is_err() {
                let _ = self.engine.cancel_pending(id);
            }
        }
    }

    /// Brings one TrainJob and the engine into agreement; a decision when it is settled here.
    fn sync(&mut self, job: &JobEntry, now: u64) -> Option<Decision> {
        match (&job.state, self.ids.get(&job.uid).map(|(id, t)| (*id, t.clone()))) {
            (JobState::Inactive, _) => None,
            (JobState::Kept, Some(_)) => Some(Decision::Running),
            (JobState::Kept, None) => None,
            (JobState::Waiting(_), _) if self.rejected.contains_key(&job.uid) => {
                self.rejected.get(&job.uid).map(|(_, d)| d.clone())
            }
            (JobState::Waiting(intent), None) => {
                let request = self.request(job, intent);
                match self.engine.submit(request) {
                    Ok(Submitted::Queued) => {
                        self.track(job, Tracked::Pending);
                        self.submitted.insert(GangId(self.next_id - 1), intent.clone());
                        None
                    }
                    Ok(Submitted::Unschedulable(why)) => {
                        self.next_id -= 1;
                        let d = Decision::Unschedulable { reason: unschedulable_code(&why), message: why.to_string() };
                        self.rejected.insert(job.uid.clone(), (intent.clone(), d.clone()));
                        Some(d)
                    }
                    Err(e) => {
                        self.next_id -= 1;
                        Some(Decision::Pending { reason: "SchedulerError".into(), message: e.to_string() })
                    }
                }
            }
            // The engine admitted it but the record has not reached the object yet: ask again.
            (JobState::Waiting(_), Some((_, Tracked::Running { decided: Some(record) }))) => {
                Some(Decision::Admit(record))
            }
            // The preemption was carried out: the engine already queued it again.
            (JobState::Waiting(_), Some((id, Tracked::Preempted { .. }))) => {
                self.set_tracked(id, Tracked::Pending);
                None
            }
            // Its record was removed by hand while it ran: release its place and queue it again.
            (JobState::Waiting(_), Some((id, Tracked::Running { decided: None }))) => {
                let _ = self.engine.finish(id, now);
                self.ids.remove(&job.uid);
                self.keys.remove(&id);
                self.sync(job, now)
            }
            // Edited while waiting (queue, priority, size, topology): queue it again as it is now.
            (JobState::Waiting(intent), Some((id, Tracked::Pending)))
                if self.submitted.get(&id).is_some_and(|was| was != intent) =>
            {
                let _ = self.engine.cancel_pending(id);
                self.ids.remove(&job.uid);
                self.keys.remove(&id);
                self.domain_level.remove(&id);
                self.submitted.remove(&id);
                self.sync(job, now)
            }
            (JobState::Waiting(_), Some((_, Tracked::Pending))) => None,
            (JobState::Admitted(intent, record), None) => {
                let hosts: Option<Vec<HostId>> =
                    record.slots().iter().map(|name| self.hosts.get(*name).copied()).collect();
                let request = self.request(job, intent);
                // A record naming a node that left the cluster still runs where it is; it is not
                // charged until it ends, which is the most the scheduler can know.
                let adopted = hosts.map(|h| self.engine.adopt(request, h, record.at.min(now)));
                if let Some(Ok(Submitted::Queued)) = adopted {
                    self.track(job, Tracked::Running { decided: None });
                } else {
                    self.next_id -= 1;
                }
                Some(Decision::Running)
            }
            (JobState::Admitted(..), Some((_, Tracked::Preempted { by }))) => Some(Decision::Preempt { by }),
            (JobState::Admitted(_, record), Some((id, Tracked::Running { decided: Some(decided) })))
                if decided != *record =>
            {
                // The object carries another admission than the one just decided (an older one
                // that is running): the pods are where the record says, so charge those hosts.
                let _ = self.engine.finish(id, now);
                self.ids.remove(&job.uid);
                self.keys.remove(&id);
                self.domain_level.remove(&id);
                self.sync(job, now)
            }
            (JobState::Admitted(..), Some((id, tracked))) => {
                if matches!(tracked, Tracked::Running { decided: Some(_) }) {
                    self.set_tracked(id, Tracked::Running { decided: None });
                }
                Some(Decision::Running)
            }
        }
    }

    fn request(&mut self, job: &JobEntry, intent: &GangIntent) -> GangRequest {
        let id = GangId(self.next_id);
        self.next_id += 1;
        GangRequest {
            id,
            queue: intent.queue.clone(),
            priority: intent.priority,
            submit: job.created,
            shape: if self.node_slots {
                super::slurm_side::node_slot_shape(&intent.shape)
            } else {
                intent.shape.clone()
            },
            runtime_estimate: None,
            hosts: Default::default(),
            order: 0,
        }
    }

    fn track(&mut self, job: &JobEntry, tracked: Tracked) {
        let id = GangId(self.next_id - 1);
        if let JobState::Waiting(intent) | JobState::Admitted(intent, _) = &job.state
            && intent.domain_mode
            && let trainyard_topology::TopologyRequest::Required(level) = &intent.shape.topology
        {
            self.domain_level.insert(id, level.clone());
        }
        self.ids.insert(job.uid.clone(), (id, tracked));
        self.keys.insert(id, (job.uid.clone(), job.key.clone()));
    }

    fn set_tracked(&mut self, id: GangId, tracked: Tracked) {
        if let Some((uid, _)) = self.keys.get(&id)
            && let Some(entry) = self.ids.get_mut(uid)
        {
            entry.1 = tracked;
        }
    }

    fn record(&self, id: GangId, placement: &trainyard_topology::Placement, now: u64) -> AdmissionRecord {
        let topo = self.engine.cluster().topology();
        let nodes = placement.per_host().into_iter().map(|(h, n)| (topo.host_name(h).to_string(), n)).collect();
        // Levels are named by their node label keys, so each enclosing domain is a selector term.
        let domain = self.domain_level.get(&id).and_then(|level| {
            let depth = topo.level_depth(level).ok()?;
            let host = topo.host_domain(*placement.hosts.first()?);
            let selector = (1..=depth)
                .map(|d| {
                    (topo.levels()[usize::from(d) - 1].clone(), topo.domain(topo.ancestor_at(host, d)).name.clone())
                })
                .collect();
            Some(selector)
        });
        AdmissionRecord { nodes, domain, at: now, cost: placement.cost, slurm: self.node_slots }
    }
}

/// A CamelCase condition reason for a pending reason.
fn reason_code(reason: &trainyard_policies::PendingReason) -> String {
    use trainyard_policies::PendingReason as R;
    match reason {
        R::NotYetScheduled => "NotYetScheduled",
        R::Quota { .. } => "QuotaExceeded",
        R::Capacity { .. } => "InsufficientCapacity",
        R::Topology { .. } => "TopologyUnavailable",
        R::Reservation { .. } => "WaitingForReservation",
        R::QueuedBehind { .. } => "QueuedBehind",
        R::Backoff { .. } => "Backoff",
        R::BadSlice { .. } => "BadSlice",
        R::NodeLost { .. } => "NodeLost",
    }
    .to_string()
}

/// A CamelCase condition reason for a gang that can never run.
fn unschedulable_code(why: &trainyard_policies::Unschedulable) -> String {
    use trainyard_policies::Unschedulable as U;
    match why {
        U::EmptyGang => "EmptyGang",
        U::UnknownLevel { .. } => "UnknownTopologyLevel",
        U::UnknownQueue { .. } => "UnknownQueue",
        U::ExceedsQuota { .. } => "ExceedsQuota",
        U::NeverFits(_) => "NeverFits",
    }
    .to_string()
}
