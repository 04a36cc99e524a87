//! What brings a TrainJob's reconcile: its own watch (errors kept to itself, a relist from the
//! whole list), and the TrainJob a changed gang pod or owned workload names.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::DynamicObject;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use tokio::sync::mpsc;
use trainyard_bridges::GANG_LABEL;

use crate::api::TrainJob;
use crate::controller::watching::caches::changed_objects;

/// A reflector's changed objects as the Controller's triggers (see
/// [`changed_objects`]: errors never reach its shared trigger stream, whose one backoff would
/// hold every trigger up).
pub(super) fn quiet_triggers<K>(
    cached: Store<K>,
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: kube::Resource + Clone + Send + Sync + 'static,
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    changed_objects(cached, events).map(|(object, _)| Ok(std::sync::Arc::unwrap_or_clone(object)))
}

/// What the planner reads of each pod or workload, remembered by object: a change it does not
/// read (a condition kube-scheduler adds, a managed field, a resourceVersion) brings no reconcile.
#[derive(Debug, Default)]
pub(super) struct SeenViews {
    by_object: std::sync::Mutex<std::collections::HashMap<String, u64>>,
}

impl SeenViews {
    /// Whether the view of object `key` changed: it is new, differs from the last one, or the
    /// object is gone (`None`).
    pub(super) fn changed(&self, key: String, view: Option<&impl std::fmt::Debug>) -> bool {
        let mut seen = self.by_object.lock().expect("lock");
        let Some(view) = view else {
            seen.remove(&key);
            return true;
        };
        let digest = trainyard_topology::rng::fnv1a(format!("{view:?}").as_bytes());
        seen.insert(key, digest) != Some(digest)
    }
}

/// The names of each gang's pods, by namespace and gang, kept from the pod watch: a reconcile
/// reads its gang's pods without walking every pod of the cluster.
#[derive(Debug, Default)]
pub(crate) struct PodsByGang {
    names: std::sync::Mutex<std::collections::HashMap<String, std::collections::BTreeSet<String>>>,
}

impl PodsByGang {
    /// Notes a pod the watch brought, or its deletion.
    pub(crate) fn note(&self, pod: &Pod, deleted: bool) {
        let (Some(job), Some(name)) = (gang_of(pod), pod.metadata.name.clone()) else { return };
        let key = format!("{}/{}", job.namespace.as_deref().unwrap_or_default(), job.name);
        let mut names = self.names.lock().expect("lock");
        if deleted {
            if let Some(set) = names.get_mut(&key) {
                set.remove(&name);
                if set.is_empty() {
                    names.remove(&key);
                }
            }
        } else {
            names.entry(key).or_default().insert(name);
        }
    }

    /// The pods of gang `name` in `namespace` (a name may be stale after a relist: the caller
    /// reads each from the cache).
    pub(crate) fn names(&self, namespace: &str, name: &str) -> Vec<String> {
        let names = self.names.lock().expect("lock");
        names.get(&format!("{namespace}/{name}")).map(|s| s.iter().cloned().collect()).unwrap_or_default()
    }
}

/// The key a namespaced object is remembered by.
pub(super) fn object_key(meta: &kube::api::ObjectMeta) -> String {
    format!("{}/{}", meta.namespace.as_deref().unwrap_or_default(), meta.name.as_deref().unwrap_or_default())
}

/// The TrainJob a gang pod belongs to, by its gang label.
pub(super) fn gang_of(pod: &Pod) -> Option<ObjectRef<TrainJob>> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    pod.metadata.labels.as_ref()?.get(GANG_LABEL).map(|gang| ObjectRef::new(gang).within(ns))
}

/// The TrainJob that owns a JobSet or LeaderWorkerSet, by its owner reference.
pub(super) fn owning_trainjob(workload: &DynamicObject) -> Option<ObjectRef<TrainJob>> {
    let ns = workload.metadata.namespace.as_deref().unwrap_or_default();
    let group = format!("{}/", TrainJob::group(&()));
    workload
        .metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.kind == TrainJob::kind(&()) && o.api_version.starts_with(&group))
        .map(|o| ObjectRef::new(&o.name).within(ns))
}

/// An mpsc receiver as a stream.
pub(super) fn tokio_stream_from<T: Send + 'static>(
    mut rx: mpsc::UnboundedReceiver<T>,
) -> impl futures::Stream<Item = T> + Send {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::acting::actor::api_resource;
    use std::time::Duration;

    /// A trigger watch's errors (the API server away, 410 Expired) never reach the controller's
    /// shared trigger stream, whose one backoff would hold every trigger up; its objects do, a
    /// relist's from the cache once the list is whole.
    #[tokio::test(start_paused = true)]
    async fn a_failing_trigger_watch_keeps_its_errors_to_itself() {
        let expired =
            || Err(watcher::Error::WatchError(Box::new(kube::core::Status { code: 410, ..Default::default() })));
        let job = |name: &str| {
            let mut j = TrainJob::new(name, Default::default());
            j.metadata.namespace = Some("n".into());
            j
        };
        let events = futures::stream::iter(vec![
            expired(),
            expired(),
            Ok(watcher::Event::Apply(job("a"))),
            expired(),
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(job("a"))),
            Ok(watcher::Event::InitApply(job("b"))),
            Ok(watcher::Event::InitDone),
            Ok(watcher::Event::Delete(job("a"))),
        ]);
        let (reader, writer) = kube::runtime::reflector::store::<TrainJob>();
        let started = tokio::time::Instant::now();
        let out: Vec<_> = quiet_triggers(reader.clone(), kube::runtime::reflector(writer, events)).collect().await;
        let mut names: Vec<String> = out.into_iter().map(|r| r.expect("no error").metadata.name.unwrap()).collect();
        names[1..3].sort();
        assert_eq!(names, ["a", "a", "b", "a"], "the change, the relisted cache, the deletion");
        // Three failures waited out (100 ms, 200 ms, then 100 ms again after the event reset it).
        assert_eq!(started.elapsed(), Duration::from_millis(400));
    }

    /// Only a change the planner reads brings a reconcile; a new object and a deleted one always do.
    #[test]
    fn only_views_that_changed_trigger() {
        let seen = SeenViews::default();
        assert!(seen.changed("n/p".into(), Some(&("gated", None::<&str>))), "new");
        assert!(!seen.changed("n/p".into(), Some(&("gated", None::<&str>))), "the same view again");
        assert!(seen.changed("n/p".into(), Some(&("bound", Some("host-a")))), "bound");
        assert!(seen.changed("n/p".into(), None::<&()>), "deleted");
        assert!(seen.changed("n/p".into(), Some(&("bound", Some("host-a")))), "made again");
    }

    /// A gang's pods are found by name, and a deleted one is forgotten.
    #[test]
    fn pods_are_indexed_by_gang() {
        let pod = |name: &str, gang: &str| {
            let mut p = Pod::default();
            p.metadata.name = Some(name.into());
            p.metadata.namespace = Some("team".into());
            p.metadata.labels = Some([(GANG_LABEL.to_string(), gang.to_string())].into());
            p
        };
        let index = PodsByGang::default();
        index.note(&pod("a-0", "a"), false);
        index.note(&pod("a-1", "a"), false);
        index.note(&pod("b-0", "b"), false);
        assert_eq!(index.names("team", "a"), ["a-0", "a-1"]);
        index.note(&pod("a-0", "a"), true);
        assert_eq!(index.names("team", "a"), ["a-1"]);
        assert!(index.names("other", "a").is_empty());
    }

    /// Gang pods and owned workloads name the TrainJob to reconcile; others name none.
    #[test]
    fn triggers_name_the_trainjob_of_a_pod_or_workload() {
        let mut pod = Pod::default();
        pod.metadata.namespace = Some("team".into());
        assert_eq!(gang_of(&pod), None, "a pod without the gang label");
        pod.metadata.labels = Some([(GANG_LABEL.to_string(), "llm".to_string())].into());
        assert_eq!(gang_of(&pod), Some(ObjectRef::new("llm").within("team")));

        let owner = |api_version: &str, kind: &str| k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: "llm".into(),
            uid: "u".into(),
            controller: Some(true),
            ..Default::default()
        };
        let mut jobset = DynamicObject::new("llm", &api_resource("jobset.x-k8s.io/v1alpha2", "JobSet").unwrap());
        jobset.metadata.namespace = Some("team".into());
        assert_eq!(owning_trainjob(&jobset), None, "no owner");
        jobset.metadata.owner_references = Some(vec![owner("apps/v1", "TrainJob"), owner("v1", "ConfigMap")]);
        assert_eq!(owning_trainjob(&jobset), None, "a TrainJob kind of another group");
        jobset.metadata.owner_references = Some(vec![owner("trainer.kubeflow.org/v1alpha1", "TrainJob")]);
        assert_eq!(owning_trainjob(&jobset), Some(ObjectRef::new("llm").within("team")));
    }
}
