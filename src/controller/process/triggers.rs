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
    changed_objects(cached, events).map(|object| Ok(std::sync::Arc::unwrap_or_clone(object)))
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
