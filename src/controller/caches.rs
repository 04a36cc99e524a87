//! Watch-fed caches of the objects the controller reads, and fingerprints of what changes its inputs.

use std::fmt::Debug;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

/// A cache of `K` fed by a watch, and the task that keeps it current.
pub fn cache<K>(api: Api<K>, config: watcher::Config) -> (Store<K>, impl Future<Output = ()> + Send)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let stream =
        reflector(writer, watcher(api, config)).backoff(super::retry::WatchBackoff::default()).touched_objects();
    (
        reader,
        stream.for_each(|event| async move {
            if let Err(e) = event {
                tracing::warn!(error = %e, "watch failed; retrying with backoff");
            }
        }),
    )
}

/// A cache of objects of a kind known only at runtime.
pub fn dynamic_cache(
    client: Client,
    ar: ApiResource,
    config: watcher::Config,
) -> (Store<DynamicObject>, impl Future<Output = ()> + Send + 'static) {
    let api: Api<DynamicObject> = Api::all_with(client, &ar);
    let writer = reflector::store::Writer::new(ar);
    let reader = writer.as_reader();
    let stream =
        reflector(writer, watcher(api, config)).backoff(super::retry::WatchBackoff::default()).touched_objects();
    (
        reader,
        stream.for_each(|event| async move {
            if let Err(e) = event {
                tracing::warn!(error = %e, "watch failed; retrying with backoff");
            }
        }),
    )
}

/// Whether the server serves `ar` (a CRD that may not be installed).
pub async fn served(client: &Client, ar: &ApiResource) -> bool {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), ar);
    api.list(&ListParams::default().limit(1)).await.is_ok()
}

/// What changes the cluster tree: node names, labels, allocatable and schedulability.
pub fn nodes_fingerprint(nodes: &[Arc<Node>]) -> u64 {
    let mut h = DefaultHasher::new();
    let mut keyed: Vec<&Arc<Node>> = nodes.iter().collect();
    keyed.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for n in keyed {
        n.metadata.name.hash(&mut h);
        n.metadata.labels.hash(&mut h);
        if let Some(s) = &n.spec {
            s.unschedulable.hash(&mut h);
        }
        if let Some(st) = &n.status {
            st.allocatable
                .as_ref()
                .map(|a| a.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect::<Vec<_>>())
                .hash(&mut h);
            st.conditions
                .as_ref()
                .map(|c| c.iter().map(|c| (c.type_.clone(), c.status.clone())).collect::<Vec<_>>())
                .hash(&mut h);
        }
    }
    h.finish()
}

/// What changes the quota tree or the levels: names and specs (`generation`), not status. The loop
/// writes Queue status itself, which bumps `resourceVersion`; keying on that would rebuild the
/// engine after every cycle that changes a count.
pub fn objects_fingerprint<K: Resource>(objects: &[Arc<K>]) -> u64 {
    let mut h = DefaultHasher::new();
    let mut keyed: Vec<(String, i64)> = objects
        .iter()
        .map(|o| (o.meta().name.clone().unwrap_or_default(), o.meta().generation.unwrap_or_default()))
        .collect();
    keyed.sort();
    keyed.hash(&mut h);
    h.finish()
}
