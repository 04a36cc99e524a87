//! trainyard's cluster-scoped `Topology`: how node labels describe the cluster's levels.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use trainyard_topology::sources::k8s_nodes::{DEFAULT_CLIQUE_KEY, DEFAULT_GPU_RESOURCE, NodeListOptions};

/// The levels of the cluster as node label keys, outermost first, as in a Kueue `Topology`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "trainyard.io",
    version = "v1alpha1",
    kind = "Topology",
    doc = "The cluster topology trainyard places gangs on, as node label keys.",
    plural = "topologies",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct TopologySpec {
    /// Levels, outermost first. `kubernetes.io/hostname` is the host level, added when not listed.
    #[schemars(length(min = 1, max = 16))]
    pub levels: Vec<Level>,
    /// NVLink domain label (one value per NVLink clique), inserted as a level above the host.
    /// Default `nvidia.com/gpu.clique`; an empty string turns it off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_label: Option<String>,
    /// The extended resource counted as GPUs; default `nvidia.com/gpu`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_resource: Option<String>,
    /// Only nodes with all of these labels belong to the cluster trainyard schedules.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Slices for TrainJobs that ask for none: each slice of `size` pods inside one domain of `level`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_slice: Option<Slice>,
}

/// One level of the tree.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Level {
    /// The node label whose value names a node's domain at this level.
    #[schemars(length(min = 1, max = 316))]
    pub node_label: String,
}

/// A slice rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Slice {
    /// Level (node label key) each slice must sit in.
    pub level: String,
    /// Pods per slice.
    #[schemars(range(min = 1))]
    pub size: u32,
}

impl TopologySpec {
    /// The levels every cluster has: hosts (and NVLink cliques where nodes carry them), for a
    /// controller without a Topology object.
    pub fn hosts_only() -> TopologySpec {
        TopologySpec { levels: vec![], ..TopologySpec::default() }
    }

    /// How the node reader turns labels into levels.
    pub fn node_list_options(&self) -> NodeListOptions {
        NodeListOptions {
            level_keys: self.levels.iter().map(|l| l.node_label.clone()).collect(),
            clique_key: match self.nvlink_label.as_deref() {
                None => Some(DEFAULT_CLIQUE_KEY.to_string()),
                Some("") => None,
                Some(key) => Some(key.to_string()),
            },
            gpu_resource: self.gpu_resource.clone().unwrap_or_else(|| DEFAULT_GPU_RESOURCE.to_string()),
        }
    }
}
