//! An admitted TrainJob of a Slurm queue as a Slurm job: the trainer container's command and env on
//! the hosts trainyard chose, one Slurm node per pod.
//!
//! The JobSet is rendered exactly as for Kubernetes, so every Trainer rule (overrides, numNodes,
//! ML-policy env) applies; what only Kubernetes can resolve is translated: the completion index
//! becomes the node rank, the first pod's DNS name the first host, `$(VAR)` references are
//! expanded. Whatever cannot be translated (initializer jobs, MPI launchers, `valueFrom` secrets)
//! is a [`Problem`] naming the field, found before admission.

use std::collections::BTreeMap;

use trainyard_bridges::pod::{Container, EnvVar};
use trainyard_bridges::render::policy::{COMPLETION_INDEX_PATH, first_node_host};
use trainyard_bridges::slurm::{SlurmGang, SlurmPlacement, SlurmSpecError};
use trainyard_bridges::trainer::{self as bridge, NODE};
use trainyard_bridges::{RenderOptions, render_jobset};
use trainyard_topology::Resources;

use crate::api::SlurmTarget;
use crate::controller::acting::admission_record::AdmissionRecord;
use crate::controller::deciding::intent::Problem;

/// Condition reason for a TrainJob that cannot be expressed as a Slurm job.
pub const NOT_FOR_SLURM: &str = "NotRunnableOnSlurm";

/// The gang id a Slurm job of this admission carries in its comment. The uid tells apart a
/// TrainJob created again under the same name; the admission time tells apart the runs of one
/// TrainJob (a preempted gang is cancelled and admitted again as a new job).
pub fn gang_id(namespace: &str, name: &str, uid: &str, record: &AdmissionRecord) -> String {
    format!("{namespace}/{name}/{uid}@{}", record.at)
}

/// `namespace/name` of the TrainJob a gang id belongs to.
pub fn job_key_of(gang: &str) -> Option<String> {
    let mut parts = gang.splitn(3, '/');
    let (ns, name, rest) = (parts.next()?, parts.next()?, parts.next()?);
    rest.contains('@').then(|| format!("{ns}/{name}"))
}

fn problem(field: impl Into<String>, message: impl Into<String>) -> Problem {
    Problem { reason: NOT_FOR_SLURM, field: field.into(), message: message.into(), terminal: true }
}

/// The Slurm job for `job` admitted on `record`'s hosts. `pod` is the gang's pod shape (GPUs,
/// CPUs and memory each node is asked for).
pub fn slurm_gang(
    job: &bridge::TrainJob,
    runtime: &bridge::TrainingRuntime,
    target: &SlurmTarget,
    pod: &Resources,
    record: &AdmissionRecord,
) -> Result<SlurmGang, Problem> {
    let name = job.metadata.name.clone().unwrap_or_default();
    let namespace = job.metadata.namespace.clone().unwrap_or_default();
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let jobset = render_jobset(job, &runtime.spec, &RenderOptions::default()).map_err(|e| Problem {
        reason: "InvalidSpec",
        field: e.field().to_string(),
        message: e.to_string(),
        terminal: true,
    })?;
    if let Some(other) = jobset.spec.replicated_jobs.iter().find(|r| r.name != NODE) {
        return Err(problem(
            "spec.runtimeRef.name",
            format!(
                "the runtime's replicated job {:?} (an initializer or MPI launcher) cannot run on Slurm; only `{NODE}` does",
                other.name
            ),
        ));
    }
    let rjob = jobset.spec.replicated_jobs.first().ok_or_else(|| problem("spec.runtimeRef.name", "no `node` job"))?;
    let containers = &rjob.template.spec.template.spec.containers;
    let container = containers
        .iter()
        .find(|c| c.name == NODE)
        .or_else(|| containers.first().filter(|_| containers.len() == 1))
        .ok_or_else(|| problem("spec.runtimeRef.name", format!("the `{NODE}` job has no container named `{NODE}`")))?;
    let env = translate_env(container, &name)?;
    let command = command_of(container, &env)?;
    if record.nodes.iter().any(|(_, pods)| *pods != 1) {
        // The Slurm loop counts one node slot per pod, so this is a record written by hand.
        return Err(problem("metadata.annotations", "a Slurm gang places one pod per node"));
    }
    let gang = SlurmGang {
        name: name.clone(),
        gang: gang_id(&namespace, &name, &uid, record),
        partition: target.partition.clone(),
        account: target.account.clone(),
        qos: target.qos.clone(),
        nodes: record.pods(),
        tasks_per_node: 1,
        gpus_per_node: u32::try_from(pod.gpus).unwrap_or(u32::MAX),
        cpus_per_task: (pod.cpu_milli > 0).then(|| u32::try_from(pod.cpu_milli.div_ceil(1000)).unwrap_or(u32::MAX)),
        memory_mib: (pod.memory_mib > 0).then_some(pod.memory_mib),
        time_limit_minutes: job
            .spec
            .active_deadline_seconds
            .map(|s| u32::try_from(s.max(1).unsigned_abs().div_ceil(60)).unwrap_or(u32::MAX)),
        array: None,
        placement: Some(SlurmPlacement::Nodelist(record.slots().into_iter().map(String::from).collect())),
        command,
        env: env.plain,
        rank_env: env.rank,
        master_env: env.master,
        workdir: target.workdir.clone(),
        output: None,
        rendezvous_port: trainyard_bridges::render::policy::MASTER_PORT,
    };
    gang.validate("TrainJob").map_err(|e| match e {
        SlurmSpecError::Invalid { field, message, .. } => problem(slurm_field(&field), message),
        other => problem("spec", other.to_string()),
    })?;
    Ok(gang)
}

/// Checks before admission that `job` can run on Slurm, by converting it for `pods` made-up hosts.
pub fn check(
    job: &bridge::TrainJob,
    runtime: &bridge::TrainingRuntime,
    target: &SlurmTarget,
    pod: &Resources,
    pods: u32,
) -> Result<(), Problem> {
    let nodes = (0..pods).map(|i| (format!("slot-{i}"), 1)).collect();
    slurm_gang(
        job,
        runtime,
        target,
        pod,
        &AdmissionRecord { nodes, domain: None, at: 0, cost: 0, slurm: true, devices: Vec::new() },
    )
    .map(|_| ())
}

/// Where a field of the Slurm job comes from in the TrainJob.
fn slurm_field(field: &str) -> String {
    match field.split(['.', '[']).next().unwrap_or_default() {
        "env" | "rankEnv" | "masterEnv" => "spec.trainer.env".into(),
        "command" => "spec.trainer.command".into(),
        "workdir" | "partition" | "account" | "qos" => format!("Queue spec.slurm.{field}"),
        "name" | "gang" => "metadata.name".into(),
        _ => format!("spec ({field})"),
    }
}

#[derive(Default)]
struct Env {
    plain: BTreeMap<String, String>,
    rank: Vec<String>,
    master: BTreeMap<String, String>,
}

impl Env {
    /// Names whose value differs per node, known only inside the job.
    fn per_node(&self) -> Vec<&str> {
        self.rank.iter().map(String::as_str).chain(self.master.keys().map(String::as_str)).collect()
    }
}

/// The container's env as a Slurm job sets it.
fn translate_env(container: &Container, job_name: &str) -> Result<Env, Problem> {
    if !container.env_from.is_empty() {
        return Err(problem("spec.trainer.envFrom", "envFrom reads ConfigMaps or Secrets, which Slurm nodes cannot"));
    }
    let first_host = first_node_host(job_name);
    let mut env = Env::default();
    for EnvVar { name, value, value_from } in &container.env {
        let field = format!("spec.trainer.env[{name}]");
        match (value, value_from) {
            (_, Some(from)) if is_completion_index(from) => env.rank.push(name.clone()),
            (_, Some(_)) => {
                return Err(problem(field, "valueFrom is resolved by the kubelet, which a Slurm node does not run"));
            }
            (Some(v), None)
                if v.strip_prefix(&first_host).is_some_and(|rest| rest.is_empty() || rest.starts_with(':')) =>
            {
                env.master.insert(name.clone(), v[first_host.len()..].to_string());
            }
            (Some(v), None) if v.contains(&first_host) => {
                return Err(problem(
                    field,
                    format!("only `{first_host}` or `{first_host}:<port>` can become the first Slurm host, not {v:?}"),
                ));
            }
            (Some(v), None) => {
                let expanded = expand(v, &env.plain, &env.per_node()).map_err(|m| problem(&field, m))?;
                env.plain.insert(name.clone(), expanded);
            }
            (None, None) => {
                env.plain.insert(name.clone(), String::new());
            }
        }
    }
    Ok(env)
}

fn is_completion_index(from: &serde_json::Value) -> bool {
    from.pointer("/fieldRef/fieldPath").and_then(|p| p.as_str()) == Some(COMPLETION_INDEX_PATH)
}

/// The program and its arguments with Kubernetes' `$(VAR)` references expanded, as the kubelet would.
fn command_of(container: &Container, env: &Env) -> Result<Vec<String>, Problem> {
    let per_node = env.per_node();
    let words: Vec<String> = container
        .command
        .iter()
        .flatten()
        .chain(container.args.iter().flatten())
        .map(|w| expand(w, &env.plain, &per_node))
        .collect::<Result<_, _>>()
        .map_err(|m| problem("spec.trainer.command", m))?;
    if words.is_empty() {
        return Err(problem(
            "spec.trainer.command",
            "a Slurm job runs a command on the host, not an image's entrypoint; set command",
        ));
    }
    Ok(words)
}

/// Kubernetes' expansion of `$(VAR)` in command, args and env values: a defined variable is
/// replaced, `$$` is a literal `$`, anything else stays as written. A reference to a `per_node`
/// variable (rank, first host) is an error: its value exists only inside the job, where the
/// program can read it from its environment.
fn expand(text: &str, env: &BTreeMap<String, String>, per_node: &[&str]) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
            && per_node.contains(&&inner[..end])
        {
            let name = &inner[..end];
            return Err(format!(
                "$({name}) differs per node on Slurm and cannot be expanded in advance; read {name} from the environment"
            ));
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
            && let Some(value) = env.get(&inner[..end])
        {
            out.push_str(value);
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_references_expand_like_the_kubelet() {
        let env: BTreeMap<String, String> = [("A".into(), "x".into()), ("B".into(), "$(A)".into())].into();
        assert_eq!(expand("$(A)-$(B)-$(C)-$$(A)-$-$(", &env, &[]).unwrap(), "x-$(A)-$(C)-$(A)-$-$(");
        let err = expand("--node_rank=$(PET_NODE_RANK)", &env, &["PET_NODE_RANK"]).unwrap_err();
        assert!(err.contains("$(PET_NODE_RANK) differs per node"), "{err}");
        assert_eq!(expand("$$(PET_NODE_RANK)", &env, &["PET_NODE_RANK"]).unwrap(), "$(PET_NODE_RANK)");
    }

    #[test]
    fn gang_ids_lead_back_to_the_trainjob() {
        let record = AdmissionRecord {
            nodes: vec![("n1".into(), 1)],
            domain: None,
            at: 42,
            cost: 0,
            slurm: true,
            devices: Vec::new(),
        };
        let id = gang_id("team", "llm", "0a-1b", &record);
        assert_eq!(id, "team/llm/0a-1b@42");
        assert_eq!(job_key_of(&id).as_deref(), Some("team/llm"));
        assert_eq!(job_key_of("tests/manual-1"), None);
    }
}
