//! The immutable shape of a cluster: a petgraph tree of domains with aggregated capacity.
//!
//! Domain 0 is the cluster itself (depth 0); a domain of `levels[i]` has depth `i + 1`, so
//! hosts sit at depth `levels.len()`. Besides the graph we keep flat parent/children arrays
//! because the scheduler walks them millions of times per replay.

use std::collections::{BTreeMap, HashMap};

use petgraph::graph::{DiGraph, NodeIndex};

use crate::{Error, InputError, ResolvedSpec, Resources, Result, TopologyRequest};

mod gang;
mod live;
mod tori;

pub(crate) use tori::{block_grid, block_index, block_origin};

/// Index of a domain (any level, including hosts and the cluster root).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DomainId(pub u32);

/// Index of a host among [`Topology::hosts`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostId(pub u32);

impl DomainId {
    /// The cluster root.
    pub const ROOT: DomainId = DomainId(0);

    fn index(self) -> usize {
        self.0 as usize
    }
}

/// One vertex of the topology graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Domain {
    /// Name of the domain (the cluster name for the root).
    pub name: String,
    /// 0 for the root, `i + 1` for a domain of level `i`.
    pub depth: u8,
}

/// A topology request resolved against this cluster's levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LevelConstraint {
    /// The outermost depth a gang may span (0 = the whole cluster).
    pub top_depth: u8,
    /// Depth the request prefers, when it named one.
    pub preferred_depth: Option<u8>,
    /// Every slice of `size` pods inside one domain of `depth`, when the request slices the gang.
    pub slice: Option<SliceConstraint>,
}

/// A gang cut into slices of `size` pods, each slice inside one domain at `depth`
/// (Kueue's `podset-slice-required-topology` and `podset-slice-size`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SliceConstraint {
    /// Depth of the level every slice must stay within.
    pub depth: u8,
    /// Pods per slice; the gang's pod count must be a multiple of it.
    pub size: u32,
}

impl LevelConstraint {
    /// Anywhere in the cluster.
    pub const UNCONSTRAINED: LevelConstraint = LevelConstraint { top_depth: 0, preferred_depth: None, slice: None };
}

/// The cluster's tree of domains.
#[derive(Clone, Debug)]
pub struct Topology {
    levels: Vec<String>,
    graph: DiGraph<Domain, ()>,
    parent: Vec<u32>,
    children: Vec<Vec<u32>>,
    hosts: Vec<u32>,
    host_of: Vec<u32>,
    depth: Vec<u8>,
    capacity: Vec<Resources>,
    /// Distinct GPU flavors: sorted at build, then in order of appearance (ids never move);
    /// `host_flavor` indexes into it.
    flavors: Vec<String>,
    host_flavor: Vec<u16>,
    /// Every live domain but the root by its path of names; looked up only, never iterated.
    by_path: HashMap<Vec<String>, u32>,
    /// Vertices and host slots of removed domains and hosts, reused by later additions.
    free_domains: Vec<u32>,
    free_hosts: Vec<u32>,
    live_hosts: usize,
    /// TPU tori by domain vertex (see `tori.rs`).
    tori: BTreeMap<u32, crate::torus::TorusSpec>,
    /// The outermost depth any gang may span: 0 for a cluster, 1 for a fleet (one cluster).
    span_ceiling: u8,
}

/// No flavor.
pub(crate) const NO_FLAVOR: u16 = u16::MAX;

pub(crate) const NO_PARENT: u32 = u32::MAX;

/// Depth of a removed domain's vertex: no level has it, so searches by depth never see it.
pub(crate) const DEAD_DEPTH: u8 = u8::MAX;

impl Topology {
    /// Builds the tree from a validated description.
    pub fn build(spec: &ResolvedSpec) -> Result<Topology> {
        let mut graph = DiGraph::new();
        let root = graph.add_node(Domain { name: spec.name.clone(), depth: 0 });
        // Looked up by path only, never iterated, so the HashMap cannot leak its order.
        let mut by_path: HashMap<&[String], NodeIndex> = HashMap::new();
        if let Some(node) = spec.nodes.iter().find(|n| n.path.len() != spec.levels.len()) {
            let message = format!(
                "node `{}` has {} path parts for {} levels",
                node.path.join("/"),
                node.path.len(),
                spec.levels.len()
            );
            return Err(InputError::invalid(&spec.name, None, "nodes", message).into());
        }
        let mut host_nodes = Vec::with_capacity(spec.nodes.len());
        let mut host_capacity = Vec::with_capacity(spec.nodes.len());
        for node in &spec.nodes {
            let mut parent = root;
            for depth in 1..=node.path.len() {
                let key = &node.path[..depth];
                let is_host = depth == node.path.len();
                if is_host && by_path.contains_key(key) {
                    let message = format!("node `{}` appears twice", node.path.join("/"));
                    return Err(InputError::invalid(&spec.name, None, "nodes", message).into());
                }
                parent = *by_path.entry(key).or_insert_with(|| {
                    let child = graph.add_node(Domain { name: key[depth - 1].clone(), depth: depth as u8 });
                    graph.add_edge(parent, child, ());
                    child
                });
            }
            host_nodes.push(parent.index() as u32);
            host_capacity.push(node.capacity);
        }
        let n = graph.node_count();
        let mut parent = vec![NO_PARENT; n];
        let mut children = vec![Vec::new(); n];
        for edge in graph.raw_edges() {
            parent[edge.target().index()] = edge.source().index() as u32;
            children[edge.source().index()].push(edge.target().index() as u32);
        }
        let mut host_of = vec![NO_PARENT; n];
        for (h, &d) in host_nodes.iter().enumerate() {
            host_of[d as usize] = h as u32;
        }
        let depth = graph.node_weights().map(|w| w.depth).collect();
        let mut flavors: Vec<String> = spec.nodes.iter().filter_map(|n| n.flavor.clone()).collect();
        flavors.sort();
        flavors.dedup();
        let host_flavor = spec
            .nodes
            .iter()
            .map(|n| n.flavor.as_ref().and_then(|f| flavors.binary_search(f).ok()).map_or(NO_FLAVOR, |i| i as u16))
            .collect();
        let mut capacity = vec![Resources::ZERO; n];
        let by_path_owned = by_path.iter().map(|(k, v)| (k.to_vec(), v.index() as u32)).collect();
        let mut topo = Topology {
            levels: spec.levels.clone(),
            graph,
            parent,
            children,
            hosts: host_nodes,
            host_of,
            depth,
            capacity: Vec::new(),
            flavors,
            host_flavor,
            by_path: by_path_owned,
            free_domains: Vec::new(),
            free_hosts: Vec::new(),
            live_hosts: spec.nodes.len(),
            tori: BTreeMap::new(),
            span_ceiling: 0,
        };
        for (h, cap) in topo.hosts.iter().zip(&host_capacity) {
            let mut d = *h;
            loop {
                capacity[d as usize] = capacity[d as usize]
                    .checked_add(cap)
                    .ok_or_else(|| InputError::invalid(&spec.name, None, "nodes", "total capacity overflows"))?;
                if d == 0 {
                    break;
                }
                d = topo.parent[d as usize];
            }
        }
        topo.capacity = capacity;
        for entry in &spec.tori {
            let d = topo.find(&entry.path).ok_or_else(|| {
                InputError::invalid(&spec.name, None, "tori", format!("no domain `{}`", entry.path.join("/")))
            })?;
            topo.set_torus(d, Some(entry.spec.clone()))?;
        }
        Ok(topo)
    }

    /// The GPU flavors of the cluster's nodes: sorted when built, later ones appended.
    pub fn flavors(&self) -> &[String] {
        &self.flavors
    }

    /// Index of a flavor by name.
    pub fn flavor_id(&self, name: &str) -> Option<u16> {
        self.flavors.iter().position(|f| f == name).map(|i| i as u16)
    }

    /// A host's flavor, if it has one.
    pub fn host_flavor(&self, host: HostId) -> Option<u16> {
        Some(self.host_flavor[host.0 as usize]).filter(|&f| f != NO_FLAVOR)
    }

    /// Cluster name.
    pub fn name(&self) -> &str {
        &self.graph[NodeIndex::new(0)].name
    }

    /// Level names, outermost first; the last is the host level.
    pub fn levels(&self) -> &[String] {
        &self.levels
    }

    /// Depth of hosts (= number of levels).
    pub fn host_depth(&self) -> u8 {
        self.levels.len() as u8
    }

    /// The underlying graph (edges point from a domain to its children).
    pub fn graph(&self) -> &DiGraph<Domain, ()> {
        &self.graph
    }

    /// Number of domains including the root and the hosts.
    pub fn domain_count(&self) -> usize {
        self.parent.len()
    }

    /// Number of hosts.
    pub fn host_count(&self) -> usize {
        self.live_hosts
    }

    /// One past the largest host id in use: the length of arrays indexed by host.
    pub fn host_slots(&self) -> usize {
        self.hosts.len()
    }

    /// Every host, in id order (declaration order for a built cluster).
    pub fn hosts(&self) -> impl Iterator<Item = HostId> + '_ {
        self.hosts.iter().enumerate().filter(|(_, d)| **d != NO_PARENT).map(|(h, _)| HostId(h as u32))
    }

    /// Whether `host` names a host of the cluster (not a removed one).
    pub fn is_host(&self, host: HostId) -> bool {
        self.hosts.get(host.0 as usize).is_some_and(|d| *d != NO_PARENT)
    }

    /// The domain at `path` (names from the outermost level down), if it exists.
    pub fn find(&self, path: &[String]) -> Option<DomainId> {
        if path.is_empty() {
            return Some(DomainId::ROOT);
        }
        self.by_path.get(path).map(|&d| DomainId(d))
    }

    /// The host at `path` (one name per level, the host's last), if it exists.
    pub fn find_host(&self, path: &[String]) -> Option<HostId> {
        self.find(path).and_then(|d| self.as_host(d))
    }

    /// The domain vertex of a host.
    pub fn host_domain(&self, host: HostId) -> DomainId {
        DomainId(self.hosts[host.0 as usize])
    }

    /// The host a domain is, if it is one.
    pub fn as_host(&self, d: DomainId) -> Option<HostId> {
        match self.host_of[d.index()] {
            NO_PARENT => None,
            h => Some(HostId(h)),
        }
    }

    /// Depth of a domain (0 for the root).
    pub fn depth(&self, d: DomainId) -> u8 {
        self.depth[d.index()]
    }

    /// A domain's vertex data.
    pub fn domain(&self, d: DomainId) -> &Domain {
        &self.graph[NodeIndex::new(d.index())]
    }

    /// A host's name.
    pub fn host_name(&self, host: HostId) -> &str {
        &self.domain(self.host_domain(host)).name
    }

    /// Level name of a domain (`cluster` for the root).
    pub fn level_name(&self, d: DomainId) -> &str {
        match self.domain(d).depth {
            0 => "cluster",
            depth => &self.levels[depth as usize - 1],
        }
    }

    /// Parent of a domain, `None` for the root.
    pub fn parent(&self, d: DomainId) -> Option<DomainId> {
        match self.parent[d.index()] {
            NO_PARENT => None,
            p => Some(DomainId(p)),
        }
    }

    /// Children of a domain, in declaration order.
    pub fn children(&self, d: DomainId) -> &[u32] {
        &self.children[d.index()]
    }

    /// Total capacity of a domain (sum over its hosts).
    pub fn capacity(&self, d: DomainId) -> Resources {
        self.capacity[d.index()]
    }

    /// Capacity of one host.
    pub fn host_capacity(&self, host: HostId) -> Resources {
        self.capacity(self.host_domain(host))
    }

    /// Aggregated capacity of every domain, indexed by domain.
    pub(crate) fn capacities(&self) -> &[Resources] {
        &self.capacity
    }

    /// The ancestor of `d` at `depth` (or `d` itself).
    pub fn ancestor_at(&self, mut d: DomainId, depth: u8) -> DomainId {
        while self.domain(d).depth > depth {
            d = DomainId(self.parent[d.index()]);
        }
        d
    }

    /// `block-0/rack-3/host-17` style path of a domain, without the cluster name.
    pub fn path(&self, d: DomainId) -> String {
        let mut parts = Vec::new();
        let mut cur = d;
        while let Some(p) = self.parent(cur) {
            parts.push(self.domain(cur).name.as_str());
            cur = p;
        }
        parts.reverse();
        parts.join("/")
    }

    /// Depth of a level name.
    pub fn level_depth(&self, level: &str) -> Result<u8> {
        self.levels
            .iter()
            .position(|l| l == level)
            .map(|i| (i + 1) as u8)
            .ok_or_else(|| Error::UnknownLevel { level: level.to_string(), known: self.levels.join(", ") })
    }

    /// Keeps every gang inside one domain at `depth` or below, whatever it asks: a fleet's
    /// gangs never span two clusters.
    pub fn set_span_ceiling(&mut self, depth: u8) {
        self.span_ceiling = depth.min(self.host_depth());
    }

    /// The outermost depth any gang may span.
    pub fn span_ceiling(&self) -> u8 {
        self.span_ceiling
    }

    /// Resolves a request's level name to depths, within the span ceiling.
    pub fn resolve(&self, request: &TopologyRequest) -> Result<LevelConstraint> {
        let mut constraint = self.resolve_level(request)?;
        constraint.top_depth = constraint.top_depth.max(self.span_ceiling);
        Ok(constraint)
    }

    fn resolve_level(&self, request: &TopologyRequest) -> Result<LevelConstraint> {
        Ok(match request {
            TopologyRequest::Unconstrained => LevelConstraint::UNCONSTRAINED,
            TopologyRequest::Preferred(level) => {
                LevelConstraint { preferred_depth: Some(self.level_depth(level)?), ..LevelConstraint::UNCONSTRAINED }
            }
            TopologyRequest::Required(level) => {
                let depth = self.level_depth(level)?;
                LevelConstraint { top_depth: depth, preferred_depth: Some(depth), slice: None }
            }
        })
    }
}
