//! Kueue's objects carried over to trainyard's: ClusterQueues and Cohorts become a tree of
//! `Queue`s (cohorts the inner queues that pool their members' quota), a Kueue `Topology`
//! becomes trainyard's, and everything without an equivalent (LocalQueues, per-flavor quotas,
//! flavors' node labels and taints, preemption and queueing settings, priority classes, kinds
//! trainyard has no use for) is listed as a note naming the object and where it came from.
//! Nothing is dropped without a note; what cannot be read at all is an error naming the field.

mod quota;

use std::collections::{BTreeMap, BTreeSet};

use kube::api::ObjectMeta;
use serde_json::Value;

use crate::api::queue::QueueSpec;
use crate::api::topology::{Level, TopologySpec};
use crate::api::{Queue, Topology};

/// Where an object came from: `file:line` of its YAML document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sourced {
    /// `file:line`.
    pub origin: String,
    /// The object as read.
    pub value: Value,
}

/// How to read the objects.
#[derive(Clone, Debug)]
pub struct ImportOptions {
    /// Resource names counted as GPUs (`nvidia.com/gpu` by default).
    pub gpu_resources: Vec<String>,
}

impl Default for ImportOptions {
    fn default() -> ImportOptions {
        ImportOptions { gpu_resources: vec!["nvidia.com/gpu".to_string()] }
    }
}

/// Something of the input that trainyard's objects do not carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// `file:line` of the object.
    pub origin: String,
    /// `Kind name` (or `Kind namespace/name`).
    pub object: String,
    /// What has no equivalent, and what became of it.
    pub message: String,
}

/// The carried-over objects.
#[derive(Clone, Debug, Default)]
pub struct Imported {
    /// trainyard's Topology, when a Kueue Topology was given.
    pub topology: Option<Topology>,
    /// The queues, parents before children, siblings by name.
    pub queues: Vec<Queue>,
    /// What has no equivalent, object by object.
    pub notes: Vec<Note>,
}

/// An object that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: {object}: {field}: {message}")]
pub struct ImportError {
    /// `file:line` of the object.
    pub origin: String,
    /// `Kind name`.
    pub object: String,
    /// The field at fault, e.g. `spec.resourceGroups[0].flavors[1].resources[0].nominalQuota`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

/// The object being read, to name it in errors and notes.
#[derive(Clone)]
pub(crate) struct At {
    origin: String,
    /// `Kind name` (or `Kind namespace/name`).
    object: String,
    name: String,
}

impl At {
    fn error(&self, field: &str, message: &str) -> ImportError {
        ImportError {
            origin: self.origin.clone(),
            object: self.object.clone(),
            field: field.to_string(),
            message: message.to_string(),
        }
    }

    fn note(&self, message: impl Into<String>) -> Note {
        Note { origin: self.origin.clone(), object: self.object.clone(), message: message.into() }
    }
}

/// The Kueue API group.
const KUEUE_GROUP: &str = "kueue.x-k8s.io";

/// Node label naming a node's GPU model: what a trainyard Queue's `flavor` matches.
const GPU_PRODUCT_LABEL: &str = "nvidia.com/gpu.product";

/// ClusterQueue and Cohort spec fields read into the Queue; any other is noted.
const READ_FIELDS: [&str; 6] = ["resourceGroups", "cohort", "cohortName", "fairSharing", "parent", "parentName"];

/// One queue of the tree being built.
struct Node {
    at: At,
    kind: &'static str,
    spec: QueueSpec,
}

/// Carries the objects over (see the module documentation).
pub fn import(objects: &[Sourced], options: &ImportOptions) -> Result<Imported, ImportError> {
    let mut notes = Vec::new();
    let mut flavors: BTreeMap<String, (At, Value)> = BTreeMap::new();
    let mut topologies: Vec<(At, String, Value)> = Vec::new();
    let mut queues: Vec<(At, Value)> = Vec::new();
    let mut cohorts: Vec<(At, Value)> = Vec::new();
    for object in objects {
        let kind = object.value.get("kind").and_then(Value::as_str).unwrap_or("");
        let api = object.value.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let meta = object.value.get("metadata");
        let name = meta.and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or("");
        let namespace = meta.and_then(|m| m.get("namespace")).and_then(Value::as_str);
        let shown = match namespace {
            Some(ns) => format!("{kind} {ns}/{name}"),
            None => format!("{kind} {name}"),
        };
        let at = At { origin: object.origin.clone(), object: shown, name: name.to_string() };
        if kind.is_empty() {
            return Err(at.error("kind", "missing: every object needs `apiVersion` and `kind`"));
        }
        if api.split('/').next() != Some(KUEUE_GROUP) {
            notes.push(at.note(format!("not a Kueue object (apiVersion `{api}`): left out")));
            continue;
        }
        if name.is_empty() {
            return Err(at.error("metadata.name", "missing"));
        }
        let spec = object.value.get("spec").cloned().unwrap_or(Value::Object(Default::default()));
        match kind {
            "ResourceFlavor" => {
                flavors.insert(name.to_string(), (at, spec));
            }
            "Topology" => topologies.push((at, name.to_string(), spec)),
            "ClusterQueue" => queues.push((at, spec)),
            "Cohort" => cohorts.push((at, spec)),
            "LocalQueue" => {
                let cq = spec.get("clusterQueue").and_then(Value::as_str).unwrap_or("");
                notes.push(at.note(format!(
                    "trainyard has no namespaced queues: TrainJobs of namespace `{}` sent to `{name}` \
                     (label kueue.x-k8s.io/queue-name) carry the label trainyard.io/queue: {cq} instead",
                    namespace.unwrap_or("default")
                )));
            }
            "WorkloadPriorityClass" => {
                let value = object.value.get("value").map_or("0".to_string(), Value::to_string);
                notes.push(at.note(format!(
                    "a priority class belongs to the policy file: add `{{name: {name}, value: {value}}}` to its \
                     priority_classes, and label TrainJobs trainyard.io/priority-class: {name}"
                )));
            }
            other => notes.push(at.note(format!("kind `{other}` has no equivalent in trainyard: left out"))),
        }
    }
    for (at, spec) in flavors.values() {
        notes.extend(flavor_notes(at, spec));
    }
    let mut nodes: BTreeMap<String, Node> = BTreeMap::new();
    for (at, spec) in &cohorts {
        let node = cohort_queue(at, spec, options, &mut notes)?;
        nodes.insert(at.name.clone(), node);
    }
    for (at, spec) in &queues {
        let node = cluster_queue(at, spec, options, &flavors, &mut notes)?;
        if let Some(cohort) = nodes.get(&at.name) {
            return Err(at.error(
                "metadata.name",
                &format!(
                    "{} at {} has this name too; trainyard's queues share one namespace, so rename one",
                    cohort.at.object, cohort.at.origin
                ),
            ));
        }
        nodes.insert(at.name.clone(), node);
    }
    // Cohorts named by a ClusterQueue or Cohort without an object of their own pool their
    // members' quota and hold none themselves; they are located where they are first named.
    let named: BTreeMap<String, String> = nodes
        .values()
        .filter_map(|n| n.spec.parent.clone().map(|p| (p, format!("{} ({})", n.at.origin, n.at.object))))
        .rev()
        .collect();
    for (cohort, named_at) in named {
        nodes.entry(cohort).or_insert_with_key(|cohort| {
            let at =
                At { origin: format!("named at {named_at}"), object: format!("Cohort {cohort}"), name: cohort.clone() };
            Node { at, kind: "Cohort", spec: QueueSpec::default() }
        });
    }
    let topology = pick_topology(&topologies, &flavors, &mut notes);
    let queues = tree_order(nodes)?;
    Ok(Imported { topology, queues, notes })
}

/// The queue of a ClusterQueue or Cohort: its quota summed over flavors, its parent named by
/// the first of `parent_keys` it sets, its fair-sharing weight. Returns the quota too.
fn queue_node(
    at: &At,
    kind: &'static str,
    spec: &Value,
    parent_keys: [&str; 2],
    options: &ImportOptions,
    notes: &mut Vec<Note>,
) -> Result<(Node, quota::Quota), ImportError> {
    let quota = quota::read_groups(spec.get("resourceGroups"), at, &options.gpu_resources)?;
    notes.extend(quota.notes.iter().map(|n| at.note(n.clone())));
    let parent = match parent_keys.iter().find_map(|k| spec.get(*k).and_then(Value::as_str).map(|v| (*k, v))) {
        Some((key, name)) if name.trim().is_empty() => {
            // Kueue reads an empty name as none; naming a nameless queue is refused here.
            return Err(at.error(&format!("spec.{key}"), "empty: name a cohort or leave the field out"));
        }
        found => found.map(|(_, name)| name.to_string()),
    };
    let spec = QueueSpec {
        parent,
        nominal: quota.nominal.clone(),
        borrowing_limit: quota.borrowing.clone(),
        lending_limit: quota.lending.clone(),
        weight: weight(at, spec, notes)?,
        ..QueueSpec::default()
    };
    Ok((Node { at: at.clone(), kind, spec }, quota))
}

/// A ClusterQueue as a queue: its cohort is its parent; one flavor naming a GPU model gives the
/// queue its flavor.
fn cluster_queue(
    at: &At,
    spec: &Value,
    options: &ImportOptions,
    flavors: &BTreeMap<String, (At, Value)>,
    notes: &mut Vec<Note>,
) -> Result<Node, ImportError> {
    let (mut node, quota) = queue_node(at, "ClusterQueue", spec, ["cohortName", "cohort"], options, notes)?;
    for missing in quota.flavors.iter().filter(|f| !flavors.contains_key(*f)) {
        notes.push(at.note(format!("names ResourceFlavor `{missing}`, which is not among the inputs")));
    }
    node.spec.flavor = gpu_flavor(at, &quota.gpu_flavors, flavors, notes);
    notes.extend(setting_notes(at, spec));
    Ok(node)
}

/// A Cohort object as an inner queue: its own quota is a pool on top of its members'.
fn cohort_queue(at: &At, spec: &Value, options: &ImportOptions, notes: &mut Vec<Note>) -> Result<Node, ImportError> {
    let (node, quota) = queue_node(at, "Cohort", spec, ["parentName", "parent"], options, notes)?;
    if !quota.gpu_flavors.is_empty() {
        notes.push(at.note(format!(
            "the cohort's GPU quota of flavors {} pools GPUs of any model: an inner trainyard queue has no flavor",
            quota.gpu_flavors.join(", ")
        )));
    }
    notes.extend(setting_notes(at, spec));
    Ok(node)
}

/// The fair-sharing weight; Kueue's weight 0 (borrow last) has no equivalent.
fn weight(at: &At, spec: &Value, notes: &mut Vec<Note>) -> Result<Option<f64>, ImportError> {
    let Some(w) = spec.get("fairSharing").and_then(|f| f.get("weight")) else { return Ok(None) };
    let text = match w {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let millis = trainyard_topology::sources::k8s_nodes::quantity::parse_millis(&text)
        .map_err(|e| at.error("spec.fairSharing.weight", &e.to_string()))?;
    if millis == 0 {
        notes.push(at.note("fair-sharing weight 0 has no equivalent (trainyard weights are above 0): left at 1"));
        return Ok(None);
    }
    Ok(Some(millis as f64 / 1000.0))
}

/// The GPU model a queue's gangs run on, when exactly one flavor gives its GPUs and that flavor
/// names a model by the label trainyard matches.
fn gpu_flavor(
    at: &At,
    gpu_flavors: &[String],
    flavors: &BTreeMap<String, (At, Value)>,
    notes: &mut Vec<Note>,
) -> Option<String> {
    let [only] = gpu_flavors else {
        if gpu_flavors.len() > 1 {
            notes.push(at.note(format!(
                "GPUs of flavors {} are pooled: a trainyard Queue names one GPU model or none, so its gangs run on any",
                gpu_flavors.join(", ")
            )));
        }
        return None;
    };
    let product = flavors
        .get(only)
        .and_then(|(_, spec)| spec.get("nodeLabels"))
        .and_then(|labels| labels.get(GPU_PRODUCT_LABEL))
        .and_then(Value::as_str);
    if product.is_none() && flavors.contains_key(only) {
        notes.push(at.note(format!(
            "flavor `{only}` names no GPU model (label {GPU_PRODUCT_LABEL}): the queue's gangs run on any GPU node"
        )));
    }
    product.map(str::to_string)
}

/// Settings of a ClusterQueue or Cohort that trainyard keeps elsewhere or not at all.
fn setting_notes(at: &At, spec: &Value) -> Vec<Note> {
    let Some(fields) = spec.as_object() else { return Vec::new() };
    let mut out = Vec::new();
    for (key, value) in fields {
        if READ_FIELDS.contains(&key.as_str()) {
            continue;
        }
        let message = match key.as_str() {
            "namespaceSelector" if value.as_object().is_some_and(|m| m.is_empty()) => continue,
            "namespaceSelector" => {
                "namespaceSelector has no equivalent: any namespace's TrainJobs may name the queue (limit that with RBAC)"
                    .to_string()
            }
            "preemption" => preemption_note(value),
            "queueingStrategy" => format!(
                "queueingStrategy {} is the policy's choice in trainyard (`backfill: none` is strict FIFO, `easy` lets \
                 later gangs pass without delaying the first)",
                value.as_str().unwrap_or("?")
            ),
            "stopPolicy" if value.as_str() == Some("None") => continue,
            other => format!("spec.{other} has no equivalent: left out"),
        };
        out.push(at.note(message));
    }
    out
}

/// Kueue's preemption settings as the policy's.
fn preemption_note(value: &Value) -> String {
    let get = |k: &str| value.get(k).and_then(Value::as_str).unwrap_or("Never");
    let reclaim = get("reclaimWithinCohort") != "Never";
    let within = get("withinClusterQueue") != "Never";
    let mut note = format!(
        "preemption is the policy's in trainyard: reclaimWithinCohort {} and withinClusterQueue {} read as \
         `preemption: {{reclaim: {reclaim}, within_queue: {within}}}`",
        get("reclaimWithinCohort"),
        get("withinClusterQueue")
    );
    if value.get("borrowWithinCohort").is_some() {
        note.push_str("; borrowWithinCohort has no equivalent");
    }
    note
}

/// What a ResourceFlavor says that trainyard's objects do not carry.
fn flavor_notes(at: &At, spec: &Value) -> Vec<Note> {
    let mut out = Vec::new();
    if let Some(labels) = spec.get("nodeLabels").and_then(Value::as_object) {
        let others: Vec<String> = labels
            .iter()
            .filter(|(k, _)| k.as_str() != GPU_PRODUCT_LABEL)
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
            .collect();
        if !others.is_empty() {
            out.push(at.note(format!(
                "node labels {} have no equivalent on a Queue (it selects nodes by GPU model, {GPU_PRODUCT_LABEL}, \
                 only); the Topology's nodeSelector limits trainyard to some nodes cluster-wide",
                others.join(", ")
            )));
        }
    }
    for key in ["nodeTaints", "tolerations"] {
        if spec.get(key).and_then(Value::as_array).is_some_and(|a| !a.is_empty()) {
            out.push(at.note(format!(
                "{key} has no equivalent: trainyard places only on nodes whose taints the gang's pods tolerate"
            )));
        }
    }
    out
}

/// trainyard's Topology from Kueue's: the one the flavors name, or the only one given.
fn pick_topology(
    topologies: &[(At, String, Value)],
    flavors: &BTreeMap<String, (At, Value)>,
    notes: &mut Vec<Note>,
) -> Option<Topology> {
    let named: BTreeSet<&str> =
        flavors.values().filter_map(|(_, s)| s.get("topologyName").and_then(Value::as_str)).collect();
    let index = topologies.iter().position(|(_, name, _)| named.contains(name.as_str())).unwrap_or(0);
    let chosen = topologies.get(index)?;
    for (i, (at, name, _)) in topologies.iter().enumerate() {
        if i != index {
            notes.push(at.note(format!("trainyard places on one Topology (`{}`); `{name}` is left out", chosen.1)));
        }
    }
    let levels: Vec<Level> = chosen
        .2
        .get("levels")
        .and_then(Value::as_array)
        .map(|ls| {
            ls.iter()
                .filter_map(|l| l.get("nodeLabel").and_then(Value::as_str))
                .map(|k| Level { node_label: k.to_string() })
                .collect()
        })
        .unwrap_or_default();
    let mut topology = Topology::new("default", TopologySpec { levels, ..TopologySpec::default() });
    topology.metadata = ObjectMeta { name: Some("default".into()), ..ObjectMeta::default() };
    Some(topology)
}

/// The queues, roots first, each followed by its subtree, siblings by name; the tree is checked
/// as the controller checks it.
fn tree_order(nodes: BTreeMap<String, Node>) -> Result<Vec<Queue>, ImportError> {
    let mut children: BTreeMap<Option<&str>, Vec<&str>> = BTreeMap::new();
    for (name, node) in &nodes {
        children.entry(node.spec.parent.as_deref()).or_default().push(name);
    }
    let mut order: Vec<&str> = Vec::new();
    let mut stack: Vec<&str> = children.get(&None).cloned().unwrap_or_default();
    stack.reverse();
    while let Some(name) = stack.pop() {
        order.push(name);
        if let Some(kids) = children.get(&Some(name)) {
            stack.extend(kids.iter().rev());
        }
    }
    let queues: Vec<Queue> = order
        .iter()
        .map(|name| {
            let mut q = Queue::new(name, nodes[*name].spec.clone());
            q.metadata = ObjectMeta { name: Some((*name).to_string()), ..ObjectMeta::default() };
            q
        })
        .collect();
    if order.len() < nodes.len() {
        let (name, node) = nodes.iter().find(|(n, _)| !order.contains(&n.as_str())).expect("one is left out");
        return Err(node.at.error(
            "spec",
            &format!("`{name}` is in a cycle of cohort parents; Kueue disables such a tree, trainyard refuses it"),
        ));
    }
    let configs: Vec<_> = queues
        .iter()
        .map(|q| q.to_queue_config())
        .collect::<Result<_, _>>()
        .map_err(|e| ImportError { origin: String::new(), object: "Queue".into(), field: "spec".into(), message: e })?;
    if let Err(e) = trainyard_policies::check_tree(&configs) {
        let node = &nodes[&e.name];
        return Err(node.at.error(&e.field, &format!("as a trainyard queue ({}): {}", node.kind, e.message)));
    }
    Ok(queues)
}

impl Imported {
    /// The objects as multi-document YAML, after comment lines listing the notes.
    pub fn to_yaml(&self) -> Result<String, serde_saphyr::ser::Error> {
        let mut out = String::from("# Carried over from Kueue by `trainyard import kueue`.\n");
        if self.notes.is_empty() {
            out.push_str("# Everything read has an equivalent.\n");
        } else {
            let n = self.notes.len();
            out.push_str(&format!("# {n} note{} on what has no equivalent:\n", if n == 1 { "" } else { "s" }));
            for n in &self.notes {
                let origin = if n.origin.is_empty() { String::new() } else { format!("{}: ", n.origin) };
                out.push_str(&format!("# - {origin}{}: {}\n", n.object, n.message));
            }
        }
        if let Some(t) = &self.topology {
            out.push_str("---\n");
            out.push_str(&serde_saphyr::to_string(t)?);
        }
        for q in &self.queues {
            out.push_str("---\n");
            out.push_str(&serde_saphyr::to_string(q)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
