//! Trainer v2.4's `spec.trainer.resourceClaimsPerNode` (KEP-2782): the claims go onto the trainer
//! pods and their `node` container, and a claim template's GPUs count like extended GPUs where the
//! framework needs a per-node GPU count.
//!
//! As the Trainer does: pod-level `resourceClaims` are merged by name with the TrainJob's entries
//! winning over the runtime's and the patches'; each entry is added to the `node` container's
//! `resources.claims` (on top of what is there, once); `resourcesPerNode.claims` is refused. The
//! GPU count of a template sums its requests whose name contains `gpu` and that ask for an exact
//! count (`exactly`, allocation mode `ExactCount`, no admin access); `firstAvailable`, `All` and
//! admin-access requests count 0. The first claim the `node` container uses gives the count, and
//! extended GPU resources, when the container has any, win over it.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::error::RenderError;
use crate::pod::{Container, PodSpec};
use crate::trainer::TrainerResourceClaim;

/// GPUs a ResourceClaimTemplate asks for, counted as the Trainer counts them (module docs).
pub fn template_gpus(template: &Value) -> i64 {
    let requests = template.pointer("/spec/spec/devices/requests").and_then(Value::as_array);
    let counted = |r: &&Value| {
        let name = r.get("name").and_then(Value::as_str).unwrap_or_default();
        let exactly = r.get("exactly");
        let mode = exactly.and_then(|e| e.get("allocationMode")).and_then(Value::as_str).unwrap_or("ExactCount");
        let admin = exactly.and_then(|e| e.get("adminAccess")).and_then(Value::as_bool).unwrap_or(false);
        name.contains("gpu") && exactly.is_some() && mode == "ExactCount" && !admin
    };
    let count = |r: &Value| r.pointer("/exactly/count").and_then(Value::as_i64).unwrap_or(1);
    requests.map_or(0, |rs| rs.iter().filter(counted).map(count).sum())
}

/// GPUs per template name, from ResourceClaimTemplate objects (others are skipped).
pub fn gpus_by_template(objects: &[Value]) -> BTreeMap<String, i64> {
    objects
        .iter()
        .filter(|o| o.get("kind").and_then(Value::as_str) == Some("ResourceClaimTemplate"))
        .filter_map(|o| Some((o.pointer("/metadata/name")?.as_str()?.to_owned(), template_gpus(o))))
        .collect()
}

/// Refuses `resourcesPerNode.claims`, as Trainer v2.4's validation does.
pub(crate) fn check_resources_per_node(job: &str, resources: Option<&Value>) -> Result<(), RenderError> {
    if resources.and_then(|r| r.get("claims")).is_some() {
        return Err(RenderError::Forbidden {
            job: job.to_owned(),
            field: "spec.trainer.resourcesPerNode.claims".into(),
            message: "DRA claims go in spec.trainer.resourceClaimsPerNode".into(),
        });
    }
    Ok(())
}

/// Puts the TrainJob's claims onto a trainer pod and its `node` container.
pub(crate) fn apply(pod: &mut PodSpec, node_index: usize, claims: &[TrainerResourceClaim]) {
    if claims.is_empty() {
        return;
    }
    let mut pod_claims: Vec<Value> =
        pod.rest.get("resourceClaims").and_then(Value::as_array).cloned().unwrap_or_default();
    for claim in claims {
        let entry = json!({"name": claim.name, "resourceClaimTemplateName": claim.resource_claim_template_name});
        match pod_claims.iter_mut().find(|c| c.get("name").and_then(Value::as_str) == Some(claim.name.as_str())) {
            Some(existing) => *existing = entry,
            None => pod_claims.push(entry),
        }
    }
    pod.rest.insert("resourceClaims".into(), Value::Array(pod_claims));
    let node = &mut pod.containers[node_index];
    let resources = node.resources.get_or_insert_with(|| json!({}));
    let Some(resources) = resources.as_object_mut() else { return };
    let used = resources.entry("claims").or_insert_with(|| json!([]));
    if !used.is_array() {
        *used = json!([]);
    }
    let list = used.as_array_mut().expect("made an array above");
    for claim in claims {
        if !list.iter().any(|c| c.get("name").and_then(Value::as_str) == Some(claim.name.as_str())) {
            list.push(json!({"name": claim.name}));
        }
    }
}

/// GPUs of the first claim the container uses, when that claim comes from a template of known
/// GPU count; 0 otherwise.
pub(crate) fn claim_gpus(pod: &PodSpec, node: &Container, templates: &BTreeMap<String, i64>) -> i64 {
    let first = node.resources.as_ref().and_then(|r| r.pointer("/claims/0/name")).and_then(Value::as_str);
    let Some(first) = first else { return 0 };
    let pod_claims = pod.rest.get("resourceClaims").and_then(Value::as_array);
    let template = pod_claims
        .and_then(|cs| cs.iter().find(|c| c.get("name").and_then(Value::as_str) == Some(first)))
        .and_then(|c| c.get("resourceClaimTemplateName"))
        .and_then(Value::as_str);
    template.and_then(|t| templates.get(t)).copied().unwrap_or(0)
}
