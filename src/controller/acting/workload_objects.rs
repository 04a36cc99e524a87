//! The objects an admitted TrainJob is launched as: a JobSet or LeaderWorkerSet, plus what its pods
//! mount (the MPI hostfile, Flux's scripts and certificate).

use serde_json::{Value, json};
use trainyard_bridges::trainer as bridge;
use trainyard_bridges::{
    GANG_LABEL, Placement, RenderError, RenderOptions, WorkloadKind, render_flux_objects, render_jobset,
    render_leader_worker_set, render_lws_mpi_hostfile, render_mpi_hostfile,
};

use crate::controller::acting::admission_record::AdmissionRecord;
use crate::controller::acting::binders::{Binder, QueueHints, SCHEDULER_NAME_ANNOTATION};
use crate::controller::acting::gang_api::GangApi;
use crate::controller::deciding::pod_bindings::GangLayout;

/// What the reconciler applies for one admitted TrainJob.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    /// The JobSet or LeaderWorkerSet, as sent to the API server.
    pub workload: Value,
    /// The `<tj>-mpi-hostfile` ConfigMap for MPI runtimes.
    pub hostfile: Option<Value>,
    /// How the gang's pods are numbered.
    pub layout: GangLayout,
    /// kube-scheduler's Workload and PodGroup for the gang (when the server has the API).
    pub gang_objects: Vec<Value>,
    /// The PodGroup of the cluster's own binder, when the gang has one.
    pub binder_group: Option<Value>,
    /// The SSH key Secret its pods mount (MPI runtimes).
    pub ssh_secret: Option<String>,
    /// Flux runtimes: the brokers' scripts ConfigMap and their CURVE certificate Secret.
    pub flux: Option<FluxObjects>,
}

/// What the pods of a Flux gang mount beside their workload.
#[derive(Clone, Debug, PartialEq)]
pub struct FluxObjects {
    /// `<tj>-flux-entrypoint`: the installer's and the brokers' scripts.
    pub config_map: Value,
    /// `<tj>-flux-curve`: the key pair the brokers share (the same for every render of the TrainJob).
    pub secret: Value,
}

/// A namespaced object's identity, for deletes and lookups.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ObjectRef {
    /// `group/version` (or `v1`).
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// The workload object of a TrainJob of `kind` (same name and namespace as the TrainJob).
pub fn workload_ref(kind: WorkloadKind, namespace: &str, name: &str) -> ObjectRef {
    let (api_version, kind) = match kind {
        WorkloadKind::JobSet => (trainyard_bridges::jobset::API_VERSION, "JobSet"),
        WorkloadKind::LeaderWorkerSet => (trainyard_bridges::lws::API_VERSION, "LeaderWorkerSet"),
    };
    ObjectRef { api_version: api_version.into(), kind: kind.into(), namespace: namespace.into(), name: name.into() }
}

/// The MPI hostfile ConfigMap of a TrainJob.
pub fn hostfile_ref(namespace: &str, name: &str) -> ObjectRef {
    ObjectRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: namespace.into(),
        name: format!("{name}-mpi-hostfile"),
    }
}

/// How the pods of an admission learn where to go.
pub fn placement_of(job_name: &str, record: Option<&AdmissionRecord>) -> Placement {
    match record {
        None => Placement::Unplaced,
        Some(AdmissionRecord { domain: Some(selector), .. }) => {
            Placement::Domain { gang: job_name.into(), selector: selector.clone() }
        }
        Some(_) => Placement::Gated { gang: job_name.into() },
    }
}

/// Renders the workload of `job` with `opts` (its placement, the GPUs of DRA claim templates);
/// the runtime's pod-group markers are never added, since trainyard gang-schedules. With
/// `binder`, the gang's pods join that binder's PodGroup, rendered too; else, with `gang_api`, the
/// pods of a placed gang of two or more join kube-scheduler's pod group for it, and its Workload
/// and PodGroup are rendered too.
pub fn render(
    job: &bridge::TrainJob,
    runtime: &bridge::TrainingRuntime,
    kind: WorkloadKind,
    opts: RenderOptions,
    gang_api: Option<GangApi>,
    binder: Option<&Binder>,
) -> Result<Rendered, RenderError> {
    let placed = opts.placement != Placement::Unplaced;
    let opts = RenderOptions { pod_group_markers: false, ..opts };
    let name = job.metadata.name.clone().unwrap_or_default();
    let namespace = job.metadata.namespace.clone().unwrap_or_default();
    let mut flux = None;
    let (workload, hostfile, layout) = match kind {
        WorkloadKind::JobSet => {
            let jobset = render_jobset(job, &runtime.spec, &opts)?;
            let hostfile = render_mpi_hostfile(job, &runtime.spec, &jobset);
            flux = render_flux_objects(job, &runtime.spec, &jobset)
                .map(|[config_map, secret]| FluxObjects { config_map, secret });
            let rjobs = &jobset.spec.replicated_jobs;
            let layout = GangLayout::JobSet(
                trainyard_bridges::render::gang_replicated_jobs(rjobs)
                    .into_iter()
                    .map(|i| {
                        let r = &rjobs[i];
                        let per_job = r.template.spec.parallelism.unwrap_or(1).max(0) as u32;
                        (r.name.clone(), r.replicas.unwrap_or(1).max(0) as u32, per_job)
                    })
                    .collect(),
            );
            (serde_json::to_value(&jobset), hostfile, layout)
        }
        WorkloadKind::LeaderWorkerSet => {
            let lws = render_leader_worker_set(job, &runtime.spec, &opts)?;
            let hostfile = render_lws_mpi_hostfile(job, &runtime.spec, &lws);
            // The leader is a gang pod unless it is a separate launcher, which carries no gang label.
            let leader_in_gang = lws
                .spec
                .leader_worker_template
                .leader_template
                .as_ref()
                .is_none_or(|t| t.metadata.labels.contains_key(GANG_LABEL));
            (serde_json::to_value(&lws), hostfile, GangLayout::LeaderWorkerSet { leader_in_gang })
        }
    };
    let mut workload = workload.expect("rendered objects serialise");
    let mut gang_objects = Vec::new();
    let mut binder_group = None;
    let owner = workload["metadata"]["ownerReferences"][0].clone();
    if let Some(binder) = binder {
        // The binder that binds the pods holds them by its own group; kube-scheduler's would
        // name a scheduler that does not bind them.
        let hints = QueueHints::of(&workload["metadata"], &job.metadata.annotations, &job.metadata.labels);
        let scheduler = job
            .metadata
            .annotations
            .get(SCHEDULER_NAME_ANNOTATION)
            .map(String::as_str)
            .filter(|s| !s.trim().is_empty());
        binder.mark_workload(&mut workload);
        let mut templates = gang_pod_templates(&mut workload, &layout);
        for (template, _) in &mut templates {
            binder.mark_pod(template, &name, scheduler, &hints);
        }
        let counted: Vec<(&Value, u32)> = templates.iter().map(|(t, n)| (&**t, *n)).collect();
        binder_group = Some(binder.pod_group(&namespace, &name, &owner, &counted, &hints));
    } else if let Some(api) = gang_api.filter(|_| placed) {
        let mut templates = gang_pod_templates(&mut workload, &layout);
        let pods: u32 = templates.iter().map(|(_, n)| n).sum();
        // A gang of one pod is bound whole by its own scheduling; a Workload and PodGroup for it
        // would be two more writes in every such admission, in turn before its JobSet, for no
        // guarantee.
        if pods > 1 {
            let (field, link) = api.pod_link(&name);
            let shared = shared_claims(&templates);
            for (template, _) in &mut templates {
                template["spec"][field] = link.clone();
            }
            gang_objects = api.objects(&namespace, &name, &owner, pods, &shared);
        }
    }
    let hostfile = hostfile.map(|text| {
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": format!("{name}-mpi-hostfile"),
                "namespace": namespace,
                "labels": {GANG_LABEL: name},
                "ownerReferences": workload["metadata"]["ownerReferences"].clone(),
            },
            "data": {"hostfile": text},
        })
    });
    let mpi = runtime.spec.ml_policy.as_ref().is_some_and(|m| m.mpi.is_some());
    let ssh_secret = mpi.then(|| format!("{name}{}", trainyard_bridges::render::policy::SSH_SECRET_SUFFIX));
    Ok(Rendered { workload, hostfile, layout, gang_objects, binder_group, ssh_secret, flux })
}

/// The claims every gang pod template names by `resourceClaimName` (one object all the gang's
/// pods share), as `{name, resourceClaimName}`.
fn shared_claims(templates: &[(&mut Value, u32)]) -> Vec<Value> {
    let by_name = |t: &Value| -> Vec<Value> {
        t["spec"]["resourceClaims"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c.get("resourceClaimName").and_then(Value::as_str).is_some())
            .map(|c| json!({"name": c["name"], "resourceClaimName": c["resourceClaimName"]}))
            .collect()
    };
    let Some(((first, _), rest)) = templates.split_first() else { return Vec::new() };
    let mut shared = by_name(first);
    for (t, _) in rest {
        let theirs = by_name(t);
        shared.retain(|c| theirs.contains(c));
    }
    shared
}

/// The pod templates of the gang's pods inside a rendered workload, each with how many pods it
/// makes.
fn gang_pod_templates<'a>(workload: &'a mut Value, layout: &GangLayout) -> Vec<(&'a mut Value, u32)> {
    match layout {
        GangLayout::JobSet(rjobs) => {
            let counts: std::collections::BTreeMap<&str, u32> =
                rjobs.iter().map(|(n, r, p)| (n.as_str(), r * p)).collect();
            workload["spec"]["replicatedJobs"]
                .as_array_mut()
                .map(|list| {
                    list.iter_mut()
                        .filter_map(|r| {
                            let count = *counts.get(r["name"].as_str().unwrap_or_default())?;
                            Some((&mut r["template"]["spec"]["template"], count))
                        })
                        .collect()
                })
                .unwrap_or_default()
        }
        GangLayout::LeaderWorkerSet { leader_in_gang } => {
            let template = &mut workload["spec"]["leaderWorkerTemplate"];
            let size = (template["size"].as_u64().unwrap_or(1) as u32).max(1);
            let Some(map) = template.as_object_mut() else { return vec![] };
            // Without a leader template, the leader is made from the worker template.
            let workers = if map.contains_key("leaderTemplate") || !*leader_in_gang { size - 1 } else { size };
            map.iter_mut()
                .filter_map(|(k, v)| match k.as_str() {
                    "workerTemplate" => Some((v, workers)),
                    "leaderTemplate" if *leader_in_gang => Some((v, 1)),
                    _ => None,
                })
                .collect()
        }
    }
}
