//! Watches that feed the scheduling loop: every event of Nodes, Pods (all of them: pods trainyard
//! does not manage take capacity too), TrainJobs, Queues, Topologies and, where served, the DRA
//! kinds goes into one channel as it comes, relists included; the runtimes are indexed again
//! whenever one changes.

use std::fmt::Debug;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, mpsc};

use crate::api::{ClusterTrainingRuntime, Queue, Topology, TrainJob, TrainingRuntime};
use crate::controller::watching::caches::without_managed_fields;
use crate::controller::watching::facts::slim_node;
use crate::controller::watching::live::{Change, DraChange};
use crate::controller::watching::scheduler_inputs::Runtimes;

/// Starts one watch per kind the loop follows; events go to `tx` in the order each watch
/// delivers them (a full channel slows the watch down, it never drops an event). Without
/// `nodes_and_pods` the cluster's own Nodes and Pods are not watched (a fleet manager's come
/// from its workers).
pub fn spawn(client: &Client, tx: &mpsc::Sender<Change>, nodes_and_pods: bool) {
    if nodes_and_pods {
        forward_slim(Api::<Node>::all(client.clone()), tx.clone(), |e| Change::Node(Box::new(e)), slim_node);
        forward(Api::<Pod>::all(client.clone()), tx.clone(), |e| Change::Pod(Box::new(e)));
    }
    forward(Api::<TrainJob>::all(client.clone()), tx.clone(), |e| Change::Job(Box::new(e)));
    forward(Api::<Queue>::all(client.clone()), tx.clone(), |e| Change::Queue(Box::new(e)));
    forward(Api::<Topology>::all(client.clone()), tx.clone(), |e| Change::Topology(Box::new(e)));
}

/// Starts the DRA watches (DeviceClasses, ResourceSlices, ResourceClaimTemplates,
/// ResourceClaims), for servers that serve `resource.k8s.io/v1`; without `slices_and_claims`
/// (a manager, whose slices and claims are its workers'), classes and templates only.
pub fn spawn_devices(client: &Client, tx: &mpsc::Sender<Change>, slices_and_claims: bool) {
    use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice};
    forward(Api::<DeviceClass>::all(client.clone()), tx.clone(), |e| Change::Dra(Box::new(DraChange::Class(e))));
    forward(Api::<ResourceClaimTemplate>::all(client.clone()), tx.clone(), |e| {
        Change::Dra(Box::new(DraChange::Template(e)))
    });
    if slices_and_claims {
        forward(Api::<ResourceSlice>::all(client.clone()), tx.clone(), |e| Change::Dra(Box::new(DraChange::Slice(e))));
        forward(Api::<ResourceClaim>::all(client.clone()), tx.clone(), |e| Change::Dra(Box::new(DraChange::Claim(e))));
    }
}

/// Forwards a kind's events without the objects' managed fields, which are never read and were a
/// large share of every object held.
fn forward<K>(api: Api<K>, tx: mpsc::Sender<Change>, wrap: fn(watcher::Event<K>) -> Change)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    forward_slim(api, tx, wrap, without_managed_fields);
}

/// Forwards a kind's events with each object cut down by `slim` to what the loop reads of it.
fn forward_slim<K>(api: Api<K>, tx: mpsc::Sender<Change>, wrap: fn(watcher::Event<K>) -> Change, slim: fn(&mut K))
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default())
            .modify(slim)
            .backoff(crate::controller::process::retry::WatchBackoff::default())
            .boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(e) => {
                    if tx.send(wrap(e)).await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    tracing::warn!(kind = K::kind(&()).as_ref(), error = %e, "watch failed; retrying with backoff")
                }
            }
        }
    });
}

/// The runtimes of both caches, indexed for rendering.
pub fn index_runtimes(namespaced: &Store<TrainingRuntime>, cluster: &Store<ClusterTrainingRuntime>) -> Arc<Runtimes> {
    let (n, c) = (namespaced.state(), cluster.state());
    Arc::new(Runtimes::index(n.iter().map(|r| r.as_ref()), c.iter().map(|r| r.as_ref())))
}

/// A cache of `K` whose every change wakes `changed`.
pub fn notifying_cache<K>(api: Api<K>, changed: Arc<Notify>) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = kube::runtime::reflector::store();
    let stream = kube::runtime::reflector(writer, watcher(api, watcher::Config::default()))
        .backoff(crate::controller::process::retry::WatchBackoff::default());
    tokio::spawn(stream.for_each(move |event| {
        let changed = changed.clone();
        async move {
            match event {
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
                Ok(_) => changed.notify_one(),
                Err(e) => tracing::warn!(error = %e, "watch failed; retrying with backoff"),
            }
        }
    }));
    reader
}
