//! What a TrainJob asks of the scheduler: its queue, priority and gang shape, or why it cannot ask.

use trainyard_bridges::render;
use trainyard_bridges::trainer as bridge;
use trainyard_bridges::{RenderOptions, WorkloadKind, workload_kind};
use trainyard_policies::PolicyConfig;
use trainyard_topology::eligibility::HostFilter;
use trainyard_topology::{GangShape, TopologyRequest};

use std::collections::BTreeMap;

use crate::api::worker_cluster::{CLUSTER_LEVEL_LABEL, WORKER_CLUSTER_ANNOTATION};
use crate::api::{PRIORITY_CLASS_LABEL, QUEUE_LABEL, REQUIRED_TOPOLOGY, RUNTIME_ESTIMATE_ANNOTATION, SlurmTarget};
use crate::controller::acting::binders::BinderSupport;

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
    /// How long it says it will run, seconds (`trainyard.io/runtime-estimate`); the policy's
    /// default applies without one.
    pub runtime_estimate: Option<u64>,
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
    pub(crate) fn new(
        reason: &'static str,
        field: impl Into<String>,
        message: impl Into<String>,
        terminal: bool,
    ) -> Problem {
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
    /// The binders the API server serves, and the cluster's default.
    pub binders: BinderSupport,
    /// A fleet's manager: a TrainJob may name the worker cluster it runs in.
    pub fleet: bool,
}

/// No Slurm queues.
static NO_SLURM_QUEUES: BTreeMap<String, SlurmTarget> = BTreeMap::new();

impl<'a> IntentContext<'a> {
    /// A context for a Kubernetes-only controller.
    pub fn new(policy: &'a PolicyConfig, gpu_resource: &'a str) -> IntentContext<'a> {
        IntentContext {
            policy,
            gpu_resource,
            slurm_queues: &NO_SLURM_QUEUES,
            slurm_configured: false,
            binders: BinderSupport::ANY,
            fleet: false,
        }
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
    if let Some((field, message)) = ctx.binders.problem(&runtime.spec, &runtime_name) {
        return Err(Problem::new("BinderNotServed", field, message, false));
    }
    let jobset = render::render_jobset(job, &runtime.spec, &RenderOptions::default())
        .map_err(|e| Problem::new("InvalidSpec", render_error_field(&e), e.to_string(), true))?;
    let (shape, mut hosts) =
        crate::controller::deciding::pod_sets::gang_shape(&job.metadata.annotations, &jobset, kind, ctx.gpu_resource)?;
    if ctx.fleet {
        pin_to_worker(&job.metadata.annotations, &mut hosts)?;
    }
    let topology = shape.topology.clone();
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
    let runtime_estimate = match job.metadata.annotations.get(RUNTIME_ESTIMATE_ANNOTATION) {
        None => None,
        Some(text) => Some(trainyard_policies::parse_duration(text).filter(|&s| s > 0).ok_or_else(|| {
            Problem::new(
                "InvalidSpec",
                format!("metadata.annotations[\"{RUNTIME_ESTIMATE_ANNOTATION}\"]"),
                format!("{text:?} is not a duration such as 90m, 4h or 1h30m"),
                false,
            )
        })?),
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
        crate::controller::slurm::gang_job::check(job, runtime, target, &shape.largest_pod(), shape.pods())?;
    }
    // A Slurm gang always gets its hosts as a node list.
    let domain_mode = domain_mode && slurm.is_none();
    Ok(GangIntent { queue, priority, shape, kind, domain_mode, slurm, hosts, runtime_estimate })
}

/// A fleet's manager: the worker cluster a TrainJob names (`trainyard.io/worker-cluster`) is a
/// node selector on the fleet's cluster level, so the gang goes to that worker or waits for it
/// (a worker the fleet lacks is named in the wait: no host passes that selector). Elsewhere the
/// annotation means nothing: a worker's trainyard reads it on the copy and ignores it.
fn pin_to_worker(annotations: &BTreeMap<String, String>, hosts: &mut HostFilter) -> Result<(), Problem> {
    let Some(name) = annotations.get(WORKER_CLUSTER_ANNOTATION) else { return Ok(()) };
    let part = |p: &str| {
        !p.is_empty()
            && p.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !p.starts_with('-')
            && !p.ends_with('-')
    };
    if name.len() > 253 || !name.split('.').all(part) {
        return Err(Problem::new(
            "InvalidSpec",
            format!("metadata.annotations[\"{WORKER_CLUSTER_ANNOTATION}\"]"),
            format!("{name:?} is not a WorkerCluster name (a DNS subdomain)"),
            false,
        ));
    }
    hosts.node_selector.insert(CLUSTER_LEVEL_LABEL.to_string(), name.clone());
    Ok(())
}

/// The field a render error names, for the condition.
fn render_error_field(e: &trainyard_bridges::RenderError) -> String {
    e.field().to_string()
}
