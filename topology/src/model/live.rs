//! Changing the tree in place as a live cluster changes: hosts added, moved, resized and removed.
//!
//! Each change touches the host's path only, so it costs O(depth) (plus the siblings scanned to
//! unlink a vertex). Ids stay stable: a removed host's or domain's slot is reused by a later
//! addition, never renumbered, so what a caller holds about other hosts stays valid.

use petgraph::graph::NodeIndex;

use super::{DEAD_DEPTH, Domain, DomainId, HostId, NO_FLAVOR, NO_PARENT, Topology};
use crate::{Error, InputError, Resources, Result};

impl Topology {
    /// A cluster with levels and no hosts yet (a live cluster's start).
    pub fn empty(name: &str, levels: Vec<String>) -> Result<Topology> {
        let spec = crate::ResolvedSpec { name: name.to_string(), levels, nodes: Vec::new(), tori: Vec::new() };
        Topology::build(&spec)
    }

    /// Adds a host at `path` (one name per level, its own last) with `capacity`; enclosing
    /// domains that do not exist yet are created.
    pub fn add_host(&mut self, path: &[String], capacity: Resources, flavor: Option<&str>) -> Result<HostId> {
        self.check_path(path)?;
        if self.by_path.contains_key(path) {
            return Err(self.bad_path(path, "a domain or host with this path exists"));
        }
        let leaf = self.attach(path);
        let h = match self.free_hosts.pop() {
            Some(h) => {
                self.hosts[h as usize] = leaf;
                self.host_flavor[h as usize] = NO_FLAVOR;
                h
            }
            None => {
                self.hosts.push(leaf);
                self.host_flavor.push(NO_FLAVOR);
                (self.hosts.len() - 1) as u32
            }
        };
        self.host_of[leaf as usize] = h;
        self.live_hosts += 1;
        self.set_host_flavor(HostId(h), flavor);
        self.add_along(leaf, capacity, true);
        Ok(HostId(h))
    }

    /// Moves a host to `path` (its labels changed), keeping its id and capacity; domains left
    /// empty are removed.
    pub fn move_host(&mut self, host: HostId, path: &[String]) -> Result<()> {
        self.check_path(path)?;
        let old = self.host_domain(host).0;
        if self.by_path.get(path) == Some(&old) {
            return Ok(());
        }
        if self.by_path.contains_key(path) {
            return Err(self.bad_path(path, "a domain or host with this path exists"));
        }
        let capacity = self.capacity[old as usize];
        self.add_along(old, capacity, false);
        self.detach(old);
        let leaf = self.attach(path);
        self.host_of[leaf as usize] = host.0;
        self.hosts[host.0 as usize] = leaf;
        self.add_along(leaf, capacity, true);
        Ok(())
    }

    /// Sets a host's capacity; every domain above it follows.
    pub fn set_host_capacity(&mut self, host: HostId, capacity: Resources) {
        let d = self.host_domain(host).0;
        let old = self.capacity[d as usize];
        if old != capacity {
            self.add_along(d, old, false);
            self.add_along(d, capacity, true);
        }
    }

    /// Sets a host's GPU flavor; a flavor not seen before gets the next id.
    pub fn set_host_flavor(&mut self, host: HostId, flavor: Option<&str>) {
        let id = match flavor {
            None => NO_FLAVOR,
            Some(name) => match self.flavor_id(name) {
                Some(id) => id,
                None => {
                    self.flavors.push(name.to_string());
                    (self.flavors.len() - 1) as u16
                }
            },
        };
        self.host_flavor[host.0 as usize] = id;
    }

    /// Removes a host; domains left empty go with it. Its id may be reused by a later addition.
    pub fn remove_host(&mut self, host: HostId) {
        let d = self.host_domain(host).0;
        let capacity = self.capacity[d as usize];
        self.add_along(d, capacity, false);
        self.detach(d);
        self.hosts[host.0 as usize] = NO_PARENT;
        self.host_flavor[host.0 as usize] = NO_FLAVOR;
        self.free_hosts.push(host.0);
        self.live_hosts -= 1;
    }

    fn check_path(&self, path: &[String]) -> Result<()> {
        if path.len() != self.levels.len() {
            let message = format!("{} names for {} levels ({})", path.len(), self.levels.len(), self.levels.join(", "));
            return Err(self.bad_path(path, &message));
        }
        if path.iter().any(|p| p.trim().is_empty()) {
            return Err(self.bad_path(path, "a level's name is empty"));
        }
        Ok(())
    }

    fn bad_path(&self, path: &[String], message: &str) -> Error {
        InputError::invalid(self.name(), None, "path", format!("host `{}`: {message}", path.join("/"))).into()
    }

    /// Adds (or, with `add` false, takes away) `amount` on `d` and every domain above it.
    fn add_along(&mut self, mut d: u32, amount: Resources, add: bool) {
        loop {
            let c = &mut self.capacity[d as usize];
            *c = if add {
                c.checked_add(&amount).expect("a cluster's capacity fits in u64")
            } else {
                c.checked_sub(&amount).expect("a domain holds its hosts' capacity")
            };
            match self.parent[d as usize] {
                NO_PARENT => break,
                p => d = p,
            }
        }
    }

    /// Creates the domains of `path` that are missing, and returns the vertex of the last.
    fn attach(&mut self, path: &[String]) -> u32 {
        let mut parent = 0u32;
        for depth in 1..=path.len() {
            let key = &path[..depth];
            parent = match self.by_path.get(key) {
                Some(&d) => d,
                None => {
                    let d = self.new_vertex(Domain { name: key[depth - 1].clone(), depth: depth as u8 });
                    self.parent[d as usize] = parent;
                    self.children[parent as usize].push(d);
                    self.graph.add_edge(NodeIndex::new(parent as usize), NodeIndex::new(d as usize), ());
                    self.by_path.insert(key.to_vec(), d);
                    d
                }
            };
        }
        parent
    }

    fn new_vertex(&mut self, domain: Domain) -> u32 {
        let depth = domain.depth;
        match self.free_domains.pop() {
            Some(d) => {
                self.graph[NodeIndex::new(d as usize)] = domain;
                self.depth[d as usize] = depth;
                d
            }
            None => {
                let d = self.graph.add_node(domain).index() as u32;
                self.parent.push(NO_PARENT);
                self.children.push(Vec::new());
                self.host_of.push(NO_PARENT);
                self.depth.push(depth);
                self.capacity.push(Resources::ZERO);
                d
            }
        }
    }

    /// Unlinks vertex `d` from its parent and frees it, then its ancestors that are left empty.
    fn detach(&mut self, mut d: u32) {
        loop {
            let parent = self.parent[d as usize];
            let siblings = &mut self.children[parent as usize];
            if let Some(i) = siblings.iter().position(|&c| c == d) {
                // Order matters: children are searched in order and ties go to the first.
                siblings.remove(i);
            }
            if let Some(e) = self.graph.find_edge(NodeIndex::new(parent as usize), NodeIndex::new(d as usize)) {
                self.graph.remove_edge(e);
            }
            let path = self.path_parts(DomainId(d));
            self.by_path.remove(&path);
            self.parent[d as usize] = NO_PARENT;
            self.host_of[d as usize] = NO_PARENT;
            self.depth[d as usize] = DEAD_DEPTH;
            self.capacity[d as usize] = Resources::ZERO;
            self.graph[NodeIndex::new(d as usize)].depth = DEAD_DEPTH;
            self.free_domains.push(d);
            self.tori.remove(&d);
            if parent == 0 || !self.children[parent as usize].is_empty() {
                break;
            }
            d = parent;
        }
    }

    /// The names on the path to `d`, outermost first (empty for the root).
    pub(crate) fn path_parts(&self, d: DomainId) -> Vec<String> {
        let mut parts = Vec::new();
        let mut cur = d;
        while let Some(p) = self.parent(cur) {
            parts.push(self.domain(cur).name.clone());
            cur = p;
        }
        parts.reverse();
        parts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(parts: &[&str]) -> Vec<String> {
        parts.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn hosts_come_and_go_with_their_domains() {
        let mut t = Topology::empty("live", path(&["rack", "host"])).unwrap();
        let a = t.add_host(&path(&["r1", "a"]), Resources::gpus(8), None).unwrap();
        let b = t.add_host(&path(&["r1", "b"]), Resources::gpus(8), Some("h100")).unwrap();
        let c = t.add_host(&path(&["r2", "c"]), Resources::gpus(4), None).unwrap();
        assert_eq!(t.capacity(DomainId::ROOT).gpus, 20);
        assert_eq!(t.capacity(t.find(&path(&["r1"])).unwrap()).gpus, 16);
        assert_eq!(t.host_flavor(b), t.flavor_id("h100"));
        assert!(t.add_host(&path(&["r1", "a"]), Resources::gpus(1), None).is_err(), "duplicate path");
        assert!(t.add_host(&path(&["r1"]), Resources::gpus(1), None).is_err(), "short path");

        t.move_host(a, &path(&["r2", "a"])).unwrap();
        assert_eq!(t.capacity(t.find(&path(&["r1"])).unwrap()).gpus, 8);
        assert_eq!(t.capacity(t.find(&path(&["r2"])).unwrap()).gpus, 12);
        assert_eq!(t.path(t.host_domain(a)), "r2/a");

        t.set_host_capacity(c, Resources::gpus(2));
        assert_eq!(t.capacity(DomainId::ROOT).gpus, 18);

        t.remove_host(b);
        assert!(t.find(&path(&["r1"])).is_none(), "an empty rack goes with its last host");
        assert_eq!(t.host_count(), 2);
        assert!(!t.is_host(b));
        assert_eq!(t.children(DomainId::ROOT).len(), 1);
        let d = t.add_host(&path(&["r3", "d"]), Resources::gpus(8), None).unwrap();
        assert_eq!(d, b, "a freed host id is reused");
        assert_eq!(t.capacity(DomainId::ROOT).gpus, 18);
        assert_eq!(t.hosts().count(), 3);
    }
}
