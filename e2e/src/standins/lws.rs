//! A stand-in for the LeaderWorkerSet controller (v0.10) and its pod webhook: the leader
//! StatefulSet `<lws>` (applied by field manager `lws`, Parallel pod management, owned by the
//! LeaderWorkerSet), the shared headless Service, and per leader pod a worker StatefulSet named
//! after it (owned by the leader pod, `size - 1` replicas numbered from 1). kube-controller-
//! manager's StatefulSet controller makes the pods. No webhook can run here, so the labels
//! upstream's pod webhook sets at creation (`group-index`, `group-key` on leaders, `worker-index`
//! on workers) are patched onto the pods right after they appear; the `LWS_*` environment
//! variables it injects cannot be added to a created pod and are not modelled.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

use super::jobset::store;

const P: &str = "leaderworkerset.sigs.k8s.io/";

/// The LeaderWorkerSet kind.
pub fn resource() -> ApiResource {
    ApiResource {
        group: "leaderworkerset.x-k8s.io".into(),
        version: "v1".into(),
        api_version: "leaderworkerset.x-k8s.io/v1".into(),
        kind: "LeaderWorkerSet".into(),
        plural: "leaderworkersets".into(),
    }
}

/// Starts the stand-in.
pub fn start(client: Client) {
    let changed = Arc::new(Notify::new());
    let sets = store(Api::<DynamicObject>::all_with(client.clone(), &resource()), resource(), changed.clone());
    let pods_api: Api<Pod> = Api::all(client.clone());
    let pods = store_filtered(pods_api, &format!("{P}name"), changed.clone());
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = changed.notified() => tokio::time::sleep(Duration::from_millis(20)).await,
                _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            }
            for lws in sets.state() {
                if let Err(e) = reconcile(&client, &lws, &pods).await {
                    tracing::debug!(lws = %lws.name_any(), error = %e, "lws stand-in");
                }
            }
        }
    });
}

fn store_filtered(api: Api<Pod>, label: &str, changed: Arc<Notify>) -> Store<Pod> {
    use futures::StreamExt;
    use kube::runtime::WatchStreamExt;
    let writer = kube::runtime::reflector::store::Writer::new(());
    let reader = writer.as_reader();
    let config = watcher::Config::default().labels(label);
    let stream = kube::runtime::reflector(writer, watcher(api, config)).default_backoff();
    tokio::spawn(stream.for_each(move |_| {
        changed.notify_one();
        async {}
    }));
    reader
}

fn str_at(v: &Value, pointer: &str) -> String {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_default().to_string()
}

/// A short hash of the templates, standing for upstream's ControllerRevision key.
fn revision(lws: &Value) -> String {
    let text = lws.pointer("/spec/leaderWorkerTemplate").map(Value::to_string).unwrap_or_default();
    sha1_smol::Sha1::from(text).digest().to_string()[..10].to_string()
}

fn merged(base: Option<&Value>, extra: &[(&str, String)]) -> Value {
    let mut m: Map<String, Value> = base.and_then(Value::as_object).cloned().unwrap_or_default();
    for (k, v) in extra {
        m.insert(format!("{P}{k}"), Value::String(v.clone()));
    }
    Value::Object(m)
}

/// The leader StatefulSet upstream applies.
pub fn leader_set(lws: &Value) -> Value {
    let name = str_at(lws, "/metadata/name");
    let tpl = lws.pointer("/spec/leaderWorkerTemplate").cloned().unwrap_or_default();
    let size = tpl.get("size").and_then(Value::as_u64).unwrap_or(1);
    let mut pod = tpl.get("leaderTemplate").cloned().unwrap_or_else(|| tpl["workerTemplate"].clone());
    let rev = revision(lws);
    pod["metadata"]["labels"] = merged(
        pod.pointer("/metadata/labels"),
        &[("worker-index", "0".into()), ("name", name.clone()), ("template-revision-hash", rev.clone())],
    );
    pod["metadata"]["annotations"] = merged(pod.pointer("/metadata/annotations"), &[("size", size.to_string())]);
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {
            "name": name, "namespace": str_at(lws, "/metadata/namespace"),
            "labels": merged(lws.pointer("/metadata/labels"), &[("name", name.clone()), ("template-revision-hash", rev)]),
            "ownerReferences": [owner("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", lws)],
        },
        "spec": {
            "replicas": lws.pointer("/spec/replicas").and_then(Value::as_u64).unwrap_or(1),
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {format!("{P}name"): name, format!("{P}worker-index"): "0"}},
            "template": pod,
        },
    })
}

/// The worker StatefulSet upstream creates for one leader pod.
pub fn worker_set(lws: &Value, leader: &Value) -> Value {
    let name = str_at(lws, "/metadata/name");
    let tpl = lws.pointer("/spec/leaderWorkerTemplate").cloned().unwrap_or_default();
    let size = tpl.get("size").and_then(Value::as_u64).unwrap_or(1);
    let leader_name = str_at(leader, "/metadata/name");
    let label = |k: &str| str_at(leader, &format!("/metadata/labels/{}", format!("{P}{k}").replace('/', "~1")));
    let selector = json!({
        format!("{P}name"): name,
        format!("{P}group-index"): label("group-index"),
        format!("{P}group-key"): label("group-key"),
    });
    let mut pod = tpl["workerTemplate"].clone();
    let mut labels = pod.pointer("/metadata/labels").and_then(Value::as_object).cloned().unwrap_or_default();
    for (k, v) in selector.as_object().expect("object") {
        labels.insert(k.clone(), v.clone());
    }
    labels.insert(format!("{P}template-revision-hash"), Value::String(label("template-revision-hash")));
    pod["metadata"]["labels"] = Value::Object(labels);
    pod["metadata"]["annotations"] = merged(
        pod.pointer("/metadata/annotations"),
        &[("size", size.to_string()), ("leader-name", leader_name.clone())],
    );
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {
            "name": leader_name, "namespace": str_at(lws, "/metadata/namespace"),
            "labels": selector.clone(),
            "ownerReferences": [owner("v1", "Pod", leader)],
        },
        "spec": {
            "replicas": size.saturating_sub(1),
            "ordinals": {"start": 1},
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": selector},
            "template": pod,
        },
    })
}

fn owner(api_version: &str, kind: &str, of: &Value) -> Value {
    json!({
        "apiVersion": api_version, "kind": kind,
        "name": str_at(of, "/metadata/name"), "uid": str_at(of, "/metadata/uid"),
        "controller": true, "blockOwnerDeletion": true,
    })
}

/// The ordinal at the end of a StatefulSet pod's name.
fn ordinal(pod_name: &str) -> Option<u32> {
    pod_name.rsplit_once('-')?.1.parse().ok()
}

/// The labels the pod webhook would have set, or `None` when the pod has them.
pub fn webhook_labels(pod: &Value) -> Option<Value> {
    let name = str_at(pod, "/metadata/name");
    let labels = pod.pointer("/metadata/labels").and_then(Value::as_object).cloned().unwrap_or_default();
    let has = |k: &str| labels.contains_key(&format!("{P}{k}"));
    let ns = str_at(pod, "/metadata/namespace");
    if labels.get(&format!("{P}worker-index")).and_then(Value::as_str) == Some("0") {
        if has("group-index") && has("group-key") {
            return None;
        }
        let group = ordinal(&name)?;
        let key = sha1_smol::Sha1::from(format!("{ns}/{name}")).digest().to_string();
        return Some(json!({format!("{P}group-index"): group.to_string(), format!("{P}group-key"): key}));
    }
    if has("worker-index") {
        return None;
    }
    Some(json!({format!("{P}worker-index"): ordinal(&name)?.to_string()}))
}

async fn reconcile(client: &Client, lws_obj: &DynamicObject, pods: &Store<Pod>) -> Result<()> {
    if lws_obj.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let lws = serde_json::to_value(lws_obj)?;
    let (name, ns) = (str_at(&lws, "/metadata/name"), str_at(&lws, "/metadata/namespace"));
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    sts.patch(&name, &PatchParams::apply("lws").force(), &Patch::Apply(&leader_set(&lws))).await?;
    let svc: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), &ns);
    if svc.get_opt(&name).await?.is_none() {
        let body = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": ns, "labels": {format!("{P}name"): name},
                         "ownerReferences": [owner("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", &lws)]},
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": true, "selector": {format!("{P}name"): name}},
        });
        svc.create(&PostParams::default(), &serde_json::from_value(body)?).await.ok();
    }
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let size = lws.pointer("/spec/leaderWorkerTemplate/size").and_then(Value::as_u64).unwrap_or(1);
    let mine = pods
        .state()
        .into_iter()
        .filter(|p| p.namespace().as_deref() == Some(ns.as_str()))
        .filter(|p| p.labels().get(&format!("{P}name")) == Some(&name));
    for pod in mine {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let value = serde_json::to_value(pod.as_ref())?;
        if let Some(labels) = webhook_labels(&value) {
            let patch = json!({"metadata": {"labels": labels}});
            pods_api.patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
            continue;
        }
        let leader = pod.labels().get(&format!("{P}worker-index")).map(String::as_str) == Some("0");
        if leader && size > 1 && sts.get_opt(&pod.name_any()).await?.is_none() {
            // As JSON, so that no pod field newer than the typed API is dropped.
            let body: DynamicObject = serde_json::from_value(worker_set(&lws, &value))?;
            let gvk = kube::core::GroupVersionKind::gvk("apps", "v1", "StatefulSet");
            let dynamic: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &ns, &ApiResource::from_gvk_with_plural(&gvk, "statefulsets"));
            match dynamic.create(&PostParams::default(), &body).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    // Replicas as upstream reports them (the leader StatefulSet's).
    let leader_set = sts.get_opt(&name).await?;
    let replicas = leader_set.and_then(|s| s.status).map(|s| s.replicas).unwrap_or(0);
    if lws.pointer("/status/replicas").and_then(Value::as_i64) != Some(i64::from(replicas)) {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource());
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&json!({"status": {"replicas": replicas}})))
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lws() -> Value {
        json!({
            "metadata": {"name": "llm", "namespace": "team", "uid": "u-9"},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 4, "workerTemplate": {
                "metadata": {"labels": {"trainyard.io/gang": "team-llm"}},
                "spec": {"containers": [{"name": "node"}]},
            }}},
        })
    }

    #[test]
    fn the_leader_set_selects_worker_index_zero() {
        let s = leader_set(&lws());
        assert_eq!(s["spec"]["podManagementPolicy"], "Parallel");
        assert_eq!(s["spec"]["template"]["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"], "0");
        assert_eq!(s["spec"]["template"]["metadata"]["labels"]["trainyard.io/gang"], "team-llm");
        assert_eq!(s["spec"]["template"]["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/size"], "4");
        assert_eq!(s["metadata"]["ownerReferences"][0]["kind"], "LeaderWorkerSet");
    }

    #[test]
    fn workers_are_numbered_from_one_under_their_leader() {
        let leader = json!({"metadata": {"name": "llm-0", "namespace": "team", "uid": "p-1", "labels": {
            "leaderworkerset.sigs.k8s.io/group-index": "0", "leaderworkerset.sigs.k8s.io/group-key": "k",
            "leaderworkerset.sigs.k8s.io/template-revision-hash": "h"}}});
        let s = worker_set(&lws(), &leader);
        assert_eq!(s["metadata"]["name"], "llm-0");
        assert_eq!(s["spec"]["replicas"], 3);
        assert_eq!(s["spec"]["ordinals"]["start"], 1);
        assert_eq!(s["spec"]["selector"]["matchLabels"]["leaderworkerset.sigs.k8s.io/group-key"], "k");
        assert_eq!(s["metadata"]["ownerReferences"][0]["kind"], "Pod");
        assert_eq!(
            s["spec"]["template"]["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/leader-name"],
            "llm-0"
        );
    }

    #[test]
    fn the_webhooks_labels_come_from_the_pod_name() {
        let worker = json!({"metadata": {"name": "llm-0-3", "namespace": "team", "labels": {"leaderworkerset.sigs.k8s.io/name": "llm"}}});
        assert_eq!(webhook_labels(&worker), Some(json!({"leaderworkerset.sigs.k8s.io/worker-index": "3"})));
        let leader = json!({"metadata": {"name": "llm-0", "namespace": "team", "labels": {"leaderworkerset.sigs.k8s.io/worker-index": "0"}}});
        let labels = webhook_labels(&leader).unwrap();
        assert_eq!(labels["leaderworkerset.sigs.k8s.io/group-index"], "0");
        let done =
            json!({"metadata": {"name": "llm-0-1", "labels": {"leaderworkerset.sigs.k8s.io/worker-index": "1"}}});
        assert_eq!(webhook_labels(&done), None);
    }
}
