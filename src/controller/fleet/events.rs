//! A worker's Warning events about a copy, mirrored onto the manager's TrainJob: what a
//! researcher reads on the manager (`kubectl describe`, `kubectl events`) says what went wrong on
//! the worker, and which worker. Normal events are not mirrored: what they say (admitted,
//! running, complete) already reaches the manager as the copy's status.
//!
//! Only events that happen while the manager watches are mirrored; the worker's older events (a
//! first list, a relist) are not sent again, so a manager restart repeats nothing.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event as CoreEvent, ObjectReference};
use kube::api::Api;
use kube::runtime::events::{Event, EventType};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};

use super::copies::origin_of;
use super::workers::Fleet;
use crate::api::TrainJob;
use crate::controller::process::retry::WatchBackoff;

/// The event to publish on the manager's TrainJob `origin` for a worker's event about `copy`;
/// `None` unless the event is a Warning about that very copy and `copy` copies `origin`.
pub fn mirrored(
    cluster: &str,
    event: &CoreEvent,
    copy: &TrainJob,
    origin: &TrainJob,
) -> Option<(ObjectReference, Event)> {
    if event.type_.as_deref() != Some("Warning") || event.involved_object.uid.is_none() {
        return None;
    }
    if event.involved_object.uid != copy.metadata.uid || origin_of(copy) != origin.metadata.uid.as_deref() {
        return None;
    }
    let message = event.message.as_deref().unwrap_or_default();
    let mirrored = Event {
        type_: EventType::Warning,
        reason: event.reason.clone().unwrap_or_else(|| "WorkerWarning".into()),
        note: Some(format!("worker cluster {cluster}: {message}")),
        action: event.action.clone().unwrap_or_else(|| "Run".into()),
        secondary: None,
    };
    Some((origin.object_ref(&()), mirrored))
}

/// Follows a worker's Warning events about TrainJobs and mirrors those about copies.
pub(super) async fn follow(fleet: Arc<Fleet>, cluster: String, client: Client) {
    let config = watcher::Config::default().fields("involvedObject.kind=TrainJob,type=Warning");
    let events = watcher(Api::<CoreEvent>::all(client), config).backoff(WatchBackoff::default());
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        // Listed events happened before this watch (or while it was away): never sent again.
        let Ok(watcher::Event::Apply(event)) = event else { continue };
        let (name, ns) = (&event.involved_object.name, &event.involved_object.namespace);
        let (Some(name), Some(ns)) = (name, ns) else { continue };
        let Some(copy) = fleet.copy(&cluster, ns, name) else { continue };
        let Some(Some(origin)) = fleet.manager_job(&copy) else { continue };
        if let Some((reference, mirrored)) = mirrored(&cluster, &event, &copy, &origin) {
            fleet.publish(&reference, &mirrored).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::worker_cluster::ORIGIN_LABEL;
    use serde_json::json;

    fn job(uid: &str, origin: Option<&str>) -> TrainJob {
        let labels = origin.map(|o| json!({ORIGIN_LABEL: o})).unwrap_or(json!({}));
        serde_json::from_value(json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "t", "namespace": "ns", "uid": uid, "labels": labels},
            "spec": {"runtimeRef": {"name": "torch"}}
        }))
        .unwrap()
    }

    fn event(type_: &str, uid: &str) -> CoreEvent {
        serde_json::from_value(json!({
            "metadata": {"name": "e", "namespace": "ns"},
            "involvedObject": {"kind": "TrainJob", "name": "t", "namespace": "ns", "uid": uid},
            "type": type_, "reason": "LaunchFailed", "message": "JobSet refused: quota"
        }))
        .unwrap()
    }

    #[test]
    fn a_warning_about_a_copy_is_told_on_its_managers_trainjob_naming_the_worker() {
        let (copy, origin) = (job("copy-uid", Some("m-uid")), job("m-uid", None));
        let (reference, e) = mirrored("east", &event("Warning", "copy-uid"), &copy, &origin).unwrap();
        assert_eq!(reference.uid.as_deref(), Some("m-uid"));
        assert_eq!((reference.name.as_deref(), reference.namespace.as_deref()), (Some("t"), Some("ns")));
        assert_eq!(e.reason, "LaunchFailed");
        assert_eq!(e.note.as_deref(), Some("worker cluster east: JobSet refused: quota"));
        assert_eq!(e.type_, EventType::Warning);
    }

    #[test]
    fn normal_events_and_events_of_other_objects_are_not_mirrored() {
        let (copy, origin) = (job("copy-uid", Some("m-uid")), job("m-uid", None));
        assert!(mirrored("east", &event("Normal", "copy-uid"), &copy, &origin).is_none(), "status says it");
        assert!(mirrored("east", &event("Warning", "older-copy"), &copy, &origin).is_none(), "an earlier copy's");
        let replaced = job("m-uid-2", None);
        assert!(mirrored("east", &event("Warning", "copy-uid"), &copy, &replaced).is_none(), "another TrainJob's copy");
        assert!(mirrored("east", &event("Warning", "copy-uid"), &job("copy-uid", None), &origin).is_none(), "no copy");
    }
}
