//! What the researcher API reads, answered from the live picture between two cycles: one
//! TrainJob, a filtered list, why one waits, when it will start, and the queues. Pure: the
//! scheduling task calls [`answer`] with its own state, so every answer agrees with the last
//! cycle and nothing is copied for callers that never ask.

use std::collections::BTreeMap;

use trainyard_policies::{Counterfactual, EtaAnswer, GangId, RuntimeHistory};

use crate::controller::acting::admission_record::AdmissionRecord;
use crate::controller::deciding::scheduling_loop::{Decision, JobEntry, JobState};
use crate::controller::watching::live::Live;
use crate::grpc::{utc, v1};
use v1::JobState as S;

/// A question for the scheduling task.
#[derive(Clone, Debug, PartialEq)]
pub enum Query {
    /// One TrainJob, by `namespace/name`.
    Get(String),
    /// TrainJobs matching the filters (empty fields match all).
    List(v1::ListRequest),
    /// Why one waits.
    Explain(String),
    /// When one will start.
    Eta(String),
    /// Every queue.
    Queues,
}

/// The scheduling task's answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// One TrainJob.
    Job(v1::Job),
    /// Several, ordered by namespace and name.
    Jobs(Vec<v1::Job>),
    /// Why it waits.
    Explanation(v1::Explanation),
    /// When it starts.
    Eta(v1::EtaResponse),
    /// The queues, ordered by name.
    Queues(Vec<v1::Queue>),
    /// No TrainJob has this `namespace/name`.
    NotFound(String),
}

/// A question with the way back to whoever asked.
#[derive(Debug)]
pub struct Asked {
    /// The question.
    pub query: Query,
    /// Where the answer goes (the asker may have given up: sending is then a no-op).
    pub reply: tokio::sync::oneshot::Sender<Answer>,
}

/// Answers `query` from `live` at `now` (seconds); `history` holds runtimes learned per queue.
pub fn answer(live: &Live, query: &Query, history: &RuntimeHistory, now: u64) -> Answer {
    match query {
        Query::Get(key) => match live.entry(key) {
            Some(entry) => Answer::Job(live_job_view(live, entry)),
            None => Answer::NotFound(key.clone()),
        },
        Query::List(filter) => Answer::Jobs(list(live, filter)),
        Query::Explain(key) => match live.entry(key) {
            Some(entry) => Answer::Explanation(explain(live, entry)),
            None => Answer::NotFound(key.clone()),
        },
        Query::Eta(key) => match live.entry(key) {
            Some(entry) => Answer::Eta(eta(live, entry, history, now)),
            None => Answer::NotFound(key.clone()),
        },
        Query::Queues => Answer::Queues(queues(live)),
    }
}

/// `namespace/name` split in two.
pub fn job_ref(key: &str) -> v1::JobRef {
    let (namespace, name) = key.split_once('/').unwrap_or(("", key));
    v1::JobRef { namespace: namespace.to_string(), name: name.to_string() }
}

/// A TrainJob as the live picture shows it: [`job_view`] of its entry and decision, its queue
/// filled in by [`label_queue`].
pub fn live_job_view(live: &Live, entry: &JobEntry) -> v1::Job {
    let mut job = job_view(entry, live.decision(&entry.key));
    label_queue(live, &entry.key, &mut job);
    if let Some(trial) = live.search_of(&entry.key) {
        job.search = trial.search;
        job.search_trials = trial.trials;
        job.search_parallel = trial.parallel;
    }
    job
}

/// The queue the TrainJob's label names, where the view has none: an entry with no intent left
/// (ended, suspended, a bad spec) or none at all (deleted up to a cycle ago) cannot name it, and
/// a list or watch of the queue must still show the job.
pub fn label_queue(live: &Live, key: &str, job: &mut v1::Job) {
    if job.queue.is_empty() {
        job.queue = live.queue_label(key).unwrap_or_default().to_string();
    }
}

/// A TrainJob as the API shows it: what it asks for, and the loop's last word on it.
pub fn job_view(entry: &JobEntry, decision: Option<&Decision>) -> v1::Job {
    let (namespace, name) = entry.key.split_once('/').unwrap_or(("", &entry.key));
    let mut job = v1::Job {
        namespace: namespace.to_string(),
        name: name.to_string(),
        uid: entry.uid.clone(),
        created: entry.created,
        ..Default::default()
    };
    let recorded = match &entry.state {
        JobState::Waiting(intent) | JobState::Admitted(intent, _) => {
            job.queue = intent.queue.clone();
            job.priority = intent.priority;
            job.pods = intent.shape.pods();
            job.gpus = intent.shape.total().gpus;
            match &entry.state {
                JobState::Admitted(_, record) => Some(record),
                _ => None,
            }
        }
        JobState::Kept | JobState::Inactive => None,
    };
    let (state, reason, message, record): (S, &str, String, Option<&AdmissionRecord>) = match (&entry.state, decision) {
        (JobState::Inactive, _) => (S::Inactive, "Inactive", "asks nothing of the scheduler".into(), None),
        (_, Some(Decision::Admit(record))) => (S::Admitted, "Admitted", String::new(), Some(record)),
        (_, Some(Decision::Move(record))) => (S::Admitted, "Moved", "moved off lost nodes".into(), Some(record)),
        (_, Some(Decision::Running)) => (S::Admitted, "Admitted", String::new(), recorded),
        (_, Some(Decision::Degraded { message, .. })) => (S::Degraded, "NodesLost", message.clone(), recorded),
        (_, Some(Decision::Pending { reason, message })) => (S::Pending, reason.as_str(), message.clone(), None),
        (_, Some(Decision::Requeue { reason, message })) => (S::Pending, reason.as_str(), message.clone(), None),
        (_, Some(Decision::Unschedulable { reason, message })) => {
            (S::Unschedulable, reason.as_str(), message.clone(), None)
        }
        (_, Some(Decision::Preempt { by })) => {
            (S::Preempted, "Preempted", format!("stopped to make room for {by}"), recorded)
        }
        (JobState::Admitted(..) | JobState::Kept, None) => (S::Admitted, "Admitted", String::new(), recorded),
        (JobState::Waiting(_), None) => (S::Pending, "Queued", "not looked at yet".into(), None),
    };
    job.set_state(state);
    job.reason = reason.to_string();
    job.message = message;
    if let Some(record) = record {
        job.domain = record
            .domain
            .as_ref()
            .map(|d| d.iter().map(|(_, v)| v.as_str()).collect::<Vec<_>>().join("/"))
            .unwrap_or_default();
        job.nodes = record.nodes.iter().map(|(n, _)| n.clone()).collect();
        job.cluster = crate::controller::fleet::copies::local_record(record).map(|(c, _)| c).unwrap_or_default();
    }
    job
}

fn list(live: &Live, filter: &v1::ListRequest) -> Vec<v1::Job> {
    let prefix = (!filter.namespace.is_empty()).then(|| format!("{}/", filter.namespace));
    let state = filter.state();
    let mut jobs: Vec<v1::Job> = live
        .entries()
        .filter(|e| prefix.as_deref().is_none_or(|p| e.key.starts_with(p)))
        .map(|e| live_job_view(live, e))
        .filter(|j| filter.queue.is_empty() || j.queue == filter.queue)
        .filter(|j| state == S::Unspecified || j.state() == state)
        .filter(|j| filter.search.is_empty() || j.search == filter.search)
        .collect();
    jobs.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    jobs
}

/// The TrainJob an engine gang stands for, or the gang's number when the loop no longer knows it.
fn gang_ref(live: &Live, id: GangId) -> v1::JobRef {
    match live.scheduling_loop().key_of_gang(id) {
        Some(key) => job_ref(key),
        None => v1::JobRef { namespace: String::new(), name: id.to_string() },
    }
}

fn names(refs: &[v1::JobRef]) -> String {
    refs.iter().map(v1::JobRef::to_string).collect::<Vec<_>>().join(", ")
}

fn explain(live: &Live, entry: &JobEntry) -> v1::Explanation {
    let job = live_job_view(live, entry);
    let looped = live.scheduling_loop();
    let Some(explanation) = looped.gang_of(&entry.uid).and_then(|id| looped.engine().explain(id)) else {
        return v1::Explanation { job: Some(job), counterfactuals: Vec::new() };
    };
    let counterfactuals = explanation
        .counterfactuals
        .iter()
        .map(|c| match c {
            Counterfactual::WaitingFor { at, last, gangs } => {
                let jobs = vec![gang_ref(live, *last)];
                let text =
                    format!("fits at {} when {} ends ({gangs} running gang(s) ending first)", utc(*at), names(&jobs));
                v1::Counterfactual { kind: "waiting_for".into(), text, at: *at, jobs, ..Default::default() }
            }
            Counterfactual::Preempting { domain, victims } => {
                let jobs: Vec<v1::JobRef> = victims.iter().map(|v| gang_ref(live, *v)).collect();
                let text = format!("fits in {domain} if {} are preempted", names(&jobs));
                v1::Counterfactual {
                    kind: "preempting".into(),
                    text,
                    jobs,
                    r#where: domain.clone(),
                    ..Default::default()
                }
            }
            Counterfactual::MoreHosts { level, pods_short, hosts_short } => v1::Counterfactual {
                kind: "more_hosts".into(),
                text: format!("needs {hosts_short} more host(s) ({pods_short} pods) in one {level}"),
                r#where: level.clone(),
                short: *hosts_short,
                ..Default::default()
            },
            Counterfactual::QuotaShort { queue, gpus_short } => v1::Counterfactual {
                kind: "quota_short".into(),
                text: format!("queue {queue} must free {gpus_short} GPU(s) of its quota"),
                r#where: queue.clone(),
                short: *gpus_short,
                ..Default::default()
            },
        })
        .collect();
    v1::Explanation { job: Some(job), counterfactuals }
}

fn eta(live: &Live, entry: &JobEntry, history: &RuntimeHistory, now: u64) -> v1::EtaResponse {
    use v1::eta_response::Kind;
    let job = live_job_view(live, entry);
    let mut out = v1::EtaResponse { now, ..Default::default() };
    match job.state() {
        S::Admitted | S::Degraded => {
            out.set_kind(Kind::Running);
            out.started = match (&entry.state, live.decision(&entry.key)) {
                (_, Some(Decision::Admit(record) | Decision::Move(record))) | (JobState::Admitted(_, record), _) => {
                    record.at
                }
                _ => 0,
            };
        }
        S::Unschedulable | S::Inactive => {
            out.set_kind(Kind::Unschedulable);
            out.reason = format!("{}: {}", job.reason, job.message);
        }
        S::Pending | S::Preempted | S::Unspecified => {
            let looped = live.scheduling_loop();
            match looped.gang_of(&entry.uid).map(|id| looped.engine().eta(id, now, Some(history))) {
                None | Some(EtaAnswer::Unknown) => {
                    // Out of the engine: being stopped, or refused for a reason the loop reports.
                    out.set_kind(Kind::Unschedulable);
                    out.reason = format!("{}: {}", job.reason, job.message);
                }
                Some(EtaAnswer::Running { start }) => {
                    out.set_kind(Kind::Running);
                    out.started = start;
                }
                Some(EtaAnswer::Unschedulable { reason }) => {
                    out.set_kind(Kind::Unschedulable);
                    out.reason = reason;
                }
                Some(EtaAnswer::BeyondHorizon { searched_until, ahead, .. }) => {
                    out.set_kind(Kind::BeyondHorizon);
                    out.reason = format!(
                        "does not start before t={searched_until}s when the queue is run forward ({ahead} gang(s) ahead)"
                    );
                }
                Some(EtaAnswer::Stalled { at, reason }) => {
                    out.set_kind(Kind::Stalled);
                    out.earliest = at;
                    out.reason = reason;
                }
                Some(EtaAnswer::Estimated(estimate)) => {
                    out.set_kind(Kind::Estimate);
                    out.earliest = estimate.earliest;
                    out.likely = estimate.likely;
                    out.waits_for_total = u32::try_from(estimate.waits_for_total).unwrap_or(u32::MAX);
                    out.waits_for = estimate.waits_for.iter().map(|id| gang_ref(live, *id)).collect();
                }
            }
        }
    }
    out.job = Some(job);
    out
}

fn queues(live: &Live) -> Vec<v1::Queue> {
    #[derive(Default)]
    struct Counts {
        admitted: u32,
        pending: u32,
        by_reason: BTreeMap<String, u32>,
    }
    let mut counts: BTreeMap<String, Counts> = BTreeMap::new();
    for entry in live.entries() {
        let job = live_job_view(live, entry);
        if job.queue.is_empty() {
            continue;
        }
        let c = counts.entry(job.queue.clone()).or_default();
        match job.state() {
            S::Admitted | S::Degraded | S::Preempted => c.admitted += 1,
            S::Pending | S::Unschedulable => {
                c.pending += 1;
                *c.by_reason.entry(job.reason.clone()).or_default() += 1;
            }
            S::Inactive | S::Unspecified => {}
        }
    }
    let quotas = live.scheduling_loop().engine().quotas();
    let root = quotas.root();
    let mut out: Vec<v1::Queue> = quotas
        .queues()
        .filter(|&q| q != root)
        .map(|q| {
            let name = quotas.name(q).to_string();
            let nominal = quotas.nominal(q).gpus;
            let used = quotas.usage(q).gpus;
            let has_nominal = nominal != u64::MAX;
            let c = counts.remove(&name).unwrap_or_default();
            v1::Queue {
                parent: quotas.parent(q).filter(|&p| p != root).map(|p| quotas.name(p).to_string()).unwrap_or_default(),
                nominal_gpus: if has_nominal { nominal } else { 0 },
                has_nominal,
                used_gpus: used,
                borrowed_gpus: if has_nominal { used.saturating_sub(nominal) } else { 0 },
                admitted: c.admitted,
                pending: c.pending,
                pending_by_reason: c.by_reason.into_iter().collect(),
                name,
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}
