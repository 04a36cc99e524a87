//! A fleet: several clusters that one trainyard places gangs across, built as one tree whose
//! top level is `cluster`. A gang never spans two clusters: the tree's span ceiling keeps every
//! gang inside one domain of that level, whatever it asks.
//!
//! ```yaml
//! name: two-regions
//! clusters:
//!   - {name: east, file: demo.yaml}      # a cluster file, read by the caller
//!   - name: west                         # or the description inline
//!     cluster: {name: west, levels: [rack, host], generate: {counts: [4, 8], node: {gpus: 8}}}
//! ```
//! Members may name different levels: the fleet's levels are `cluster`, then every member's
//! levels in an order all of them agree with, then the node level. A member without one of
//! those levels holds a single domain of it, named after the member.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::{ClusterSpec, NodeLayout, ResolvedSpec, TorusEntry};
use crate::{InputError, Result};

/// The fleet's top level: one domain per member cluster.
pub const CLUSTER_LEVEL: &str = "cluster";

/// A fleet description, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetSpec {
    /// Name shown in reports.
    pub name: String,
    /// The member clusters, in the order reports list them.
    pub clusters: Vec<Spanned<MemberSpec>>,
}

/// One member cluster: its name in the fleet and its description (a file, or inline).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberSpec {
    /// The member's name: its domain at the `cluster` level.
    pub name: String,
    /// A trainyard cluster file, relative to the fleet file.
    #[serde(default)]
    pub file: Option<String>,
    /// Or the description itself.
    #[serde(default)]
    pub cluster: Option<ClusterSpec>,
}

/// Only whether a text has a top-level `clusters` key.
#[derive(Deserialize)]
struct Probe {
    #[serde(default)]
    clusters: Option<serde::de::IgnoredAny>,
}

impl FleetSpec {
    /// Parses YAML text; `source_name` prefixes every error.
    pub fn from_yaml(text: &str, source_name: &str) -> Result<FleetSpec> {
        crate::input_text::yaml(text, source_name).map_err(Into::into)
    }

    /// Whether YAML text describes a fleet rather than a single cluster.
    pub fn is_fleet(text: &str) -> bool {
        serde_saphyr::from_str::<Probe>(text).is_ok_and(|p| p.clusters.is_some())
    }
}

/// A member with its description in hand.
#[derive(Debug, Clone)]
pub struct Member {
    /// Its name in the fleet.
    pub name: String,
    /// Its description.
    pub spec: ClusterSpec,
    /// Where the description was read (its file, or the fleet file), for errors.
    pub source: String,
}

/// The fleet as one description: the tree, every layout of the members, the labels of their
/// listed nodes, all with paths from the `cluster` level down.
#[derive(Debug, Clone)]
pub struct ResolvedFleet {
    /// The tree's levels and nodes.
    pub spec: ResolvedSpec,
    /// Every member's `intra_node` entries, each for the nodes it covers.
    pub layouts: Vec<(NodeLayout, String)>,
    /// Labels of listed nodes, by path.
    pub labels: Vec<(Vec<String>, BTreeMap<String, String>)>,
    /// Member names, in order.
    pub members: Vec<String>,
}

/// The fleet's upper levels (between `cluster` and the node level): every member's, in an
/// order all of them agree with, whatever order the members are listed in. Each member's
/// sequence says which level is outside which; the levels are taken outermost first, ties by
/// first appearance, so the answer is the same for the same file. A cycle (one member puts
/// `rack` outside `block`, another inside) is refused, naming the members' levels.
fn merged_levels(members: &[(&Member, ResolvedSpec)], fleet_source: &str) -> Result<Vec<String>> {
    let mut levels: Vec<String> = Vec::new();
    // (outer, inner) index pairs, one per adjacent pair of some member's levels.
    let mut edges: Vec<(usize, usize)> = Vec::new();
    for (member, resolved) in members {
        let upper = &resolved.levels[..resolved.levels.len() - 1];
        let mut previous = None;
        for level in upper {
            if level == CLUSTER_LEVEL {
                let message = format!("member `{}` has a level named `{CLUSTER_LEVEL}`, the fleet's own", member.name);
                return Err(InputError::invalid(&member.source, None, "levels", message).into());
            }
            let at = levels.iter().position(|l| l == level).unwrap_or_else(|| {
                levels.push(level.clone());
                levels.len() - 1
            });
            if let Some(p) = previous {
                edges.push((p, at));
            }
            previous = Some(at);
        }
    }
    let mut inward = vec![0usize; levels.len()];
    for &(_, inner) in &edges {
        inward[inner] += 1;
    }
    let mut merged = Vec::with_capacity(levels.len());
    let mut taken = vec![false; levels.len()];
    while merged.len() < levels.len() {
        let Some(next) = (0..levels.len()).find(|&i| !taken[i] && inward[i] == 0) else {
            let orders: Vec<String> = members
                .iter()
                .map(|(m, r)| format!("`{}`: {}", m.name, r.levels[..r.levels.len() - 1].join(", ")))
                .collect();
            let message =
                format!("the members order their levels in ways no one order agrees with ({})", orders.join("; "));
            return Err(InputError::invalid(fleet_source, None, "clusters", message).into());
        };
        taken[next] = true;
        merged.push(levels[next].clone());
        for &(outer, inner) in &edges {
            if outer == next {
                inward[inner] -= 1;
            }
        }
    }
    Ok(merged)
}

/// A member's path (its own levels, outermost first) as a path of the fleet's levels.
fn fleet_path(member: &str, own: &[String], path: &[String], fleet_upper: &[String], is_host: bool) -> Vec<String> {
    let depth = if is_host { path.len() - 1 } else { path.len() };
    let deepest = own[..depth].last();
    let mut out = vec![member.to_string()];
    for level in fleet_upper {
        out.push(match own[..depth].iter().position(|l| l == level) {
            Some(i) => path[i].clone(),
            None => member.to_string(),
        });
        if !is_host && deepest == Some(level) {
            return out;
        }
    }
    if is_host {
        out.push(path[path.len() - 1].clone());
    }
    out
}

/// Builds the fleet's tree from its members. Every member is checked as a cluster of its own
/// first, so its errors name its own file.
pub fn resolve_fleet(name: &str, members: &[Member], fleet_source: &str) -> Result<ResolvedFleet> {
    if members.is_empty() {
        return Err(InputError::invalid(fleet_source, None, "clusters", "a fleet needs at least one cluster").into());
    }
    let mut resolved = Vec::with_capacity(members.len());
    for (i, member) in members.iter().enumerate() {
        if member.name.is_empty() || members[..i].iter().any(|m| m.name == member.name) {
            let message = format!("cluster name `{}` is empty or given twice", member.name);
            return Err(InputError::invalid(fleet_source, None, format!("clusters[{i}].name"), message).into());
        }
        resolved.push((member, member.spec.resolve(&member.source)?));
    }
    let upper = merged_levels(&resolved, fleet_source)?;
    let node_level = resolved[0].1.levels.last().cloned().unwrap_or_else(|| "host".into());
    let mut levels = vec![CLUSTER_LEVEL.to_string()];
    levels.extend(upper.iter().cloned());
    levels.push(node_level);
    let (mut nodes, mut tori, mut layouts, mut labels) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (member, spec) in &resolved {
        let own = &spec.levels;
        let first_node = nodes.len();
        for node in &spec.nodes {
            let mut entry = node.clone();
            entry.path = fleet_path(&member.name, own, &node.path, &upper, true);
            nodes.push(entry);
        }
        for torus in &spec.tori {
            let path = fleet_path(&member.name, own, &torus.path, &upper, false);
            tori.push(TorusEntry { path, spec: torus.spec.clone() });
        }
        for layout in member.spec.node_layouts() {
            let covered: Vec<Vec<String>> = match &layout.path {
                Some(p) => vec![fleet_path(&member.name, own, p, &upper, true)],
                // A generated member's layout covers its own nodes only.
                None => nodes[first_node..].iter().map(|n| n.path.clone()).collect(),
            };
            for path in covered {
                layouts.push((NodeLayout { path: Some(path), ..layout.clone() }, member.source.clone()));
            }
        }
        for (path, l) in member.spec.node_labels() {
            labels.push((fleet_path(&member.name, own, &path, &upper, true), l));
        }
    }
    let spec = ResolvedSpec { name: name.to_string(), levels, nodes, tori };
    let members = members.iter().map(|m| m.name.clone()).collect();
    Ok(ResolvedFleet { spec, layouts, labels, members })
}
