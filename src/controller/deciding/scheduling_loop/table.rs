//! The table of tracked TrainJobs: one row per uid with what the engine holds for it and the last
//! decision, brought into agreement with each TrainJob as it changes and with each cycle.

use trainyard_policies::{Cycle, GangId, GangRequest, Submitted};
use trainyard_topology::{GangShape, HostId, TopologyRequest};

use super::codes::{moved_record, pending_message, reason_code, record_of, refusal_decision};
use super::{CycleStats, Decision, JobEntry, JobState, SchedulingLoop};
use crate::controller::acting::admission_record::AdmissionRecord;
use crate::controller::deciding::intent::GangIntent;

/// What the engine holds for a TrainJob.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Gang {
    /// Nothing.
    None,
    /// Waiting in the engine with the intent it was submitted with.
    Pending { id: GangId, intent: GangIntent },
    /// Running in the engine. `decided` is a record the object does not carry yet (a new
    /// admission, or a move off lost nodes when `moved`).
    Running { id: GangId, decided: Option<AdmissionRecord>, moved: bool },
    /// Taken off its hosts while the object still has its record and its pods may still run:
    /// out of the engine until the object shows it stopped, then queued again in its old place.
    Stopping { decision: Decision, since: u64 },
    /// Refused by the engine for this intent; looked at again when the TrainJob, the cluster or
    /// the quotas change.
    Rejected { intent: GangIntent, decision: Decision },
    /// Admitted on hosts the cluster does not have (any more): it runs where it is, uncharged.
    Unplaced,
}

/// One row.
#[derive(Clone, Debug)]
pub(super) struct Tracked {
    pub(super) uid: String,
    pub(super) key: String,
    pub(super) state: JobState,
    pub(super) created: u64,
    pub(super) order: u64,
    pub(super) gang: Gang,
    /// The last decision reported.
    pub(super) decision: Option<Decision>,
}

impl Gang {
    pub(super) fn id(&self) -> Option<GangId> {
        match self {
            Gang::Pending { id, .. } | Gang::Running { id, .. } => Some(*id),
            Gang::None | Gang::Stopping { .. } | Gang::Rejected { .. } | Gang::Unplaced => None,
        }
    }
}

impl SchedulingLoop {
    /// Brings one TrainJob and the engine into agreement at `now`.
    pub fn apply(&mut self, job: &JobEntry, now: u64) {
        if job.state == JobState::Inactive && !self.table.contains_key(&job.uid) {
            return;
        }
        let row = self.table.entry(job.uid.clone()).or_insert_with(|| Tracked {
            uid: job.uid.clone(),
            key: job.key.clone(),
            state: JobState::Inactive,
            created: job.created,
            order: job.order,
            gang: Gang::None,
            decision: None,
        });
        // A stopped gang waits for its TrainJob to show it stopped: any event of it may be that.
        let stopping = matches!(row.gang, Gang::Stopping { .. });
        if !stopping
            && row.state == job.state
            && row.key == job.key
            && row.created == job.created
            && row.order == job.order
        {
            return;
        }
        (row.key, row.created, row.order, row.state) = (job.key.clone(), job.created, job.order, job.state.clone());
        self.by_key.insert(job.key.clone(), job.uid.clone());
        self.sync(&job.uid, now);
        self.stale.insert(job.uid.clone());
    }

    /// A TrainJob is gone: its gang leaves the engine (its pods still charge their nodes until
    /// they are gone).
    pub fn remove(&mut self, uid: &str, now: u64) {
        self.refused.remove(uid);
        self.stopping.remove(uid);
        let Some(row) = self.table.remove(uid) else { return };
        if self.by_key.get(&row.key).is_some_and(|u| u == uid) {
            self.by_key.remove(&row.key);
        }
        self.release(&row.key, &row.gang, now);
    }

    /// Takes a gang out of the engine, whatever state it is in there.
    fn release(&mut self, key: &str, gang: &Gang, now: u64) {
        let Some(id) = gang.id() else { return };
        self.by_id.remove(&id);
        let was_running = matches!(gang, Gang::Running { .. });
        if self.engine.finish(id, now).is_err() {
            let _ = self.engine.cancel_pending(id);
        }
        if was_running {
            self.reclassify(key);
        }
    }

    fn set_gang(&mut self, uid: &str, gang: Gang) {
        if matches!(gang, Gang::Rejected { .. } | Gang::Unplaced) {
            self.refused.insert(uid.to_string());
        } else {
            self.refused.remove(uid);
        }
        if matches!(gang, Gang::Stopping { .. }) {
            self.stopping.insert(uid.to_string());
        } else {
            self.stopping.remove(uid);
        }
        let key = match self.table.get_mut(uid) {
            Some(row) => {
                let running = |g: &Gang| matches!(g, Gang::Running { .. });
                let (before, after) = (running(&row.gang), running(&gang));
                row.gang = gang;
                (before != after).then(|| row.key.clone())
            }
            None => None,
        };
        if let Some(key) = key {
            self.reclassify(&key);
        }
        self.stale.insert(uid.to_string());
    }

    fn sync(&mut self, uid: &str, now: u64) {
        let Some(row) = self.table.get(uid) else { return };
        let (state, gang, key) = (row.state.clone(), row.gang.clone(), row.key.clone());
        match (&state, &gang) {
            (JobState::Inactive, g) | (JobState::Kept, g @ (Gang::Pending { .. } | Gang::Rejected { .. })) => {
                self.release(&key, g, now);
                self.set_gang(uid, Gang::None);
            }
            (JobState::Kept, _) => {}
            (JobState::Waiting(intent), Gang::Rejected { intent: refused, .. }) if intent == refused => {}
            (JobState::Waiting(intent), Gang::None | Gang::Rejected { .. } | Gang::Unplaced) => {
                self.submit(uid, intent.clone())
            }
            (JobState::Waiting(_), Gang::Running { decided: Some(_), moved: false, .. }) => {}
            // The preemption or requeue was carried out: queue it again (same submit time and
            // order, so the same place).
            (JobState::Waiting(intent), Gang::Stopping { .. }) => self.submit(uid, intent.clone()),
            // Its record was removed by hand while it ran: release its place and queue it again.
            (JobState::Waiting(intent), g @ Gang::Running { .. }) => {
                self.release(&key, g, now);
                self.submit(uid, intent.clone());
            }
            // Edited while waiting (queue, priority, size, topology): queue it again as it is now.
            (JobState::Waiting(intent), g @ Gang::Pending { intent: was, .. }) if was != intent => {
                self.release(&key, g, now);
                self.submit(uid, intent.clone());
            }
            (JobState::Waiting(_), Gang::Pending { .. }) => {}
            (JobState::Admitted(intent, record), Gang::None | Gang::Rejected { .. }) => {
                self.adopt(uid, intent.clone(), record, now)
            }
            (JobState::Admitted(..), Gang::Stopping { .. }) => {}
            (JobState::Admitted(_, record), Gang::Running { id, decided: Some(decided), moved })
                if decided == record =>
            {
                let _ = moved;
                self.set_gang(uid, Gang::Running { id: *id, decided: None, moved: false })
            }
            // A move not written yet: the object still shows the old hosts.
            (JobState::Admitted(..), Gang::Running { moved: true, .. }) => {}
            // The object carries another admission than the one just decided (an older one that
            // is running): the pods are where the record says, so charge those hosts.
            (JobState::Admitted(intent, record), g @ Gang::Running { decided: Some(_), .. })
            | (JobState::Admitted(intent, record), g @ Gang::Pending { .. }) => {
                self.release(&key, g, now);
                self.adopt(uid, intent.clone(), record, now);
            }
            (JobState::Admitted(..), Gang::Running { decided: None, .. } | Gang::Unplaced) => {}
        }
    }

    fn request(&mut self, uid: &str, intent: &GangIntent) -> GangRequest {
        let row = &self.table[uid];
        let id = GangId(self.next_id);
        self.next_id += 1;
        GangRequest {
            id,
            queue: intent.queue.clone(),
            priority: intent.priority,
            submit: row.created,
            shape: if self.node_slots {
                crate::controller::slurm::cluster_view::node_slot_shape(&intent.shape)
            } else {
                intent.shape.clone()
            },
            runtime_estimate: intent.runtime_estimate,
            hosts: intent.hosts.clone(),
            order: row.order,
        }
    }

    fn submit(&mut self, uid: &str, intent: GangIntent) {
        let request = self.request(uid, &intent);
        let id = request.id;
        match self.engine.submit(request) {
            Ok(Submitted::Queued) => {
                self.by_id.insert(id, uid.to_string());
                self.set_gang(uid, Gang::Pending { id, intent });
            }
            Ok(Submitted::Unschedulable(why)) => {
                let decision = refusal_decision(&why, &intent, self.engine.cluster().topology());
                self.set_gang(uid, Gang::Rejected { intent, decision });
            }
            Err(e) => {
                let decision = Decision::Pending { reason: "SchedulerError".into(), message: e.to_string() };
                self.set_gang(uid, Gang::Rejected { intent, decision });
            }
        }
    }

    fn adopt(&mut self, uid: &str, intent: GangIntent, record: &AdmissionRecord, now: u64) {
        // Ids the engine freed may be handed out to stand-ins below: forget their names first.
        self.forget_reaped();
        let mut request = self.request(uid, &intent);
        // A record written when the gang had other pod sets (before an MPI launcher joined its
        // gang, say) holds the pods it placed then: they are what runs, so they are what is
        // charged, each at the gang's largest pod.
        if record.pods() != request.shape.pods() {
            let shape = &request.shape;
            request.shape = GangShape::single(record.pods(), shape.largest_pod(), shape.topology.clone());
        }
        // A node the record names that is gone (deleted while trainyard was down) is held as a
        // removed host: its gang stays charged there, as it would have been without the restart.
        let mut stand_ins = Vec::new();
        let mut hosts = Vec::with_capacity(record.pods() as usize);
        for (name, pods) in &record.nodes {
            let host = match self.hosts.host_named(name) {
                Some(h) => h,
                None => match self.stand_in(name, request.shape.largest_pod().checked_mul(u64::from(*pods)), now) {
                    Some(h) => {
                        stand_ins.push(h);
                        h
                    }
                    None => {
                        for h in stand_ins {
                            self.drop_stand_in(h, now);
                        }
                        self.set_gang(uid, Gang::Unplaced);
                        return;
                    }
                },
            };
            hosts.extend(std::iter::repeat_n(host, *pods as usize));
        }
        let id = request.id;
        let devices = recorded_devices(record);
        let adopted = matches!(
            self.engine.adopt_with_devices(request, hosts, devices, record.at.min(now), now),
            Ok(Submitted::Queued)
        );
        for h in stand_ins {
            self.drop_stand_in(h, now);
        }
        self.forget_reaped();
        if adopted {
            self.by_id.insert(id, uid.to_string());
            self.set_gang(uid, Gang::Running { id, decided: None, moved: false });
        } else {
            self.set_gang(uid, Gang::Unplaced);
        }
    }

    /// Takes in what a cycle did: preemptions, admissions, requeues and moves.
    pub(super) fn take_cycle(&mut self, cycle: Cycle, now: u64, stats: &mut CycleStats) {
        stats.ran = !cycle.admitted.is_empty() || !cycle.preempted.is_empty() || self.engine.cycle_ran();
        for p in &cycle.preempted {
            let by = self.by_id.get(&p.by).and_then(|u| self.table.get(u)).map(|t| t.key.clone()).unwrap_or_default();
            self.hold(p.victim, Decision::Preempt { by }, now);
            stats.preempted += 1;
        }
        for lost in &cycle.requeued {
            let names: Vec<String> = lost.hosts.iter().map(|&h| self.hosts.node_of(h, &self.engine)).collect();
            let message = format!("requeued: node(s) {} under it were lost", names.join(", "));
            self.hold(lost.gang, Decision::Requeue { reason: "NodeLost".into(), message }, now);
            stats.node_losses += 1;
        }
        for (id, why) in &cycle.rejected {
            let Some(uid) = self.by_id.remove(id) else { continue };
            let Some(JobState::Waiting(intent)) = self.table.get(&uid).map(|t| t.state.clone()) else { continue };
            let decision = refusal_decision(why, &intent, self.engine.cluster().topology());
            self.set_gang(&uid, Gang::Rejected { intent, decision });
        }
        for a in &cycle.admitted {
            let Some(uid) = self.by_id.get(&a.id).cloned() else { continue };
            let record = self.record(&uid, &a.placement, now);
            stats.admitted += 1;
            stats.costs.push(record.cost);
            self.set_gang(&uid, Gang::Running { id: a.id, decided: Some(record), moved: false });
        }
        for r in &cycle.replaced {
            let Some(uid) = self.by_id.get(&r.gang).cloned() else { continue };
            let Some((state, gang)) = self.table.get(&uid).map(|t| (t.state.clone(), t.gang.clone())) else { continue };
            let lost = self.hosts.name_of(r.lost, &self.engine);
            let gang = match (state, gang) {
                // Its admission is not written yet: admit it on the new hosts instead.
                (JobState::Waiting(_), _) => {
                    let record = self.record(&uid, &r.placement, now);
                    Gang::Running { id: r.gang, decided: Some(record), moved: false }
                }
                // An earlier move is not written yet: move on from it.
                (_, Gang::Running { decided: Some(d), moved: true, .. }) => {
                    Gang::Running { id: r.gang, decided: Some(moved_record(&self.engine, &d, r, lost)), moved: true }
                }
                (JobState::Admitted(_, old), _) => {
                    Gang::Running { id: r.gang, decided: Some(moved_record(&self.engine, &old, r, lost)), moved: true }
                }
                _ => continue,
            };
            stats.node_losses += 1;
            self.set_gang(&uid, gang);
            // Its pods on the lost host now charge that host until they are gone.
            let key = self.table[&uid].key.clone();
            self.reclassify(&key);
        }
    }

    /// Holds a gang the engine stopped (and queued again) out of the engine until its TrainJob
    /// shows it stopped: its pods may run until then, and admitting it again meanwhile would put a
    /// second copy beside them.
    fn hold(&mut self, id: GangId, decision: Decision, now: u64) {
        let Some(uid) = self.by_id.remove(&id) else { return };
        let _ = self.engine.cancel_pending(id);
        self.set_gang(&uid, Gang::Stopping { decision, since: now });
    }

    /// A stopped gang whose TrainJob never carried its admission (it was stopped before the
    /// record was written) has nothing to stop; once a write in flight would have landed, it is
    /// queued again in its old place.
    pub(super) fn release_stale_holds(&mut self, now: u64) {
        const LANDED_S: u64 = 10;
        let due: Vec<(String, GangIntent)> = self
            .stopping
            .iter()
            .filter_map(|uid| self.table.get(uid))
            .filter_map(|t| match (&t.state, &t.gang) {
                (JobState::Waiting(intent), Gang::Stopping { since, .. }) if since + LANDED_S <= now => {
                    Some((t.uid.clone(), intent.clone()))
                }
                _ => None,
            })
            .collect();
        for (uid, intent) in due {
            self.submit(&uid, intent);
        }
    }

    /// The level whose domain becomes the pods' node selector, for a domain-mode gang.
    fn domain_level(&self, uid: &str) -> Option<String> {
        let row = self.table.get(uid)?;
        let (JobState::Waiting(intent) | JobState::Admitted(intent, _)) = &row.state else { return None };
        match (&intent.shape.topology, intent.domain_mode) {
            (TopologyRequest::Required(level), true) => Some(level.clone()),
            _ => None,
        }
    }

    /// The record of `placement` for the gang of `uid` at `now`: its pods' hosts in the order its
    /// pods are counted, its domain's selector in domain mode.
    fn record(
        &self,
        uid: &str,
        placement: &trainyard_topology::Placement,
        now: u64,
    ) -> crate::controller::acting::admission_record::AdmissionRecord {
        let level = self.domain_level(uid);
        let sliced: Vec<bool> = match self.table.get(uid).map(|row| &row.state) {
            Some(JobState::Waiting(intent) | JobState::Admitted(intent, _)) => {
                intent.shape.sets.iter().map(|s| s.slice.is_some()).collect()
            }
            _ => Vec::new(),
        };
        record_of(&self.engine, level.as_deref(), placement, &sliced, now, self.node_slots)
    }

    /// Looks again at the decision of every stale row and returns the ones that changed.
    pub(super) fn settle(&mut self) -> std::collections::BTreeMap<String, Option<Decision>> {
        let stale = std::mem::take(&mut self.stale);
        let mut out = std::collections::BTreeMap::new();
        for uid in stale {
            let Some(decision) = self.table.get(&uid).map(|row| self.decide(row)) else { continue };
            let row = self.table.get_mut(&uid).expect("looked up above");
            if row.decision != decision {
                row.decision = decision.clone();
                out.insert(row.key.clone(), decision);
            }
            if matches!(row.state, JobState::Inactive) && matches!(row.gang, Gang::None) {
                let key = row.key.clone();
                self.table.remove(&uid);
                if self.by_key.get(&key).is_some_and(|u| *u == uid) {
                    self.by_key.remove(&key);
                }
            }
        }
        out
    }

    fn decide(&self, row: &Tracked) -> Option<Decision> {
        match (&row.state, &row.gang) {
            (JobState::Inactive, _) => None,
            (JobState::Kept, Gang::Running { .. } | Gang::Unplaced) => Some(Decision::Running),
            (JobState::Kept, _) => None,
            (_, Gang::Rejected { decision, .. } | Gang::Stopping { decision, .. }) => Some(decision.clone()),
            (_, Gang::Pending { id, .. }) => {
                let status = self.engine.pending_status(*id)?;
                if status.reason == trainyard_policies::PendingReason::NotYetScheduled {
                    // The next cycle gives it a reason; saying "not yet" would only flap.
                    return row.decision.clone();
                }
                let name = |g: GangId| {
                    self.by_id.get(&g).and_then(|u| self.table.get(u)).map_or_else(|| g.to_string(), |t| t.key.clone())
                };
                let message = pending_message(&status.reason, &name);
                Some(Decision::Pending { reason: reason_code(&status.reason), message })
            }
            (JobState::Waiting(_), Gang::Running { decided: Some(record), .. }) => {
                Some(Decision::Admit(record.clone()))
            }
            (_, Gang::Running { decided: Some(record), moved: true, .. }) => Some(Decision::Move(record.clone())),
            (_, Gang::Running { id, .. }) => Some(self.degraded(*id).unwrap_or(Decision::Running)),
            (_, Gang::Unplaced) => Some(Decision::Running),
            (_, Gang::None) => None,
        }
    }

    /// The lost nodes of a running gang, as a decision.
    fn degraded(&self, id: GangId) -> Option<Decision> {
        let lost = self.engine.lost_hosts(id);
        if lost.is_empty() {
            return None;
        }
        let mut named: Vec<(String, String)> = lost
            .iter()
            .map(|&(h, _)| (self.hosts.node_of(h, &self.engine), self.hosts.why_lost(h, &self.engine)))
            .collect();
        named.sort();
        let (nodes, why): (Vec<String>, Vec<String>) = named.into_iter().unzip();
        Some(Decision::Degraded { nodes, message: format!("lost node(s): {}", why.join("; ")) })
    }

    /// After a failed cycle: waiting rows whose gang the engine started before it failed are
    /// admitted where it started them (their admission is written like any other).
    pub(super) fn recover_started(&mut self, now: u64) {
        let started: Vec<(String, GangId)> = self
            .table
            .values()
            .filter_map(|t| match &t.gang {
                Gang::Pending { id, .. } if self.engine.running_placement(*id).is_some() => Some((t.uid.clone(), *id)),
                _ => None,
            })
            .collect();
        for (uid, id) in started {
            let Some(placement) = self.engine.running_placement(id).cloned() else { continue };
            let record = self.record(&uid, &placement, now);
            self.set_gang(&uid, Gang::Running { id, decided: Some(record), moved: false });
        }
    }

    /// Waiting gangs the engine refused are looked at again (the cluster or the quotas changed).
    pub fn retry_rejected(&mut self, now: u64) {
        let refused: Vec<String> = self.refused.iter().cloned().collect();
        for uid in refused {
            match self.table.get(&uid).map(|t| (t.state.clone(), t.gang.clone())) {
                Some((JobState::Waiting(intent), Gang::Rejected { .. })) => self.submit(&uid, intent),
                Some((JobState::Admitted(intent, record), Gang::Unplaced)) => self.adopt(&uid, intent, &record, now),
                _ => {}
            }
        }
    }

    /// How many pods of the running gang of `key` each host holds for it (`None`: it is not
    /// running; an empty map with `true`: a domain-mode gang, whose hosts kube-scheduler picks
    /// inside its domain, holds whatever its pods take).
    pub(super) fn own_slots(&self, key: &str) -> Option<(std::collections::HashMap<HostId, u32>, bool)> {
        let row = self.by_key.get(key).and_then(|u| self.table.get(u))?;
        let Gang::Running { id, .. } = &row.gang else { return None };
        if self.domain_level(&row.uid).is_some() {
            return Some((std::collections::HashMap::new(), true));
        }
        let placement = self.engine.running_placement(*id)?;
        Some((placement.per_host().into_iter().collect(), false))
    }
}

/// The devices a record gives its pods, one entry per pod (or none when it records none).
fn recorded_devices(record: &AdmissionRecord) -> Vec<Option<trainyard_topology::devices::PodAllocation>> {
    use trainyard_topology::devices::allocate::ClaimResult;
    use trainyard_topology::devices::{DeviceId, DeviceResult, PodAllocation};
    if record.devices.is_empty() {
        return Vec::new();
    }
    let slots = record.slots();
    let mut out = vec![None; slots.len()];
    for pod in &record.devices {
        let Some(entry) = out.get_mut(pod.slot as usize) else { continue };
        let claims = pod
            .claims
            .iter()
            .map(|(claim, results)| ClaimResult {
                claim: claim.clone(),
                results: results
                    .iter()
                    .map(|[request, driver, pool, device]| DeviceResult {
                        request: request.clone(),
                        device: DeviceId::new(driver, pool, device),
                    })
                    .collect(),
            })
            .collect();
        *entry = Some(PodAllocation { node: slots[pod.slot as usize].to_string(), claims });
    }
    out
}
