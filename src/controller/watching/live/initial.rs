//! The first complete list of every kind the loop follows: what the engine is built from, once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::watcher::Event;

use super::Change;
use crate::api::{Queue, Topology, TopologySpec, TrainJob};
use crate::controller::watching::scheduler_inputs::Runtimes;

/// Objects of each kind as listed, until every kind has been listed once.
#[derive(Debug, Default)]
pub struct Initial {
    /// Nodes by name.
    pub nodes: BTreeMap<String, Arc<Node>>,
    /// Pods by uid.
    pub pods: BTreeMap<String, Arc<Pod>>,
    /// TrainJobs by uid.
    pub jobs: BTreeMap<String, Arc<TrainJob>>,
    /// Queues by name.
    pub queues: BTreeMap<String, Arc<Queue>>,
    /// Topologies by name.
    pub topologies: BTreeMap<String, Arc<Topology>>,
    /// The runtimes, once indexed.
    pub runtimes: Option<Arc<Runtimes>>,
    /// DRA events in the order they came (replayed into the live picture).
    pub dra: Vec<super::DraChange>,
    /// Whether the DRA kinds must be listed too (the server serves `resource.k8s.io/v1`).
    pub expect_dra: bool,
    done: BTreeSet<&'static str>,
}

/// The kinds that must be listed before the engine is built.
const KINDS: [&str; 6] = ["node", "pod", "job", "queue", "topology", "runtimes"];

fn track<K>(
    map: &mut BTreeMap<String, Arc<K>>,
    done: &mut BTreeSet<&'static str>,
    kind: &'static str,
    event: Event<K>,
    key: impl Fn(&K) -> String,
) {
    match event {
        Event::Init => {
            map.clear();
            done.remove(kind);
        }
        Event::InitApply(o) | Event::Apply(o) => {
            map.insert(key(&o), Arc::new(o));
        }
        Event::Delete(o) => {
            map.remove(&key(&o));
        }
        Event::InitDone => {
            done.insert(kind);
        }
    }
}

impl Initial {
    /// Takes one event.
    pub fn take(&mut self, change: Change) {
        let name = |m: &kube::api::ObjectMeta| m.name.clone().unwrap_or_default();
        let uid = |m: &kube::api::ObjectMeta| m.uid.clone().unwrap_or_default();
        let done = &mut self.done;
        match change {
            Change::Node(e) => track(&mut self.nodes, done, "node", *e, |o| name(&o.metadata)),
            Change::Pod(e) => track(&mut self.pods, done, "pod", *e, |o| uid(&o.metadata)),
            Change::Job(e) => track(&mut self.jobs, done, "job", *e, |o| uid(&o.metadata)),
            Change::Queue(e) => track(&mut self.queues, done, "queue", *e, |o| name(&o.metadata)),
            Change::Topology(e) => track(&mut self.topologies, done, "topology", *e, |o| name(&o.metadata)),
            Change::Runtimes(r) => {
                self.runtimes = Some(r);
                done.insert("runtimes");
            }
            // The settings carry the binders found at start; a later change comes after the start.
            Change::Binders(_) => {}
            Change::Dra(change) => {
                let kind = change.kind();
                match change.as_ref() {
                    super::DraChange::Class(Event::Init)
                    | super::DraChange::Slice(Event::Init)
                    | super::DraChange::Template(Event::Init)
                    | super::DraChange::Claim(Event::Init) => {
                        done.remove(kind);
                    }
                    super::DraChange::Class(Event::InitDone)
                    | super::DraChange::Slice(Event::InitDone)
                    | super::DraChange::Template(Event::InitDone)
                    | super::DraChange::Claim(Event::InitDone) => {
                        done.insert(kind);
                    }
                    _ => {}
                }
                self.dra.push(*change);
            }
        }
    }

    fn kinds(&self) -> impl Iterator<Item = &'static str> + '_ {
        let dra = if self.expect_dra { &super::DRA_KINDS[..] } else { &[] };
        KINDS.iter().chain(dra).copied()
    }

    /// Whether every kind has been listed.
    pub fn complete(&self) -> bool {
        self.kinds().all(|k| self.done.contains(k))
    }

    /// The kinds still being listed, for logs.
    pub fn waiting_for(&self) -> Vec<&'static str> {
        self.kinds().filter(|k| !self.done.contains(k)).collect()
    }

    /// The Topology named `name`, or hosts (and NVLink cliques) only without one.
    pub fn topology(&self, name: &str) -> TopologySpec {
        self.topologies.get(name).map(|t| t.spec.clone()).unwrap_or_else(TopologySpec::hosts_only)
    }
}
