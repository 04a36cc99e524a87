//! What a TrainJob asks of the scheduler: its queue, priority and gang shape, or why it cannot ask.

use serde_json::Value;
use trainyard_bridges::jobset::JobSet;
use trainyard_bridges::render::{self, gang_replicated_jobs};
use trainyard_bridges::trainer as bridge;
use trainyard_bridges::{RenderOptions, WorkloadKind, workload_kind};
use trainyard_policies::PolicyConfig;
use trainyard_topology::eligibility::HostFilter;
use trainyard_topology::sources::k8s_nodes::quantity::{parse_mebibytes, parse_millis, parse_whole};
use trainyard_topology::{GangShape, Resources, TopologyRequest};

use std::collections::BTreeMap;

use crate::api::{
    PREFERRED_TOPOLOGY, PRIORITY_CLASS_LABEL, QUEUE_LABEL, REQUIRED_TOPOLOGY, SLICE_REQUIRED_TOPOLOGY, SLICE_SIZE,
    SlurmTarget, UNCONSTRAINED_TOPOLOGY,
};

/// Annotation choosing how an admission reaches the pods: `pods` (default: each pod gated and bound
/// to its host) or `domain` (a node selector on the required level's domain; kube-scheduler picks hosts).
pub const PLACEMENT_MODE_ANNOTATION: &str = "trainyard.io/placement-mode";

/// A TrainJob the scheduler can queue.
#[derive(Clone, Debug, PartialEq)]
pub struct GangIntent {
    /// Queue it is charged to.
    pub queue: String,
    /// Priority from its class.
    pub priority: i32,
    /// Pods, pod shape and topology request.
    pub shape: GangShape,
    /// JobSet or LeaderWorkerSet.
    pub kind: WorkloadKind,
    /// Node selector on the domain instead of per-pod binding.
    pub domain_mode: bool,
    /// Set when its queue runs on Slurm: where its Slurm job goes.
    pub slurm: Option<SlurmTarget>,
    /// The hosts its pods may use: tolerations, node selector and required affinity of the gang's
    /// pod template (runtime and TrainJob overrides merged, as rendered).
    pub hosts: HostFilter,
}

/// Why a TrainJob cannot be queued, naming the field at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Condition reason (`RuntimeNotFound`, `InvalidSpec`, `InvalidTopologyRequest`, ...).
    pub reason: &'static str,
    /// The field at fault, e.g. `spec.trainer.numNodes`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
    /// The TrainJob can never run as written (an immutable field is wrong): it is marked Failed.
    /// Otherwise it stays Queued=False and is looked at again when something changes.
    pub terminal: bool,
}

impl Problem {
    fn new(reason: &'static str, field: impl Into<String>, message: impl Into<String>, terminal: bool) -> Problem {
        Problem { reason, field: field.into(), message: message.into(), terminal }
    }

    /// `field: message`, the condition message.
    pub fn describe(&self) -> String {
        format!("{}: {}", self.field, self.message)
    }
}

/// Where the cluster's GPUs are counted, and which levels exist.
#[derive(Clone, Debug)]
pub struct IntentContext<'a> {
    /// The policy (priority classes).
    pub policy: &'a PolicyConfig,
    /// Extended resource counted as GPUs.
    pub gpu_resource: &'a str,
    /// Queues whose gangs run on Slurm, with their targets.
    pub slurm_queues: &'a BTreeMap<String, SlurmTarget>,
    /// Whether this controller has a Slurm cluster to run them on.
    pub slurm_configured: bool,
}

/// No Slurm queues.
static NO_SLURM_QUEUES: BTreeMap<String, SlurmTarget> = BTreeMap::new();

impl<'a> IntentContext<'a> {
    /// A context for a Kubernetes-only controller.
    pub fn new(policy: &'a PolicyConfig, gpu_resource: &'a str) -> IntentContext<'a> {
        IntentContext { policy, gpu_resource, slurm_queues: &NO_SLURM_QUEUES, slurm_configured: false }
    }
}

/// Derives the gang of `job` run with `runtime` (already resolved). The JobSet is rendered once
/// without placement so that every Trainer rule (overrides, patches, numNodes) is applied exactly
/// as for the real launch; its gang replicated jobs give the pod count and shape.
pub fn gang_intent(
    job: &bridge::TrainJob,
    runtime: &bridge::TrainingRuntime,
    ctx: &IntentContext<'_>,
) -> Result<GangIntent, Problem> {
    let labels = &job.metadata.labels;
    let queue = labels.get(QUEUE_LABEL).filter(|q| !q.is_empty()).cloned().ok_or_else(|| {
        Problem::new(
            "NoQueue",
            format!("metadata.labels[\"{QUEUE_LABEL}\"]"),
            "name the trainyard queue this TrainJob is charged to",
            false,
        )
    })?;
    let class = labels.get(PRIORITY_CLASS_LABEL).map(String::as_str);
    let priority = ctx.policy.priority_value(class).ok_or_else(|| {
        Problem::new(
            "InvalidSpec",
            format!("metadata.labels[\"{PRIORITY_CLASS_LABEL}\"]"),
            format!("unknown priority class {:?}", class.unwrap_or_default()),
            false,
        )
    })?;
    let runtime_name = runtime.metadata.name.clone().unwrap_or_default();
    let kind = workload_kind(&runtime.metadata, &runtime_name)
        .map_err(|e| Problem::new("RuntimeNotSupported", "spec.runtimeRef.name", e.to_string(), true))?;
    let jobset = render::render_jobset(job, &runtime.spec, &RenderOptions::default())
        .map_err(|e| Problem::new("InvalidSpec", render_error_field(&e), e.to_string(), true))?;
    let (pods, pod, hosts) = gang_pods(&jobset, ctx.gpu_resource)?;
    let topology = topology_request(&job.metadata.annotations)?;
    let domain_mode = match job.metadata.annotations.get(PLACEMENT_MODE_ANNOTATION).map(String::as_str) {
        None | Some("pods") => false,
        Some("domain") if matches!(topology, TopologyRequest::Required(_)) => true,
        Some("domain") => {
            return Err(Problem::new(
                "InvalidTopologyRequest",
                format!("metadata.annotations[\"{PLACEMENT_MODE_ANNOTATION}\"]"),
                format!("`domain` needs a required level ({REQUIRED_TOPOLOGY})"),
                false,
            ));
        }
        Some(other) => {
            return Err(Problem::new(
                "InvalidTopologyRequest",
                format!("metadata.annotations[\"{PLACEMENT_MODE_ANNOTATION}\"]"),
                format!("{other:?} is neither `pods` nor `domain`"),
                false,
            ));
        }
    };
    let slurm = ctx.slurm_queues.get(&queue).cloned();
    if let Some(target) = &slurm {
        if !ctx.slurm_configured {
            return Err(Problem::new(
                "SlurmNotConfigured",
                format!("metadata.labels[\"{QUEUE_LABEL}\"]"),
                format!("queue {queue} runs on Slurm, but trainyard runs without --slurm (or in companion mode)"),
                false,
            ));
        }
        super::slurm_gang::check(job, runtime, target, &pod, pods)?;
    }
    // A Slurm gang always gets its hosts as a node list.
    let domain_mode = domain_mode && slurm.is_none();
    Ok(GangIntent { queue, priority, shape: GangShape { pods, pod, topology }, kind, domain_mode, slurm, hosts })
}

/// The field a render error names, for the condition.
fn render_error_field(e: &trainyard_bridges::RenderError) -> String {
    e.field().to_string()
}

/// Pods of the gang's replicated jobs, the largest pod among them, and the hosts their pods may
/// use. The engine places a gang on one set of hosts, so replicated jobs whose pods would pass
/// different hosts (selector, affinity or tolerations) are refused rather than placed where some
/// of their pods could not bind.
fn gang_pods(jobset: &JobSet, gpu_resource: &str) -> Result<(u32, Resources, HostFilter), Problem> {
    let rjobs = &jobset.spec.replicated_jobs;
    let mut pods: u64 = 0;
    let mut shape = Resources::ZERO;
    let mut hosts: Option<(HostFilter, &str)> = None;
    for i in gang_replicated_jobs(rjobs) {
        let rjob = &rjobs[i];
        let field = format!("replicatedJobs[{}].template.spec.template.spec", rjob.name);
        let filter = super::host_filter::host_filter(&rjob.template.spec.template.spec, &field)?;
        match &hosts {
            None => hosts = Some((filter, rjob.name.as_str())),
            Some((first, first_name)) if *first != filter => {
                return Err(Problem::new(
                    "InvalidSpec",
                    field,
                    format!(
                        "its nodeSelector, node affinity or tolerations differ from replicatedJobs[{first_name}]'s; \
                         the pods of one gang must be able to use the same nodes"
                    ),
                    true,
                ));
            }
            Some(_) => {}
        }
        let count = i64::from(rjob.replicas.unwrap_or(1)) * i64::from(rjob.template.spec.parallelism.unwrap_or(1));
        pods += u64::try_from(count.max(0)).unwrap_or(0);
        let field = format!("replicatedJobs[{}]", rjob.name);
        let pod = pod_resources(&rjob.template.spec.template.spec, gpu_resource, &field)?;
        shape = Resources {
            gpus: shape.gpus.max(pod.gpus),
            cpu_milli: shape.cpu_milli.max(pod.cpu_milli),
            memory_mib: shape.memory_mib.max(pod.memory_mib),
        };
    }
    let pods = u32::try_from(pods)
        .map_err(|_| Problem::new("InvalidSpec", "spec.trainer.numNodes", format!("{pods} pods is too many"), true))?;
    Ok((pods, shape, hosts.map(|(filter, _)| filter).unwrap_or_default()))
}

/// Requests (or limits, where a request is absent) summed over the pod's containers.
fn pod_resources(
    spec: &trainyard_bridges::pod::PodSpec,
    gpu_resource: &str,
    field: &str,
) -> Result<Resources, Problem> {
    let mut total = Resources::ZERO;
    for c in &spec.containers {
        let resources = c.resources.as_ref();
        let amount = |name: &str| {
            let pick = |kind: &str| resources.and_then(|r| r.get(kind)).and_then(|m| m.get(name)).cloned();
            pick("requests").or_else(|| pick("limits"))
        };
        let at = |name: &str| format!("{field}.containers[{}].resources.requests[\"{name}\"]", c.name);
        let parse = |name: &str, f: fn(&str) -> Result<u64, _>| -> Result<u64, Problem> {
            match amount(name) {
                None => Ok(0),
                Some(Value::Number(n)) => n
                    .as_f64()
                    .filter(|v| *v >= 0.0)
                    .map(|v| f(&v.to_string()).unwrap_or(0))
                    .ok_or_else(|| Problem::new("InvalidSpec", at(name), format!("{n} is not a quantity"), true)),
                Some(Value::String(s)) => {
                    f(&s).map_err(|e| Problem::new("InvalidSpec", at(name), format!("{s:?}: {e}"), true))
                }
                Some(other) => Err(Problem::new("InvalidSpec", at(name), format!("{other} is not a quantity"), true)),
            }
        };
        total.gpus += parse(gpu_resource, parse_whole)?;
        total.cpu_milli += parse("cpu", parse_millis)?;
        total.memory_mib += parse("memory", parse_mebibytes)?;
    }
    Ok(total)
}

/// The topology request from Kueue's podset annotations on the TrainJob. Values are node label keys,
/// which are the level names of a cluster read from its nodes.
fn topology_request(annotations: &std::collections::BTreeMap<String, String>) -> Result<TopologyRequest, Problem> {
    let field = |key: &str| format!("metadata.annotations[\"{key}\"]");
    let bad = |key: &str, message: String| Problem::new("InvalidTopologyRequest", field(key), message, false);
    let get = |key: &str| -> Result<Option<String>, Problem> {
        match annotations.get(key).map(|v| v.trim()) {
            None => Ok(None),
            Some("") => Err(bad(key, "is empty; name a node label key".to_string())),
            Some(v) if v.contains(char::is_whitespace) => Err(bad(key, format!("{v:?} is not a node label key"))),
            Some(v) => Ok(Some(v.to_string())),
        }
    };
    let required = get(REQUIRED_TOPOLOGY)?;
    let preferred = get(PREFERRED_TOPOLOGY)?;
    let unconstrained = annotations.get(UNCONSTRAINED_TOPOLOGY).map(|v| v.trim());
    if let Some(v) = unconstrained
        && v != "true"
        && v != "false"
    {
        return Err(bad(UNCONSTRAINED_TOPOLOGY, format!("{v:?} is not `true` or `false`")));
    }
    let set = [required.is_some(), preferred.is_some(), unconstrained == Some("true")];
    if set.iter().filter(|s| **s).count() > 1 {
        return Err(bad(
            REQUIRED_TOPOLOGY,
            "give only one of the required, preferred or unconstrained annotations".into(),
        ));
    }
    if annotations.contains_key(SLICE_REQUIRED_TOPOLOGY) || annotations.contains_key(SLICE_SIZE) {
        let key = if annotations.contains_key(SLICE_REQUIRED_TOPOLOGY) { SLICE_REQUIRED_TOPOLOGY } else { SLICE_SIZE };
        if let Some(size) = annotations.get(SLICE_SIZE)
            && size.trim().parse::<u32>().map_or(true, |n| n == 0)
        {
            return Err(bad(SLICE_SIZE, format!("{size:?} is not a positive pod count")));
        }
        return Err(Problem::new(
            "UnsupportedTopologyRequest",
            field(key),
            "slice constraints are placed by `trainyard place --slice`, not yet by the controller's engine",
            false,
        ));
    }
    Ok(match (required, preferred) {
        (Some(level), _) => TopologyRequest::Required(level),
        (None, Some(level)) => TopologyRequest::Preferred(level),
        (None, None) => TopologyRequest::Unconstrained,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn kueue_annotations_become_requests() {
        let req = topology_request(&annotations(&[(REQUIRED_TOPOLOGY, "example.com/rack")])).unwrap();
        assert_eq!(req, TopologyRequest::Required("example.com/rack".into()));
        let req = topology_request(&annotations(&[(PREFERRED_TOPOLOGY, "example.com/block")])).unwrap();
        assert_eq!(req, TopologyRequest::Preferred("example.com/block".into()));
        assert_eq!(topology_request(&annotations(&[])).unwrap(), TopologyRequest::Unconstrained);
    }

    fn two_trainer_jobs(second_selector: serde_json::Value) -> JobSet {
        let rjob = |name: &str, selector: serde_json::Value| {
            serde_json::json!({
                "name": name,
                "replicas": 1,
                "template": {
                    "metadata": {"labels": {bridge::ANCESTOR_LABEL: bridge::TRAINER_ANCESTOR}},
                    "spec": {"parallelism": 2, "template": {"spec": {
                        "nodeSelector": selector,
                        "containers": [{"name": "main", "image": "x",
                            "resources": {"requests": {"nvidia.com/gpu": "8"}}}]
                    }}}
                }
            })
        };
        serde_json::from_value(serde_json::json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "j"},
            "spec": {"replicatedJobs": [
                rjob("launcher", serde_json::json!({"pool": "a"})),
                rjob("workers", second_selector),
            ]}
        }))
        .expect("jobset")
    }

    #[test]
    fn gang_jobs_that_would_use_different_nodes_are_refused() {
        let (pods, pod, hosts) =
            gang_pods(&two_trainer_jobs(serde_json::json!({"pool": "a"})), "nvidia.com/gpu").unwrap();
        assert_eq!((pods, pod.gpus), (4, 8));
        assert_ne!(hosts, HostFilter::default(), "the shared selector is kept");
        let p = gang_pods(&two_trainer_jobs(serde_json::json!({"pool": "b"})), "nvidia.com/gpu").unwrap_err();
        assert_eq!(p.reason, "InvalidSpec");
        assert_eq!(p.field, "replicatedJobs[workers].template.spec.template.spec");
        assert!(p.message.contains("replicatedJobs[launcher]"), "{}", p.message);
        assert!(p.terminal);
    }

    #[test]
    fn malformed_annotations_name_the_field() {
        let p = topology_request(&annotations(&[(REQUIRED_TOPOLOGY, " ")])).unwrap_err();
        assert_eq!(p.field, format!("metadata.annotations[\"{REQUIRED_TOPOLOGY}\"]"));
        assert!(!p.terminal);
        let p = topology_request(&annotations(&[(REQUIRED_TOPOLOGY, "a"), (PREFERRED_TOPOLOGY, "b")])).unwrap_err();
        assert_eq!(p.reason, "InvalidTopologyRequest");
        let p = topology_request(&annotations(&[(SLICE_SIZE, "zero")])).unwrap_err();
        assert_eq!(p.field, format!("metadata.annotations[\"{SLICE_SIZE}\"]"));
        let p = topology_request(&annotations(&[(UNCONSTRAINED_TOPOLOGY, "yes")])).unwrap_err();
        assert!(p.message.contains("yes"));
    }
}
