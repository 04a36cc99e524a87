//! What Submit creates: a TrainJob from the caller's manifest, or one made from a plain gang
//! spec on a ClusterTrainingRuntime. Pure: every refusal names the field at fault, and the
//! object keeps every field the caller wrote (it is posted as JSON, never through a typed
//! struct that would drop what it does not know).

use serde_json::{Value, json};

use super::v1;
use crate::api::{PRIORITY_CLASS_LABEL, QUEUE_LABEL, RUNTIME_ESTIMATE_ANNOTATION};

/// A request field that cannot be used, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// The field, as a path into the request (`gang.nodes`, `manifest.metadata.namespace`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

fn field(field: &str, message: impl Into<String>) -> FieldError {
    FieldError { field: field.to_string(), message: message.into() }
}

/// The API version of the TrainJobs trainyard schedules.
pub const TRAINJOB_API_VERSION: &str = "trainer.kubeflow.org/v1alpha1";

/// Whether `name` is a DNS-1123 subdomain, as Kubernetes wants of object names.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|part| {
            !part.is_empty()
                && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// The namespace a job call is about, checked.
pub fn namespace(name: &str, path: &str) -> Result<(), FieldError> {
    if name.is_empty() {
        return Err(field(path, "a namespace is required"));
    }
    if !valid_name(name) || name.contains('.') || name.len() > 63 {
        return Err(field(path, format!("{name:?} is not a valid namespace name")));
    }
    Ok(())
}

/// A job reference, checked: `namespace/name`.
pub fn job_key(job: Option<&v1::JobRef>) -> Result<String, FieldError> {
    let job = job.ok_or_else(|| field("job", "the TrainJob (namespace and name) is required"))?;
    namespace(&job.namespace, "job.namespace")?;
    if !valid_name(&job.name) {
        return Err(field("job.name", format!("{:?} is not a valid TrainJob name", job.name)));
    }
    Ok(format!("{}/{}", job.namespace, job.name))
}

/// The TrainJob a Submit creates in `request.namespace`, ready to post.
pub fn trainjob_of(request: &v1::SubmitRequest, gpu_resource: &str) -> Result<Value, FieldError> {
    namespace(&request.namespace, "namespace")?;
    match &request.job {
        None => Err(field("job", "send a TrainJob `manifest` or a `gang` spec")),
        Some(v1::submit_request::Job::Manifest(text)) => from_manifest(text, &request.namespace),
        Some(v1::submit_request::Job::Gang(gang)) => Ok(from_gang(gang, &request.namespace, gpu_resource)?),
    }
}

fn from_manifest(text: &str, ns: &str) -> Result<Value, FieldError> {
    let mut object: Value = serde_saphyr::from_str(text)
        .map_err(|e| field("manifest", format!("not a YAML or JSON object: {}", one_line(&e.to_string()))))?;
    let Some(map) = object.as_object_mut() else {
        return Err(field("manifest", "not an object"));
    };
    match map.get("apiVersion").and_then(Value::as_str) {
        Some(TRAINJOB_API_VERSION) => {}
        other => {
            return Err(field(
                "manifest.apiVersion",
                format!("{:?}: only {TRAINJOB_API_VERSION} TrainJobs are submitted here", other.unwrap_or("")),
            ));
        }
    }
    if map.get("kind").and_then(Value::as_str) != Some("TrainJob") {
        return Err(field("manifest.kind", "must be TrainJob"));
    }
    let metadata = map
        .entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| field("manifest.metadata", "not an object"))?;
    let name = metadata.get("name").and_then(Value::as_str).unwrap_or_default();
    let generate = metadata.get("generateName").and_then(Value::as_str).unwrap_or_default();
    if name.is_empty() && generate.is_empty() {
        return Err(field("manifest.metadata.name", "a name (or generateName) is required"));
    }
    if !name.is_empty() && !valid_name(name) {
        return Err(field("manifest.metadata.name", format!("{name:?} is not a valid name")));
    }
    match metadata.get("namespace").and_then(Value::as_str) {
        None | Some("") => {
            metadata.insert("namespace".into(), Value::String(ns.to_string()));
        }
        Some(own) if own == ns => {}
        Some(own) => {
            return Err(field(
                "manifest.metadata.namespace",
                format!("{own:?} differs from the request's namespace {ns:?}"),
            ));
        }
    }
    let labels = metadata.get("labels").and_then(Value::as_object);
    if labels.and_then(|l| l.get(QUEUE_LABEL)).and_then(Value::as_str).is_none_or(str::is_empty) {
        return Err(field(
            &format!("manifest.metadata.labels[\"{QUEUE_LABEL}\"]"),
            "name the trainyard queue this TrainJob is charged to",
        ));
    }
    if map.get("spec").and_then(|s| s.get("runtimeRef")).and_then(|r| r.get("name")).and_then(Value::as_str).is_none() {
        return Err(field("manifest.spec.runtimeRef.name", "the training runtime is required"));
    }
    Ok(object)
}

fn from_gang(gang: &v1::GangSpec, ns: &str, gpu_resource: &str) -> Result<Value, FieldError> {
    if !valid_name(&gang.name) {
        return Err(field("gang.name", format!("{:?} is not a valid TrainJob name", gang.name)));
    }
    if gang.queue.is_empty() {
        return Err(field("gang.queue", "the trainyard queue is required"));
    }
    if !valid_name(&gang.runtime) {
        return Err(field("gang.runtime", format!("{:?} is not a ClusterTrainingRuntime name", gang.runtime)));
    }
    if gang.nodes == 0 {
        return Err(field("gang.nodes", "a gang needs at least one node"));
    }
    let mut labels = json!({ QUEUE_LABEL: gang.queue });
    if !gang.priority_class.is_empty() {
        labels[PRIORITY_CLASS_LABEL] = Value::String(gang.priority_class.clone());
    }
    let mut metadata = json!({ "name": gang.name, "namespace": ns, "labels": labels });
    if gang.runtime_estimate_seconds > 0 {
        metadata["annotations"] = json!({ RUNTIME_ESTIMATE_ANNOTATION: format!("{}s", gang.runtime_estimate_seconds) });
    }
    let mut trainer = json!({ "numNodes": gang.nodes });
    if gang.gpus_per_node > 0 {
        let gpus = gang.gpus_per_node.to_string();
        trainer["resourcesPerNode"] = json!({ "limits": { gpu_resource: gpus }, "requests": { gpu_resource: gpus } });
    }
    if !gang.image.is_empty() {
        trainer["image"] = Value::String(gang.image.clone());
    }
    if !gang.command.is_empty() {
        trainer["command"] = json!(gang.command);
    }
    Ok(json!({
        "apiVersion": TRAINJOB_API_VERSION,
        "kind": "TrainJob",
        "metadata": metadata,
        "spec": {
            "runtimeRef": { "name": gang.runtime, "kind": "ClusterTrainingRuntime", "apiGroup": "trainer.kubeflow.org" },
            "trainer": trainer,
        },
    }))
}

fn one_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_string()
}
