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

/// `TrainJob.spec`, v2.3 shape plus the v2.0 and v2.1 override fields.
fn train_job_spec() -> Value {
    let data = json!({
        "type": "object",
        "properties": {
            "storageUri": {"type": "string", "maxLength": 2048},
            "env": env_list(),
            "secretRef": {"type": "object", "properties": {"name": {"type": "string"}}},
        },
    });
    json!({
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
    })
}

/// `TrainJob`.
pub(super) fn train_job() -> Schema {
    let spec = train_job_spec();
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

/// A numeric range of a search space; bounds are decimal strings.
fn search_range(lower_rule: &str) -> Value {
    let number = json!({
        "type": "string",
        "minLength": 1,
        "maxLength": 64,
        "pattern": "^-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?$",
    });
    json!({
        "type": "object",
        "required": ["min", "max"],
        "properties": {
            "min": number.clone(),
            "max": number,
            "type": {"type": "string", "enum": ["Int", "Float"], "default": "Float"},
        },
        "x-kubernetes-validations": [{"rule": lower_rule, "message": "min must be below max (and above 0 for logUniform)"}],
    })
}

/// `OptimizationJob` (Trainer v2.4): a hyperparameter search whose trials are TrainJobs.
pub(super) fn optimization_job() -> Schema {
    let text = json!({"type": "string", "minLength": 1, "maxLength": 64});
    let spec = json!({
        "type": "object",
        "required": ["objectives", "parameters", "trainJobTemplate"],
        "properties": {
            "objectives": {
                "type": "array",
                "minItems": 1,
                "maxItems": 1,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["metric"],
                "items": {
                    "type": "object",
                    "required": ["metric"],
                    "properties": {
                        "metric": text.clone(),
                        "direction": {"type": "string", "enum": ["Maximize", "Minimize"], "default": "Minimize"},
                    },
                },
            },
            "searchAlgorithm": {
                "type": "object",
                "default": {"random": {}},
                "properties": {
                    "random": {"type": "object", "properties": {"seed": {"type": "integer", "format": "int64"}}},
                    "grid": {"type": "object"},
                },
                "x-kubernetes-validations": [{
                    "rule": "[has(self.random), has(self.grid)].filter(x, x).size() == 1",
                    "message": "exactly one of random and grid",
                }],
            },
            "parameters": {
                "type": "array",
                "minItems": 1,
                "maxItems": 100,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {
                    "type": "object",
                    "required": ["name", "searchSpace"],
                    "properties": {
                        "name": text.clone(),
                        "searchSpace": {
                            "type": "object",
                            "properties": {
                                "uniform": search_range("double(self.min) < double(self.max)"),
                                "logUniform": search_range("double(self.min) > 0.0 && double(self.min) < double(self.max)"),
                                "categorical": {
                                    "type": "object",
                                    "required": ["choices"],
                                    "properties": {
                                        "choices": {
                                            "type": "array",
                                            "minItems": 1,
                                            "maxItems": 100,
                                            "x-kubernetes-list-type": "set",
                                            "items": {"type": "string", "maxLength": 64},
                                        },
                                    },
                                },
                            },
                            "x-kubernetes-validations": [{
                                "rule": "[has(self.uniform), has(self.logUniform), has(self.categorical)].filter(x, x).size() == 1",
                                "message": "exactly one of uniform, logUniform and categorical",
                            }],
                        },
                    },
                },
            },
            "numTrials": {"type": "integer", "format": "int32", "minimum": 1, "maximum": 100, "default": 1},
            "parallelTrials": {"type": "integer", "format": "int32", "minimum": 1, "maximum": 100, "default": 1},
            "trainJobTemplate": {
                "type": "object",
                "required": ["spec"],
                "properties": {
                    "metadata": {
                        "type": "object",
                        "properties": {"labels": string_map(), "annotations": string_map()},
                    },
                    "spec": train_job_spec(),
                },
            },
        },
        "x-kubernetes-validations": [
            {"rule": "self == oldSelf", "message": "an OptimizationJob's spec is immutable"},
            {"rule": "!has(self.parallelTrials) || self.parallelTrials <= (has(self.numTrials) ? self.numTrials : 1)", "message": "parallelTrials may not exceed numTrials"},
            {
                "rule": "!has(self.searchAlgorithm) || !has(self.searchAlgorithm.grid) || self.parameters.all(p, has(p.searchSpace.categorical))",
                "message": "grid search takes categorical parameters only",
            },
        ],
    });
    let status = json!({
        "type": "object",
        "properties": {
            "conditions": conditions(),
            "result": {
                "type": "object",
                "properties": {"trainJobName": {"type": "string"}, "parameters": {"type": "array", "items": open_object()}},
            },
            "trials": {"type": "array", "maxItems": 100, "items": open_object()},
        },
    });
    root(spec, Some(status), json!([]))
}
