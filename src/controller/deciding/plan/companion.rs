//! Companion mode in a plan: the `runtimePatches` entry through which Kubeflow Trainer launches
//! a gang where trainyard placed it.

use serde_json::{Value, json};
use trainyard_bridges::trainer as bridge;

use super::{PATCH_MANAGER, Planner};
use crate::controller::acting::admission_record::AdmissionRecord;
use crate::controller::deciding::pod_bindings::GangLayout;

impl Planner<'_, '_> {
    /// trainyard's current `runtimePatches` entry on the TrainJob, as JSON.
    pub(super) fn our_patch(&self) -> Option<Value> {
        let patch = self.inp.job.spec.0.runtime_patches.iter().find(|p| p.manager == PATCH_MANAGER)?;
        let mut value = serde_json::to_value(patch).ok()?;
        // `time` is the webhook's to set.
        value.as_object_mut()?.remove("time");
        Some(value)
    }

    /// Whether the TrainJob already carries the runtime patch for this admission.
    pub(super) fn has_our_patch(&self, layout: &GangLayout, record: &AdmissionRecord) -> bool {
        let want = Some(companion_patch(self.name(), layout, record));
        let have = self
            .inp
            .job
            .spec
            .0
            .runtime_patches
            .iter()
            .find(|p| p.manager == PATCH_MANAGER)
            .and_then(|p| serde_json::to_value(p).ok());
        match (want, have) {
            (Some(w), Some(h)) => h.get("trainingRuntimeSpec") == w.get("trainingRuntimeSpec"),
            _ => false,
        }
    }
}

/// trainyard's `runtimePatches` entry for an admission: the gang label plus either the topology
/// gate (pods are bound one by one) or the domain node selector, on the `node` replicated job.
pub fn companion_patch(job_name: &str, layout: &GangLayout, record: &AdmissionRecord) -> Value {
    let names: Vec<&str> = match layout {
        GangLayout::JobSet(rjobs) => rjobs.iter().map(|(n, ..)| n.as_str()).collect(),
        GangLayout::LeaderWorkerSet { .. } => vec![bridge::NODE],
    };
    let mut pod_spec = json!({});
    match &record.domain {
        Some(selector) => {
            let map: serde_json::Map<String, Value> =
                selector.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
            pod_spec["nodeSelector"] = Value::Object(map);
        }
        None => pod_spec["schedulingGates"] = json!([{"name": trainyard_bridges::TOPOLOGY_GATE}]),
    }
    json!({
        "manager": PATCH_MANAGER,
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": names.iter().map(|name| json!({
                        "name": name,
                        "template": {
                            "spec": {
                                "template": {
                                    "metadata": {"labels": {trainyard_bridges::GANG_LABEL: job_name}},
                                    "spec": pod_spec.clone(),
                                },
                            },
                        },
                    })).collect::<Vec<_>>(),
                },
            },
        },
    })
}
