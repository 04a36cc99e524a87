//! The two halves of a kubelet the suite needs. Deletion: a pod being deleted is gone only once
//! its kubelet confirms it (here, at once, with grace period 0, whether or not it was bound).
//! Completion: the pods of a gang end with exit code 0 when a scenario says so, so that the Job
//! controller completes their Jobs.

use anyhow::Result;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

/// Starts confirming deletions for as long as the suite runs.
pub fn start(client: Client) {
    tokio::spawn(async move {
        let pods: Api<Pod> = Api::all(client.clone());
        let mut events = watcher(pods, watcher::Config::default()).default_backoff().applied_objects().boxed();
        while let Some(event) = events.next().await {
            let Ok(pod) = event else { continue };
            if pod.metadata.deletion_timestamp.is_none() {
                continue;
            }
            let (Some(ns), name) = (pod.namespace(), pod.name_any()) else { continue };
            let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
            tokio::spawn(async move {
                let _ =
                    api.delete(&name, &DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() }).await;
            });
        }
    });
}

/// Ends every pod of `namespace` matching `selector` with exit code 0 (phase Succeeded), as their
/// kubelet would report it. Returns how many it ended.
pub async fn succeed(client: &Client, namespace: &str, selector: &str) -> Result<usize> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pods = api.list(&ListParams::default().labels(selector)).await?;
    let at = Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let mut ended = 0;
    for pod in pods.items {
        if pod.metadata.deletion_timestamp.is_some() || pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none() {
            continue;
        }
        let containers: Vec<_> =
            pod.spec.as_ref().map(|s| s.containers.iter().map(|c| c.name.clone()).collect()).unwrap_or_default();
        let statuses: Vec<_> = containers
            .iter()
            .map(|name| {
                json!({
                    "name": name, "ready": false, "restartCount": 0, "image": "e2e", "imageID": "",
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": at, "finishedAt": at}},
                })
            })
            .collect();
        let patch = json!({"status": {
            "phase": "Succeeded",
            "startTime": at,
            "containerStatuses": statuses,
            "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": at}],
        }});
        api.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
        ended += 1;
    }
    Ok(ended)
}
