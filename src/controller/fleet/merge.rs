//! The fleet's nodes and pods (and DRA slices and claims) as one cluster's: each worker's watch
//! events renamed into names unique across the fleet (`<cluster>/<name>`) and merged into the
//! one stream of events the live picture reads, so that the engine sees a tree with a cluster
//! level on top and every worker change costs what it changed. Pure: the watches feed events in.
//!
//! A worker's relist is settled here (what it no longer lists is deleted), so the merged stream
//! lists once, at the start, and never relists: one worker's 410 never touches another's nodes.
//! A worker the manager cannot reach keeps its nodes, shown not Ready, so that its gangs stay
//! charged and the policy's node-loss rules decide what happens to them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::api::ObjectMeta;
use kube::runtime::watcher::Event;

use super::devices::{qualify_claim, qualify_slice};
use crate::api::worker_cluster::CLUSTER_LEVEL_LABEL;
use crate::controller::watching::live::{Change, DraChange};

/// The label kube-scheduler and the Topology read a node's host name from.
pub(super) const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// The Ready condition's reason on the nodes of a worker the manager cannot reach.
pub const UNREACHABLE_REASON: &str = "WorkerClusterUnreachable";

/// One thing a worker's watches saw.
#[derive(Clone, Debug)]
pub enum WorkerEvent {
    /// A Node event of the worker.
    Node(Box<Event<Node>>),
    /// A Pod event of the worker.
    Pod(Box<Event<Pod>>),
    /// A ResourceSlice event of the worker.
    Slice(Box<Event<ResourceSlice>>),
    /// A ResourceClaim event of the worker.
    Claim(Box<Event<ResourceClaim>>),
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

/// One kind of a worker's objects as last listed and watched.
#[derive(Debug)]
struct Listing<K> {
    objects: BTreeMap<String, Arc<K>>,
    /// Keys seen since the `Init` of a relist.
    relisting: Option<BTreeSet<String>>,
    listed: bool,
}

impl<K> Default for Listing<K> {
    fn default() -> Self {
        Listing { objects: BTreeMap::new(), relisting: None, listed: false }
    }
}

impl<K> Listing<K> {
    /// Takes one watch event: `seen(object, true)` for each object applied, `seen(object,
    /// false)` for each object deleted, including those a relist no longer shows.
    fn take(&mut self, event: Event<K>, key: impl Fn(&K) -> String, mut seen: impl FnMut(&K, bool)) {
        match event {
            Event::Init => self.relisting = Some(BTreeSet::new()),
            Event::InitApply(object) | Event::Apply(object) => {
                let k = key(&object);
                if let Some(keys) = &mut self.relisting {
                    keys.insert(k.clone());
                }
                seen(&object, true);
                self.objects.insert(k, Arc::new(object));
            }
            Event::Delete(object) => {
                if let Some(old) = self.objects.remove(&key(&object)) {
                    seen(&old, false);
                }
            }
            Event::InitDone => {
                let listed = self.relisting.take().unwrap_or_default();
                let vanished: Vec<String> = self.objects.keys().filter(|k| !listed.contains(*k)).cloned().collect();
                for k in vanished {
                    if let Some(old) = self.objects.remove(&k) {
                        seen(&old, false);
                    }
                }
                self.listed = true;
            }
        }
    }
}

fn name_of(meta: &ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

fn uid_of(meta: &ObjectMeta) -> String {
    meta.uid.clone().unwrap_or_default()
}

#[derive(Debug, Default)]
struct Worker {
    nodes: Listing<Node>,
    pods: Listing<Pod>,
    slices: Listing<ResourceSlice>,
    claims: Listing<ResourceClaim>,
    unreachable: bool,
}

/// The merge of every worker's nodes and pods (and, with devices, slices and claims).
#[derive(Debug, Default)]
pub struct FleetMerge {
    workers: BTreeMap<String, Worker>,
    /// Workers whose first lists the merged first list waits for.
    awaited: BTreeSet<String>,
    /// The merged first list was sent (its `InitDone`).
    started: bool,
    /// Workers' ResourceSlices and ResourceClaims are merged too (the manager follows DRA).
    devices: bool,
}

impl FleetMerge {
    /// A merge whose first list waits for these workers (each listed, unreachable or gone);
    /// with `devices`, their slices and claims are listed and merged as well.
    pub fn new(awaited: impl IntoIterator<Item = String>, devices: bool) -> (FleetMerge, Vec<Change>) {
        let mut merge = FleetMerge { awaited: awaited.into_iter().collect(), devices, ..FleetMerge::default() };
        let mut out = vec![Change::Node(Box::new(Event::Init)), Change::Pod(Box::new(Event::Init))];
        if devices {
            out.push(slice_change(Event::Init));
            out.push(claim_change(Event::Init));
        }
        merge.maybe_start(&mut out);
        (merge, out)
    }

    /// Whether the merged first list is complete.
    pub fn started(&self) -> bool {
        self.started
    }

    /// The worker's nodes as last seen.
    pub fn node_count(&self, cluster: &str) -> usize {
        self.workers.get(cluster).map_or(0, |w| w.nodes.objects.len())
    }

    /// Takes one event of worker `cluster`; returns the merged events it makes.
    pub fn apply(&mut self, cluster: &str, event: WorkerEvent) -> Vec<Change> {
        let mut out = Vec::new();
        let initial = !self.started;
        match event {
            WorkerEvent::Gone => {
                self.awaited.remove(cluster);
                if let Some(w) = self.workers.remove(cluster) {
                    for node in w.nodes.objects.values() {
                        out.push(Change::Node(Box::new(Event::Delete(qualify_node(cluster, node, false)))));
                    }
                    for pod in w.pods.objects.values() {
                        out.push(Change::Pod(Box::new(Event::Delete(qualify_pod(cluster, pod)))));
                    }
                    for slice in w.slices.objects.values() {
                        out.push(slice_change(Event::Delete(qualify_slice(cluster, slice))));
                    }
                    for claim in w.claims.objects.values() {
                        out.push(claim_change(Event::Delete(qualify_claim(cluster, claim))));
                    }
                }
            }
            WorkerEvent::Reachable(reachable) => {
                let w = self.workers.entry(cluster.to_string()).or_default();
                if w.unreachable == reachable {
                    w.unreachable = !reachable;
                    for node in w.nodes.objects.values() {
                        let q = qualify_node(cluster, node, w.unreachable);
                        out.push(Change::Node(Box::new(apply_event(q, initial))));
                    }
                }
                if !reachable {
                    // The start does not wait for a worker it cannot reach.
                    self.awaited.remove(cluster);
                }
            }
            WorkerEvent::Node(e) => {
                let w = self.workers.entry(cluster.to_string()).or_default();
                let hidden = w.unreachable;
                w.nodes.take(
                    *e,
                    |n| name_of(&n.metadata),
                    |n, present| {
                        out.push(Change::Node(Box::new(present_event(
                            qualify_node(cluster, n, hidden),
                            present,
                            initial,
                        ))));
                    },
                );
            }
            WorkerEvent::Pod(e) => {
                let w = self.workers.entry(cluster.to_string()).or_default();
                w.pods.take(
                    *e,
                    |p| uid_of(&p.metadata),
                    |p, present| {
                        out.push(Change::Pod(Box::new(present_event(qualify_pod(cluster, p), present, initial))));
                    },
                );
            }
            WorkerEvent::Slice(e) if self.devices => {
                let w = self.workers.entry(cluster.to_string()).or_default();
                w.slices.take(
                    *e,
                    |s| name_of(&s.metadata),
                    |s, present| {
                        out.push(slice_change(present_event(qualify_slice(cluster, s), present, initial)));
                    },
                );
            }
            WorkerEvent::Claim(e) if self.devices => {
                let w = self.workers.entry(cluster.to_string()).or_default();
                w.claims.take(
                    *e,
                    |c| uid_of(&c.metadata),
                    |c, present| {
                        out.push(claim_change(present_event(qualify_claim(cluster, c), present, initial)));
                    },
                );
            }
            WorkerEvent::Slice(_) | WorkerEvent::Claim(_) => {}
        }
        self.maybe_start(&mut out);
        out
    }

    fn maybe_start(&mut self, out: &mut Vec<Change>) {
        if self.started {
            return;
        }
        let devices = self.devices;
        let listed = |c: &String| {
            self.workers
                .get(c)
                .is_some_and(|w| w.nodes.listed && w.pods.listed && (!devices || (w.slices.listed && w.claims.listed)))
        };
        if self.awaited.iter().all(listed) {
            self.started = true;
            out.push(Change::Node(Box::new(Event::InitDone)));
            out.push(Change::Pod(Box::new(Event::InitDone)));
            if devices {
                out.push(slice_change(Event::InitDone));
                out.push(claim_change(Event::InitDone));
            }
        }
    }
}

fn slice_change(event: Event<ResourceSlice>) -> Change {
    Change::Dra(Box::new(DraChange::Slice(event)))
}

fn claim_change(event: Event<ResourceClaim>) -> Change {
    Change::Dra(Box::new(DraChange::Claim(event)))
}

/// Before the merged first list is complete, objects are part of it.
fn apply_event<K>(object: K, initial: bool) -> Event<K> {
    if initial { Event::InitApply(object) } else { Event::Apply(object) }
}

/// An object applied (`present`) or deleted, in the merged stream.
fn present_event<K>(object: K, present: bool, initial: bool) -> Event<K> {
    if present { apply_event(object, initial) } else { Event::Delete(object) }
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
        let (mut m, out) = FleetMerge::new(["east".to_string(), "west".to_string()], false);
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
        let (mut m, _) = FleetMerge::new(["east".to_string(), "west".to_string()], false);
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
        let (mut m, _) = FleetMerge::new(["east".to_string(), "west".to_string()], false);
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
    fn with_devices_the_first_list_waits_for_slices_and_claims_and_a_gone_worker_takes_them() {
        use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
        let slice: ResourceSlice = serde_json::from_value(json!({"metadata": {"name": "s1"},
            "spec": {"driver": "d", "nodeName": "n1", "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1}}}))
        .unwrap();
        let claim: ResourceClaim =
            serde_json::from_value(json!({"metadata": {"name": "c", "namespace": "ns", "uid": "cu"}, "spec": {}}))
                .unwrap();
        let dra = |out: &[Change]| -> Vec<String> {
            out.iter()
                .filter_map(|c| match c {
                    Change::Dra(d) => Some(match d.as_ref() {
                        DraChange::Slice(Event::Init) => "slice:init".to_string(),
                        DraChange::Slice(Event::InitDone) => "slice:done".to_string(),
                        DraChange::Slice(Event::InitApply(s)) => format!("slice+{}", s.spec.pool.name),
                        DraChange::Slice(Event::Delete(s)) => format!("slice-{}", s.metadata.name.as_deref().unwrap()),
                        DraChange::Claim(Event::Init) => "claim:init".to_string(),
                        DraChange::Claim(Event::InitDone) => "claim:done".to_string(),
                        DraChange::Claim(Event::InitApply(c)) => {
                            format!("claim+{}", c.metadata.uid.as_deref().unwrap())
                        }
                        DraChange::Claim(Event::Delete(c)) => format!("claim-{}", c.metadata.uid.as_deref().unwrap()),
                        other => format!("{other:?}"),
                    }),
                    _ => None,
                })
                .collect()
        };
        let (mut m, first) = FleetMerge::new(["east".to_string()], true);
        assert_eq!(dra(&first), ["slice:init", "claim:init"]);
        list(&mut m, "east", vec![node("n1", "r1")], vec![]);
        assert!(!m.started(), "slices and claims are not listed yet");
        let mut out = Vec::new();
        for e in [Event::Init, Event::InitApply(slice.clone()), Event::InitDone] {
            out.extend(m.apply("east", WorkerEvent::Slice(Box::new(e))));
        }
        for e in [Event::Init, Event::InitApply(claim.clone()), Event::InitDone] {
            out.extend(m.apply("east", WorkerEvent::Claim(Box::new(e))));
        }
        assert!(m.started());
        assert_eq!(dra(&out), ["slice+east/n1", "claim+east/cu", "slice:done", "claim:done"], "one first list");
        assert_eq!(dra(&m.apply("east", WorkerEvent::Gone)), ["slice-east/s1", "claim-east/cu"]);
        // Without devices, a worker's slice events are not merged.
        let (mut plain, first) = FleetMerge::new(["east".to_string()], false);
        assert!(dra(&first).is_empty());
        assert!(plain.apply("east", WorkerEvent::Slice(Box::new(Event::Apply(slice)))).is_empty());
    }

    #[test]
    fn fleet_names_split_back() {
        assert_eq!(split_fleet_name("east/n1"), Some(("east", "n1")));
        assert_eq!(split_fleet_name("n1"), None);
        assert_eq!(split_fleet_name("/n1"), None);
    }
}
