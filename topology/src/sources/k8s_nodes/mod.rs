//! Kubernetes Node lists (`kubectl get nodes -o json` or `-o yaml`) as a tree whose levels are node label keys.
//!
//! This follows Kueue's topology-aware scheduling: a Kueue `Topology` names label keys outermost first,
//! and a domain is a node's tuple of values for the keys down to its level, so subblock `s1` of block
//! `b1` and subblock `s1` of block `b2` are different domains. Level names are the label keys
//! themselves, which is what a request names: `podset-required-topology:
//! cloud.google.com/gce-topology-block`.
//!
//! GB200 NVL72 racks add an NVLink level. GPU feature discovery labels each node with
//! `nvidia.com/gpu.clique = <clusterUUID>.<cliqueId>`, and only GPUs of one clique reach each other over
//! NVLink, so when a usable node carries that label the clique becomes a level just above the host.
//!
//! Like Kueue, only Ready, schedulable nodes count. They and nodes without a level label are left out
//! with a [`SourceWarning`] rather than merged into a neighbour's domain. Capacity comes from
//! `status.allocatable`.

mod kueue;
pub mod quantity;
pub mod tpu;

use std::collections::{BTreeMap, HashSet};

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_saphyr::Spanned;

use super::{LoadedTopology, SourceWarning, node};
use crate::{Error, InputError, NodeEntry, ResolvedSpec, Resources, Result};
pub use kueue::level_keys_from_kueue_topology;
use quantity::QuantityError;

/// The label GPU feature discovery puts the GPU model in; read as the node's flavor.
pub const GPU_PRODUCT_KEY: &str = "nvidia.com/gpu.product";

/// The label every node carries with its host name; Kueue allows it only as the lowest level.
pub const HOSTNAME_KEY: &str = "kubernetes.io/hostname";
/// The NVLink clique label GPU feature discovery writes on GB200 nodes.
pub const DEFAULT_CLIQUE_KEY: &str = "nvidia.com/gpu.clique";
/// The extended resource the NVIDIA device plugin advertises.
pub const DEFAULT_GPU_RESOURCE: &str = "nvidia.com/gpu";
/// Kueue's limit on the levels of one `Topology`.
pub const MAX_LEVELS: usize = 16;

/// How to turn node labels and resources into levels and capacities.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeListOptions {
    /// Label keys of the levels, outermost first, as a Kueue Topology lists them, e.g.
    /// `["cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock",
    /// "kubernetes.io/hostname"]`. If the last key is not `kubernetes.io/hostname`, a host level named
    /// `kubernetes.io/hostname` valued by `metadata.name` is appended.
    pub level_keys: Vec<String>,
    /// NVLink domain label; default `Some("nvidia.com/gpu.clique")`. When any usable node carries it,
    /// a level of that name is inserted just above the host level.
    pub clique_key: Option<String>,
    /// Extended resource counted as GPUs; default `nvidia.com/gpu`.
    pub gpu_resource: String,
}

impl Default for NodeListOptions {
    /// Hosts only (plus NVLink cliques where nodes have them), GPUs from `nvidia.com/gpu`: the levels
    /// every cluster has, since other topology labels differ between clouds.
    fn default() -> NodeListOptions {
        NodeListOptions {
            level_keys: vec![HOSTNAME_KEY.to_string()],
            clique_key: Some(DEFAULT_CLIQUE_KEY.to_string()),
            gpu_resource: DEFAULT_GPU_RESOURCE.to_string(),
        }
    }
}

/// A `List`/`NodeList` (with `items`) or a single `Node`; only the fields the reader uses.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Document {
    kind: Option<String>,
    items: Option<Vec<Spanned<NodeObject>>>,
    metadata: Option<Metadata>,
    spec: Option<NodeSpec>,
    status: Option<NodeStatus>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NodeObject {
    kind: Option<String>,
    metadata: Option<Metadata>,
    spec: Option<NodeSpec>,
    status: Option<NodeStatus>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Metadata {
    name: Option<String>,
    labels: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NodeSpec {
    unschedulable: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NodeStatus {
    allocatable: Option<BTreeMap<String, String>>,
    conditions: Option<Vec<Condition>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Condition {
    #[serde(rename = "type")]
    kind: Option<String>,
    status: Option<String>,
}

/// One node object with where it sits in the input.
struct Item {
    /// `items[3].` (or empty for a single Node), to prefix field paths in errors.
    field: String,
    line: Option<u64>,
    object: NodeObject,
}

/// A node as read, before the level labels are looked at.
struct ReadNode<'a> {
    item: &'a Item,
    name: &'a str,
    labels: &'a BTreeMap<String, String>,
    capacity: Resources,
    /// Why Kueue would not count it; empty when it is usable.
    unusable: Vec<String>,
}

/// A node that made it into the spec.
struct Kept<'a> {
    item: &'a Item,
    name: &'a str,
    path: Vec<String>,
    capacity: Resources,
    flavor: Option<String>,
}

/// Reads a node list and builds the levels from `options`. Nodes that are not Ready, are cordoned or
/// miss a level label are reported and left out. A quantity that does not parse, a duplicate node
/// name, an NVLink clique split across parent domains, a level key no node carries, or no usable node
/// at all is an error.
pub fn parse(text: &str, source_name: &str, options: &NodeListOptions) -> Result<LoadedTopology> {
    check_level_keys(&options.level_keys, source_name, "level_keys", |i| format!("level_keys[{i}]"))?;
    if let Some(key) = options.clique_key.as_deref().filter(|k| !is_label_key(k)) {
        return Err(invalid(source_name, None, "clique_key", format!("`{key}` is not a node label key")));
    }
    if options.gpu_resource.trim().is_empty() {
        return Err(invalid(source_name, None, "gpu_resource", "must name a resource, e.g. nvidia.com/gpu".into()));
    }
    let items = read_items(text, source_name)?;

    // Only looked up, never iterated.
    let mut names = HashSet::new();
    let mut nodes = Vec::with_capacity(items.len());
    for item in &items {
        let node = read_node(item, source_name, &options.gpu_resource)?;
        if !names.insert(node.name) {
            let message = format!("node {} is listed twice", node.name);
            return Err(invalid(source_name, item.line, format!("{}metadata.name", item.field), message));
        }
        nodes.push(node);
    }
    let host_from_label = options.level_keys.last().is_some_and(|k| k == HOSTNAME_KEY);
    for (i, key) in options.level_keys.iter().enumerate() {
        if !nodes.iter().any(|n| n.labels.contains_key(key)) {
            let message = format!("no node in the list carries the label `{key}`; is it spelled right?");
            return Err(invalid(source_name, None, format!("level_keys[{i}]"), message));
        }
    }
    let upper: Vec<&str> = options.level_keys[..options.level_keys.len() - usize::from(host_from_label)]
        .iter()
        .map(|k| k.as_str())
        .collect();
    let clique_key = options
        .clique_key
        .as_deref()
        .filter(|k| !options.level_keys.iter().any(|l| l == k))
        .filter(|k| nodes.iter().any(|n| n.unusable.is_empty() && n.labels.contains_key(*k)));

    // Every path is `upper..., [clique], host`; the keys looked up in labels are all but a host
    // named by `metadata.name`.
    let mut label_keys = upper.clone();
    label_keys.extend(clique_key);
    if host_from_label {
        label_keys.push(HOSTNAME_KEY);
    }
    let mut levels: Vec<String> = upper.iter().map(|k| k.to_string()).collect();
    levels.extend(clique_key.map(str::to_string));
    levels.push(HOSTNAME_KEY.to_string());

    let mut warnings = Vec::new();
    let mut kept = Vec::with_capacity(nodes.len());
    for node in &nodes {
        let warn = |message: String| SourceWarning {
            source_name: source_name.to_string(),
            line: node.item.line,
            item: format!("node {}", node.name),
            message,
        };
        if !node.unusable.is_empty() {
            warnings.push(warn(format!("{}; left out, as Kueue does", node.unusable.join(" and "))));
            continue;
        }
        let missing: Vec<String> = label_keys
            .iter()
            .filter(|k| node.labels.get(**k).is_none_or(|v| v.trim().is_empty()))
            .map(|k| format!("`{k}`"))
            .collect();
        if !missing.is_empty() {
            warnings.push(warn(format!("no label {}; node left out", missing.join(", "))));
            continue;
        }
        let mut path: Vec<String> = label_keys.iter().map(|k| node.labels[*k].trim().to_string()).collect();
        if !host_from_label {
            path.push(node.name.to_string());
        }
        // GPU feature discovery names the GPU model; it becomes the node's flavor.
        let flavor = node.labels.get(GPU_PRODUCT_KEY).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        kept.push(Kept { item: node.item, name: node.name, path, capacity: node.capacity, flavor });
    }
    if kept.is_empty() {
        return Err(nothing_left(source_name, nodes.len(), &warnings));
    }
    if host_from_label {
        check_unique_hosts(&kept, source_name)?;
    }
    // A clique listed among the level keys is checked like one inserted here.
    if let Some(key) = options.clique_key.as_deref() {
        let depth = label_keys.iter().position(|k| *k == key).filter(|&d| d + 1 < levels.len());
        if let Some(depth) = depth {
            check_cliques(&kept, depth, key, source_name)?;
        }
    }
    kept.sort_by(|a, b| a.name.cmp(b.name));
    let nodes: Vec<NodeEntry> =
        kept.into_iter().map(|k| NodeEntry { flavor: k.flavor, ..node(k.path, k.capacity) }).collect();
    Ok(LoadedTopology {
        spec: ResolvedSpec { name: source_name.to_string(), levels, nodes, tori: Vec::new() },
        warnings,
    })
}

fn invalid(source_name: &str, line: Option<u64>, field: impl Into<String>, message: String) -> Error {
    InputError::invalid(source_name, line, field, message).into()
}

/// The node objects of a list, or the one node of a `Node` document.
fn read_items(text: &str, source_name: &str) -> Result<Vec<Item>> {
    let document: Document = decode(text, source_name)?;
    let items = match (document.items, document.kind.as_deref()) {
        (Some(items), None | Some("List" | "NodeList")) => items
            .into_iter()
            .enumerate()
            .map(|(i, spanned)| Item {
                field: format!("items[{i}]."),
                // Location 0 means unknown: JSON input, which has no line numbers here.
                line: Some(spanned.referenced.line()).filter(|&l| l > 0),
                object: spanned.value,
            })
            .collect(),
        (None, Some("Node")) => {
            let object = NodeObject {
                kind: document.kind,
                metadata: document.metadata,
                spec: document.spec,
                status: document.status,
            };
            vec![Item { field: String::new(), line: None, object }]
        }
        (_, kind) => {
            let found = kind.map_or("no `kind`".to_string(), |k| format!("kind `{k}`"));
            let message = format!("expected a NodeList, a List of Nodes or a Node, found {found}");
            return Err(invalid(source_name, None, "kind", message));
        }
    };
    if items.is_empty() {
        return Err(invalid(source_name, None, "items", "the list has no nodes".into()));
    }
    if let Some(item) = items.iter().find(|i| i.object.kind.as_deref().is_some_and(|k| k != "Node")) {
        let message = format!("expected a Node, found `{}`", item.object.kind.as_deref().unwrap_or_default());
        return Err(invalid(source_name, item.line, format!("{}kind", item.field), message));
    }
    Ok(items)
}

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

fn read_node<'a>(item: &'a Item, source_name: &str, gpu_resource: &str) -> Result<ReadNode<'a>> {
    let metadata = item.object.metadata.as_ref();
    let name = metadata.and_then(|m| m.name.as_deref()).map(str::trim).unwrap_or_default();
    if name.is_empty() {
        let field = format!("{}metadata.name", item.field);
        return Err(invalid(source_name, item.line, field, "a node needs a name".into()));
    }
    let labels = metadata.and_then(|m| m.labels.as_ref()).unwrap_or(&NO_LABELS);
    let status = item.object.status.as_ref();
    let allocatable = status.and_then(|s| s.allocatable.as_ref()).unwrap_or(&NO_LABELS);
    let amount = |key: &str, parse: fn(&str) -> Result<u64, QuantityError>| -> Result<u64> {
        let Some(text) = allocatable.get(key) else { return Ok(0) };
        parse(text).map_err(|e| {
            let field = format!("{}status.allocatable.{key}", item.field);
            invalid(source_name, item.line, field, format!("node {name}: {e}"))
        })
    };
    let capacity = Resources {
        gpus: amount(gpu_resource, quantity::parse_whole)?,
        cpu_milli: amount("cpu", quantity::parse_millis)?,
        memory_mib: amount("memory", quantity::parse_mebibytes)?,
    };
    let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    let ready = conditions.iter().find(|c| c.kind.as_deref() == Some("Ready")).map(|c| c.status.as_deref());
    let mut unusable = Vec::new();
    match ready {
        Some(Some("True")) => {}
        Some(status) => unusable.push(format!("not Ready (Ready is {:?})", status.unwrap_or_default())),
        None => unusable.push("not Ready (no Ready condition)".to_string()),
    }
    if item.object.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        unusable.push("unschedulable (cordoned)".to_string());
    }
    Ok(ReadNode { item, name, labels, capacity, unusable })
}

/// With `kubernetes.io/hostname` as a level its value names the host, and two nodes must not share it.
fn check_unique_hosts(kept: &[Kept<'_>], source_name: &str) -> Result<()> {
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for node in kept {
        let host = node.path.last().map(String::as_str).unwrap_or_default();
        if let Some(other) = seen.insert(host, node.name) {
            let message = format!("nodes {other} and {} both have `{HOSTNAME_KEY}` = `{host}`", node.name);
            let field = format!("{}metadata.labels.{HOSTNAME_KEY}", node.item.field);
            return Err(invalid(source_name, node.item.line, field, message));
        }
    }
    Ok(())
}

/// Every node of an NVLink clique sits in one rack, so one parent domain: labels saying otherwise
/// contradict each other, and picking either would misplace the gang.
fn check_cliques(kept: &[Kept<'_>], depth: usize, key: &str, source_name: &str) -> Result<()> {
    let mut first: BTreeMap<&str, &Kept<'_>> = BTreeMap::new();
    for node in kept {
        let clique = node.path[depth].as_str();
        let seen = *first.entry(clique).or_insert(node);
        if seen.path[..depth] != node.path[..depth] {
            let message = format!(
                "NVLink clique `{clique}` spans two parent domains: node {} is under `{}`, node {} under `{}`",
                seen.name,
                seen.path[..depth].join("/"),
                node.name,
                node.path[..depth].join("/"),
            );
            return Err(invalid(
                source_name,
                node.item.line,
                format!("{}metadata.labels.{key}", node.item.field),
                message,
            ));
        }
    }
    Ok(())
}

/// The error when every node was left out: how many, and the first few reasons.
fn nothing_left(source_name: &str, total: usize, warnings: &[SourceWarning]) -> Error {
    const SHOWN: usize = 3;
    let mut reasons: Vec<String> = warnings.iter().take(SHOWN).map(|w| format!("{}: {}", w.item, w.message)).collect();
    if warnings.len() > SHOWN {
        reasons.push(format!("and {} more", warnings.len() - SHOWN));
    }
    let message = format!("all {total} nodes were left out: {}", reasons.join("; "));
    invalid(source_name, None, "items", message)
}

/// Checks a list of level label keys the way Kueue checks a `Topology`: 1 to 16 valid, distinct keys,
/// with `kubernetes.io/hostname` only as the last.
fn check_level_keys(
    keys: &[String],
    source_name: &str,
    list_field: &str,
    item_field: impl Fn(usize) -> String,
) -> Result<()> {
    if keys.is_empty() {
        let message = "no levels; list at least one node label key, e.g. kubernetes.io/hostname".to_string();
        return Err(invalid(source_name, None, list_field, message));
    }
    if keys.len() > MAX_LEVELS {
        let message = format!("{} levels; Kueue allows at most {MAX_LEVELS}", keys.len());
        return Err(invalid(source_name, None, list_field, message));
    }
    for (i, key) in keys.iter().enumerate() {
        if !is_label_key(key) {
            return Err(invalid(source_name, None, item_field(i), format!("`{key}` is not a node label key")));
        }
        if keys[..i].contains(key) {
            return Err(invalid(source_name, None, item_field(i), format!("`{key}` appears twice")));
        }
        if key == HOSTNAME_KEY && i + 1 != keys.len() {
            let message = format!("`{HOSTNAME_KEY}` can only be the last (lowest) level");
            return Err(invalid(source_name, None, item_field(i), message));
        }
    }
    Ok(())
}

/// A Kubernetes label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63
/// alphanumerics, `-`, `_` or `.` that starts and ends alphanumeric.
fn is_label_key(key: &str) -> bool {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let name_ok = (1..=63).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    let prefix_ok = prefix.is_none_or(|p| {
        (1..=253).contains(&p.len())
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            })
    });
    name_ok && prefix_ok
}

/// JSON when the first non-blank character is `{` or `[`, YAML otherwise.
fn decode<T: DeserializeOwned>(text: &str, source_name: &str) -> Result<T> {
    let text = crate::input_text::normalize(text);
    if text.trim_start().starts_with(['{', '[']) {
        return serde_json::from_str(&text).map_err(|e| InputError::syntax(source_name, e).into());
    }
    Ok(crate::input_text::yaml_with(&text, source_name, super::cluster_dump_yaml())?)
}

#[cfg(test)]
mod tests;
