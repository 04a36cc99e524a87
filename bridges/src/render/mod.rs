//! Renders a TrainJob plus its runtime into the JobSet the Trainer controller would build, plus placement.

pub mod claims;
pub mod flux;
pub mod lws;
mod patch;
pub mod policy;

use serde_json::{Value, json};

use crate::error::RenderError;
use crate::jobset::{self, JobSet, ReplicatedJob, apply_webhook_defaults};
use crate::meta::{ObjectMeta, OwnerReference};
use crate::pod::{Container, EnvVar};
use crate::trainer::{
    self, ANCESTOR_LABEL, DATASET_INITIALIZER, LAUNCHER, MODEL_INITIALIZER, NODE, TRAINER_ANCESTOR, TrainJob,
    TrainingRuntimeSpec,
};

/// Scheduling gate trainyard removes once it has bound the gang's pods.
pub const TOPOLOGY_GATE: &str = "trainyard.io/topology";
/// Pod label naming the gang a pod belongs to.
pub const GANG_LABEL: &str = "trainyard.io/gang";
/// Env prefixes only the controller may set.
const RESERVED_ENV: [&str; 4] = ["PET_", "DMLC_", "OMPI_MCA_", "PRTE_MCA_"];

/// Where trainyard put the gang, as far as the JobSet needs to know.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Placement {
    /// No trainyard placement: the pods go to whatever scheduler the cluster runs.
    #[default]
    Unplaced,
    /// Every pod is gated with [`TOPOLOGY_GATE`] and labelled [`GANG_LABEL`]`=gang`; trainyard binds them.
    Gated {
        /// Gang name.
        gang: String,
    },
    /// The whole gang sits in one topology domain: pods get a node selector with the domain's label
    /// and those of its enclosing domains (a rack name may repeat across blocks), plus the gang label.
    Domain {
        /// Gang name.
        gang: String,
        /// Node label key and value of the domain and of each enclosing level, outermost first.
        selector: Vec<(String, String)>,
    },
}

/// Rendering knobs that come from trainyard rather than from the TrainJob.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RenderOptions {
    /// Placement to stamp on every pod template.
    pub placement: Placement,
    /// Also add the runtime's `podGroupPolicy` pod markers (coscheduling label / Volcano annotation), as the
    /// Trainer controller does; off when trainyard itself gang-schedules.
    pub pod_group_markers: bool,
    /// GPUs each ResourceClaimTemplate asks for, by name ([`claims::gpus_by_template`]): the per-node
    /// GPU count of a trainer whose GPUs come through `resourceClaimsPerNode`.
    pub claim_gpus: std::collections::BTreeMap<String, i64>,
}

/// Renders `job` against the (already resolved) `runtime` spec: runtime template, patches, node counts,
/// trainer overrides, framework env, initializers, placement, owner reference and JobSet webhook defaults.
pub fn render_jobset(
    job: &TrainJob,
    runtime: &TrainingRuntimeSpec,
    opts: &RenderOptions,
) -> Result<JobSet, RenderError> {
    let name = job.metadata.name.clone().unwrap_or_default();
    let namespace = job.metadata.namespace.clone();
    let id = format!("{}/{}", namespace.as_deref().unwrap_or(""), name);
    let missing = |field: &str| RenderError::MissingField { job: id.clone(), field: field.to_owned() };
    if name.is_empty() {
        return Err(missing("metadata.name"));
    }
    let uid = job.metadata.uid.clone().filter(|u| !u.is_empty()).ok_or_else(|| missing("metadata.uid"))?;
    check_runtime_ref(job, &id)?;
    let runtime_name = job.spec.runtime_ref.name.clone();
    let trainer_spec = job.spec.trainer.clone().unwrap_or_default();
    for (i, var) in trainer_spec.env.iter().enumerate() {
        if let Some(prefix) = RESERVED_ENV.iter().find(|p| var.name.starts_with(*p)) {
            return Err(RenderError::Forbidden {
                job: id.clone(),
                field: format!("spec.trainer.env[{i}].name"),
                message: format!("{:?} uses the reserved prefix {prefix}", var.name),
            });
        }
    }
    claims::check_resources_per_node(&id, trainer_spec.resources_per_node.as_ref())?;
    let ml = runtime.ml_policy.clone().unwrap_or_default();
    let (num_nodes, nodes_field) = match (trainer_spec.num_nodes, ml.num_nodes) {
        (Some(n), _) => (n, "spec.trainer.numNodes"),
        (None, Some(n)) => (n, "runtime spec.mlPolicy.numNodes"),
        (None, None) => (1, "runtime spec.mlPolicy.numNodes"),
    };
    if num_nodes < 1 {
        return Err(RenderError::ZeroNodes { job: id, field: nodes_field.into(), value: num_nodes });
    }

    let mut spec = runtime.template.spec.clone();
    let mut meta = runtime.template.metadata.clone();
    patch::apply_all(job, &id, &mut spec, &mut meta)?;

    let ancestor = |r: &ReplicatedJob| r.template.metadata.labels.get(ANCESTOR_LABEL).cloned().unwrap_or_default();
    let trainers: Vec<usize> =
        (0..spec.replicated_jobs.len()).filter(|&i| ancestor(&spec.replicated_jobs[i]) == TRAINER_ANCESTOR).collect();
    if trainers.is_empty() {
        return Err(RenderError::NoTrainerJob { job: id, runtime: runtime_name });
    }
    let node_missing = |rjob: &str| RenderError::MissingNodeContainer {
        job: id.clone(),
        runtime: runtime_name.clone(),
        replicated_job: rjob.to_owned(),
    };
    // The API server keys replicated jobs by name: two of one name never reach a controller.
    for (i, rjob) in spec.replicated_jobs.iter().enumerate() {
        if spec.replicated_jobs[..i].iter().any(|r| r.name == rjob.name) {
            return Err(RenderError::DuplicateName {
                job: id,
                runtime: runtime_name,
                field: format!("spec.template.spec.replicatedJobs[{i}].name"),
                name: rjob.name.clone(),
            });
        }
    }
    let position = |rjobs: &[ReplicatedJob], wanted: &str| rjobs.iter().position(|r| r.name == wanted);
    let launcher_as_node = ml.mpi.as_ref().is_some_and(|m| m.run_launcher_as_node == Some(true));
    // MPI scales the `node` job to numNodes (less the launcher when it runs as one): without it
    // the gang would shrink to the launcher alone.
    if ml.mpi.is_some() && num_nodes >= 2 {
        for wanted in [LAUNCHER, NODE] {
            if position(&spec.replicated_jobs, wanted).is_none() {
                return Err(RenderError::MissingReplicatedJob {
                    job: id,
                    runtime: runtime_name,
                    replicated_job: wanted.into(),
                });
            }
        }
    }

    // Counts and resources first: the framework defaults below read the merged resources.
    let mut counts: Vec<i32> = spec.replicated_jobs.iter().map(|r| r.template.spec.parallelism.unwrap_or(1)).collect();
    for &i in &trainers {
        // Trainer v2.4: a trainer job of several replicas (one per TPU slice) shares the nodes.
        let rjob = &mut spec.replicated_jobs[i];
        let replicas = rjob.replicas.unwrap_or(1).max(1);
        if num_nodes % replicas != 0 {
            return Err(RenderError::UnevenReplicas {
                job: id,
                field: nodes_field.into(),
                num_nodes,
                replicas,
                replicated_job: rjob.name.clone(),
            });
        }
        rjob.replicas = Some(replicas);
        counts[i] = num_nodes / replicas;
    }
    let mut resource_targets = trainers.clone();
    if ml.mpi.is_some() {
        if let Some(i) = position(&spec.replicated_jobs, LAUNCHER) {
            counts[i] = 1;
        }
        if let Some(i) = position(&spec.replicated_jobs, NODE) {
            counts[i] = if launcher_as_node { (num_nodes - 1).max(1) } else { num_nodes };
            if launcher_as_node && !resource_targets.contains(&i) {
                resource_targets.push(i);
            }
        }
    }
    for &i in &resource_targets {
        let rjob = &mut spec.replicated_jobs[i];
        let Some(node) = node_container(rjob) else { return Err(node_missing(&rjob.name)) };
        if let Some(extra) = &trainer_spec.resources_per_node {
            let mut merged = node.resources.take().unwrap_or_else(|| json!({}));
            crate::merge::strategic_merge(&mut merged, extra, "resources");
            node.resources = Some(merged);
        }
        let pod = &mut rjob.template.spec.template.spec;
        let at = pod.containers.iter().position(|c| c.name == NODE).expect("found above");
        claims::apply(pod, at, &trainer_spec.resource_claims_per_node);
    }

    // Trainer v2.4: the image also replaces that of every `node` container of a replicated job
    // that is no step at all (the MPI workers, which must run the launcher's image); command and
    // args stay the trainer's, so the workers keep their SSH server.
    if let Some(image) = &trainer_spec.image {
        for rjob in spec.replicated_jobs.iter_mut().filter(|r| ancestor(r).is_empty()) {
            if let Some(node) = node_container(rjob) {
                node.image = Some(image.clone());
            }
        }
    }
    for &i in &trainers {
        let rjob = &mut spec.replicated_jobs[i];
        let Some(node) = node_container(rjob) else { return Err(node_missing(&rjob.name)) };
        if let Some(image) = &trainer_spec.image {
            node.image = Some(image.clone());
        }
        if let Some(command) = &trainer_spec.command {
            node.command = Some(command.clone());
        }
        // Flux hands the TrainJob's args to its entrypoint with the command instead.
        if let Some(args) = trainer_spec.args.as_ref().filter(|_| ml.flux.is_none()) {
            node.args = Some(args.clone());
        }
        for var in &trainer_spec.env {
            node.upsert_env(var.clone());
        }
    }

    if ml.flux.is_some() {
        let Some(i) = position(&spec.replicated_jobs, NODE) else {
            return Err(RenderError::MissingReplicatedJob {
                job: id,
                runtime: runtime_name,
                replicated_job: NODE.into(),
            });
        };
        if node_container(&mut spec.replicated_jobs[i]).is_none() {
            return Err(node_missing(NODE));
        }
        flux::install(&mut spec.replicated_jobs[i], &id, &name, trainer_spec.args.as_deref())?;
    }
    if let Some(torch) = &ml.torch {
        let first = trainers[0];
        let dra = dra_gpus(&spec.replicated_jobs[first], &opts.claim_gpus);
        let node = node_container(&mut spec.replicated_jobs[first]).ok_or_else(|| node_missing(NODE))?;
        let nproc =
            policy::torch_nproc(trainer_spec.num_proc_per_node.as_ref(), torch.num_proc_per_node.as_ref(), node, dra);
        let nodes = counts[first] * spec.replicated_jobs[first].replicas.unwrap_or(1);
        let env = policy::torch_env(&name, nodes, &nproc);
        inject_trainer_env(&mut spec.replicated_jobs, &trainers, &env);
        inject_targets(&mut spec.replicated_jobs, torch.env_injection.as_ref(), &env);
    }
    if ml.jax.is_some() {
        inject_trainer_env(&mut spec.replicated_jobs, &trainers, &policy::jax_env(&name, num_nodes));
    }
    if ml.xgboost.is_some() {
        // GPUs are read after the resourcesPerNode merge above, as the Trainer does.
        let dra = dra_gpus(&spec.replicated_jobs[trainers[0]], &opts.claim_gpus);
        let gpus = node_container(&mut spec.replicated_jobs[trainers[0]])
            .map(|c| policy::gpus_per_node(c))
            .filter(|&g| g > 0)
            .unwrap_or(dra);
        inject_trainer_env(&mut spec.replicated_jobs, &trainers, &policy::xgboost_env(&name, num_nodes, gpus));
    }
    if let Some(mpi) = &ml.mpi {
        let mount = mpi.ssh_auth_mount_path.clone().unwrap_or_else(|| policy::DEFAULT_SSH_PATH.into());
        let launcher = position(&spec.replicated_jobs, LAUNCHER).unwrap_or(trainers[0]);
        let dra = dra_gpus(&spec.replicated_jobs[launcher], &opts.claim_gpus);
        let gpus = node_container(&mut spec.replicated_jobs[launcher])
            .map(|c| policy::gpus_per_node(c))
            .filter(|&g| g > 0)
            .unwrap_or(dra);
        let slots = policy::mpi_slots(trainer_spec.num_proc_per_node.as_ref(), mpi, gpus);
        let rjob = &mut spec.replicated_jobs[launcher];
        let node = node_container(rjob).ok_or_else(|| node_missing(LAUNCHER))?;
        policy::mpi_launcher_env(slots).into_iter().for_each(|v| node.upsert_env(v));
        policy::mount_hostfile(&mut rjob.template.spec.template.spec, &name);
        for wanted in [LAUNCHER, NODE] {
            if let Some(i) = position(&spec.replicated_jobs, wanted) {
                policy::mount_ssh(&mut spec.replicated_jobs[i].template.spec.template.spec, &name, &mount);
            }
        }
    }

    let placed = gang_replicated_jobs(&spec.replicated_jobs);
    for (i, rjob) in spec.replicated_jobs.iter_mut().enumerate() {
        let step = ancestor(rjob);
        let input = job.spec.initializer.as_ref().and_then(|init| match step.as_str() {
            DATASET_INITIALIZER => init.dataset.as_ref(),
            MODEL_INITIALIZER => init.model.as_ref(),
            _ => None,
        });
        if step == DATASET_INITIALIZER || step == MODEL_INITIALIZER {
            rjob.replicas = Some(1);
        }
        if let Some(input) = input {
            let pod = &mut rjob.template.spec.template.spec;
            if let Some(c) = pod.containers.iter_mut().chain(pod.init_containers.iter_mut()).find(|c| c.name == step) {
                if let Some(uri) = &input.storage_uri {
                    c.upsert_env(EnvVar::literal("STORAGE_URI", uri.clone()));
                }
                input.env.iter().for_each(|v| c.upsert_env(v.clone()));
                if let Some(secret) = &input.secret_ref {
                    let from = json!({"secretRef": secret});
                    if !c.env_from.contains(&from) {
                        c.env_from.push(from);
                    }
                }
            }
        }
        rjob.template.spec.parallelism = Some(counts[i]);
        rjob.template.spec.completions = Some(counts[i]);
        stamp_pod(rjob, &name, runtime, opts, placed.contains(&i));
    }

    spec.suspend = Some(job.spec.suspend.unwrap_or(false));
    apply_webhook_defaults(&mut spec);
    let owner = OwnerReference {
        api_version: trainer::API_VERSION.into(),
        kind: "TrainJob".into(),
        name: name.clone(),
        uid,
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let metadata = ObjectMeta {
        name: Some(name),
        namespace,
        labels: meta.labels,
        annotations: meta.annotations,
        owner_references: vec![owner],
        ..ObjectMeta::default()
    };
    Ok(JobSet { api_version: jobset::API_VERSION.into(), kind: jobset::KIND.into(), metadata, spec })
}

/// Rejects `runtimeRef`s that do not name a Trainer runtime.
fn check_runtime_ref(job: &TrainJob, id: &str) -> Result<(), RenderError> {
    let rr = &job.spec.runtime_ref;
    if rr.name.is_empty() {
        return Err(RenderError::MissingField { job: id.to_owned(), field: "spec.runtimeRef.name".into() });
    }
    if let Some(group) = rr.api_group.as_deref().filter(|g| *g != trainer::GROUP) {
        let field = "spec.runtimeRef.apiGroup".into();
        return Err(RenderError::UnsupportedRuntime { job: id.to_owned(), field, value: group.into() });
    }
    match rr.kind.as_deref() {
        None | Some(trainer::CLUSTER_TRAINING_RUNTIME) | Some(trainer::TRAINING_RUNTIME) => Ok(()),
        Some(other) => {
            let field = "spec.runtimeRef.kind".into();
            Err(RenderError::UnsupportedRuntime { job: id.to_owned(), field, value: other.into() })
        }
    }
}

/// The `node` container of a replicated job's pod.
/// GPUs the `node` container of `rjob` gets through its first DRA claim (0 without one).
fn dra_gpus(rjob: &ReplicatedJob, templates: &std::collections::BTreeMap<String, i64>) -> i64 {
    let pod = &rjob.template.spec.template.spec;
    pod.containers.iter().find(|c| c.name == NODE).map_or(0, |node| claims::claim_gpus(pod, node, templates))
}

fn node_container(rjob: &mut ReplicatedJob) -> Option<&mut Container> {
    rjob.template.spec.template.spec.containers.iter_mut().find(|c| c.name == NODE)
}

/// Upserts `env` and the coordinator port into the `node` container of every trainer replicated job (their
/// presence was checked when the trainer overrides were applied).
fn inject_trainer_env(rjobs: &mut [ReplicatedJob], trainers: &[usize], env: &[EnvVar]) {
    for &i in trainers {
        if let Some(node) = node_container(&mut rjobs[i]) {
            env.iter().for_each(|v| node.upsert_env(v.clone()));
            node.ensure_port(policy::MASTER_PORT);
        }
    }
}

/// Pushes the Torch variables into the extra containers of `mlPolicy.torch.envInjection.targets`.
fn inject_targets(rjobs: &mut [ReplicatedJob], injection: Option<&Value>, env: &[EnvVar]) {
    let targets = injection.and_then(|v| v.get("targets")).and_then(Value::as_array).cloned().unwrap_or_default();
    for target in &targets {
        let job_name = target.get("jobName").and_then(Value::as_str).unwrap_or_default();
        let names: Vec<&str> = target
            .get("containerNames")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let Some(rjob) = rjobs.iter_mut().find(|r| r.name == job_name) else { continue };
        let pod = &mut rjob.template.spec.template.spec;
        for c in pod.containers.iter_mut().chain(pod.init_containers.iter_mut()) {
            if c.name != NODE && names.contains(&c.name.as_str()) {
                env.iter().for_each(|v| c.upsert_env(v.clone()));
            }
        }
    }
}

/// The replicated jobs whose pods form the gang trainyard places, in the order of the JobSet: the
/// `node` replicated job with an MPI `launcher` when there is one (the launcher is placed with its
/// workers, near them, whether it runs as a node or as a small CPU pod), else the trainer
/// ancestors. Initializers run before the gang, so they never wait for the gang's hosts.
pub fn gang_replicated_jobs(rjobs: &[ReplicatedJob]) -> Vec<usize> {
    match rjobs.iter().position(|r| r.name == NODE) {
        Some(_) => (0..rjobs.len()).filter(|&i| rjobs[i].name == NODE || rjobs[i].name == LAUNCHER).collect(),
        None => (0..rjobs.len())
            .filter(|&i| {
                rjobs[i].template.metadata.labels.get(ANCESTOR_LABEL).map(String::as_str) == Some(TRAINER_ANCESTOR)
            })
            .collect(),
    }
}

/// Adds the scheduler markers to a replicated job's pod template, and trainyard's placement when its
/// pods belong to the gang (see [`gang_replicated_jobs`]).
fn stamp_pod(
    rjob: &mut ReplicatedJob,
    job_name: &str,
    runtime: &TrainingRuntimeSpec,
    opts: &RenderOptions,
    is_trainer: bool,
) {
    let pod = &mut rjob.template.spec.template;
    if opts.pod_group_markers
        && let Some(pgp) = &runtime.pod_group_policy
    {
        if pgp.coscheduling.is_some() {
            pod.metadata.labels.insert("scheduling.x-k8s.io/pod-group".into(), job_name.into());
        }
        if pgp.volcano.is_some() {
            pod.metadata.annotations.insert("scheduling.k8s.io/group-name".into(), job_name.into());
        }
    }
    if !is_trainer {
        return;
    }
    match &opts.placement {
        Placement::Unplaced => {}
        Placement::Gated { gang } => {
            pod.metadata.labels.insert(GANG_LABEL.into(), gang.clone());
            pod.spec.ensure_scheduling_gate(TOPOLOGY_GATE);
        }
        Placement::Domain { gang, selector } => {
            pod.metadata.labels.insert(GANG_LABEL.into(), gang.clone());
            for (key, value) in selector {
                pod.spec.node_selector.insert(key.clone(), value.clone());
            }
        }
    }
}

/// The `hostfile` key of the `<tj>-mpi-hostfile` ConfigMap for a JobSet rendered by [`render_jobset`]:
/// one `<pod endpoint> slots=<n>` line per node pod, launcher pods first when the launcher is a node.
/// `None` when the runtime has no MPI policy.
pub fn render_mpi_hostfile(job: &TrainJob, runtime: &TrainingRuntimeSpec, jobset: &JobSet) -> Option<String> {
    let mpi = runtime.ml_policy.as_ref()?.mpi.as_ref()?;
    let name = jobset.metadata.name.as_deref().unwrap_or_default();
    let subdomain = jobset.spec.network.as_ref().and_then(|n| n.subdomain.as_deref()).unwrap_or(name);
    let find = |wanted: &str| jobset.spec.replicated_jobs.iter().find(|r| r.name == wanted);
    let launcher =
        find(LAUNCHER).and_then(|r| r.template.spec.template.spec.containers.iter().find(|c| c.name == NODE));
    let gpus = launcher.map(policy::gpus_per_node).unwrap_or(0);
    let nproc = job.spec.trainer.as_ref().and_then(|t| t.num_proc_per_node.as_ref());
    let slots = launcher.and_then(policy::rendered_slots).unwrap_or_else(|| policy::mpi_slots(nproc, mpi, gpus));
    let mut hosts = String::new();
    let launcher_as_node = mpi.run_launcher_as_node == Some(true);
    for rjob_name in [LAUNCHER, NODE] {
        if rjob_name == LAUNCHER && !launcher_as_node {
            continue;
        }
        let Some(rjob) = find(rjob_name) else { continue };
        for pod in 0..rjob.template.spec.parallelism.unwrap_or(1).max(0) {
            hosts.push_str(&format!("{name}-{rjob_name}-0-{pod}.{subdomain} slots={slots}\n"));
        }
    }
    Some(hosts)
}
