//! The slices of core/v1 pod types the renderer edits; everything else round-trips untouched.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::meta::{StringMap, TemplateMeta};

/// A `PodTemplateSpec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodTemplate {
    /// Pod labels and annotations.
    #[serde(default, skip_serializing_if = "TemplateMeta::is_empty")]
    pub metadata: TemplateMeta,
    /// Pod spec.
    #[serde(default)]
    pub spec: PodSpec,
}

/// A `PodSpec`, typed only where the renderer writes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    /// Init containers (the renderer may inject env into them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_containers: Vec<Container>,
    /// Containers.
    #[serde(default)]
    pub containers: Vec<Container>,
    /// Pod restart policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
    /// Node selector.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: StringMap,
    /// Scheduling gates (`{name}` objects).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scheduling_gates: Vec<Value>,
    /// Volumes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Value>,
    /// Every other pod field, preserved unchanged.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// A `Container`, typed only where the renderer writes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    /// Container name.
    pub name: String,
    /// Image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Entrypoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    /// Environment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// `envFrom` sources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_from: Vec<Value>,
    /// Ports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<Value>,
    /// Resource requirements, kept as JSON so quantities and claims round-trip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Value>,
    /// Volume mounts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_mounts: Vec<Value>,
    /// Every other container field, preserved unchanged.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// An `EnvVar`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvVar {
    /// Variable name.
    pub name: String,
    /// Literal value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Source of the value (fieldRef, secretKeyRef, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<Value>,
}

impl EnvVar {
    /// A literal `name=value` variable.
    pub fn literal(name: &str, value: impl Into<String>) -> Self {
        EnvVar { name: name.to_owned(), value: Some(value.into()), value_from: None }
    }
}

impl Container {
    /// Sets `var`, replacing an existing variable of the same name in place (so order is stable).
    pub fn upsert_env(&mut self, var: EnvVar) {
        match self.env.iter_mut().find(|e| e.name == var.name) {
            Some(slot) => *slot = var,
            None => self.env.push(var),
        }
    }

    /// Adds a TCP container port unless one with that number exists.
    pub fn ensure_port(&mut self, port: u16) {
        let exists = self.ports.iter().any(|p| p.get("containerPort").and_then(Value::as_u64) == Some(u64::from(port)));
        if !exists {
            self.ports.push(serde_json::json!({ "containerPort": port, "protocol": "TCP" }));
        }
    }

    /// Adds a volume mount unless one at the same path exists.
    pub fn ensure_volume_mount(&mut self, mount: Value) {
        let path = mount.get("mountPath").cloned();
        if !self.volume_mounts.iter().any(|m| m.get("mountPath") == path.as_ref()) {
            self.volume_mounts.push(mount);
        }
    }
}

impl PodSpec {
    /// Adds a volume unless one with the same name exists.
    pub fn ensure_volume(&mut self, volume: Value) {
        let name = volume.get("name").cloned();
        if !self.volumes.iter().any(|v| v.get("name") == name.as_ref()) {
            self.volumes.push(volume);
        }
    }

    /// Adds a scheduling gate unless present.
    pub fn ensure_scheduling_gate(&mut self, gate: &str) {
        if !self.scheduling_gates.iter().any(|g| g.get("name").and_then(Value::as_str) == Some(gate)) {
            self.scheduling_gates.push(serde_json::json!({ "name": gate }));
        }
    }
}
