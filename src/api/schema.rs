//! Hand-written OpenAPI schemas of the Trainer kinds: the fields trainyard checks, the rest kept open.
//!
//! Upstream's controller-gen schemas spell out the whole pod spec (hundreds of kilobytes). These
//! keep Trainer's own fields, defaults and rules exact and leave embedded pod and JobSet templates
//! as `x-kubernetes-preserve-unknown-fields`, so the same TrainJob is accepted by both.

use schemars::Schema;
use serde_json::{Value, json};

/// Any object, stored as given.
fn open_object() -> Value {
    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

fn string_map() -> Value {
    json!({"type": "object", "additionalProperties": {"type": "string"}})
}

fn env_list() -> Value {
    json!({
        "type": "array",
        "maxItems": 128,
        "items": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string"}},
            "x-kubernetes-preserve-unknown-fields": true,
        },
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
    })
}

/// `metav1.Condition`.
fn conditions() -> Value {
    json!({
        "type": "array",
        "maxItems": 8,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["type", "status", "lastTransitionTime", "reason", "message"],
            "properties": {
                "type": {"type": "string", "maxLength": 316},
                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
                "lastTransitionTime": {"type": "string", "format": "date-time"},
                "reason": {"type": "string", "minLength": 1, "maxLength": 1024},
                "message": {"type": "string", "maxLength": 32768},
            },
        },
    })
}

fn root(spec: Value, status: Option<Value>, rules: Value) -> Schema {
    let mut properties = json!({
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": spec,
    });
    if let Some(status) = status {
        properties["status"] = status;
    }
    let mut value = json!({"type": "object", "required": ["spec"], "properties": properties});
    if rules.as_array().is_some_and(|r| !r.is_empty()) {
        value["x-kubernetes-validations"] = rules;
    }
    Schema::try_from(value).expect("a literal object is a schema")
}

/// `TrainJob`, v2.3 shape plus the v2.0 and v2.1 override fields.
pub(super) fn train_job() -> Schema {
    let data = json!({
        "type": "object",
        "properties": {
            "storageUri": {"type": "string", "maxLength": 2048},
            "env": env_list(),
            "secretRef": {"type": "object", "properties": {"name": {"type": "string"}}},
        },
    });
    let spec = json!({
        "type": "object",
        "required": ["runtimeRef"],
        "properties": {
            "runtimeRef": {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string", "minLength": 1, "maxLength": 253},
                    "apiGroup": {"type": "string", "default": "trainer.kubeflow.org", "maxLength": 253},
                    "kind": {
                        "type": "string",
                        "default": "ClusterTrainingRuntime",
                        "enum": ["TrainingRuntime", "ClusterTrainingRuntime"],
                    },
                },
                "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "runtimeRef is immutable"}],
            },
            "initializer": {
                "type": "object",
                "properties": {"dataset": data.clone(), "model": data},
                "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "initializer is immutable"}],
            },
            "trainer": {
                "type": "object",
                "properties": {
                    "image": {"type": "string", "maxLength": 500},
                    "command": {"type": "array", "maxItems": 128, "items": {"type": "string"}},
                    "args": {"type": "array", "maxItems": 128, "items": {"type": "string"}},
                    "env": env_list(),
                    "numNodes": {"type": "integer", "format": "int32", "minimum": 0},
                    "resourcesPerNode": open_object(),
                    // Trainer v2.4 (KEP-2782): a claim from a template for every node.
                    "resourceClaimsPerNode": {
                        "type": "array",
                        "maxItems": 32,
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name"],
                        "items": {
                            "type": "object",
                            "required": ["name", "resourceClaimTemplateName"],
                            "properties": {
                                "name": {"type": "string", "minLength": 1, "maxLength": 253},
                                "resourceClaimTemplateName": {"type": "string", "minLength": 1, "maxLength": 253},
                            },
                        },
                    },
                    // An integer since v2.2; v2.0/v2.1 also took "auto", "cpu" or "gpu".
                    "numProcPerNode": {"x-kubernetes-int-or-string": true},
                },
                "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "trainer is immutable"}],
            },
            "labels": string_map(),
            "annotations": string_map(),
            "podSpecOverrides": {"type": "array", "items": open_object()},
            "podTemplateOverrides": {"type": "array", "items": open_object()},
            "runtimePatches": {
                "type": "array",
                "maxItems": 16,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["manager"],
                "items": {
                    "type": "object",
                    "required": ["manager"],
                    "properties": {
                        "manager": {"type": "string", "minLength": 1, "maxLength": 316},
                        "time": {"type": "string", "format": "date-time"},
                        "trainingRuntimeSpec": open_object(),
                    },
                },
            },
            "suspend": {"type": "boolean", "default": false},
            "activeDeadlineSeconds": {"type": "integer", "format": "int64", "minimum": 1},
            "managedBy": {"type": "string", "default": "trainer.kubeflow.org/trainjob-controller"},
        },
    });
    let status = json!({
        "type": "object",
        "properties": {
            "conditions": conditions(),
            "jobsStatus": {
                "type": "array",
                "maxItems": 100,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string"},
                        "ready": {"type": "integer", "format": "int32"},
                        "succeeded": {"type": "integer", "format": "int32"},
                        "failed": {"type": "integer", "format": "int32"},
                        "active": {"type": "integer", "format": "int32"},
                        "suspended": {"type": "integer", "format": "int32"},
                    },
                },
            },
            "trainerStatus": open_object(),
        },
    });
    let rules = json!([
        {
            "rule": "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
            "message": "metadata.name must be an RFC 1035 label",
        },
        {"rule": "size(self.metadata.name) <= 63", "message": "metadata.name must be at most 63 characters"},
    ]);
    root(spec, Some(status), rules)
}

/// `TrainingRuntime` and `ClusterTrainingRuntime`.
pub(super) fn training_runtime() -> Schema {
    let spec = json!({
        "type": "object",
        "required": ["template"],
        "properties": {
            "mlPolicy": {
                "type": "object",
                "properties": {
                    "numNodes": {"type": "integer", "format": "int32", "minimum": 1},
                    "torch": open_object(),
                    "mpi": open_object(),
                    "jax": open_object(),
                    "xgboost": open_object(),
                    "flux": open_object(),
                },
                "x-kubernetes-validations": [{
                    "rule": "[has(self.torch), has(self.mpi), has(self.jax), has(self.xgboost), has(self.flux)].filter(x, x).size() <= 1",
                    "message": "only one of torch, mpi, jax, xgboost or flux may be set",
                }],
            },
            "podGroupPolicy": open_object(),
            "template": {
                "type": "object",
                "properties": {
                    "metadata": {
                        "type": "object",
                        "properties": {"labels": string_map(), "annotations": string_map()},
                    },
                    "spec": open_object(),
                },
            },
        },
    });
    root(spec, None, json!([]))
}
