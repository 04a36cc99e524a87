//! Folds the JobSet rendered for a TrainJob into a one-group LeaderWorkerSet, for runtimes that ask for one.

use serde_json::Value;

use super::{RenderOptions, policy, render_jobset};
use crate::error::RenderError;
use crate::jobset::{JobSet, ReplicatedJob};
use crate::lws::{
    self, LeaderWorkerSet, LeaderWorkerSetSpec, LeaderWorkerTemplate, RECREATE_GROUP_ON_POD_RESTART,
    apply_lws_webhook_defaults,
};
use crate::meta::ObjectMeta;
use crate::pod::{EnvVar, PodTemplate};
use crate::trainer::{
    ANCESTOR_LABEL, DATASET_INITIALIZER, LAUNCHER, MODEL_INITIALIZER, NODE, TrainJob, TrainingRuntimeSpec,
};

/// Annotation on a TrainingRuntime's `metadata.annotations` choosing the workload trainyard renders.
pub const WORKLOAD_ANNOTATION: &str = "trainyard.io/workload";
/// Env expansion of the leader pod's DNS name, which LWS puts first in every container's env.
pub const LEADER_ADDRESS_REF: &str = "$(LWS_LEADER_ADDRESS)";
/// Env expansion of the pod's index in its group (0 = leader), injected by LWS.
pub const WORKER_INDEX_REF: &str = "$(LWS_WORKER_INDEX)";

/// Which workload object a runtime renders to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadKind {
    /// A `jobset.x-k8s.io/v1alpha2` JobSet ([`render_jobset`]); the default.
    JobSet,
    /// A `leaderworkerset.x-k8s.io/v1` LeaderWorkerSet ([`render_leader_worker_set`]).
    LeaderWorkerSet,
}

/// The workload the runtime asks for through [`WORKLOAD_ANNOTATION`]: absent or `JobSet` is a JobSet,
/// `LeaderWorkerSet` a LeaderWorkerSet; any other value is an error naming the annotation.
pub fn workload_kind(runtime_metadata: &ObjectMeta, runtime_name: &str) -> Result<WorkloadKind, RenderError> {
    match runtime_metadata.annotations.get(WORKLOAD_ANNOTATION).map(String::as_str) {
        None | Some("JobSet") => Ok(WorkloadKind::JobSet),
        Some("LeaderWorkerSet") => Ok(WorkloadKind::LeaderWorkerSet),
        Some(other) => Err(RenderError::UnsupportedWorkload {
            runtime: runtime_name.to_owned(),
            field: format!("metadata.annotations[\"{WORKLOAD_ANNOTATION}\"]"),
            value: other.to_owned(),
        }),
    }
}

/// Renders `job` as one LeaderWorkerSet group (the gang). The JobSet is rendered first, so patches,
/// overrides, env, placement and the owner reference are exactly those of [`render_jobset`]; it is then
/// folded: a `launcher` replicated job becomes the leader template and the other one the worker template
/// (`size` = its pods + 1), or a lone trainer job is both (`size` = its pods, leader = pod 0). Addresses of
/// the first node pod become `$(LWS_LEADER_ADDRESS)` and completion-index ranks `$(LWS_WORKER_INDEX)`.
/// Pods get `restartPolicy: Always` (StatefulSets allow nothing else) and a failure recreates the whole
/// group. A suspended TrainJob renders with `replicas: 0`, since a LeaderWorkerSet cannot be suspended.
pub fn render_leader_worker_set(
    job: &TrainJob,
    runtime: &TrainingRuntimeSpec,
    opts: &RenderOptions,
) -> Result<LeaderWorkerSet, RenderError> {
    let JobSet { metadata, spec, .. } = render_jobset(job, runtime, opts)?;
    let name = metadata.name.clone().unwrap_or_default();
    let id = format!("{}/{}", metadata.namespace.as_deref().unwrap_or(""), name);
    let not_foldable = |rjob: &str, message: String| RenderError::NotFoldable {
        job: id.clone(),
        replicated_job: rjob.to_owned(),
        message,
    };
    if runtime.ml_policy.as_ref().is_some_and(|m| m.flux.is_some()) {
        let why = "Flux's brokers find one another by the JobSet's pod names and read their scripts from \
                   ConfigMaps made for a JobSet (use the JobSet workload for this runtime)";
        return Err(not_foldable(crate::trainer::NODE, why.into()));
    }
    for rjob in &spec.replicated_jobs {
        let step = rjob.template.metadata.labels.get(ANCESTOR_LABEL).map(String::as_str).unwrap_or_default();
        if [DATASET_INITIALIZER, MODEL_INITIALIZER].iter().any(|init| *init == step || *init == rjob.name) {
            let why = "an initializer must run to completion before training, and a LeaderWorkerSet group has \
                       neither ordering nor completion (use the JobSet workload for this runtime)";
            return Err(not_foldable(&rjob.name, why.into()));
        }
        if let Some(replicas) = rjob.replicas.filter(|&r| r != 1) {
            return Err(not_foldable(&rjob.name, format!("replicas = {replicas}, but a group holds one copy")));
        }
    }
    let mut rjobs = spec.replicated_jobs;
    let launcher = rjobs.iter().position(|r| r.name == LAUNCHER).filter(|_| rjobs.len() > 1);
    let leader = launcher.map(|i| rjobs.remove(i));
    if let Some(extra) = rjobs.get(1) {
        let why = "a LeaderWorkerSet has one leader template (the launcher) and one worker template".to_owned();
        return Err(not_foldable(&extra.name, why));
    }
    let Some(worker) = rjobs.pop() else {
        return Err(RenderError::MissingReplicatedJob {
            job: id,
            runtime: job.spec.runtime_ref.name.clone(),
            replicated_job: NODE.into(),
        });
    };
    let worker_pods = worker.template.spec.parallelism.unwrap_or(1);
    let size = match &leader {
        None => worker_pods,
        Some(leader) => {
            let pods = leader.template.spec.parallelism.unwrap_or(1);
            if pods != 1 {
                return Err(not_foldable(&leader.name, format!("parallelism = {pods}, but the leader is one pod")));
            }
            if uses_completion_index(&worker) {
                let why = "its ranks come from the completion index, but behind a separate leader the worker \
                           indices start at 1"
                    .to_owned();
                return Err(not_foldable(&worker.name, why));
            }
            worker_pods.checked_add(1).ok_or_else(|| not_foldable(&worker.name, "too many pods".into()))?
        }
    };
    let host = policy::first_node_host(&name);
    let leader_template = leader.map(|r| fold_pod(r, &host));
    let worker_template = fold_pod(worker, &host);
    let mut lws_spec = LeaderWorkerSetSpec {
        replicas: Some(if spec.suspend == Some(true) { 0 } else { 1 }),
        leader_worker_template: LeaderWorkerTemplate {
            leader_template,
            worker_template,
            size: Some(size),
            // A gang trains together: one lost pod restarts the whole group, as a JobSet restart would.
            restart_policy: Some(RECREATE_GROUP_ON_POD_RESTART.into()),
            ..LeaderWorkerTemplate::default()
        },
        ..LeaderWorkerSetSpec::default()
    };
    apply_lws_webhook_defaults(&mut lws_spec);
    Ok(LeaderWorkerSet { api_version: lws::API_VERSION.into(), kind: lws::KIND.into(), metadata, spec: lws_spec })
}

/// Whether any container of the replicated job reads the Job completion index.
fn uses_completion_index(rjob: &ReplicatedJob) -> bool {
    let pod = &rjob.template.spec.template.spec;
    pod.containers.iter().chain(&pod.init_containers).flat_map(|c| &c.env).any(is_completion_index)
}

fn is_completion_index(var: &EnvVar) -> bool {
    var.value_from.as_ref().and_then(|v| v.pointer("/fieldRef/fieldPath")).and_then(Value::as_str)
        == Some(policy::COMPLETION_INDEX_PATH)
}

/// The pod template of a replicated job, rewritten for a StatefulSet-backed LWS group.
fn fold_pod(rjob: ReplicatedJob, first_host: &str) -> PodTemplate {
    let mut pod = rjob.template.spec.template;
    pod.spec.restart_policy = Some("Always".into());
    let PodTemplate { spec, .. } = &mut pod;
    for container in spec.containers.iter_mut().chain(spec.init_containers.iter_mut()) {
        for var in &mut container.env {
            if is_completion_index(var) {
                *var = EnvVar::literal(&var.name, WORKER_INDEX_REF);
            } else if let Some(value) = &mut var.value {
                *value = replace_host(value, first_host, LEADER_ADDRESS_REF);
            }
        }
    }
    pod
}

/// Replaces `host` in `text` where it stands as a whole DNS name (not inside a longer one).
fn replace_host(text: &str, host: &str, with: &str) -> String {
    let dns_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.';
    let mut out = String::with_capacity(text.len());
    let mut done = 0;
    for (at, _) in text.match_indices(host) {
        let before = text[..at].chars().next_back();
        let after = text[at + host.len()..].chars().next();
        if !before.is_some_and(dns_char) && !after.is_some_and(dns_char) {
            out.push_str(&text[done..at]);
            out.push_str(with);
            done = at + host.len();
        }
    }
    out.push_str(&text[done..]);
    out
}

/// The `hostfile` key of the `<tj>-mpi-hostfile` ConfigMap for a LeaderWorkerSet rendered by
/// [`render_leader_worker_set`]: one `<pod>.<subdomain> slots=<n>` line per node pod. Pods are named
/// `<lws>-0` (leader) and `<lws>-0-<i>` (workers); a launcher leader is listed only when it runs as a
/// node. `None` when the runtime has no MPI policy.
pub fn render_lws_mpi_hostfile(job: &TrainJob, runtime: &TrainingRuntimeSpec, lws: &LeaderWorkerSet) -> Option<String> {
    let mpi = runtime.ml_policy.as_ref()?.mpi.as_ref()?;
    let name = lws.metadata.name.as_deref().unwrap_or_default();
    let unique =
        lws.spec.network_config.as_ref().and_then(|n| n.subdomain_policy.as_deref()) == Some("UniquePerReplica");
    let subdomain = if unique { format!("{name}-0") } else { name.to_owned() };
    let template = &lws.spec.leader_worker_template;
    let leader = template.leader_template.as_ref().unwrap_or(&template.worker_template);
    let node = leader.spec.containers.iter().find(|c| c.name == NODE);
    let gpus = node.map(policy::gpus_per_node).unwrap_or(0);
    let nproc = job.spec.trainer.as_ref().and_then(|t| t.num_proc_per_node.as_ref());
    let slots = node.and_then(policy::rendered_slots).unwrap_or_else(|| policy::mpi_slots(nproc, mpi, gpus));
    let leader_is_node = template.leader_template.is_none() || mpi.run_launcher_as_node == Some(true);
    let mut hosts = String::new();
    if leader_is_node {
        hosts.push_str(&format!("{name}-0.{subdomain} slots={slots}\n"));
    }
    for worker in 1..template.size.unwrap_or(1).max(1) {
        hosts.push_str(&format!("{name}-0-{worker}.{subdomain} slots={slots}\n"));
    }
    Some(hosts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_is_replaced_only_as_a_whole_name() {
        let host = "tj-node-0-0.tj";
        assert_eq!(replace_host("tj-node-0-0.tj", host, "L"), "L");
        assert_eq!(replace_host("tj-node-0-0.tj:29500", host, "L"), "L:29500");
        assert_eq!(replace_host("a=tj-node-0-0.tj,b=tj-node-0-0.tj", host, "L"), "a=L,b=L");
        assert_eq!(replace_host("tj-node-0-0.tjx", host, "L"), "tj-node-0-0.tjx");
        assert_eq!(replace_host("xtj-node-0-0.tj", host, "L"), "xtj-node-0-0.tj");
        assert_eq!(replace_host("tj-node-0-0.tj.ns.svc", host, "L"), "tj-node-0-0.tj.ns.svc");
        assert_eq!(replace_host("nothing here", host, "L"), "nothing here");
    }

    #[test]
    fn workload_annotation_is_parsed_strictly() {
        let mut meta = ObjectMeta::default();
        assert_eq!(workload_kind(&meta, "rt"), Ok(WorkloadKind::JobSet));
        meta.annotations.insert(WORKLOAD_ANNOTATION.into(), "JobSet".into());
        assert_eq!(workload_kind(&meta, "rt"), Ok(WorkloadKind::JobSet));
        meta.annotations.insert(WORKLOAD_ANNOTATION.into(), "LeaderWorkerSet".into());
        assert_eq!(workload_kind(&meta, "rt"), Ok(WorkloadKind::LeaderWorkerSet));
        meta.annotations.insert(WORKLOAD_ANNOTATION.into(), "lws".into());
        let err = workload_kind(&meta, "rt").unwrap_err();
        assert_eq!(
            err,
            RenderError::UnsupportedWorkload {
                runtime: "rt".into(),
                field: "metadata.annotations[\"trainyard.io/workload\"]".into(),
                value: "lws".into()
            }
        );
        assert!(err.to_string().contains("metadata.annotations[\"trainyard.io/workload\"]"), "{err}");
    }
}
