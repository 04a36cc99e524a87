//! The pod sets of a TrainJob's gang: one per gang replicated job of the rendered JobSet (the
//! `node` workers, an MPI `launcher`, the trainer jobs), each with its pod shape, its own Kueue
//! topology annotations, and the hosts its pods may use.
//!
//! Kueue's podset annotations are read in two places. On the TrainJob they speak for the whole
//! gang (`podset-required-topology`, `-preferred-`, `-unconstrained-`) and for its trainer pods
//! (`podset-slice-required-topology` with `podset-slice-size`). On a replicated job's pod template
//! (the runtime's, or a TrainJob override) they speak for that pod set alone.
//!
//! A pod template that selects GKE's `cloud.google.com/gke-tpu-topology` asks for TPU slices of
//! that chip shape: its pods are whole TPU hosts, one slice per replica of its job (Trainer
//! v2.4's multi-slice), each slice a contiguous box on one of the cluster's tori.

use std::collections::BTreeMap;

use serde_json::Value;
use trainyard_bridges::WorkloadKind;
use trainyard_bridges::jobset::{JobSet, ReplicatedJob};
use trainyard_bridges::render::gang_replicated_jobs;
use trainyard_bridges::trainer::{ANCESTOR_LABEL, LAUNCHER, NODE, TRAINER_ANCESTOR};
use trainyard_topology::eligibility::HostFilter;
use trainyard_topology::sources::k8s_nodes::quantity::{parse_mebibytes, parse_millis, parse_whole};
use trainyard_topology::torus::SliceShape;
use trainyard_topology::{GangShape, PodSetShape, Resources, SliceRequest, TopologyRequest};

use crate::api::{
    PREFERRED_TOPOLOGY, REQUIRED_TOPOLOGY, SLICE_REQUIRED_TOPOLOGY, SLICE_SIZE, TPU_TOPOLOGY_LABEL,
    UNCONSTRAINED_TOPOLOGY,
};
use crate::controller::deciding::intent::Problem;

/// Where a set of annotations was read from, for the field a problem names.
#[derive(Clone, Copy, Debug)]
enum Source<'a> {
    /// The TrainJob's own `metadata.annotations`.
    TrainJob,
    /// The pod template of a replicated job of the rendered JobSet.
    PodTemplate(&'a str),
}

impl Source<'_> {
    fn field(self, key: &str) -> String {
        match self {
            Source::TrainJob => format!("metadata.annotations[\"{key}\"]"),
            Source::PodTemplate(rjob) => {
                format!("replicatedJobs[{rjob}].template.spec.template.metadata.annotations[\"{key}\"]")
            }
        }
    }
}

/// The gang of a rendered JobSet: its pod sets in the order their pods are counted (a
/// LeaderWorkerSet's leader first), the gang's topology request, and the hosts its pods may use.
/// The engine places a gang on one set of eligible hosts, so replicated jobs whose pods would pass
/// different hosts (selector, affinity or tolerations) are refused rather than placed where some of
/// their pods could not bind.
pub fn gang_shape(
    job_annotations: &BTreeMap<String, String>,
    jobset: &JobSet,
    kind: WorkloadKind,
    gpu_resource: &str,
) -> Result<(GangShape, HostFilter), Problem> {
    let rjobs = &jobset.spec.replicated_jobs;
    let namespace = jobset.metadata.namespace.as_deref().unwrap_or("default");
    let topology = topology_request(job_annotations, Source::TrainJob)?;
    let trainer_slice = slice_request(job_annotations, Source::TrainJob)?;
    let mut order = gang_replicated_jobs(rjobs);
    if kind == WorkloadKind::LeaderWorkerSet {
        // The leader is worker index 0 of the group: a launcher leads, the workers follow.
        order.sort_by_key(|&i| rjobs[i].name != LAUNCHER);
    }
    let has_node = rjobs.iter().any(|r| r.name == NODE);
    let mut sets = Vec::with_capacity(order.len());
    let mut hosts: Option<(HostFilter, &str)> = None;
    for i in order {
        let rjob = &rjobs[i];
        let field = format!("replicatedJobs[{}].template.spec.template.spec", rjob.name);
        let filter = crate::controller::deciding::host_filter::host_filter(&rjob.template.spec.template.spec, &field)?;
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
        let pods = u32::try_from(count.max(0)).map_err(|_| {
            Problem::new(
                "InvalidSpec",
                format!("replicatedJobs[{}]", rjob.name),
                format!("{count} pods is too many"),
                true,
            )
        })?;
        let pod =
            pod_resources(&rjob.template.spec.template.spec, gpu_resource, &format!("replicatedJobs[{}]", rjob.name))?;
        let own = &rjob.template.spec.template.metadata.annotations;
        let source = Source::PodTemplate(&rjob.name);
        let is_trainer = if has_node { rjob.name == NODE } else { is_trainer_ancestor(rjob) };
        let slice = match slice_request(own, source)? {
            Some(slice) => Some((slice, source)),
            None => trainer_slice.clone().filter(|_| is_trainer).map(|s| (s, Source::TrainJob)),
        };
        if let Some((slice, from)) = &slice
            && pods % slice.size != 0
        {
            return Err(Problem::new(
                "InvalidTopologyRequest",
                from.field(SLICE_SIZE),
                format!(
                    "replicated job {} has {pods} pods, which do not divide into slices of {}",
                    rjob.name, slice.size
                ),
                false,
            ));
        }
        let tpu = tpu_shape(&rjob.template.spec.template.spec, &field)?;
        if let (Some(shape), Some((_, from))) = (&tpu, &slice) {
            return Err(Problem::new(
                "InvalidTopologyRequest",
                from.field(SLICE_SIZE),
                format!("replicated job {} asks for TPU slices of {shape}; their size comes from the torus", rjob.name),
                false,
            ));
        }
        sets.push(PodSetShape {
            name: rjob.name.clone(),
            pods,
            pod,
            topology: topology_request(own, source)?,
            slice: slice.map(|(s, _)| s),
            tpu,
            // The kubelet chooses a pod's GPUs through the device plugin: a layout cannot be
            // promised here (see README, GPU layout inside the host).
            gpu_layout: None,
            claims: pod_claims(&rjob.template.spec.template.spec, namespace, &field)?,
        });
    }
    // A pod that requests nothing (an MPI launcher, often) still takes a host near its gang, as
    // kube-scheduler gives it one: it is placed as asking for one millicore. A gang whose pods all
    // ask for nothing stays as it is, and the engine refuses it.
    if sets.iter().any(|s| !s.pod.is_zero()) {
        for s in sets.iter_mut().filter(|s| s.pod.is_zero()) {
            s.pod.cpu_milli = 1;
        }
    }
    let total = sets.iter().try_fold(0u32, |sum, s| sum.checked_add(s.pods));
    if total.is_none() {
        return Err(Problem::new("InvalidSpec", "spec.trainer.numNodes", "the gang has too many pods", true));
    }
    Ok((GangShape { sets, topology }, hosts.map(|(filter, _)| filter).unwrap_or_default()))
}

/// The TPU slice shape a pod template selects, if it selects one.
fn tpu_shape(spec: &trainyard_bridges::pod::PodSpec, field: &str) -> Result<Option<SliceShape>, Problem> {
    let Some(text) = spec.node_selector.get(TPU_TOPOLOGY_LABEL) else { return Ok(None) };
    text.parse().map(Some).map_err(|e| {
        let at = format!("{field}.nodeSelector[\"{TPU_TOPOLOGY_LABEL}\"]");
        Problem::new("InvalidTopologyRequest", at, format!("{e}"), false)
    })
}

/// The ResourceClaimTemplates each pod gets a claim of (`resourceClaims[].resourceClaimTemplateName`),
/// as `namespace/name`, in the pod's order. A claim by name (`resourceClaimName`) is one object
/// its pods share: kube-scheduler allocates it once, and the devices it holds count against
/// every gang like any claim trainyard does not place.
fn pod_claims(spec: &trainyard_bridges::pod::PodSpec, namespace: &str, field: &str) -> Result<Vec<String>, Problem> {
    let Some(entries) = spec.rest.get("resourceClaims") else { return Ok(Vec::new()) };
    let invalid = |at: String, message: &str| Problem::new("InvalidSpec", at, message.to_string(), true);
    let entries = entries.as_array().ok_or_else(|| invalid(format!("{field}.resourceClaims"), "must be a list"))?;
    let mut templates = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let at = format!("{field}.resourceClaims[{i}]");
        let text = |key: &str| entry.get(key).and_then(serde_json::Value::as_str).filter(|s| !s.is_empty());
        if text("name").is_none() {
            return Err(invalid(format!("{at}.name"), "a pod claim needs a name"));
        }
        match (text("resourceClaimTemplateName"), text("resourceClaimName")) {
            (Some(template), None) => templates.push(format!("{namespace}/{template}")),
            (None, Some(_)) => {}
            _ => return Err(invalid(at, "exactly one of resourceClaimTemplateName and resourceClaimName must be set")),
        }
    }
    Ok(templates)
}

fn is_trainer_ancestor(rjob: &ReplicatedJob) -> bool {
    rjob.template.metadata.labels.get(ANCESTOR_LABEL).map(String::as_str) == Some(TRAINER_ANCESTOR)
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

/// A node label key named by an annotation, if it is there.
fn label_key(annotations: &BTreeMap<String, String>, key: &str, source: Source<'_>) -> Result<Option<String>, Problem> {
    let bad = |message: String| Problem::new("InvalidTopologyRequest", source.field(key), message, false);
    match annotations.get(key).map(|v| v.trim()) {
        None => Ok(None),
        Some("") => Err(bad("is empty; name a node label key".to_string())),
        Some(v) if v.contains(char::is_whitespace) => Err(bad(format!("{v:?} is not a node label key"))),
        Some(v) => Ok(Some(v.to_string())),
    }
}

/// The topology request of Kueue's podset annotations. Values are node label keys, which are the
/// level names of a cluster read from its nodes.
fn topology_request(annotations: &BTreeMap<String, String>, source: Source<'_>) -> Result<TopologyRequest, Problem> {
    let bad = |key: &str, message: String| Problem::new("InvalidTopologyRequest", source.field(key), message, false);
    let required = label_key(annotations, REQUIRED_TOPOLOGY, source)?;
    let preferred = label_key(annotations, PREFERRED_TOPOLOGY, source)?;
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
    Ok(match (required, preferred) {
        (Some(level), _) => TopologyRequest::Required(level),
        (None, Some(level)) => TopologyRequest::Preferred(level),
        (None, None) => TopologyRequest::Unconstrained,
    })
}

/// The slice request of Kueue's slice annotations: both or neither, a positive size.
fn slice_request(annotations: &BTreeMap<String, String>, source: Source<'_>) -> Result<Option<SliceRequest>, Problem> {
    let bad = |key: &str, message: String| Problem::new("InvalidTopologyRequest", source.field(key), message, false);
    let level = label_key(annotations, SLICE_REQUIRED_TOPOLOGY, source)?;
    let size = annotations.get(SLICE_SIZE).map(|v| v.trim());
    match (level, size) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(bad(SLICE_SIZE, format!("is missing; {SLICE_REQUIRED_TOPOLOGY} needs a slice size"))),
        (None, Some(_)) => Err(bad(SLICE_REQUIRED_TOPOLOGY, format!("is missing; {SLICE_SIZE} needs a slice level"))),
        (Some(level), Some(size)) => match size.parse::<u32>() {
            Ok(size) if size > 0 => Ok(Some(SliceRequest { level, size })),
            _ => Err(bad(SLICE_SIZE, format!("{size:?} is not a positive pod count"))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn kueue_annotations_become_requests() {
        let job = Source::TrainJob;
        let req = topology_request(&annotations(&[(REQUIRED_TOPOLOGY, "example.com/rack")]), job).unwrap();
        assert_eq!(req, TopologyRequest::Required("example.com/rack".into()));
        let req = topology_request(&annotations(&[(PREFERRED_TOPOLOGY, "example.com/block")]), job).unwrap();
        assert_eq!(req, TopologyRequest::Preferred("example.com/block".into()));
        assert_eq!(topology_request(&annotations(&[]), job).unwrap(), TopologyRequest::Unconstrained);
        let slice = slice_request(&annotations(&[(SLICE_REQUIRED_TOPOLOGY, "rack"), (SLICE_SIZE, "4")]), job).unwrap();
        assert_eq!(slice, Some(SliceRequest { level: "rack".into(), size: 4 }));
    }

    #[test]
    fn malformed_annotations_name_the_field() {
        let job = Source::TrainJob;
        let p = topology_request(&annotations(&[(REQUIRED_TOPOLOGY, " ")]), job).unwrap_err();
        assert_eq!(p.field, format!("metadata.annotations[\"{REQUIRED_TOPOLOGY}\"]"));
        assert!(!p.terminal);
        let p =
            topology_request(&annotations(&[(REQUIRED_TOPOLOGY, "a"), (PREFERRED_TOPOLOGY, "b")]), job).unwrap_err();
        assert_eq!(p.reason, "InvalidTopologyRequest");
        let p =
            slice_request(&annotations(&[(SLICE_REQUIRED_TOPOLOGY, "rack"), (SLICE_SIZE, "zero")]), job).unwrap_err();
        assert_eq!(p.field, format!("metadata.annotations[\"{SLICE_SIZE}\"]"));
        let p = slice_request(&annotations(&[(SLICE_REQUIRED_TOPOLOGY, "rack")]), job).unwrap_err();
        assert!(p.message.contains("slice size"), "{}", p.message);
        let p = topology_request(&annotations(&[(UNCONSTRAINED_TOPOLOGY, "yes")]), job).unwrap_err();
        assert!(p.message.contains("yes"));
        let template = Source::PodTemplate("workers");
        let p = slice_request(&annotations(&[(SLICE_SIZE, "2")]), template).unwrap_err();
        assert_eq!(
            p.field,
            format!(
                "replicatedJobs[workers].template.spec.template.metadata.annotations[\"{SLICE_REQUIRED_TOPOLOGY}\"]"
            )
        );
    }

    fn trainer_jobs(second_selector: serde_json::Value) -> JobSet {
        let rjob = |name: &str, selector: serde_json::Value| {
            serde_json::json!({
                "name": name,
                "replicas": 1,
                "template": {
                    "metadata": {"labels": {ANCESTOR_LABEL: TRAINER_ANCESTOR}},
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
    fn every_trainer_job_is_a_pod_set_and_they_must_share_their_nodes() {
        let none = BTreeMap::new();
        let (shape, hosts) =
            gang_shape(&none, &trainer_jobs(serde_json::json!({"pool": "a"})), WorkloadKind::JobSet, "nvidia.com/gpu")
                .unwrap();
        let names: Vec<&str> = shape.sets.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["launcher", "workers"]);
        assert_eq!((shape.pods(), shape.total().gpus), (4, 32));
        assert_ne!(hosts, HostFilter::default(), "the shared selector is kept");
        let p =
            gang_shape(&none, &trainer_jobs(serde_json::json!({"pool": "b"})), WorkloadKind::JobSet, "nvidia.com/gpu")
                .unwrap_err();
        assert_eq!(p.reason, "InvalidSpec");
        assert_eq!(p.field, "replicatedJobs[workers].template.spec.template.spec");
        assert!(p.message.contains("replicatedJobs[launcher]"), "{}", p.message);
        assert!(p.terminal);
    }

    #[test]
    fn a_trainjob_slice_applies_to_its_trainer_sets_and_must_divide_them() {
        let jobset = trainer_jobs(serde_json::json!({"pool": "a"}));
        let sliced = annotations(&[(SLICE_REQUIRED_TOPOLOGY, "rack"), (SLICE_SIZE, "2")]);
        let (shape, _) = gang_shape(&sliced, &jobset, WorkloadKind::JobSet, "nvidia.com/gpu").unwrap();
        assert!(shape.sets.iter().all(|s| s.slice == Some(SliceRequest { level: "rack".into(), size: 2 })));
        let odd = annotations(&[(SLICE_REQUIRED_TOPOLOGY, "rack"), (SLICE_SIZE, "3")]);
        let p = gang_shape(&odd, &jobset, WorkloadKind::JobSet, "nvidia.com/gpu").unwrap_err();
        assert_eq!(p.field, format!("metadata.annotations[\"{SLICE_SIZE}\"]"));
        assert!(p.message.contains("2 pods"), "{}", p.message);
    }
}
