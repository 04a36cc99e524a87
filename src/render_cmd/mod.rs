//! `trainyard render`: what the controller would create for a TrainJob, computed offline.

mod print;

use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use crate::inputs::read_objects;
use clap::Args;
use serde_json::Value;
use std::collections::BTreeMap;

use kube::ResourceExt;
use trainyard::api::{QUEUE_LABEL, Queue, SlurmTarget, TrainJob};
use trainyard::controller::acting::binders::binder_of;
use trainyard::controller::acting::workload_objects;
use trainyard::controller::deciding::intent::{IntentContext, Problem};
use trainyard::controller::deciding::plan::{Mode, companion_patch};
use trainyard::controller::deciding::pod_bindings::GangLayout;
use trainyard::controller::deciding::scheduling_loop::{Decision, JobEntry, JobState, SchedulingLoop};
use trainyard::controller::slurm::cluster_view::node_slot_cluster;
use trainyard::controller::slurm::gang_job::slurm_gang;
use trainyard::controller::watching::scheduler_inputs::{Runtimes, created_s, intent_of};
use trainyard::controller::watching::scheduler_inputs::{Side, policy_with_queues};
use trainyard_bridges::slurm::render_sbatch;
use trainyard_bridges::trainer as bridge;
use trainyard_policies::PolicyConfig;
use trainyard_topology::Cluster;
use trainyard_topology::ClusterSpec;

use crate::controller_cmd::ModeArg;
use crate::inputs::{load_policy, read_text};
use crate::output::Output;
use print::{Binding, Body, Rendering, print};
use trainyard::controller::acting::admission_record::AdmissionRecord;

/// Owner uid stamped on offline renders: a TrainJob read from a file has none yet.
const OFFLINE_UID: &str = "00000000-0000-0000-0000-000000000000";

/// Flags of `trainyard render`.
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// The TrainJob (YAML or JSON).
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub trainjob: PathBuf,
    /// Its TrainingRuntime or ClusterTrainingRuntime.
    #[arg(long, value_name = "FILE")]
    pub runtime: PathBuf,
    /// Cluster to place it on (trainyard's cluster YAML, as for `simulate`); without it the workload
    /// is rendered unplaced, exactly as Kubeflow Trainer would build it.
    #[arg(long, value_name = "FILE")]
    pub topology: Option<PathBuf>,
    /// Policy (built-in name or file) for priority classes and queue quotas.
    #[arg(long, default_value = "fifo", value_name = "POLICY")]
    pub policy: String,
    /// standalone: print the JobSet / LeaderWorkerSet; companion: print the patch trainyard applies
    /// to the TrainJob for Kubeflow Trainer to launch it.
    #[arg(long, value_enum, default_value = "standalone")]
    pub mode: ModeArg,
    /// Queue objects with `spec.slurm` (YAML documents: the leaf and its parents): the TrainJob
    /// runs in its queue on Slurm, so print the batch script of its Slurm job instead of a JobSet.
    /// `--topology` is then the Slurm cluster (e.g. from `trainyard slurm nodes --out`), where
    /// each pod takes one node.
    #[arg(long, value_name = "FILE", requires = "topology", conflicts_with = "mode")]
    pub slurm_queues: Option<PathBuf>,
    /// ResourceClaimTemplates (YAML documents or a List) that the TrainJob's
    /// `resourceClaimsPerNode` names: their GPU count sets the per-node process count, as Kubeflow
    /// Trainer v2.4 reads it.
    #[arg(long, value_name = "FILE")]
    pub claim_templates: Option<PathBuf>,
    /// The scheduler that binds the gang's pods when it is not kube-scheduler (standalone mode):
    /// also print its PodGroup, and mark the pods for it. A runtime's `podGroupPolicy` wins.
    #[arg(long, value_enum, value_name = "BINDER")]
    pub binder: Option<crate::controller_cmd::BinderArg>,
    /// The extended resource counted as the accelerator, as the Topology's `gpuResource`
    /// (`google.com/tpu` for TPU chips).
    #[arg(long, default_value = trainyard_topology::sources::k8s_nodes::DEFAULT_GPU_RESOURCE, value_name = "NAME")]
    pub gpu_resource: String,
    /// Print as json (a `List` of the objects, or a Slurm job's nodes and script), yaml (the
    /// objects, or for Slurm the same document as json), table (the objects and their pods) or
    /// wide (also each pod's node). Default: the manifests as they are applied.
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Output>,
}

fn parse<T: serde::de::DeserializeOwned>(path: &std::path::Path) -> Result<T> {
    let text = read_text(path)?;
    Ok(trainyard_topology::input_text::yaml(&text, &path.display().to_string())?)
}

/// Reads, places and prints.
pub fn run(args: &RenderArgs) -> Result<()> {
    let mut job: TrainJob = parse(&args.trainjob)?;
    let file = args.trainjob.display().to_string();
    if job.metadata.name.as_deref().unwrap_or_default().is_empty() {
        bail!("{file}: metadata.name is required");
    }
    let mut notes = Vec::new();
    job.metadata.namespace.get_or_insert_with(|| "default".into());
    if job.metadata.uid.is_none() {
        job.metadata.uid = Some(OFFLINE_UID.into());
        notes
            .push(format!("ownerReferences carry the placeholder uid {OFFLINE_UID}; the API server sets the real one"));
    }
    let slurm_queues = match &args.slurm_queues {
        Some(path) => read_queues(path)?,
        None => Vec::new(),
    };
    let labels = job.metadata.labels.get_or_insert_with(Default::default);
    if let Some(path) = &args.slurm_queues {
        let queue_file = path.display();
        let leaf = match labels.get(QUEUE_LABEL) {
            Some(q) => slurm_queues.iter().find(|x| x.metadata.name.as_ref() == Some(q)),
            None if slurm_queues.len() == 1 => slurm_queues.first(),
            None => bail!("{file}: no {QUEUE_LABEL} label to pick one of the queues of {queue_file}"),
        };
        let Some(leaf) = leaf else {
            bail!("{file}: queue {:?} is not in {queue_file}", labels.get(QUEUE_LABEL).cloned().unwrap_or_default())
        };
        if leaf.spec.slurm.is_none() {
            bail!("{queue_file}: Queue {}: spec.slurm is not set; this queue runs on Kubernetes", leaf.name_any());
        }
        let name = leaf.name_any();
        labels.insert(QUEUE_LABEL.into(), name);
    }
    if !labels.contains_key(QUEUE_LABEL) {
        labels.insert(QUEUE_LABEL.into(), "default".into());
        notes.push(format!("no {QUEUE_LABEL} label: charged to queue `default`"));
    }
    let runtime_value: Value = parse(&args.runtime)?;
    let runtime_file = args.runtime.display().to_string();
    let runtime: bridge::TrainingRuntime = serde_json::from_value(runtime_value.clone())
        .map_err(|e| anyhow::anyhow!("{runtime_file}: not a TrainingRuntime: {e}"))?;
    let kind = runtime_value["kind"].as_str().unwrap_or_default();
    let mut runtimes = Runtimes::default();
    match kind {
        bridge::TRAINING_RUNTIME => {
            let ns = runtime.metadata.namespace.clone().or_else(|| job.metadata.namespace.clone()).unwrap_or_default();
            runtimes.namespaced.insert((ns, runtime.metadata.name.clone().unwrap_or_default()), runtime);
        }
        bridge::CLUSTER_TRAINING_RUNTIME => {
            runtimes.cluster.insert(runtime.metadata.name.clone().unwrap_or_default(), runtime);
        }
        other => bail!("{runtime_file}: kind {other:?} is not TrainingRuntime or ClusterTrainingRuntime"),
    }
    let policy: PolicyConfig = match &args.slurm_queues {
        None => load_policy(&args.policy)?,
        Some(path) => {
            // The Slurm loop's quota tree is the Queues' alone; a policy file adds its global settings.
            let text = if std::path::Path::new(&args.policy).exists() {
                read_text(args.policy.as_ref())?
            } else {
                String::new()
            };
            let refs: Vec<&Queue> = slurm_queues.iter().collect();
            policy_with_queues(&text, &args.policy, &refs, Side::Slurm)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
        }
    };
    let gpu = args.gpu_resource.as_str();
    let slurm_targets: BTreeMap<String, SlurmTarget> =
        slurm_queues.iter().filter_map(|q| Some((q.metadata.name.clone()?, q.spec.slurm.clone()?))).collect();
    let ctx =
        IntentContext { slurm_queues: &slurm_targets, slurm_configured: true, ..IntentContext::new(&policy, gpu) };
    let (intent, runtime) = intent_of(&job, &runtimes, &ctx);
    let problem_error = |p: Problem| anyhow::anyhow!("{file}: {}: {} ({})", p.field, p.message, p.reason);
    let intent = intent.map_err(problem_error)?;
    let runtime = runtime.context("the runtime resolved")?;
    let bridge_job = job.to_bridge()?;

    let mut torus_at: BTreeMap<String, String> = BTreeMap::new();
    let record = match &args.topology {
        None => None,
        Some(path) => {
            let (text, name) = (read_text(path)?, path.display().to_string());
            let mut looped = match intent.slurm {
                None => SchedulingLoop::new(Cluster::from_yaml(&text, &name)?, policy.clone())?,
                Some(_) => {
                    let spec = ClusterSpec::from_yaml(&text, &name)?.resolve(&name)?;
                    SchedulingLoop::new(node_slot_cluster(spec)?, policy.clone())?.with_node_slots()
                }
            };
            let entry = JobEntry {
                key: job.key(),
                uid: job.metadata.uid.clone().unwrap_or_default(),
                created: created_s(&job),
                order: 0,
                state: JobState::Waiting(intent.clone()),
            };
            let (decisions, _) = looped.cycle(std::slice::from_ref(&entry), created_s(&job));
            // Where each TPU host sits on its torus, for the comment lines.
            let topo = looped.engine().cluster().topology();
            for (torus, _) in topo.tori() {
                for (h, chip) in topo.torus_layout(torus) {
                    let chip: Vec<String> = chip.iter().map(u32::to_string).collect();
                    let at = format!("chip {} of torus {}", chip.join(","), topo.path(torus));
                    torus_at.insert(topo.host_name(h).to_string(), at);
                }
            }
            match decisions.get(&job.key()) {
                Some(Decision::Admit(record)) => Some(record.clone()),
                Some(Decision::Pending { reason, message } | Decision::Unschedulable { reason, message }) => {
                    bail!("{file}: would not be admitted on {}: {reason}: {message}", path.display())
                }
                other => bail!("{file}: no admission on {}: {other:?}", path.display()),
            }
        }
    };
    let mut comments: Vec<String> = notes.iter().map(|n| format!("note: {n}")).collect();
    if let (Some(target), Some(r)) = (&intent.slurm, &record) {
        let gang = slurm_gang(&bridge_job, runtime, target, &intent.shape.largest_pod(), r).map_err(problem_error)?;
        comments.push(format!(
            "admitted: {} pods on {} Slurm nodes, placement cost {}",
            r.pods(),
            r.nodes.len(),
            r.cost
        ));
        comments.push("the gang id carries the admission time; here the TrainJob's creation time".into());
        let bindings = r.slots().iter().enumerate().map(|(i, node)| Binding::on(format!("pod {i}"), node)).collect();
        let name = format!("{}/{}", job.metadata.namespace.as_deref().unwrap_or_default(), job.name_any());
        let body = Body::Sbatch { script: render_sbatch(&gang), name };
        let rendering = Rendering { comments, record, bindings, body };
        return print(&rendering, args.output);
    }
    let placement = workload_objects::placement_of(job.metadata.name.as_deref().unwrap_or_default(), record.as_ref());
    let claim_gpus = match &args.claim_templates {
        Some(path) => {
            let objects: Vec<serde_json::Value> = read_objects(path)?.into_iter().map(|(_, v)| v).collect();
            let templates = objects.iter().filter(|o| o["kind"] == "ResourceClaimTemplate").count();
            if templates == 0 {
                // Read as none, the claims would silently count no GPUs and change the workers' env.
                bail!(
                    "{}: --claim-templates holds no ResourceClaimTemplate ({} other objects)",
                    path.display(),
                    objects.len()
                );
            }
            trainyard_bridges::render::claims::gpus_by_template(&objects)
        }
        None => BTreeMap::new(),
    };
    let opts = trainyard_bridges::RenderOptions { placement, claim_gpus, ..Default::default() };
    let binder =
        binder_of(&runtime.spec, runtime.metadata.name.as_deref().unwrap_or_default(), args.binder.map(|b| b.kind()))
            .filter(|_| args.mode == ModeArg::Standalone);
    let rendered = workload_objects::render(&bridge_job, runtime, intent.kind, opts, None, binder.as_ref())
        .map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
    let mut bindings = Vec::new();
    if let Some(r) = &record {
        comments.push(format!("admitted: {} pods on {} nodes, placement cost {}", r.pods(), r.nodes.len(), r.cost));
        match &r.domain {
            Some(selector) => {
                let terms: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
                comments.push(format!("node selector on every gang pod: {}", terms.join(", ")));
            }
            None => bindings = bindings_of(&rendered.layout, r, &torus_at),
        }
    }
    let mode = if args.mode == ModeArg::Companion { Mode::Companion } else { Mode::Standalone };
    let objects = match (mode, &record) {
        (Mode::Companion, Some(r)) => {
            let name = job.metadata.name.clone().unwrap_or_default();
            vec![serde_json::json!({
                "apiVersion": bridge::API_VERSION,
                "kind": "TrainJob",
                "metadata": {"name": name, "namespace": job.metadata.namespace},
                "spec": {"suspend": false, "runtimePatches": [companion_patch(&name, &rendered.layout, r)]},
            })]
        }
        (Mode::Companion, None) => bail!("--mode companion needs --topology: the patch carries the placement"),
        // A manager writes a copy of the TrainJob; its worker renders what standalone mode does.
        (Mode::Standalone | Mode::Manager, _) => {
            let flux = rendered.flux.iter().flat_map(|f| [&f.config_map, &f.secret]);
            rendered
                .binder_group
                .iter()
                .chain([&rendered.workload])
                .chain(rendered.hostfile.iter())
                .chain(flux)
                .cloned()
                .collect()
        }
    };
    let pods = layout_pods(&rendered.layout, &rendered.workload);
    print(&Rendering { comments, record, bindings, body: Body::Objects { objects, pods } }, args.output)
}

/// The Queue objects of a multi-document YAML file.
fn read_queues(path: &std::path::Path) -> Result<Vec<Queue>> {
    let mut queues = Vec::new();
    for (line, body) in crate::inputs::documents(path)? {
        let queue: Queue =
            trainyard_topology::input_text::yaml(&body, &format!("{} (document from line {line})", path.display()))?;
        queues.push(queue);
    }
    if queues.is_empty() {
        bail!("{}: no Queue object", path.display());
    }
    Ok(queues)
}

/// Where each gang pod goes, in the order the controller binds them.
fn bindings_of(layout: &GangLayout, record: &AdmissionRecord, torus_at: &BTreeMap<String, String>) -> Vec<Binding> {
    let slots = record.slots();
    let mut pods = Vec::new();
    match layout {
        GangLayout::JobSet(rjobs) => {
            for (name, replicas, per_job) in rjobs {
                for job in 0..*replicas {
                    for index in 0..*per_job {
                        pods.push(format!("{name} job {job} index {index}"));
                    }
                }
            }
        }
        GangLayout::LeaderWorkerSet { leader_in_gang } => {
            let first = if *leader_in_gang { 0 } else { 1 };
            pods.extend((0..slots.len()).map(|i| format!("worker-index {}", i + first)));
        }
    }
    pods.into_iter()
        .enumerate()
        .map(|(i, pod)| {
            let node = slots.get(i).copied().unwrap_or("?");
            Binding { at: torus_at.get(node).cloned(), ..Binding::on(pod, node) }
        })
        .collect()
}

/// The gang pods a workload starts: from its layout, or an LWS's size times its replicas.
fn layout_pods(layout: &GangLayout, workload: &Value) -> u64 {
    match layout {
        GangLayout::JobSet(rjobs) => {
            rjobs.iter().map(|(_, replicas, per_job)| u64::from(*replicas) * u64::from(*per_job)).sum()
        }
        GangLayout::LeaderWorkerSet { .. } => {
            let replicas = workload["spec"]["replicas"].as_u64().unwrap_or(1);
            replicas * workload["spec"]["leaderWorkerTemplate"]["size"].as_u64().unwrap_or(1)
        }
    }
}
