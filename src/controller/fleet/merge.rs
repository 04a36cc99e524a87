//! The fleet's nodes and pods as one cluster's: each worker's watch events renamed into names
//! unique across the fleet (`<cluster>/<name>`) and merged into the one stream of Node and Pod
//! events the live picture reads, so that the engine sees a tree with a cluster level on top and
//! every worker change costs what it changed. Pure: the watches feed events in.
//!
//! A worker's relist is settled here (what it no longer lists is deleted), so the merged stream
//! lists once, at the start, and never relists: one worker's 410 never touches another's nodes.
//! A worker the manager cannot reach keeps its nodes, shown not Ready, so that its gangs stay
//! charged and the policy's node-loss rules decide what happens to them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod};
use kube::runtime::watcher::Event;

use crate::api::worker_cluster::CLUSTER_LEVEL_LABEL;
use crate::controller::watching::live::Change;

/// The label kube-scheduler and the Topology read a node's host name from.
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// The Ready condition's reason on the nodes of a worker the manager cannot reach.
pub const UNREACHABLE_REASON: &str = "WorkerClusterUnreachable";

/// One thing a worker's watches saw.
#[derive(Clone, Debug)]
pub enum WorkerEvent {
    /// A Node event of the worker.
    Node(Box<Event<Node>>),
    /// A Pod event of the worker.
    Pod(Box<Event<Pod>>),
    /// The manager reaches the worker again (true) or lost it (false).
    Reachable(bool),
    /// The worker left the fleet (its WorkerCluster deleted or its credentials no longer valid).
    Gone,
}

/// The name of a worker's node in the fleet.
pub fn fleet_name(cluster: &str, name: &str) -> String {
    format!("{cluster}/{name}")
}

/// A fleet name split into the worker and the worker's own name.
pub fn split_fleet_name(name: &str) -> Option<(&str, &str)> {
    name.split_once('/').filter(|(c, n)| !c.is_empty() && !n.is_empty())
}

#[derive(Debug, Default)]
struct Worker {
    nodes: BTreeMap<String, Arc<Node>>,
    pods: BTreeMap<String, Arc<Pod>>,
    relisting_nodes: Option<BTreeSet<String>>,
    relisting_pods: Option<BTreeSet<String>>,
    nodes_listed: bool,
    pods_listed: bool,
    unreachable: bool,
}

/// The merge of every worker's nodes and pods.
#[derive(Debug, Default)]
pub struct FleetMerge {
    workers: BTreeMap<String, Worker>,
    /// Workers whose first lists the merged first list waits for.
    awaited: BTreeSet<String>,
    /// The merged first list was sent (its `InitDone`).
    started: bool,
}

impl FleetMerge {
    /// A merge whose first list waits for these workers (each listed, unreachable or gone).
    pub fn new(awaited: impl IntoIterator<Item = String>) -> (FleetMerge, Vec<Change>) {
        let mut merge = FleetMerge { awaited: awaited.into_iter().collect(), ..FleetMerge::default() };
        let mut out = vec![Change::Node(Box::new(Event::Init)), Change::Pod(Box::new(Event::Init))];
        merge.maybe_start(&mut out);
        (merge, out)
    }

    /// Whether the merged first list is complete.
    pub fn started(&self) -> bool {
        self.started
    }

    /// The worker's nodes as last seen.
    pub fn node_count(&self, cluster: &str) -> usize {
        self.workers.get(cluster).map_or(0, |w| w.nodes.len())
    }

    /// Takes one event of worker `cluster`; returns the merged events it makes.
    pub fn apply(&mut self, cluster: &str, event: WorkerEvent) -> Vec<Change> {
        let mut out = Vec::new();
        let initial = !self.started;
        match event {
            WorkerEvent::Gone => {
                self.awaited.remove(cluster);
                if let Some(w) = self.workers.remove(cluster) {
                    for node in w.nodes.values() {
                        out.push(Change::Node(Box::new(Event::Delete(qualify_node(cluster, node, false)))));
                    }
                    for pod in w.pods.values() {
                        out.push(Change::Pod(Box::new(Event::Delete(qualify_pod(cluster, pod)))));
                    }
                }
            }
            WorkerEvent::Reachable(reachable) => {
                let w = self.workers.entry(cluster.to_string()).or_default();
                if w.unreachable == reachable {
                    w.unreachable = !reachable;
                    for node in w.nodes.values() {
                        let q = qualify_node(cluster, node, w.unreachable);
                        out.push(Change::Node(Box::new(apply_event(q, initial))));
                    }
                }
                if !reachable {
                    // The start does not wait for a worker it cannot reach.
                    self.awaited.remove(cluster);
                }
            }
            WorkerEvent::Node(e) => self.node_event(cluster, *e, initial, &mut out),
            WorkerEvent::Pod(e) => self.pod_event(cluster, *e, initial, &mut out),
        }
        self.maybe_start(&mut out);
        out
    }

    fn node_event(&mut self, cluster: &str, event: Event<Node>, initial: bool, out: &mut Vec<Change>) {
        let w = self.workers.entry(cluster.to_string()).or_default();
        let hidden = w.unreachable;
        let emit = |node: &Node, out: &mut Vec<Change>| {
            out.push(Change::Node(Box::new(apply_event(qualify_node(cluster, node, hidden), initial))));
        };
        match event {
            Event::Init => w.relisting_nodes = Some(BTreeSet::new()),
            Event::InitApply(node) | Event::Apply(node) => {
                let name = node.metadata.name.clone().unwrap_or_default();
                if let Some(seen) = &mut w.relisting_nodes {
                    seen.insert(name.clone());
                }
                emit(&node, out);
                w.nodes.insert(name, Arc::new(node));
            }
            Event::Delete(node) => {
                let name = node.metadata.name.clone().unwrap_or_default();
                if let Some(old) = w.nodes.remove(&name) {
                    out.push(Change::Node(Box::new(Event::Delete(qualify_node(cluster, &old, false)))));
                }
            }
            Event::InitDone => {
                let seen = w.relisting_nodes.take().unwrap_or_default();
                let gone: Vec<String> = w.nodes.keys().filter(|n| !seen.contains(*n)).cloned().collect();
                for name in gone {
                    if let Some(old) = w.nodes.remove(&name) {
                        out.push(Change::Node(Box::new(Event::Delete(qualify_node(cluster, &old, false)))));
                    }
                }
                w.nodes_listed = true;
            }
        }
    }

    fn pod_event(&mut self, cluster: &str, event: Event<Pod>, initial: bool, out: &mut Vec<Change>) {
        let w = self.workers.entry(cluster.to_string()).or_default();
        match event {
            Event::Init => w.relisting_pods = Some(BTreeSet::new()),
            Event::InitApply(pod) | Event::Apply(pod) => {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                if let Some(seen) = &mut w.relisting_pods {
                    seen.insert(uid.clone());
                }
                out.push(Change::Pod(Box::new(apply_event(qualify_pod(cluster, &pod), initial))));
                w.pods.insert(uid, Arc::new(pod));
            }
            Event::Delete(pod) => {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                if let Some(old) = w.pods.remove(&uid) {
                    out.push(Change::Pod(Box::new(Event::Delete(qualify_pod(cluster, &old)))));
                }
            }
            Event::InitDone => {
                let seen = w.relisting_pods.take().unwrap_or_default();
                let gone: Vec<String> = w.pods.keys().filter(|u| !seen.contains(*u)).cloned().collect();
                for uid in gone {
                    if let Some(old) = w.pods.remove(&uid) {
                        out.push(Change::Pod(Box::new(Event::Delete(qualify_pod(cluster, &old)))));
                    }
                }
                w.pods_listed = true;
            }
        }
    }

    fn maybe_start(&mut self, out: &mut Vec<Change>) {
        if self.started {
            return;
        }
        let listed = |c: &String| self.workers.get(c).is_some_and(|w| w.nodes_listed && w.pods_listed);
        if self.awaited.iter().all(listed) {
            self.started = true;
            out.push(Change::Node(Box::new(Event::InitDone)));
            out.push(Change::Pod(Box::new(Event::InitDone)));
        }
    }
}

/// Before the merged first list is complete, objects are part of it.
fn apply_event<K>(object: K, initial: bool) -> Event<K> {
    if initial { Event::InitApply(object) } else { Event::Apply(object) }
}

/// A worker's node under its fleet name, labelled with its cluster (the fleet's top level), its
/// host name made unique too; shown not Ready while the worker cannot be reached.
pub fn qualify_node(cluster: &str, node: &Node, unreachable: bool) -> Node {
    let mut q = node.clone();
    q.metadata.name = Some(fleet_name(cluster, node.metadata.name.as_deref().unwrap_or_default()));
    let labels = q.metadata.labels.get_or_insert_with(Default::default);
    if let Some(host) = labels.get_mut(HOSTNAME_LABEL) {
        *host = fleet_name(cluster, host);
    }
    labels.insert(CLUSTER_LEVEL_LABEL.to_string(), cluster.to_string());
    if unreachable {
        let status = q.status.get_or_insert_with(Default::default);
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        conditions.retain(|c| c.type_ != "Ready");
        conditions.push(NodeCondition {
            type_: "Ready".into(),
            status: "Unknown".into(),
            reason: Some(UNREACHABLE_REASON.into()),
            message: Some(format!("the manager cannot reach worker cluster {cluster}")),
            ..NodeCondition::default()
        });
    }
    q
}

/// A worker's pod with a uid and node name unique across the fleet; its namespace and gang label
/// stay, so that a copy's pods count as its manager TrainJob's.
pub fn qualify_pod(cluster: &str, pod: &Pod) -> Pod {
    let mut q = pod.clone();
    q.metadata.uid = pod.metadata.uid.as_deref().map(|u| fleet_name(cluster, u));
    if let Some(spec) = q.spec.as_mut()
        && let Some(node) = spec.node_name.as_mut()
        && !node.is_empty()
    {
        *node = fleet_name(cluster, node);
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, rack: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "rack": rack}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap()
    }

    fn pod(uid: &str, node: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": uid, "namespace": "ns", "uid": uid},
            "spec": {"nodeName": node, "containers": []}
        }))
        .unwrap()
    }

    fn names(out: &[Change]) -> Vec<String> {
        out.iter()
            .map(|c| match c {
                Change::Node(e) => match e.as_ref() {
                    Event::Init => "node:init".into(),
                    Event::InitDone => "node:done".into(),
                    Event::InitApply(n) => format!("node+{}", n.metadata.name.as_deref().unwrap()),
                    Event::Apply(n) => {
                        let ready = n.status.as_ref().unwrap().conditions.as_ref().unwrap()[0].status.clone();
                        format!("node={}:{ready}", n.metadata.name.as_deref().unwrap())
                    }
                    Event::Delete(n) => format!("node-{}", n.metadata.name.as_deref().unwrap()),
                },
                Change::Pod(e) => match e.as_ref() {
                    Event::Init => "pod:init".into(),
                    Event::InitDone => "pod:done".into(),
                    Event::InitApply(p) | Event::Apply(p) => format!(
                        "pod+{}@{}",
                        p.metadata.uid.as_deref().unwrap(),
                        p.spec.as_ref().unwrap().node_name.as_deref().unwrap()
                    ),
                    Event::Delete(p) => format!("pod-{}", p.metadata.uid.as_deref().unwrap()),
                },
                _ => "other".into(),
            })
            .collect()
    }

    fn list(m: &mut FleetMerge, cluster: &str, nodes: Vec<Node>, pods: Vec<Pod>) -> Vec<String> {
        let mut out = m.apply(cluster, WorkerEvent::Node(Box::new(Event::Init)));
        for n in nodes {
            out.extend(m.apply(cluster, WorkerEvent::Node(Box::new(Event::InitApply(n)))));
        }
        out.extend(m.apply(cluster, WorkerEvent::Node(Box::new(Event::InitDone))));
        out.extend(m.apply(cluster, WorkerEvent::Pod(Box::new(Event::Init))));
        for p in pods {
            out.extend(m.apply(cluster, WorkerEvent::Pod(Box::new(Event::InitApply(p)))));
        }
        out.extend(m.apply(cluster, WorkerEvent::Pod(Box::new(Event::InitDone))));
        names(&out)
    }

    #[test]
    fn the_first_list_waits_for_every_worker_and_names_are_the_fleets() {
        let (mut m, out) = FleetMerge::new(["east".to_string(), "west".to_string()]);
        assert_eq!(names(&out), ["node:init", "pod:init"]);
        let east = list(&mut m, "east", vec![node("n1", "r1")], vec![pod("u1", "n1")]);
        assert_eq!(east, ["node+east/n1", "pod+east/u1@east/n1"], "west has not listed yet");
        assert!(!m.started());
        let west = list(&mut m, "west", vec![node("n1", "r1")], vec![]);
        assert_eq!(west, ["node+west/n1", "node:done", "pod:done"]);
        let q = qualify_node("west", &node("n1", "r1"), false);
        let labels = q.metadata.labels.unwrap();
        assert_eq!(labels[CLUSTER_LEVEL_LABEL], "west");
        assert_eq!(labels[HOSTNAME_LABEL], "west/n1");
        assert_eq!(labels["rack"], "r1", "levels below the cluster keep their values");
    }

    #[test]
    fn an_unreachable_worker_does_not_hold_the_start_and_its_nodes_show_not_ready() {
        let (mut m, _) = FleetMerge::new(["east".to_string(), "west".to_string()]);
        list(&mut m, "east", vec![node("n1", "r1")], vec![]);
        let out = names(&m.apply("west", WorkerEvent::Reachable(false)));
        assert_eq!(out, ["node:done", "pod:done"]);
        assert_eq!(names(&m.apply("east", WorkerEvent::Reachable(false))), ["node=east/n1:Unknown"]);
        assert!(names(&m.apply("east", WorkerEvent::Reachable(false))).is_empty(), "said once");
        // Events of an unreachable worker's nodes keep them shown not Ready.
        let out = names(&m.apply("east", WorkerEvent::Node(Box::new(Event::Apply(node("n1", "r2"))))));
        assert_eq!(out, ["node=east/n1:Unknown"]);
        assert_eq!(names(&m.apply("east", WorkerEvent::Reachable(true))), ["node=east/n1:True"]);
    }

    #[test]
    fn a_workers_relist_deletes_only_its_own_vanished_objects() {
        let (mut m, _) = FleetMerge::new(["east".to_string(), "west".to_string()]);
        list(&mut m, "east", vec![node("n1", "r"), node("n2", "r")], vec![pod("u1", "n1"), pod("u2", "n2")]);
        list(&mut m, "west", vec![node("n1", "r")], vec![pod("u1", "n1")]);
        let out = list(&mut m, "east", vec![node("n2", "r")], vec![pod("u2", "n2")]);
        assert_eq!(out, ["node=east/n2:True", "node-east/n1", "pod+east/u2@east/n2", "pod-east/u1"]);
        assert_eq!(m.node_count("west"), 1);
        let gone = names(&m.apply("west", WorkerEvent::Gone));
        assert_eq!(gone, ["node-west/n1", "pod-west/u1"]);
        assert_eq!(m.node_count("west"), 0);
    }

    #[test]
    fn fleet_names_split_back() {
        assert_eq!(split_fleet_name("east/n1"), Some(("east", "n1")));
        assert_eq!(split_fleet_name("n1"), None);
        assert_eq!(split_fleet_name("/n1"), None);
    }
}
