//! The slices of Kubernetes object metadata the bridges read and write.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Labels or annotations: sorted so renders are byte-for-byte stable.
pub type StringMap = BTreeMap<String, String>;

/// `metadata` of a top-level object; fields we do not touch round-trip through `rest`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// Object name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Namespace (absent for cluster-scoped objects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Server-assigned UID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: StringMap,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: StringMap,
    /// Owners of this object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<OwnerReference>,
    /// Every other metadata field, preserved unchanged.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `metadata` of an embedded template: only labels and annotations matter there.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMeta {
    /// Labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: StringMap,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: StringMap,
    /// Every other metadata field, preserved unchanged.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

impl TemplateMeta {
    /// True when nothing would be serialized.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty() && self.rest.is_empty()
    }
}

/// A `metav1.OwnerReference`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    /// Owner's `apiVersion`.
    pub api_version: String,
    /// Owner's kind.
    pub kind: String,
    /// Owner's name.
    pub name: String,
    /// Owner's UID.
    pub uid: String,
    /// Whether the owner is the managing controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
    /// Whether foreground deletion of the owner waits for this object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_owner_deletion: Option<bool>,
}
