//! TrainJobs in the live picture: each event becomes the TrainJob's entry (its intent rendered
//! once per resourceVersion), routed to the loop of the cluster its gang runs on. FIFO ties go
//! by the order trainyard first saw TrainJobs, recorded on them so that it survives restarts.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::Live;
use trainyard_bridges::search::trials::SIZE_ANNOTATION;

use crate::api::{QUEUE_LABEL, TrainJob};
use crate::controller::deciding::intent::IntentContext;
use crate::controller::deciding::scheduling_loop::{JobEntry, JobState};
use crate::controller::watching::scheduler_inputs::{IntentCache, arrival_of, created_s, job_entry};

/// The search a TrainJob is a trial of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrialOf {
    /// The OptimizationJob's name.
    pub search: String,
    /// Trials it runs in all, 0 when unknown.
    pub trials: u32,
    /// Trials it runs at once, 0 when unknown.
    pub parallel: u32,
}

/// The TrainJobs and what the loop was told about them.
#[derive(Debug, Default)]
pub(super) struct Jobs {
    objects: HashMap<String, Arc<TrainJob>>,
    entries: BTreeMap<String, JobEntry>,
    /// uid of each `namespace/name` (looked up only).
    by_key: HashMap<String, String>,
    intents: IntentCache,
    /// Arrival orders handed out to TrainJobs that carry none yet, by uid.
    arrivals: HashMap<String, u64>,
    next_arrival: u64,
    new_arrivals: Vec<(String, u64)>,
    /// Queue labels of the TrainJobs deleted since the last cycle began, by `namespace/name`,
    /// and of those deleted before it: the cycle's end events still name their queue.
    gone: HashMap<String, String>,
    gone_before: HashMap<String, String>,
}

impl Jobs {
    /// Takes the first list: arrival orders continue after the largest recorded one, and the
    /// TrainJobs that carry none get theirs in creation order.
    pub(super) fn start(&mut self, mut jobs: Vec<Arc<TrainJob>>) {
        self.next_arrival = jobs.iter().filter_map(|j| arrival_of(j)).max().map_or(0, |m| m.saturating_add(1));
        jobs.sort_by_key(|j| (created_s(j), arrival_of(j).unwrap_or(u64::MAX), j.metadata.name.clone()));
        for job in jobs {
            let uid = job.metadata.uid.clone().unwrap_or_default();
            self.order(&job);
            self.objects.insert(uid, job);
        }
    }

    /// The tie-breaking order of a TrainJob: recorded, or handed out now.
    fn order(&mut self, job: &TrainJob) -> u64 {
        if let Some(n) = arrival_of(job) {
            return n;
        }
        let uid = job.metadata.uid.clone().unwrap_or_default();
        if let Some(&n) = self.arrivals.get(&uid) {
            return n;
        }
        let n = self.next_arrival;
        self.next_arrival = self.next_arrival.saturating_add(1);
        self.arrivals.insert(uid.clone(), n);
        self.new_arrivals.push((uid, n));
        n
    }

    pub(super) fn uid_of(&self, key: &str) -> Option<&str> {
        self.by_key.get(key).map(String::as_str)
    }

    pub(super) fn entry(&self, uid: &str) -> Option<&JobEntry> {
        self.entries.get(uid)
    }

    pub(super) fn uids(&self) -> Vec<String> {
        self.objects.keys().cloned().collect()
    }

    pub(super) fn entries(&self) -> impl Iterator<Item = &JobEntry> + '_ {
        self.entries.values()
    }

    pub(super) fn slurm_entries(&self) -> Vec<JobEntry> {
        self.entries.values().filter(|e| side(e) != Some(false)).cloned().collect()
    }

    pub(super) fn take_new_arrivals(&mut self) -> Vec<(String, u64)> {
        std::mem::take(&mut self.new_arrivals)
    }

    /// The queue a TrainJob's label names, by `namespace/name`, also for one deleted up to a
    /// cycle ago.
    pub(super) fn queue_label(&self, key: &str) -> Option<&str> {
        let job = self.uid_of(key).and_then(|uid| self.objects.get(uid));
        match job {
            Some(job) => job.metadata.labels.as_ref()?.get(QUEUE_LABEL).map(String::as_str),
            None => self.gone.get(key).or_else(|| self.gone_before.get(key)).map(String::as_str),
        }
    }

    /// The hyperparameter search a TrainJob is a trial of, by `namespace/name`: the
    /// OptimizationJob owning it (whoever made it), with the trials that search runs in all and
    /// at once when the trial says (trainyard's own trials do).
    pub(super) fn search_of(&self, key: &str) -> Option<TrialOf> {
        let job = self.uid_of(key).and_then(|uid| self.objects.get(uid))?;
        let owner = job.metadata.owner_references.iter().flatten().find(|o| o.kind == "OptimizationJob")?;
        let size = job.metadata.annotations.as_ref().and_then(|a| a.get(SIZE_ANNOTATION));
        let (trials, parallel) = size
            .and_then(|s| s.split_once('/'))
            .and_then(|(t, p)| Some((t.parse().ok()?, p.parse().ok()?)))
            .unwrap_or((0, 0));
        Some(TrialOf { search: owner.name.clone(), trials, parallel })
    }

    /// A cycle begins: labels of TrainJobs deleted before the last one are no longer asked for.
    pub(super) fn age_gone(&mut self) {
        self.gone_before = std::mem::take(&mut self.gone);
    }
}

/// Whether an entry's gang is on Slurm (`None`: it wants nothing, both loops may drop it).
fn side(e: &JobEntry) -> Option<bool> {
    match &e.state {
        JobState::Waiting(i) => Some(i.slurm.is_some()),
        // An admitted gang stays with the loop that placed it, whatever its queue says now.
        JobState::Admitted(_, record) => Some(record.slurm),
        JobState::Kept | JobState::Inactive => None,
    }
}

impl Live {
    pub(super) fn apply_job(&mut self, job: Arc<TrainJob>, now: u64) {
        let uid = job.metadata.uid.clone().unwrap_or_default();
        self.jobs.order(&job);
        self.jobs.objects.insert(uid.clone(), job);
        self.refresh_entry(&uid, now);
    }

    pub(super) fn delete_job(&mut self, uid: &str, now: u64) {
        if let Some(job) = self.jobs.objects.remove(uid)
            && let Some(queue) = job.metadata.labels.as_ref().and_then(|l| l.get(QUEUE_LABEL))
        {
            self.jobs.gone.insert(job.key(), queue.clone());
        }
        self.jobs.arrivals.remove(uid);
        if let Some(entry) = self.jobs.entries.remove(uid) {
            self.k8s.remove(uid, now);
            if self.jobs.by_key.get(&entry.key).is_some_and(|u| u == uid) {
                self.jobs.by_key.remove(&entry.key);
            }
            self.publish(&entry.key, None);
        }
        self.jobs.intents.forget(uid);
    }

    /// Every TrainJob's entry again (the runtimes or the policy changed).
    pub(super) fn apply_all_jobs(&mut self, now: u64) {
        let mut uids: Vec<(u64, u64, String)> = self
            .jobs
            .objects
            .iter()
            .map(|(uid, j)| {
                (created_s(j), arrival_of(j).or(self.jobs.arrivals.get(uid).copied()).unwrap_or(0), uid.clone())
            })
            .collect();
        // Submitted in FIFO order, so that the engine's own arrival order agrees.
        uids.sort();
        for (_, _, uid) in uids {
            self.refresh_entry(&uid, now);
        }
    }

    fn refresh_entry(&mut self, uid: &str, now: u64) {
        let Some(job) = self.jobs.objects.get(uid).cloned() else { return };
        let slurm_queues = self.slurm_queues();
        let ctx = IntentContext {
            policy: &self.policy,
            gpu_resource: &self.levels.gpu_resource,
            slurm_queues: &slurm_queues,
            slurm_configured: self.settings.slurm_configured,
            binders: self.settings.binders,
            fleet: self.settings.mode == crate::controller::deciding::plan::Mode::Manager,
        };
        let inputs = self.intent_inputs();
        let intent = self.jobs.intents.intent(&job, &self.runtimes, &ctx, inputs);
        let order = self.jobs.order(&job);
        let entry = job_entry(&job, &intent, self.settings.mode, order);
        // A TrainJob whose gang is held until it shows it stopped is looked at on each event.
        if self.jobs.entries.get(uid) == Some(&entry) && !self.k8s.is_stopping(uid) {
            return;
        }
        if side(&entry) == Some(true) {
            // The Slurm loop takes its whole list each cycle; this loop lets it go.
            self.k8s.remove(uid, now);
        } else {
            self.k8s.apply(&entry, now);
        }
        self.jobs.by_key.insert(entry.key.clone(), uid.to_string());
        self.jobs.entries.insert(uid.to_string(), entry);
    }
}
