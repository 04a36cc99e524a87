//! CRDs for the binders' PodGroups (scheduler-plugins' coscheduling, Volcano, KAI), so that the API
//! server serves the kinds trainyard writes for them; the binders themselves are absent here.
//!
//! The projects' own CRD files are not at hand, so each spec is written out from their published
//! API types (the same fields as `scripts/podgroup_schemas.py`), structural and without unknown
//! fields: the API server prunes what a schema does not define, so a field trainyard sent that the
//! binder does not know is missing from the stored object, which the scenario compares.

use serde_json::{Value, json};

/// `(group, version, spec properties)` of each binder's PodGroup.
fn kinds() -> Vec<(&'static str, &'static str, Value)> {
    let quantity = json!({"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": true});
    let resources = json!({"type": "object", "additionalProperties": quantity});
    let int32 = json!({"type": "integer", "format": "int32"});
    vec![
        (
            "scheduling.x-k8s.io",
            "v1alpha1",
            json!({
                "minMember": {"type": "integer", "format": "int32", "minimum": 1},
                "minResources": resources,
                "scheduleTimeoutSeconds": int32,
            }),
        ),
        (
            "scheduling.volcano.sh",
            "v1beta1",
            json!({
                "minMember": {"type": "integer", "format": "int32", "minimum": 0},
                "minTaskMember": {"type": "object", "additionalProperties": int32},
                "queue": {"type": "string", "default": "default"},
                "priorityClassName": {"type": "string"},
                "minResources": resources,
                "networkTopology": {"type": "object", "properties": {
                    "mode": {"type": "string", "enum": ["hard", "soft"], "default": "hard"},
                    "highestTierAllowed": {"type": "integer", "minimum": 0},
                    "highestTierName": {"type": "string"},
                }},
            }),
        ),
        (
            "scheduling.run.ai",
            "v2alpha2",
            json!({
                "minMember": {"type": "integer", "format": "int32", "minimum": 0},
                "minSubGroup": {"type": "integer", "format": "int32", "minimum": 0},
                "queue": {"type": "string"},
                "priorityClassName": {"type": "string"},
                "preemptibility": {"type": "string", "enum": ["preemptible", "non-preemptible"]},
                "markUnschedulable": {"type": "boolean"},
            }),
        ),
    ]
}

/// The CRD of the PodGroup of the binder whose API group is `group`.
pub fn pod_group_crd(group: &str) -> Option<Value> {
    let (group, version, properties) = kinds().into_iter().find(|(g, ..)| *g == group)?;
    Some(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("podgroups.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "podgroups", "singular": "podgroup", "kind": "PodGroup", "listKind": "PodGroupList"},
            "versions": [{
                "name": version,
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": {"type": "object", "properties": properties},
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    },
                }},
            }],
        },
    }))
}
