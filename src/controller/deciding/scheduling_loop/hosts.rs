//! The cluster as kube-scheduler sees it, fed to the engine change by change: nodes become hosts
//! (added, updated, removed, unusable), and every pod bound to a node that is not one of a
//! running gang's own pods there charges its requests on that node ("foreign" usage: other
//! workloads, DaemonSets, initializers, and the pods of gangs that ended or moved until they are
//! gone). A pod on a node not known yet is charged when the node appears.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use trainyard_policies::Engine;
use trainyard_topology::{Cluster, HostId, Removal, Resources};

use super::SchedulingLoop;
use crate::controller::watching::facts::{NodeFacts, NodeView, PodFacts};

/// A node the loop knows.
#[derive(Clone, Debug)]
struct NodeEntry {
    /// Its host, while it is part of the cluster.
    host: Option<HostId>,
    /// The facts last applied.
    facts: Option<NodeFacts>,
}

/// A pod bound to a node.
#[derive(Clone, Debug)]
struct PodEntry {
    facts: PodFacts,
    /// Where and how much it is charged as foreign usage, when it is.
    charged: Option<(HostId, Resources)>,
}

/// Nodes and pods, with the indexes that keep each change O(1).
#[derive(Debug, Default)]
pub(super) struct Hosts {
    nodes: HashMap<String, NodeEntry>,
    /// Host (domain) name → host, for admission records, which name hosts.
    by_host_name: HashMap<String, HostId>,
    /// Host → (node name, host name), for messages and removal; kept until the host is dropped.
    names: HashMap<HostId, (String, String)>,
    pods: HashMap<String, PodEntry>,
    pods_on_node: HashMap<String, BTreeSet<String>>,
    pods_of_gang: HashMap<String, BTreeSet<String>>,
    /// Nodes left out, with why (sorted for reports).
    problems: BTreeMap<String, String>,
    /// GPUs charged as foreign usage.
    foreign_gpus: u64,
}

/// What the cluster view holds, for metrics and status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostsReport {
    /// Hosts offered to gangs (schedulable, ready).
    pub eligible: u64,
    /// Hosts that are part of the cluster but unusable now (cordoned, not ready, removed but held).
    pub unusable: u64,
    /// GPUs pods trainyard does not place take on known nodes.
    pub foreign_gpus: u64,
    /// Nodes left out, with why.
    pub problems: BTreeMap<String, String>,
}

impl Hosts {
    /// The hosts of a cluster built beforehand (by name; a loop built from a cluster file).
    pub(super) fn of(cluster: &Cluster) -> Hosts {
        let topo = cluster.topology();
        let mut hosts = Hosts::default();
        for h in topo.hosts() {
            let name = topo.host_name(h).to_string();
            hosts.by_host_name.insert(name.clone(), h);
            hosts.names.insert(h, (name.clone(), name));
        }
        hosts
    }

    /// The host an admission record names.
    pub(super) fn host_named(&self, name: &str) -> Option<HostId> {
        self.by_host_name.get(name).copied()
    }

    /// The node name of a host, for messages.
    pub(super) fn node_of(&self, host: HostId, engine: &Engine) -> String {
        self.names.get(&host).map(|(node, _)| node.clone()).unwrap_or_else(|| {
            let topo = engine.cluster().topology();
            if topo.is_host(host) { topo.host_name(host).to_string() } else { format!("#{}", host.0) }
        })
    }

    /// The host name (as records spell it) of a host.
    pub(super) fn name_of(&self, host: HostId, engine: &Engine) -> String {
        self.names.get(&host).map(|(_, name)| name.clone()).unwrap_or_else(|| self.node_of(host, engine))
    }

    /// Why a host is lost, in words.
    pub(super) fn why_lost(&self, host: HostId, engine: &Engine) -> String {
        let node = self.node_of(host, engine);
        let facts = self.nodes.get(&node).and_then(|n| n.facts.as_ref().filter(|_| n.host == Some(host)));
        let why = match facts {
            None => "removed from the cluster".to_string(),
            Some(f) => match f.unusable() {
                Some(why) => why.to_string(),
                None => match f
                    .host
                    .attrs
                    .taints
                    .iter()
                    .find(|t| t.effect == trainyard_topology::eligibility::TaintEffect::NoExecute)
                {
                    Some(t) => format!("taint {}:NoExecute", t.key),
                    None => "lost".to_string(),
                },
            },
        };
        format!("{node} ({why})")
    }

    pub(super) fn report(&self, engine: &Engine) -> HostsReport {
        let cluster = engine.cluster();
        let topo = cluster.topology();
        let (mut eligible, mut unusable) = (0, 0);
        for h in topo.hosts() {
            if cluster.usable(h) {
                eligible += 1;
            } else {
                unusable += 1;
            }
        }
        HostsReport { eligible, unusable, foreign_gpus: self.foreign_gpus, problems: self.problems.clone() }
    }
}

impl SchedulingLoop {
    /// Applies a Node as read ([`crate::controller::watching::facts::read_node`]) at `now`. A node that
    /// cannot be read, or left the Topology's selector, leaves the cluster (its gangs keep it
    /// charged until they end). Returns the problem of a node newly left out, to report it.
    pub fn apply_node(&mut self, name: &str, view: NodeView, now: u64) -> Option<String> {
        let facts = match view {
            NodeView::Member(facts) => facts,
            NodeView::Outside => {
                self.hosts.problems.remove(name);
                self.delete_node(name, now);
                return None;
            }
            NodeView::Bad(problem) => {
                let message = format!("node {name}: {problem}; left out");
                self.delete_node(name, now);
                let new = self.hosts.problems.insert(name.to_string(), message.clone()).as_ref() != Some(&message);
                return new.then_some(message);
            }
        };
        self.hosts.problems.remove(name);
        let current = self.hosts.nodes.get(name).and_then(|n| n.host);
        if current.is_some() && self.hosts.nodes.get(name).and_then(|n| n.facts.as_ref()) == Some(&facts) {
            return None;
        }
        let host_name = facts.host.path.last().cloned().unwrap_or_default();
        // A host id freed by the engine may be handed out again now: forget the old names first.
        self.forget_reaped();
        let result = match current {
            Some(h) => self.engine.update_host(h, facts.host.clone(), now).map(|_| h),
            None => self.engine.add_host(facts.host.clone(), now),
        };
        let h = match result {
            Ok(h) => h,
            Err(e) => {
                let message = format!("node {name}: {e}; left out");
                self.delete_node(name, now);
                self.hosts.problems.insert(name.to_string(), message.clone());
                return Some(message);
            }
        };
        if let Some(old) = self.hosts.names.insert(h, (name.to_string(), host_name.clone()))
            && old.1 != host_name
            && self.hosts.by_host_name.get(&old.1) == Some(&h)
        {
            self.hosts.by_host_name.remove(&old.1);
        }
        self.hosts.by_host_name.insert(host_name, h);
        self.follow_tpu_pool(h, &facts.host);
        self.hosts.nodes.insert(name.to_string(), NodeEntry { host: Some(h), facts: Some(facts) });
        self.touch_host(h);
        if current.is_none() {
            // Pods bound before the node was known count now.
            let pods: Vec<String> = self.hosts.pods_on_node.get(name).into_iter().flatten().cloned().collect();
            for uid in pods {
                self.recharge(&uid);
            }
        }
        None
    }

    /// A GKE TPU host makes its node pool (when the Topology has that level) a torus of the chip
    /// topology its label names; a pool whose hosts disagree follows the last one read.
    fn follow_tpu_pool(&mut self, h: HostId, spec: &trainyard_topology::HostSpec) {
        use trainyard_topology::sources::k8s_nodes::tpu::{NODEPOOL_LABEL, TPU_TOPOLOGY_LABEL, gke_torus};
        let topo = self.engine.cluster().topology();
        let Some(level) = topo.levels().iter().position(|l| l == NODEPOOL_LABEL) else { return };
        let Some(shape) = spec.attrs.labels.get(TPU_TOPOLOGY_LABEL) else { return };
        let pool = topo.ancestor_at(topo.host_domain(h), (level + 1) as u8);
        let torus = gke_torus(shape, spec.capacity.gpus);
        if let Err(e) = self.engine.set_torus(pool, torus) {
            tracing::warn!(host = ?h, error = %e, "TPU node pool not modelled as a torus");
        }
    }

    /// A node left: its pods' foreign usage is released (they stay known, in case it returns),
    /// and its host is removed (kept, unusable, while gangs hold it).
    pub fn delete_node(&mut self, name: &str, now: u64) {
        self.hosts.problems.remove(name);
        let Some(entry) = self.hosts.nodes.remove(name) else { return };
        let Some(h) = entry.host else { return };
        let pods: Vec<String> = self.hosts.pods_on_node.get(name).into_iter().flatten().cloned().collect();
        for uid in &pods {
            self.uncharge(uid);
        }
        self.touch_host(h);
        match self.engine.remove_host(h, now) {
            Ok(Removal::Removed) => self.forget_host(h),
            Ok(Removal::Held) => {}
            Err(e) => tracing::error!(node = name, error = %e, "removing the node's host failed"),
        }
    }

    /// A host standing in for a node an admission record names but the cluster does not have: in
    /// the tree under placeholder domains, holding `capacity` (what the gang's pods there take),
    /// unusable. The caller removes it once the gang is charged there, so it stays only while held.
    pub(super) fn stand_in(&mut self, name: &str, capacity: Option<Resources>, now: u64) -> Option<HostId> {
        let levels = self.engine.cluster().topology().levels().len();
        let mut path = vec!["(removed)".to_string(); levels.saturating_sub(1)];
        path.push(name.to_string());
        let spec = trainyard_topology::HostSpec {
            path,
            capacity: capacity?,
            flavor: None,
            attrs: trainyard_topology::eligibility::HostAttrs { node_name: name.to_string(), ..Default::default() },
            ready: false,
        };
        let h = self.engine.add_host(spec, now).ok()?;
        self.hosts.names.insert(h, (name.to_string(), name.to_string()));
        self.hosts.by_host_name.insert(name.to_string(), h);
        Some(h)
    }

    /// What the gangs on a host say about it (why it is lost) may have changed.
    fn touch_host(&mut self, h: HostId) {
        let on_it: Vec<trainyard_policies::GangId> = self.engine.gangs_on(h).collect();
        for id in on_it {
            if let Some(uid) = self.by_id.get(&id) {
                self.stale.insert(uid.clone());
            }
        }
    }

    /// Removes a stand-in host once its gang holds it (it stays, held) or could not take it.
    pub(super) fn drop_stand_in(&mut self, h: HostId, now: u64) {
        if let Ok(Removal::Removed) = self.engine.remove_host(h, now) {
            self.forget_host(h);
        }
    }

    /// Drops the names of hosts the engine dropped (removed hosts their gangs released).
    pub(super) fn forget_reaped(&mut self) {
        for h in self.engine.take_reaped_hosts() {
            self.forget_host(h);
        }
    }

    fn forget_host(&mut self, h: HostId) {
        if let Some((_, host_name)) = self.hosts.names.remove(&h)
            && self.hosts.by_host_name.get(&host_name) == Some(&h)
        {
            self.hosts.by_host_name.remove(&host_name);
        }
    }

    /// Applies a pod that takes node capacity (bound, not finished).
    pub fn apply_pod(&mut self, facts: PodFacts) {
        let uid = facts.uid.clone();
        if let Some(old) = self.hosts.pods.get(&uid).map(|p| p.facts.clone()) {
            if old == facts {
                return;
            }
            self.unlink_pod(&old);
        }
        self.hosts.pods_on_node.entry(facts.node.clone()).or_default().insert(uid.clone());
        if let Some(g) = &facts.gang {
            self.hosts.pods_of_gang.entry(g.clone()).or_default().insert(uid.clone());
        }
        let charged = self.hosts.pods.remove(&uid).and_then(|p| p.charged);
        self.hosts.pods.insert(uid.clone(), PodEntry { facts, charged });
        self.recharge(&uid);
    }

    /// Replaces the engine's DRA objects; returns the pools left out.
    pub fn replace_devices(
        &mut self,
        objects: trainyard_topology::devices::DraObjects,
    ) -> Result<Vec<trainyard_topology::devices::PoolReport>, trainyard_policies::Error> {
        self.engine.replace_devices(objects)
    }

    /// Puts node-local pools at what their slices publish now; `None` when the devices must be
    /// replaced whole.
    pub fn replace_pools(
        &mut self,
        keys: &[trainyard_topology::devices::PoolKey],
        slices: &[trainyard_topology::devices::objects::ResourceSlice],
    ) -> Option<(std::collections::BTreeSet<String>, Vec<trainyard_topology::devices::PoolReport>)> {
        self.engine.replace_pools(keys, slices)
    }

    /// Sets the devices claims trainyard does not place hold.
    pub fn set_observed_devices(&mut self, ids: std::collections::HashSet<trainyard_topology::devices::DeviceId>) {
        self.engine.set_observed_devices(ids);
    }

    /// Whole GPUs each node's DRA devices give.
    pub fn gpu_devices(
        &mut self,
        only: Option<&std::collections::BTreeSet<String>>,
    ) -> std::collections::BTreeMap<String, u64> {
        self.engine.gpu_devices(only)
    }

    /// A pod is gone or takes no capacity any more (deleted, finished, unbound).
    pub fn delete_pod(&mut self, uid: &str) {
        self.uncharge(uid);
        if let Some(p) = self.hosts.pods.remove(uid) {
            self.unlink_pod(&p.facts);
        }
    }

    /// The uids of every pod the loop knows.
    pub fn pod_uids(&self) -> impl Iterator<Item = &str> + '_ {
        self.hosts.pods.keys().map(String::as_str)
    }

    /// The names of every node the loop knows (members and nodes left out).
    pub fn node_names(&self) -> Vec<String> {
        self.hosts
            .nodes
            .keys()
            .chain(self.hosts.problems.keys())
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    fn unlink_pod(&mut self, facts: &PodFacts) {
        if let Some(set) = self.hosts.pods_on_node.get_mut(&facts.node) {
            set.remove(&facts.uid);
            if set.is_empty() {
                self.hosts.pods_on_node.remove(&facts.node);
            }
        }
        if let Some(g) = &facts.gang
            && let Some(set) = self.hosts.pods_of_gang.get_mut(g)
        {
            set.remove(&facts.uid);
            if set.is_empty() {
                self.hosts.pods_of_gang.remove(g);
            }
        }
    }

    /// Charges or releases one pod as its gang and node now say (a pod of a running gang is
    /// looked at with the rest of its gang: which of them are the gang's own depends on all).
    fn recharge(&mut self, uid: &str) {
        let Some(pod) = self.hosts.pods.get(uid) else { return };
        if let Some(gang) = pod.facts.gang.clone()
            && self.own_slots(&gang).is_some()
        {
            return self.reclassify(&gang);
        }
        let host = self.hosts.nodes.get(&pod.facts.node).and_then(|n| n.host);
        self.set_charge(uid, host);
    }

    /// Charges pod `uid` as foreign usage on `host` (`None`: charges nothing).
    fn set_charge(&mut self, uid: &str, host: Option<HostId>) {
        let Some(pod) = self.hosts.pods.get(uid) else { return };
        let want = host.map(|h| (h, pod.facts.requests)).filter(|(_, r)| !r.is_zero());
        if want == pod.charged {
            return;
        }
        self.uncharge(uid);
        if let Some((h, amount)) = want
            && self.engine.charge_foreign(h, amount).is_ok()
        {
            self.hosts.foreign_gpus += amount.gpus;
            if let Some(p) = self.hosts.pods.get_mut(uid) {
                p.charged = Some((h, amount));
            }
        }
    }

    fn uncharge(&mut self, uid: &str) {
        let Some(pod) = self.hosts.pods.get_mut(uid) else { return };
        if let Some((h, amount)) = pod.charged.take() {
            self.hosts.foreign_gpus = self.hosts.foreign_gpus.saturating_sub(amount.gpus);
            if let Err(e) = self.engine.release_foreign(h, amount) {
                tracing::error!(pod = uid, error = %e, "releasing a pod's usage failed");
            }
        }
    }

    /// Charges or releases every pod of a gang again (it started, stopped or moved, or one of its
    /// pods changed). A running gang's own pods on a host are as many as its placement puts
    /// there, pods that are going away last; any more (pods of an earlier run still
    /// terminating, a replacement beside its predecessor) are foreign usage until they are gone.
    pub(super) fn reclassify(&mut self, key: &str) {
        let mut pods: Vec<(bool, String)> = self
            .hosts
            .pods_of_gang
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|uid| self.hosts.pods.get(uid).map(|p| (p.facts.terminating, uid.clone())))
            .collect();
        pods.sort();
        let mut own = self.own_slots(key);
        for (_, uid) in pods {
            let Some(node) = self.hosts.pods.get(&uid).map(|p| p.facts.node.clone()) else { continue };
            let host = self.hosts.nodes.get(&node).and_then(|n| n.host);
            let ours = match (&mut own, host) {
                (Some((_, true)), Some(_)) => true,
                (Some((slots, false)), Some(h)) => match slots.get_mut(&h) {
                    Some(n) if *n > 0 => {
                        *n -= 1;
                        true
                    }
                    _ => false,
                },
                _ => false,
            };
            self.set_charge(&uid, if ours { None } else { host });
        }
    }
}
