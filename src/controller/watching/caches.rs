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

/// A cache of `K` fed by a watch, and the task that keeps it current. `touched` sees each
/// object the watch brought (and whether it was deleted), after the cache holds it: a reconcile triggered from there reads a
/// cache at least as new as its trigger (a second watch for triggers could run ahead of it, and
/// a reconcile would plan on the state before the change and wait for the next resync).
/// `slim` cuts each object down to what its readers read (at least the managed fields go).
pub fn cache<K>(
    api: Api<K>,
    config: watcher::Config,
    slim: fn(&mut K),
    touched: impl Fn(&K, bool) + Send + Sync + 'static,
) -> (Store<K>, impl Future<Output = ()> + Send)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let events = watcher(api, config).modify(slim);
    (reader.clone(), keep_current(reader, reflector(writer, events), touched))
}

/// A cache of objects of a kind known only at runtime; `touched` as for [`cache`].
pub fn dynamic_cache(
    client: Client,
    ar: ApiResource,
    config: watcher::Config,
    touched: impl Fn(&DynamicObject, bool) + Send + Sync + 'static,
) -> (Store<DynamicObject>, impl Future<Output = ()> + Send + 'static) {
    let api: Api<DynamicObject> = Api::all_with(client, &ar);
    let writer = reflector::store::Writer::new(ar);
    let reader = writer.as_reader();
    let events = watcher(api, config).modify(slim_workload);
    (reader.clone(), keep_current(reader, reflector(writer, events), touched))
}

/// What a cached JobSet or LeaderWorkerSet keeps: its metadata without managed fields, its
/// status, and of its spec only what the planner reads (`suspend`, `replicas`). Thousands of
/// pod templates held for nothing were a large part of the controller's memory at scale.
fn slim_workload(o: &mut DynamicObject) {
    o.metadata.managed_fields = None;
    if let Some(spec) = o.data.get_mut("spec").and_then(serde_json::Value::as_object_mut) {
        spec.retain(|k, _| k == "suspend" || k == "replicas");
    }
}

/// The least every cached object loses: its managed fields, never read.
pub fn without_managed_fields<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// Drives a reflector's stream with the watch backoff, handing each changed object on once the
/// cache holds it.
fn keep_current<K>(
    cached: Store<K>,
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    touched: impl Fn(&K, bool) + Send + Sync + 'static,
) -> impl Future<Output = ()> + Send + 'static
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    changed_objects(cached, events).for_each(move |(object, deleted)| {
        touched(&object, deleted);
        futures::future::ready(())
    })
}

/// A reflector's changed objects (and whether each was deleted), each once the cache holds it, reconnected on the watch
/// backoff (at most a second or two apart while the API server is away) with its errors
/// logged and left out. A relist's objects are held back by the reflector until the list is
/// whole, so they come from the cache then, not as they arrive: a reconcile they trigger reads
/// a cache at least as new, and kube's Controller drops a trigger for an object its cache lacks.
pub(crate) fn changed_objects<K>(
    cached: Store<K>,
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
) -> impl futures::Stream<Item = (Arc<K>, bool)> + Send + 'static
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    events.backoff(crate::controller::process::retry::WatchBackoff::default()).flat_map(move |event| {
        let objects = match event {
            Ok(watcher::Event::Apply(object)) => vec![(Arc::new(object), false)],
            Ok(watcher::Event::Delete(object)) => vec![(Arc::new(object), true)],
            Ok(watcher::Event::InitDone) => cached.state().into_iter().map(|o| (o, false)).collect(),
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => Vec::new(),
            Err(e) => {
                tracing::warn!(error = %e, "watch failed; retrying with backoff");
                Vec::new()
            }
        };
        futures::stream::iter(objects)
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use std::sync::Mutex;

    /// Whatever `touched` is told of, the cache already holds in that state: a reconcile it
    /// triggers cannot plan on the state before the change.
    #[test]
    fn a_cached_workload_keeps_what_the_planner_reads() {
        let ar = ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"),
            "jobsets",
        );
        let mut js = DynamicObject::new("a", &ar).data(serde_json::json!({
            "spec": {"suspend": true, "replicatedJobs": [{"name": "node", "template": {}}]},
            "status": {"replicatedJobsStatus": [{"name": "node", "active": 1}]},
        }));
        js.metadata.managed_fields = Some(vec![Default::default()]);
        slim_workload(&mut js);
        assert_eq!(js.metadata.managed_fields, None);
        assert_eq!(js.data["spec"], serde_json::json!({"suspend": true}));
        assert_eq!(js.data["status"]["replicatedJobsStatus"][0]["active"], 1);
    }

    #[tokio::test]
    async fn the_cache_holds_an_object_before_it_is_handed_on() {
        let (reader, writer) = reflector::store::<Pod>();
        let pod = |version: &str| {
            let mut p = Pod::default();
            p.metadata.name = Some("p".into());
            p.metadata.namespace = Some("n".into());
            p.metadata.resource_version = Some(version.into());
            p
        };
        let events = futures::stream::iter(vec![
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(pod("1"))),
            Ok(watcher::Event::InitDone),
            Ok(watcher::Event::Apply(pod("2"))),
            Ok(watcher::Event::Apply(pod("3"))),
        ]);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let task = keep_current(reader.clone(), reflector(writer, events), {
            let (reader, seen) = (reader.clone(), seen.clone());
            move |p: &Pod, _deleted: bool| {
                let cached =
                    reader.get(&reflector::ObjectRef::from_obj(p)).and_then(|c| c.metadata.resource_version.clone());
                seen.lock().unwrap().push((p.metadata.resource_version.clone().unwrap(), cached));
            }
        });
        task.await;
        let seen = seen.lock().unwrap().clone();
        let want: Vec<(String, Option<String>)> =
            ["1", "2", "3"].iter().map(|v| (v.to_string(), Some(v.to_string()))).collect();
        assert_eq!(seen, want);
    }
}
