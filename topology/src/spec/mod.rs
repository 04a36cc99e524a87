//! The cluster description admins write: levels plus nodes, listed or generated from a shape.
//!
//! ```yaml
//! name: demo
//! levels: [block, rack, host]      # outermost first; the last level is the node itself
//! generate:
//!   counts: [2, 4, 8]              # 2 blocks, 4 racks per block, 8 hosts per rack
//!   node: {gpus: 8, cpus: 64, memory_gib: 512}
//!   total_gpus: 500                # optional: stop once this many GPUs exist
//!   flavor: h100                   # optional: the GPU model, for queues bound to one
//!   intra_node: azure-ndv5         # optional: GPU layout inside each node (SKU or NCCL XML file)
//! ```
//! or, instead of `generate`, an explicit list:
//! ```yaml
//! nodes:
//!   - {name: h1, at: {block: b0, rack: r0}, gpus: 8, cpus: 64, memory_gib: 512}
//! ```
//! TPU hosts also name the tori they form (`tori`, see `tori.rs`).

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::{Error, InputError, Resources, Result};

pub mod fleet;
mod tori;

pub use tori::{ToriSpec, TorusEntry};

/// A whole cluster description, as written in YAML.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    /// Name shown in reports.
    pub name: String,
    /// Topology level names, outermost first; the last one names the nodes themselves.
    pub levels: Vec<Spanned<String>>,
    /// Generate a regular tree of identical nodes.
    #[serde(default)]
    pub generate: Option<Spanned<GenerateSpec>>,
    /// Or list the nodes one by one.
    #[serde(default)]
    pub nodes: Vec<Spanned<NodeSpec>>,
    /// Domains whose hosts form TPU tori.
    #[serde(default)]
    pub tori: Vec<Spanned<ToriSpec>>,
}

/// A regular tree: `counts[i]` domains of `levels[i]` under each domain of the level above.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateSpec {
    /// One count per level, outermost first.
    pub counts: Vec<u32>,
    /// Resources of every generated node.
    pub node: NodeResources,
    /// Stop generating once the cluster has this many GPUs; the last node gets the remainder.
    #[serde(default)]
    pub total_gpus: Option<u64>,
    /// GPU flavor (model) of every generated node, e.g. `h100`.
    #[serde(default)]
    pub flavor: Option<String>,
    /// GPU layout inside every generated node (PCIe switches, NUMA nodes): a built-in SKU
    /// (`azure-ndv4`, `azure-ndv5`, `aws-p4d`) or an NCCL topology file; pods then get GPU indices.
    #[serde(default)]
    pub intra_node: Option<String>,
}

/// Resources of one node, in the units admins think in.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeResources {
    /// Whole GPUs.
    #[serde(default)]
    pub gpus: u64,
    /// CPU cores.
    #[serde(default)]
    pub cpus: u64,
    /// Memory in GiB.
    #[serde(default)]
    pub memory_gib: u64,
}

impl NodeResources {
    /// In the engine's units (millicores, MiB).
    pub fn to_resources(self) -> Resources {
        Resources {
            gpus: self.gpus,
            cpu_milli: self.cpus.saturating_mul(1000),
            memory_mib: self.memory_gib.saturating_mul(1024),
        }
    }
}

/// One listed node.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// Unique node name (the domain at the last level).
    pub name: String,
    /// The node's domain at every level above the last, e.g. `{block: b0, rack: r3}`.
    #[serde(default)]
    pub at: BTreeMap<String, String>,
    /// Whole GPUs.
    #[serde(default)]
    pub gpus: u64,
    /// CPU cores.
    #[serde(default)]
    pub cpus: u64,
    /// Memory in GiB.
    #[serde(default)]
    pub memory_gib: u64,
    /// GPU flavor (model), e.g. `h100`.
    #[serde(default)]
    pub flavor: Option<String>,
    /// Node labels, for the selectors and affinities of pods (e.g. GKE's TPU labels).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// GPU layout inside the node, as for `generate.intra_node`.
    #[serde(default)]
    pub intra_node: Option<String>,
}

/// An `intra_node` of the description: which nodes, which layout, where it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLayout {
    /// The node's path, or `None` for every generated node.
    pub path: Option<Vec<String>>,
    /// The layout's name: a built-in SKU or a file.
    pub name: String,
    /// Line of the node or `generate` entry.
    pub line: Option<u64>,
    /// The field, e.g. `nodes[3].intra_node`.
    pub field: String,
}

/// A node ready to be put into the graph: its path of domain names and its capacity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEntry {
    /// Domain names from the outermost level down to the node's own name.
    pub path: Vec<String>,
    /// What the node has.
    pub capacity: Resources,
    /// Its GPU flavor (model), e.g. `h100`; gangs of a queue bound to a flavor only run on
    /// nodes of that flavor.
    pub flavor: Option<String>,
}

/// A validated cluster description: level names and every node with its domain path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedSpec {
    /// Cluster name.
    pub name: String,
    /// Level names, outermost first.
    pub levels: Vec<String>,
    /// Nodes in declaration (or generation) order.
    pub nodes: Vec<NodeEntry>,
    /// Domains that are TPU tori.
    pub tori: Vec<TorusEntry>,
}

impl ClusterSpec {
    /// Parses YAML text; `source_name` (usually the file name) prefixes every error.
    pub fn from_yaml(text: &str, source_name: &str) -> Result<ClusterSpec> {
        crate::input_text::yaml(text, source_name).map_err(Into::into)
    }

    /// The labels of every listed node that has some, by its path of names.
    pub fn node_labels(&self) -> Vec<(Vec<String>, BTreeMap<String, String>)> {
        let upper = self.levels.len().saturating_sub(1);
        self.nodes
            .iter()
            .filter(|n| !n.value.labels.is_empty())
            .map(|n| {
                let at =
                    self.levels[..upper].iter().map(|l| n.value.at.get(l.value.trim()).cloned().unwrap_or_default());
                let path = at.chain(std::iter::once(n.value.name.clone())).collect();
                (path, n.value.labels.clone())
            })
            .collect()
    }

    /// Every `intra_node` written, with where it was written.
    pub fn node_layouts(&self) -> Vec<NodeLayout> {
        let upper = self.levels.len().saturating_sub(1);
        let mut out = Vec::new();
        if let Some(g) = &self.generate
            && let Some(name) = &g.value.intra_node
        {
            let field = "generate.intra_node".to_string();
            out.push(NodeLayout { path: None, name: name.clone(), line: Some(g.referenced.line()), field });
        }
        for (i, n) in self.nodes.iter().enumerate() {
            let Some(name) = &n.value.intra_node else { continue };
            let at = self.levels[..upper].iter().map(|l| n.value.at.get(l.value.trim()).cloned().unwrap_or_default());
            let path = at.chain(std::iter::once(n.value.name.clone())).collect();
            let (line, field) = (Some(n.referenced.line()), format!("nodes[{i}].intra_node"));
            out.push(NodeLayout { path: Some(path), name: name.clone(), line, field });
        }
        out
    }

    /// Checks the description and expands it into a flat node list.
    pub fn resolve(&self, source_name: &str) -> Result<ResolvedSpec> {
        let invalid = |line: Option<u64>, field: String, message: String| {
            Error::from(InputError::invalid(source_name, line, field, message))
        };
        if self.levels.is_empty() {
            return Err(invalid(None, "levels".into(), "at least one level (the node level) is needed".into()));
        }
        let mut seen = BTreeSet::new();
        for (i, level) in self.levels.iter().enumerate() {
            let name = level.value.trim();
            let line = Some(level.referenced.line());
            if name.is_empty() || name.contains(':') || name.contains(char::is_whitespace) {
                return Err(invalid(line, format!("levels[{i}]"), format!("`{name}` is not a valid level name")));
            }
            if !seen.insert(name.to_string()) {
                return Err(invalid(line, format!("levels[{i}]"), format!("level `{name}` appears twice")));
            }
        }
        let levels: Vec<String> = self.levels.iter().map(|l| l.value.trim().to_string()).collect();
        let nodes = match (&self.generate, self.nodes.is_empty()) {
            (Some(_), false) => {
                return Err(invalid(None, "generate".into(), "give either `generate` or `nodes`, not both".into()));
            }
            (None, true) => {
                return Err(invalid(
                    None,
                    "nodes".into(),
                    "the cluster has no nodes; add `nodes` or `generate`".into(),
                ));
            }
            (Some(generate), true) => generate_nodes(&levels, generate, &invalid)?,
            (None, false) => list_nodes(&levels, &self.nodes, &invalid)?,
        };
        let tori = tori::resolve_tori(&levels, &nodes, &self.tori, &invalid)?;
        Ok(ResolvedSpec { name: self.name.clone(), levels, nodes, tori })
    }
}

type Invalid<'a> = dyn Fn(Option<u64>, String, String) -> Error + 'a;

fn generate_nodes(
    levels: &[String],
    generate: &Spanned<GenerateSpec>,
    invalid: &Invalid<'_>,
) -> Result<Vec<NodeEntry>> {
    let line = Some(generate.referenced.line());
    let spec = &generate.value;
    if spec.counts.len() != levels.len() {
        return Err(invalid(
            line,
            "generate.counts".into(),
            format!("has {} entries but there are {} levels ({})", spec.counts.len(), levels.len(), levels.join(", ")),
        ));
    }
    if let Some(i) = spec.counts.iter().position(|&c| c == 0) {
        return Err(invalid(line, format!("generate.counts[{i}]"), "counts must be at least 1".into()));
    }
    let capacity = spec.node.to_resources();
    if capacity.gpus == 0 && capacity.cpu_milli == 0 {
        return Err(invalid(line, "generate.node".into(), "a node needs GPUs or CPUs".into()));
    }
    let max_nodes: u64 = spec.counts.iter().map(|&c| u64::from(c)).product();
    // Keep generated clusters to a size the engine is built for (its bars are set at 10,000
    // hosts; 200,000 build in under a second); larger ones are surely a typo.
    const MAX_GENERATED_NODES: u64 = 200_000;
    if max_nodes > MAX_GENERATED_NODES {
        return Err(invalid(
            line,
            "generate.counts".into(),
            format!("would generate {max_nodes} nodes; the limit is {MAX_GENERATED_NODES}"),
        ));
    }
    let mut remaining_gpus = match spec.total_gpus {
        Some(total) => {
            let max = max_nodes.saturating_mul(capacity.gpus);
            if total == 0 || total > max {
                return Err(invalid(
                    line,
                    "generate.total_gpus".into(),
                    format!("must be between 1 and {max} (counts x node.gpus)"),
                ));
            }
            Some(total)
        }
        None => None,
    };
    // In a regular tree the domain of level `d` that holds node `n` is number
    // `n / (nodes under one domain of level d)`, counted across the whole cluster.
    let below: Vec<u64> =
        (0..levels.len()).map(|d| spec.counts[d + 1..].iter().map(|&c| u64::from(c)).product()).collect();
    let mut nodes = Vec::new();
    for n in 0..max_nodes {
        let mut node_capacity = capacity;
        if let Some(remaining) = remaining_gpus.as_mut() {
            if *remaining == 0 {
                break;
            }
            node_capacity.gpus = node_capacity.gpus.min(*remaining);
            *remaining -= node_capacity.gpus;
        }
        let path = levels.iter().zip(&below).map(|(level, b)| format!("{level}-{}", n / b)).collect();
        nodes.push(NodeEntry { path, capacity: node_capacity, flavor: spec.flavor.clone() });
    }
    Ok(nodes)
}

fn list_nodes(levels: &[String], listed: &[Spanned<NodeSpec>], invalid: &Invalid<'_>) -> Result<Vec<NodeEntry>> {
    let upper = &levels[..levels.len() - 1];
    let mut names = BTreeSet::new();
    let mut nodes = Vec::with_capacity(listed.len());
    for (i, spanned) in listed.iter().enumerate() {
        let node = &spanned.value;
        let line = Some(spanned.referenced.line());
        if node.name.trim().is_empty() {
            return Err(invalid(line, format!("nodes[{i}].name"), "must not be empty".into()));
        }
        if !names.insert(node.name.as_str()) {
            return Err(invalid(line, format!("nodes[{i}].name"), format!("node `{}` is listed twice", node.name)));
        }
        if let Some(unknown) = node.at.keys().find(|k| !upper.contains(k)) {
            return Err(invalid(
                line,
                format!("nodes[{i}].at.{unknown}"),
                format!("unknown level; `at` takes the levels above the node: {}", upper.join(", ")),
            ));
        }
        let mut path = Vec::with_capacity(levels.len());
        for level in upper {
            match node.at.get(level) {
                Some(value) if !value.trim().is_empty() => path.push(value.trim().to_string()),
                _ => {
                    return Err(invalid(
                        line,
                        format!("nodes[{i}].at.{level}"),
                        format!("node `{}` has no `{level}`", node.name),
                    ));
                }
            }
        }
        path.push(node.name.clone());
        let capacity = NodeResources { gpus: node.gpus, cpus: node.cpus, memory_gib: node.memory_gib }.to_resources();
        if capacity.gpus == 0 && capacity.cpu_milli == 0 {
            return Err(invalid(
                line,
                format!("nodes[{i}]"),
                format!("node `{}` has neither GPUs nor CPUs", node.name),
            ));
        }
        nodes.push(NodeEntry { path, capacity, flavor: node.flavor.clone() });
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(yaml: &str) -> Result<ResolvedSpec> {
        ClusterSpec::from_yaml(yaml, "c.yaml")?.resolve("c.yaml")
    }

    #[test]
    fn generates_a_regular_tree_with_global_names() {
        let spec = resolve(
            "name: t\nlevels: [block, rack, host]\ngenerate:\n  counts: [2, 2, 2]\n  node: {gpus: 8, cpus: 4}\n",
        )
        .unwrap();
        assert_eq!(spec.nodes.len(), 8);
        assert_eq!(spec.nodes[0].path, ["block-0", "rack-0", "host-0"]);
        assert_eq!(spec.nodes[2].path, ["block-0", "rack-1", "host-2"]);
        assert_eq!(spec.nodes[7].path, ["block-1", "rack-3", "host-7"]);
        assert_eq!(spec.nodes[0].capacity, Resources { gpus: 8, cpu_milli: 4000, memory_mib: 0 });
    }

    #[test]
    fn total_gpus_truncates_and_gives_the_last_node_the_remainder() {
        let spec = resolve(
            "name: t\nlevels: [rack, host]\ngenerate:\n  counts: [39, 8]\n  node: {gpus: 8}\n  total_gpus: 2490\n",
        )
        .unwrap();
        assert_eq!(spec.nodes.len(), 312);
        assert_eq!(spec.nodes.last().unwrap().capacity.gpus, 2);
        assert_eq!(spec.nodes.iter().map(|n| n.capacity.gpus).sum::<u64>(), 2490);
    }

    #[test]
    fn listed_nodes_need_every_upper_level() {
        let err = resolve(
            "name: t\nlevels: [rack, host]\nnodes:\n  - {name: a, at: {rack: r0}, gpus: 8}\n  - {name: b, gpus: 8}\n",
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "c.yaml: line 5: field `nodes[1].at.rack`: node `b` has no `rack`");
    }

    #[test]
    fn unknown_levels_and_duplicates_are_named() {
        let err =
            resolve("name: t\nlevels: [rack, host]\nnodes:\n  - {name: a, at: {rak: r0}, gpus: 8}\n").unwrap_err();
        assert!(err.to_string().contains("field `nodes[0].at.rak`: unknown level"), "{err}");
        let err = resolve("name: t\nlevels: [rack, host]\nnodes:\n  - {name: a, at: {rack: r0}, gpus: 8}\n  - {name: a, at: {rack: r0}, gpus: 8}\n").unwrap_err();
        assert!(err.to_string().contains("node `a` is listed twice"), "{err}");
        let err = resolve("name: t\nlevels: [rack, rack]\nnodes: []\n").unwrap_err();
        assert!(err.to_string().contains("line 2: field `levels[1]`: level `rack` appears twice"), "{err}");
    }

    #[test]
    fn syntax_errors_carry_file_and_line() {
        let err = resolve("name: t\nlevels: [host]\ngenerate:\n  counts: [2]\n  node: {gpus: eight}\n").unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("c.yaml: "), "{text}");
        assert!(text.contains("line 5"), "{text}");
        let err = resolve("name: t\nlevels: [host]\ngenerate:\n  count: [2]\n").unwrap_err();
        assert!(err.to_string().contains("unknown field `count`"), "{err}");
    }

    #[test]
    fn counts_must_match_levels() {
        let err = resolve("name: t\nlevels: [rack, host]\ngenerate:\n  counts: [2]\n  node: {gpus: 8}\n").unwrap_err();
        assert!(err.to_string().contains("field `generate.counts`: has 1 entries but there are 2 levels"), "{err}");
    }
}
