//! Applies the TrainJob's runtime patches (and the v2.0/v2.1 overrides they replaced) to the runtime copy.

use serde_json::{Map, Value, json};

use crate::error::RenderError;
use crate::jobset::JobSetSpec;
use crate::merge::strategic_merge;
use crate::meta::TemplateMeta;
use crate::trainer::{DATASET_INITIALIZER, MODEL_INITIALIZER, NODE, TrainJob};

/// Containers whose env only the controller may set (through `spec.trainer` / `spec.initializer`).
const ENV_PROTECTED: [&str; 3] = [NODE, DATASET_INITIALIZER, MODEL_INITIALIZER];

/// Patches `spec` and `meta` in place: legacy labels/annotations, `podSpecOverrides`,
/// `podTemplateOverrides`, then `runtimePatches` in list order.
pub(super) fn apply_all(
    job: &TrainJob,
    id: &str,
    spec: &mut JobSetSpec,
    meta: &mut TemplateMeta,
) -> Result<(), RenderError> {
    let invalid = |field: &str, message: String| RenderError::InvalidPatch {
        job: id.to_owned(),
        field: field.to_owned(),
        message,
    };
    let mut value = serde_json::to_value(&*spec).map_err(|e| invalid("spec.runtimeRef", e.to_string()))?;
    if let Some(labels) = &job.spec.labels {
        meta.labels.extend(labels.clone());
    }
    if let Some(annotations) = &job.spec.annotations {
        meta.annotations.extend(annotations.clone());
    }
    for (i, over) in job.spec.pod_spec_overrides.iter().enumerate() {
        let base = format!("spec.podSpecOverrides[{i}]");
        let mut pod_spec = over.as_object().cloned().ok_or_else(|| invalid(&base, "expected an object".into()))?;
        pod_spec.remove("targetJobs");
        let body = json!({"template": {"spec": {"template": {"spec": pod_spec}}}});
        for (j, target) in targets(over, &base, id)?.into_iter().enumerate() {
            apply_rjob(&mut value, &target, &body, &format!("{base}.targetJobs[{j}].name"), false, id)?;
        }
    }
    for (i, over) in job.spec.pod_template_overrides.iter().enumerate() {
        let base = format!("spec.podTemplateOverrides[{i}]");
        let mut pod = Map::new();
        for key in ["metadata", "spec"] {
            if let Some(part) = over.get(key) {
                pod.insert(key.to_owned(), part.clone());
            }
        }
        let body = json!({"template": {"spec": {"template": pod}}});
        for (j, target) in targets(over, &base, id)?.into_iter().enumerate() {
            apply_rjob(&mut value, &target, &body, &format!("{base}.targetJobs[{j}].name"), false, id)?;
        }
    }
    for (i, patch) in job.spec.runtime_patches.iter().enumerate() {
        let base = format!("spec.runtimePatches[{i}].trainingRuntimeSpec");
        let Some(runtime_spec) = &patch.training_runtime_spec else { continue };
        let template = runtime_spec.get("template").cloned().unwrap_or(Value::Null);
        if let Some(extra) = runtime_spec.as_object().and_then(|o| o.keys().find(|k| *k != "template")) {
            return Err(invalid(&format!("{base}.{extra}"), "only template may be patched".into()));
        }
        if let Some(patch_meta) = template.get("metadata") {
            let patch_meta: TemplateMeta = serde_json::from_value(patch_meta.clone())
                .map_err(|e| invalid(&format!("{base}.template.metadata"), e.to_string()))?;
            meta.labels.extend(patch_meta.labels);
            meta.annotations.extend(patch_meta.annotations);
        }
        let Some(patch_spec) = template.get("spec") else { continue };
        if let Some(extra) = patch_spec.as_object().and_then(|o| o.keys().find(|k| *k != "replicatedJobs")) {
            return Err(invalid(&format!("{base}.template.spec.{extra}"), "only replicatedJobs may be patched".into()));
        }
        let rjobs = patch_spec.get("replicatedJobs").and_then(Value::as_array).cloned().unwrap_or_default();
        for (j, rjob) in rjobs.iter().enumerate() {
            let field = format!("{base}.template.spec.replicatedJobs[{j}].name");
            let name =
                rjob.get("name").and_then(Value::as_str).ok_or_else(|| invalid(&field, "name is required".into()))?;
            apply_rjob(&mut value, name, rjob, &field, true, id)?;
        }
    }
    *spec = serde_json::from_value(value).map_err(|e| invalid("spec.runtimePatches", e.to_string()))?;
    Ok(())
}

/// The `targetJobs[].name` list of a legacy override.
fn targets(over: &Value, base: &str, id: &str) -> Result<Vec<String>, RenderError> {
    let list = over.get("targetJobs").and_then(Value::as_array).cloned().unwrap_or_default();
    list.iter()
        .enumerate()
        .map(|(j, t)| {
            t.get("name").and_then(Value::as_str).map(str::to_owned).ok_or_else(|| RenderError::InvalidPatch {
                job: id.to_owned(),
                field: format!("{base}.targetJobs[{j}].name"),
                message: "name is required".into(),
            })
        })
        .collect()
}

/// Merges `body` (a replicatedJob-shaped patch) into the replicated job `name`, after checking that the
/// job and every container the patch names exist. `field` is the path of the name being applied.
fn apply_rjob(
    spec: &mut Value,
    name: &str,
    body: &Value,
    field: &str,
    runtime_patch: bool,
    id: &str,
) -> Result<(), RenderError> {
    let unknown = |field: String, name: &str| RenderError::UnknownPatchTarget {
        job: id.to_owned(),
        field,
        name: name.to_owned(),
    };
    let rjobs = spec.get_mut("replicatedJobs").and_then(Value::as_array_mut);
    let Some(target) =
        rjobs.and_then(|list| list.iter_mut().find(|r| r.get("name").and_then(Value::as_str) == Some(name)))
    else {
        return Err(unknown(field.to_owned(), name));
    };
    let parent = field.strip_suffix(".name").unwrap_or(field);
    let pod_path = ["template", "spec", "template", "spec"];
    let patch_pod = pod_path.iter().try_fold(body, |v, key| v.get(key));
    let target_pod = pod_path.iter().try_fold(&*target, |v, key| v.get(key));
    for list in ["containers", "initContainers"] {
        let patched = patch_pod.and_then(|p| p.get(list)).and_then(Value::as_array).cloned().unwrap_or_default();
        let existing = target_pod.and_then(|p| p.get(list)).and_then(Value::as_array).cloned().unwrap_or_default();
        for (k, container) in patched.iter().enumerate() {
            let cfield = format!("{parent}.template.spec.template.spec.{list}[{k}].name");
            let cname = container.get("name").and_then(Value::as_str).unwrap_or_default();
            if !existing.iter().any(|c| c.get("name").and_then(Value::as_str) == Some(cname)) {
                return Err(unknown(cfield, cname));
            }
            if runtime_patch && container.get("env").is_some() && ENV_PROTECTED.contains(&cname) {
                return Err(RenderError::Forbidden {
                    job: id.to_owned(),
                    field: format!("{parent}.template.spec.template.spec.{list}[{k}].env"),
                    message: format!("env of container {cname:?} is set through spec.trainer or spec.initializer"),
                });
            }
        }
    }
    let mut body = body.clone();
    if let Some(obj) = body.as_object_mut() {
        obj.remove("name");
    }
    strategic_merge(target, &body, "");
    Ok(())
}
