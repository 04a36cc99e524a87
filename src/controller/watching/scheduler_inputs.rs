//! From cached API objects to the scheduler's inputs: the cluster, the policy and each TrainJob's entry.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};
use trainyard_bridges::trainer as bridge;
use trainyard_policies::{PolicyConfig, QueueConfig};
use trainyard_topology::sources::k8s_nodes;
use trainyard_topology::{Cluster, Topology as Tree};

use crate::api::{ClusterTrainingRuntime, Queue, TopologySpec, TrainJob, TrainingRuntime};
use crate::controller::deciding::intent::{GangIntent, IntentContext, Problem, gang_intent};
use crate::controller::deciding::plan::{Mode, recorded};
use crate::controller::deciding::scheduling_loop::{JobEntry, JobState};

/// The runtimes a TrainJob may name: namespaced ones by `(namespace, name)`, cluster ones by name.
#[derive(Clone, Debug, Default)]
pub struct Runtimes {
    /// `TrainingRuntime`s.
    pub namespaced: BTreeMap<(String, String), bridge::TrainingRuntime>,
    /// `ClusterTrainingRuntime`s.
    pub cluster: BTreeMap<String, bridge::TrainingRuntime>,
}

impl Runtimes {
    /// Indexes the runtimes of the caches (objects that do not convert are left out).
    pub fn index<'a>(
        namespaced: impl IntoIterator<Item = &'a TrainingRuntime>,
        cluster: impl IntoIterator<Item = &'a ClusterTrainingRuntime>,
    ) -> Runtimes {
        let mut out = Runtimes::default();
        for r in namespaced {
            if let Ok(b) = r.to_bridge() {
                let key =
                    (r.metadata.namespace.clone().unwrap_or_default(), r.metadata.name.clone().unwrap_or_default());
                out.namespaced.insert(key, b);
            }
        }
        for r in cluster {
            if let Ok(b) = r.to_bridge() {
                out.cluster.insert(r.metadata.name.clone().unwrap_or_default(), b);
            }
        }
        out
    }

    /// The runtime `job` names, or why there is none.
    pub fn resolve(&self, job: &bridge::TrainJob) -> Result<&bridge::TrainingRuntime, Problem> {
        let r = &job.spec.runtime_ref;
        let kind = r.kind.as_deref().unwrap_or(bridge::CLUSTER_TRAINING_RUNTIME);
        let found = match kind {
            bridge::TRAINING_RUNTIME => {
                let ns = job.metadata.namespace.clone().unwrap_or_default();
                self.namespaced.get(&(ns, r.name.clone()))
            }
            _ => self.cluster.get(&r.name),
        };
        found.ok_or_else(|| Problem {
            reason: "RuntimeNotFound",
            field: "spec.runtimeRef.name".into(),
            message: format!("{kind} {:?} does not exist", r.name),
            terminal: false,
        })
    }
}

/// The gang a TrainJob asks for, with its runtime, or the problem that stops it.
pub fn intent_of<'r>(
    job: &TrainJob,
    runtimes: &'r Runtimes,
    ctx: &IntentContext<'_>,
) -> (Result<GangIntent, Problem>, Option<&'r bridge::TrainingRuntime>) {
    let bridge_job = match job.to_bridge() {
        Ok(j) => j,
        Err(e) => {
            let p = Problem { reason: "InvalidSpec", field: "spec".into(), message: e.to_string(), terminal: true };
            return (Err(p), None);
        }
    };
    match runtimes.resolve(&bridge_job) {
        Err(p) => (Err(p), None),
        Ok(runtime) => (gang_intent(&bridge_job, runtime, ctx), Some(runtime)),
    }
}

/// Intents of the last cycle, so that a TrainJob is rendered again only when it, its runtimes or
/// the policy changed (rendering is most of a cycle's work: about 50 µs per TrainJob).
#[derive(Debug, Default)]
pub struct IntentCache {
    inputs: u64,
    entries: std::collections::HashMap<String, (String, Result<GangIntent, Problem>)>,
}

impl IntentCache {
    /// The intent of `job`; `inputs` fingerprints everything besides the job an intent depends on
    /// (runtimes, policy, GPU resource). Entries of jobs not asked for in a cycle are dropped by
    /// [`IntentCache::retain`].
    pub fn intent(
        &mut self,
        job: &TrainJob,
        runtimes: &Runtimes,
        ctx: &IntentContext<'_>,
        inputs: u64,
    ) -> Result<GangIntent, Problem> {
        if inputs != self.inputs {
            self.entries.clear();
            self.inputs = inputs;
        }
        let uid = job.metadata.uid.clone().unwrap_or_default();
        let version = intent_version(job);
        match self.entries.get(&uid) {
            Some((v, intent)) if *v == version && !version.is_empty() => intent.clone(),
            _ => {
                let intent = intent_of(job, runtimes, ctx).0;
                self.entries.insert(uid, (version, intent.clone()));
                intent
            }
        }
    }

    /// Keeps only the entries of `uids` (the TrainJobs that still exist).
    pub fn retain(&mut self, uids: &std::collections::HashSet<&str>) {
        self.entries.retain(|uid, _| uids.contains(uid.as_str()));
    }

    /// Drops the entry of a TrainJob that is gone.
    pub fn forget(&mut self, uid: &str) {
        self.entries.remove(uid);
    }
}

/// What an intent reads of a TrainJob: its spec (by generation), labels and annotations; a status
/// write (trainyard's own, mostly) changes none of them.
fn intent_version(job: &TrainJob) -> String {
    use std::hash::{Hash, Hasher};
    let Some(generation) = job.metadata.generation else {
        return job.metadata.resource_version.clone().unwrap_or_default();
    };
    let mut h = std::collections::hash_map::DefaultHasher::new();
    job.metadata.labels.hash(&mut h);
    job.metadata.annotations.hash(&mut h);
    format!("{generation}/{:x}", h.finish())
}

/// How long a finished TrainJob ran on its last admission: `(when it ended, its queue, seconds)`,
/// from the admission record it keeps and the time its Complete or Failed condition turned true.
/// None for a TrainJob that has not finished, never ran here, or names no queue.
pub fn finished_run(job: &TrainJob) -> Option<(u64, String, u64)> {
    let ended = [crate::controller::deciding::conditions::COMPLETE, crate::controller::deciding::conditions::FAILED]
        .into_iter()
        .filter_map(|c| job.condition(c).filter(|c| c.status == "True"))
        .map(|c| u64::try_from(c.last_transition_time.0.as_second()).unwrap_or(0))
        .min()?;
    let admitted = recorded(job)?.at;
    let queue = job.metadata.labels.as_ref()?.get(crate::api::QUEUE_LABEL).filter(|q| !q.is_empty())?;
    (ended > admitted).then(|| (ended, queue.clone(), ended - admitted))
}

/// Seconds since the epoch of the TrainJob's creation (0 when unset).
pub fn created_s(job: &TrainJob) -> u64 {
    job.metadata.creation_timestamp.as_ref().map_or(0, |t| u64::try_from(t.0.as_second()).unwrap_or(0))
}

/// The order trainyard first saw a TrainJob in, as recorded on it.
pub fn arrival_of(job: &TrainJob) -> Option<u64> {
    job.metadata.annotations.as_ref()?.get(crate::api::ARRIVAL_ANNOTATION)?.trim().parse().ok()
}

/// Whether a TrainJob is this controller's to run: in manager mode the ones marked for the fleet
/// (`spec.managedBy`), in every other mode all the others (a fleet's copies included: the copy a
/// manager writes to a worker carries no mark).
pub fn is_ours(job: &TrainJob, mode: Mode) -> bool {
    let fleet = job.spec.0.managed_by.as_deref() == Some(crate::api::worker_cluster::FLEET_MANAGED_BY);
    fleet == (mode == Mode::Manager)
}

/// What the scheduling loop should do with a TrainJob; `order` breaks ties of creation time (its
/// recorded arrival, else the one the loop hands out).
pub fn job_entry(job: &TrainJob, intent: &Result<GangIntent, Problem>, mode: Mode, order: u64) -> JobEntry {
    let finished = job.has_true(crate::controller::deciding::conditions::COMPLETE)
        || job.has_true(crate::controller::deciding::conditions::FAILED);
    let suspended = job.spec.0.suspend == Some(true);
    let record = recorded(job);
    let state = match (intent, record) {
        _ if job.metadata.deletion_timestamp.is_some() || finished || !is_ours(job, mode) => JobState::Inactive,
        (Err(_), Some(_)) if !(mode == Mode::Standalone && suspended) => JobState::Kept,
        (Err(_), _) => JobState::Inactive,
        (Ok(_), None) if mode == Mode::Standalone && suspended => JobState::Inactive,
        (Ok(_), Some(_)) if mode == Mode::Standalone && suspended => JobState::Inactive,
        // In companion mode a TrainJob waits suspended; one running without a record is not ours.
        (Ok(_), None) if mode == Mode::Companion && !suspended => JobState::Inactive,
        (Ok(i), Some(r)) => JobState::Admitted(i.clone(), r),
        (Ok(i), None) => JobState::Waiting(i.clone()),
    };
    JobEntry {
        key: job.key(),
        uid: job.metadata.uid.clone().unwrap_or_default(),
        created: created_s(job),
        order,
        state,
    }
}

/// The cluster tree read from the nodes as the Topology object describes them; nodes outside its
/// node selector, not Ready or cordoned are left out (as Kueue does).
pub fn cluster_from_nodes(nodes: &[&Node], topology: &TopologySpec) -> Result<Cluster, String> {
    let items: Vec<Value> = nodes
        .iter()
        .filter(|n| {
            let labels = n.metadata.labels.clone().unwrap_or_default();
            topology.node_selector.iter().all(|(k, v)| labels.get(k) == Some(v))
        })
        .map(|n| serde_json::to_value(n).unwrap_or(Value::Null))
        .collect();
    let text = json!({"apiVersion": "v1", "kind": "NodeList", "items": items}).to_string();
    let loaded = k8s_nodes::parse(&text, "the Node cache", &topology.node_list_options()).map_err(|e| e.to_string())?;
    let tree = Tree::build(&loaded.spec).map_err(|e| e.to_string())?;
    Ok(Cluster::new(tree))
}

/// Which scheduling loop a quota tree is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The Kubernetes cluster: the policy file's queues and the Queue objects without `spec.slurm`.
    Kubernetes,
    /// The Slurm cluster: the Queue objects with `spec.slurm` (the file's global settings apply).
    Slurm,
}

impl Side {
    fn of(queue: &Queue) -> Side {
        if queue.spec.slurm.is_some() { Side::Slurm } else { Side::Kubernetes }
    }
}

/// Checks what the policy file cannot: a quota tree lies wholly on one cluster (its gangs are placed
/// by one engine, which cannot lend GPUs of the other), and a Slurm queue has no memory quota
/// (the Slurm loop counts a node per pod and leaves memory to Slurm's `--mem`).
fn check_sides(file: &PolicyConfig, queues: &[&Queue]) -> Result<(), String> {
    let side_of = |name: &str| -> Option<Side> {
        match queues.iter().find(|q| q.metadata.name.as_deref() == Some(name)) {
            Some(q) => Some(Side::of(q)),
            None => file.queues.iter().any(|q| q.name == name).then_some(Side::Kubernetes),
        }
    };
    let mut sorted: Vec<&&Queue> = queues.iter().collect();
    sorted.sort_by_key(|q| q.metadata.name.clone());
    for q in sorted {
        let name = q.metadata.name.clone().unwrap_or_default();
        let side = Side::of(q);
        if let Some(parent) = &q.spec.parent
            && let Some(parent_side) = side_of(parent)
            && parent_side != side
        {
            let on = |s: Side| if s == Side::Slurm { "Slurm" } else { "Kubernetes" };
            return Err(format!(
                "Queue {name}: spec.parent: it runs on {} (spec.slurm) but its parent {parent} runs on {}; a quota \
                 tree is wholly on one cluster",
                on(side),
                on(parent_side)
            ));
        }
        if side == Side::Slurm {
            let limits = [Some(&q.spec.nominal), q.spec.borrowing_limit.as_ref(), q.spec.lending_limit.as_ref()];
            if limits.iter().flatten().any(|a| a.memory_gib.is_some()) {
                return Err(format!(
                    "Queue {name}: spec.nominal.memoryGiB: a Slurm queue has no memory quota; Slurm enforces memory \
                     per node (--mem)"
                ));
            }
        }
    }
    Ok(())
}

/// The policy file with the Queue objects of `side` added to its queues (a Queue replaces a file
/// entry of the same name; the file's queues are Kubernetes ones), as typed values checked by the
/// rules of the file's own queues: an error names the Queue and its field.
pub fn policy_with_queues(
    base_text: &str,
    base_name: &str,
    queues: &[&Queue],
    side: Side,
) -> Result<PolicyConfig, String> {
    let outside: Vec<String> = queues.iter().filter_map(|q| q.metadata.name.clone()).collect();
    let mut policy = PolicyConfig::from_yaml_beside(base_text, base_name, &outside).map_err(|e| e.to_string())?;
    check_sides(&policy, queues)?;
    if side == Side::Slurm {
        policy.queues.clear();
    }
    let mut sorted: Vec<&&Queue> = queues.iter().filter(|q| Side::of(q) == side).collect();
    sorted.sort_by_key(|q| q.metadata.name.clone());
    let objects: Vec<QueueConfig> = sorted
        .iter()
        .map(|q| q.to_queue_config().map_err(|e| format!("Queue {}: {e}", shown_name(q.metadata.name.as_deref()))))
        .collect::<Result<_, _>>()?;
    let from_objects: Vec<String> = objects.iter().map(|q| q.name.clone()).collect();
    policy.with_queues(objects).map_err(|e| {
        if from_objects.contains(&e.name) {
            format!("Queue {}: {}: {}", shown_name(Some(&e.name)), object_field(&e.field), e.message)
        } else {
            format!("{base_name}: queue `{}`: {}: {}", e.name, e.field, e.message)
        }
    })
}

/// A Queue's name as messages show it.
fn shown_name(name: Option<&str>) -> String {
    match name {
        Some(n) if !n.trim().is_empty() => n.to_string(),
        _ => "(no name)".to_string(),
    }
}

/// Where a policy queue's field (`lending_limit.gpus`) lives in a Queue object
/// (`spec.lendingLimit.gpus`), so that a message about a Queue names its own field.
fn object_field(policy_field: &str) -> String {
    let (head, rest) = policy_field.split_once('.').map_or((policy_field, ""), |(h, r)| (h, r));
    let head = match head {
        "name" => return "metadata.name".to_string(),
        "borrowing_limit" => "borrowingLimit",
        "lending_limit" => "lendingLimit",
        "nominal_domains" => "nominalDomains",
        "fair_sharing" => "fairSharing",
        "memory_gib" => "memoryGiB",
        other => other,
    };
    let rest = rest.replace("memory_gib", "memoryGiB");
    if rest.is_empty() { format!("spec.{head}") } else { format!("spec.{head}.{rest}") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::QueueSpec;
    use crate::controller::acting::admission_record::AdmissionRecord;

    fn queue(name: &str, parent: Option<&str>, gpus: u64) -> Queue {
        let mut q = Queue::new(name, QueueSpec { parent: parent.map(Into::into), ..QueueSpec::default() });
        q.spec.nominal.gpus = Some(gpus);
        q
    }

    /// A TrainJob of queue `team` admitted at `admitted` whose `condition` turned `status` at `at`.
    fn ended_job(name: &str, admitted: Option<u64>, condition: (&str, &str, i64)) -> TrainJob {
        let record = admitted.map(|at| AdmissionRecord { nodes: vec![("n1".into(), 1)], at, ..Default::default() });
        let mut annotations = serde_json::Map::new();
        if let Some(r) = record {
            annotations.insert(crate::api::ADMISSION_ANNOTATION.into(), r.encode().into());
        }
        let at = k8s_openapi::jiff::Timestamp::from_second(condition.2).unwrap().to_string();
        serde_json::from_value(json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": "ns", "labels": {crate::api::QUEUE_LABEL: "team"}, "annotations": annotations},
            "spec": {"runtimeRef": {"name": "torch"}},
            "status": {"conditions": [{"type": condition.0, "status": condition.1, "reason": "R", "message": "",
                                        "lastTransitionTime": at}]},
        }))
        .unwrap()
    }

    #[test]
    fn finished_trainjobs_give_back_the_runtimes_a_new_leader_learns_from() {
        let mut jobs: Vec<TrainJob> =
            (1..=12).map(|i| ended_job(&format!("j{i}"), Some(1000), ("Complete", "True", 1000 + 100 * i))).collect();
        jobs.push(ended_job("failed", Some(1000), ("Failed", "True", 1500)));
        assert_eq!(finished_run(jobs.last().unwrap()), Some((1500, "team".into(), 500)));
        // Still running, never admitted here, or a clock that ran backwards: nothing learned.
        jobs.push(ended_job("running", Some(1000), ("Complete", "False", 5000)));
        jobs.push(ended_job("unrecorded", None, ("Complete", "True", 5000)));
        jobs.push(ended_job("backwards", Some(6000), ("Complete", "True", 5000)));
        for job in &jobs[13..] {
            assert_eq!(finished_run(job), None, "{:?}", job.metadata.name);
        }
        let history = crate::controller::deciding::scheduling_task::history_of(jobs.iter());
        assert_eq!(history.samples("team"), 13);
        assert_eq!(history.samples("other"), 0);
        // The mean of 100..=1200 by 100 and 500: 638.46 seconds.
        let estimate = history.estimate("team");
        assert!(matches!(estimate, Some(638 | 639)), "{estimate:?}");
    }

    #[test]
    fn queue_objects_join_the_policy_file() {
        let base = "backfill: easy\nqueues:\n  - {name: a, nominal: {gpus: 8}}\n";
        let (root, child) = (queue("org", None, 16), queue("a", Some("org"), 4));
        let policy = policy_with_queues(base, "policy.yaml", &[&root, &child], Side::Kubernetes).unwrap();
        let names: Vec<&str> = policy.queues.iter().map(|q| q.name.as_str()).collect();
        assert_eq!(names, vec!["a", "org"]);
        assert_eq!(policy.queues[0].nominal.gpus, Some(4), "the Queue object replaces the file entry");
        assert_eq!(policy.queues[0].parent.as_deref(), Some("org"));
    }

    #[test]
    fn a_bad_queue_is_named() {
        let (a, b) = (queue("a", Some("b"), 1), queue("b", Some("a"), 1));
        let err = policy_with_queues("", "policy.yaml", &[&a, &b], Side::Kubernetes).unwrap_err();
        assert!(err.contains("cycle"), "{err}");
        assert!(err.starts_with("Queue "), "{err}");
    }

    #[test]
    fn queue_objects_are_checked_as_typed_values_naming_queue_and_field() {
        let mut lender = queue("a", None, 8);
        lender.spec.lending_limit = Some(crate::api::queue::Amounts { gpus: Some(16), ..Default::default() });
        let err = policy_with_queues("", "policy.yaml", &[&lender], Side::Kubernetes).unwrap_err();
        assert!(err.starts_with("Queue a: spec.lendingLimit.gpus: queue `a` lends more than its nominal"), "{err}");
        let orphan = queue("b", Some("nowhere"), 8);
        let err = policy_with_queues("", "policy.yaml", &[&orphan], Side::Kubernetes).unwrap_err();
        assert_eq!(err, "Queue b: spec.parent: queue `b` names parent `nowhere`, which is not declared");
        let mut heavy = queue("c", None, 8);
        heavy.spec.nominal.cpus = Some(u64::MAX);
        let err = policy_with_queues("", "policy.yaml", &[&heavy], Side::Kubernetes).unwrap_err();
        assert!(err.contains("Queue c: spec.nominal.cpus") && err.contains("too large"), "{err}");
        // A Queue object may be the parent of a file queue; the merged tree is checked as one.
        let file = "queues:\n  - {name: team, parent: org, nominal: {gpus: 8}}\n";
        let policy = policy_with_queues(file, "policy.yaml", &[&queue("org", None, 0)], Side::Kubernetes).unwrap();
        assert_eq!(policy.queues.iter().map(|q| q.name.as_str()).collect::<Vec<_>>(), vec!["team", "org"]);
        let err =
            policy_with_queues(file, "policy.yaml", &[&queue("org", Some("team"), 0)], Side::Kubernetes).unwrap_err();
        assert!(err.contains("form a cycle of parents"), "{err}");
    }

    fn slurm(mut q: Queue) -> Queue {
        q.spec.slurm = Some(crate::api::SlurmTarget { workdir: "/shared".into(), ..Default::default() });
        q
    }

    #[test]
    fn slurm_queues_form_their_own_policy() {
        let base = "queues:\n  - {name: k8s, nominal: {gpus: 8}}\n";
        let (root, leaf, other) =
            (slurm(queue("hpc", None, 16)), slurm(queue("hpc-a", Some("hpc"), 8)), queue("b", None, 4));
        let refs = [&root, &leaf, &other];
        let k8s = policy_with_queues(base, "policy.yaml", &refs, Side::Kubernetes).unwrap();
        let names: Vec<&str> = k8s.queues.iter().map(|q| q.name.as_str()).collect();
        assert_eq!(names, vec!["k8s", "b"]);
        let hpc = policy_with_queues(base, "policy.yaml", &refs, Side::Slurm).unwrap();
        let names: Vec<&str> = hpc.queues.iter().map(|q| q.name.as_str()).collect();
        assert_eq!(names, vec!["hpc", "hpc-a"]);
    }

    #[test]
    fn a_tree_across_clusters_or_a_slurm_memory_quota_is_refused() {
        let (root, leaf) = (queue("org", None, 16), slurm(queue("hpc", Some("org"), 8)));
        let err = policy_with_queues("", "policy.yaml", &[&root, &leaf], Side::Slurm).unwrap_err();
        assert!(
            err.starts_with(
                "Queue hpc: spec.parent: it runs on Slurm (spec.slurm) but its parent org runs on Kubernetes"
            ),
            "{err}"
        );
        let err = policy_with_queues("queues: [{name: org}]", "p", &[&leaf], Side::Kubernetes).unwrap_err();
        assert!(err.contains("parent org runs on Kubernetes"), "{err}");
        let mut memory = slurm(queue("hpc", None, 8));
        memory.spec.nominal.memory_gib = Some(64);
        let err = policy_with_queues("", "p", &[&memory], Side::Slurm).unwrap_err();
        assert!(err.contains("Queue hpc: spec.nominal.memoryGiB: a Slurm queue has no memory quota"), "{err}");
    }
}
