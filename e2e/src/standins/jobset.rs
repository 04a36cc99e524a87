//! A stand-in for the JobSet controller (v0.12), doing what upstream does for the JobSets the
//! suite sees: one batch/v1 Job `<jobset>-<replicatedJob>-<index>` per replica, carrying the
//! JobSet's labels and annotations on the Job and its pod template, a controller owner reference,
//! the headless Service when DNS hostnames are on, `spec.suspend` followed both ways (Jobs are
//! suspended in place, never deleted), and the status: `replicatedJobsStatus` and the
//! `Completed` / `Failed` / `Suspended` conditions with upstream's reasons. The Job controller of
//! kube-controller-manager makes the pods. Restarts (`failurePolicy.maxRestarts`) are not
//! modelled: the first failed Job fails the JobSet, as upstream does without a failure policy.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

/// The label and annotation prefix of JobSet's keys.
const P: &str = "jobset.sigs.k8s.io/";

/// The JobSet kind.
pub fn resource() -> ApiResource {
    ApiResource {
        group: "jobset.x-k8s.io".into(),
        version: "v1alpha2".into(),
        api_version: "jobset.x-k8s.io/v1alpha2".into(),
        kind: "JobSet".into(),
        plural: "jobsets".into(),
    }
}

/// Starts the stand-in; it runs for as long as the suite does.
pub fn start(client: Client) {
    let changed = Arc::new(Notify::new());
    let jobsets = store(Api::<DynamicObject>::all_with(client.clone(), &resource()), resource(), changed.clone());
    let jobs = store(Api::<Job>::all(client.clone()), (), changed.clone());
    tokio::spawn(async move {
        // What each JobSet and its Jobs looked like when last reconciled without error: a JobSet
        // whose versions did not move since is left alone (thousands of them in the scale
        // scenario, a round every few milliseconds).
        let mut done: HashMap<String, Vec<String>> = HashMap::new();
        loop {
            tokio::select! {
                _ = changed.notified() => tokio::time::sleep(Duration::from_millis(20)).await,
                _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            }
            let mut by_owner: HashMap<String, Vec<Arc<Job>>> = HashMap::new();
            for job in jobs.state() {
                if let Some(owner) = job.owner_references().iter().find(|o| o.controller == Some(true)) {
                    by_owner.entry(owner.uid.clone()).or_default().push(job.clone());
                }
            }
            let mut seen = HashMap::new();
            for js in jobsets.state() {
                let uid = js.uid().unwrap_or_default();
                let owned = by_owner.remove(&uid).unwrap_or_default();
                let mut versions: Vec<String> =
                    owned.iter().map(|j| j.resource_version().unwrap_or_default()).collect();
                versions.sort();
                versions.push(js.resource_version().unwrap_or_default());
                if done.get(&uid) == Some(&versions) {
                    seen.insert(uid, versions);
                    continue;
                }
                // A failure (the API server away, a conflict) is retried on the next round.
                match reconcile(&client, &js, &owned).await {
                    Ok(()) => {
                        seen.insert(uid, versions);
                    }
                    Err(e) => tracing::debug!(jobset = %js.name_any(), error = %e, "jobset stand-in"),
                }
            }
            done = seen;
        }
    });
}

/// A watch-fed cache whose every change wakes `changed`.
pub fn store<K>(api: Api<K>, dyntype: K::DynamicType, changed: Arc<Notify>) -> Store<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
{
    let writer = reflector::store::Writer::new(dyntype);
    let reader = writer.as_reader();
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
    tokio::spawn(stream.for_each(move |_| {
        changed.notify_one();
        async {}
    }));
    reader
}

fn labels_of(v: &Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

/// The keys JobSet puts on a Job and on its pod template, as labels and as annotations alike.
pub fn keys(js: &Value, rjob_index: usize, job_index: u32) -> BTreeMap<String, String> {
    let rjobs = js.pointer("/spec/replicatedJobs").and_then(Value::as_array).cloned().unwrap_or_default();
    let replicas = |r: &Value| r.get("replicas").and_then(Value::as_u64).unwrap_or(1) as u32;
    let group = |r: &Value| r.get("groupName").and_then(Value::as_str).unwrap_or("default").to_string();
    let rjob = &rjobs[rjob_index];
    let (js_name, ns) = (str_at(js, "/metadata/name"), str_at(js, "/metadata/namespace"));
    let job_name = format!("{js_name}-{}-{job_index}", str_at(rjob, "/name"));
    let global_before: u32 = rjobs[..rjob_index].iter().map(replicas).sum();
    let my_group = group(rjob);
    let in_group = rjobs.iter().filter(|r| group(r) == my_group);
    let group_replicas: u32 = in_group.clone().map(replicas).sum();
    let group_before: u32 = rjobs[..rjob_index].iter().filter(|r| group(r) == my_group).map(replicas).sum();
    let mut k = BTreeMap::new();
    let mut put = |key: &str, value: String| {
        k.insert(format!("{P}{key}"), value);
    };
    put("jobset-name", js_name.clone());
    put("jobset-uid", str_at(js, "/metadata/uid"));
    put("replicatedjob-name", str_at(rjob, "/name"));
    put("restart-attempt", js.pointer("/status/restarts").and_then(Value::as_u64).unwrap_or(0).to_string());
    put("replicatedjob-replicas", replicas(rjob).to_string());
    put("global-replicas", rjobs.iter().map(replicas).sum::<u32>().to_string());
    put("job-index", job_index.to_string());
    put("job-key", sha1_smol::Sha1::from(format!("{ns}/{job_name}")).digest().to_string());
    put("job-global-index", (global_before + job_index).to_string());
    put("group-name", my_group);
    put("group-replicas", group_replicas.to_string());
    put("job-group-index", (group_before + job_index).to_string());
    k
}

fn str_at(v: &Value, pointer: &str) -> String {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_default().to_string()
}

fn suspended(js: &Value) -> bool {
    js.pointer("/spec/suspend").and_then(Value::as_bool).unwrap_or(false)
}

fn dns_hostnames(js: &Value) -> bool {
    js.pointer("/spec/network/enableDNSHostnames").and_then(Value::as_bool).unwrap_or(false)
}

fn subdomain(js: &Value) -> String {
    match js.pointer("/spec/network/subdomain").and_then(Value::as_str) {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => str_at(js, "/metadata/name"),
    }
}

/// The Job upstream makes for replica `job_index` of replicated job `rjob_index`.
pub fn job_for(js: &Value, rjob_index: usize, job_index: u32) -> Value {
    let rjob = &js["spec"]["replicatedJobs"][rjob_index];
    let name = format!("{}-{}-{job_index}", str_at(js, "/metadata/name"), str_at(rjob, "/name"));
    let keys = keys(js, rjob_index, job_index);
    let add = |base: &Value| {
        let mut m = labels_of(base);
        for (k, v) in &keys {
            m.insert(k.clone(), Value::String(v.clone()));
        }
        Value::Object(m)
    };
    let template = &rjob["template"];
    let mut spec = template.get("spec").cloned().unwrap_or_else(|| json!({}));
    let pod_meta = spec.pointer("/template/metadata").cloned().unwrap_or_else(|| json!({}));
    spec["template"]["metadata"] = json!({
        "labels": add(pod_meta.get("labels").unwrap_or(&Value::Null)),
        "annotations": add(pod_meta.get("annotations").unwrap_or(&Value::Null)),
    });
    if dns_hostnames(js) {
        spec["template"]["spec"]["subdomain"] = Value::String(subdomain(js));
    }
    spec["suspend"] = Value::Bool(suspended(js));
    let meta = template.get("metadata").cloned().unwrap_or_else(|| json!({}));
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": str_at(js, "/metadata/namespace"),
            "labels": add(meta.get("labels").unwrap_or(&Value::Null)),
            "annotations": add(meta.get("annotations").unwrap_or(&Value::Null)),
            "ownerReferences": [owner(js)],
        },
        "spec": spec,
    })
}

fn owner(js: &Value) -> Value {
    json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "name": str_at(js, "/metadata/name"), "uid": str_at(js, "/metadata/uid"),
        "controller": true, "blockOwnerDeletion": true,
    })
}

/// Jobs as JSON objects.
fn jobs_dynamic(client: &Client, ns: &str) -> Api<DynamicObject> {
    let gvk = kube::core::GroupVersionKind::gvk("batch", "v1", "Job");
    Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk_with_plural(&gvk, "jobs"))
}

fn job_finished(job: &Job) -> Option<&'static str> {
    let conditions = job.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().filter(|c| c.status == "True").find_map(|c| match c.type_.as_str() {
        "Complete" => Some("Complete"),
        "Failed" => Some("Failed"),
        _ => None,
    })
}

async fn reconcile(client: &Client, js_obj: &DynamicObject, jobs: &[Arc<Job>]) -> Result<()> {
    if js_obj.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let js = serde_json::to_value(js_obj)?;
    let (name, ns) = (str_at(&js, "/metadata/name"), str_at(&js, "/metadata/namespace"));
    let owned: BTreeMap<String, Arc<Job>> = jobs
        .iter()
        .filter(|j| j.namespace().as_deref() == Some(ns.as_str()))
        .map(|j| (j.name_any(), j.clone()))
        .collect();
    let rjobs = js.pointer("/spec/replicatedJobs").and_then(Value::as_array).cloned().unwrap_or_default();
    let job_api: Api<Job> = Api::namespaced(client.clone(), &ns);
    let conditions: Vec<Value> =
        js.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    let terminal =
        conditions.iter().any(|c| (c["type"] == "Completed" || c["type"] == "Failed") && c["status"] == "True");

    let mut new_conditions = conditions.clone();
    let finished: Vec<(&String, &'static str)> =
        owned.iter().filter_map(|(n, j)| job_finished(j).map(|f| (n, f))).collect();
    let total: u64 = rjobs.iter().map(|r| r.get("replicas").and_then(Value::as_u64).unwrap_or(1)).sum();
    let failed = finished.iter().find(|(_, f)| *f == "Failed").map(|(n, _)| (*n).clone());
    let succeeded = finished.iter().filter(|(_, f)| *f == "Complete").count() as u64;
    if !terminal {
        if let Some(first) = failed {
            set_condition(
                &mut new_conditions,
                "Failed",
                "FailedJobs",
                &format!("jobset failed due to one or more job failures (first failed job: {first})"),
            );
        } else if total > 0 && succeeded >= total {
            set_condition(&mut new_conditions, "Completed", "AllJobsCompleted", "jobset completed successfully");
        }
    }
    let now_terminal =
        new_conditions.iter().any(|c| (c["type"] == "Completed" || c["type"] == "Failed") && c["status"] == "True");
    if now_terminal {
        for (job_name, job) in &owned {
            if job_finished(job).is_none() && job.metadata.deletion_timestamp.is_none() {
                job_api.delete(job_name, &DeleteParams::foreground()).await.ok();
            }
        }
    } else {
        if dns_hostnames(&js) {
            ensure_service(client, &js).await?;
        }
        for (ri, rjob) in rjobs.iter().enumerate() {
            let replicas = rjob.get("replicas").and_then(Value::as_u64).unwrap_or(1) as u32;
            for i in 0..replicas {
                let job_name = format!("{name}-{}-{i}", str_at(rjob, "/name"));
                match owned.get(&job_name) {
                    None => {
                        // As JSON: typed objects of an older API version would drop newer pod
                        // fields (a 1.36 `schedulingGroup`) without a word.
                        let job: DynamicObject = serde_json::from_value(job_for(&js, ri, i))?;
                        match jobs_dynamic(client, &ns).create(&PostParams::default(), &job).await {
                            Ok(_) => {}
                            // A Job of that name left by an earlier JobSet of the same name: the
                            // garbage collector removes it, and this JobSet is looked at again
                            // (not marked done) until its own Job is made.
                            Err(kube::Error::Api(e)) if e.code == 409 => {
                                anyhow::bail!("Job {job_name} exists and is not this JobSet's yet")
                            }
                            Err(e) => return Err(e.into()),
                        }
                    }
                    Some(job) => follow_suspend(&job_api, &js, ri, job).await?,
                }
            }
        }
        if suspended(&js) {
            set_condition(&mut new_conditions, "Suspended", "SuspendedJobs", "jobset is suspended");
        } else if new_conditions.iter().any(|c| c["type"] == "Suspended" && c["status"] == "True") {
            set_false(&mut new_conditions, "Suspended", "ResumeJobs", "jobset is resumed");
        }
    }

    let status = json!({
        "replicatedJobsStatus": replicated_jobs_status(&rjobs, &name, &owned),
        "conditions": new_conditions,
    });
    let current = json!({
        "replicatedJobsStatus": js.pointer("/status/replicatedJobsStatus").cloned().unwrap_or(json!([])),
        "conditions": conditions,
    });
    if status != current {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource());
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&json!({"status": status}))).await?;
    }
    Ok(())
}

/// Suspends an active Job in place, or resumes it (start time cleared, the pod template's
/// scheduling fields refreshed from the JobSet), as upstream does.
async fn follow_suspend(api: &Api<Job>, js: &Value, rjob_index: usize, job: &Job) -> Result<()> {
    if job_finished(job).is_some() || job.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let want = suspended(js);
    let have = job.spec.as_ref().and_then(|s| s.suspend).unwrap_or(false);
    if want == have {
        return Ok(());
    }
    let name = job.name_any();
    if want {
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&json!({"spec": {"suspend": true}}))).await?;
        return Ok(());
    }
    if job.status.as_ref().and_then(|s| s.start_time.as_ref()).is_some() {
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&json!({"status": {"startTime": null}})))
            .await?;
    }
    let fresh =
        job_for(js, rjob_index, job.labels().get(&format!("{P}job-index")).and_then(|i| i.parse().ok()).unwrap_or(0));
    let pod = &fresh["spec"]["template"];
    let patch = json!({"spec": {
        "suspend": false,
        "template": {
            "metadata": {"labels": pod["metadata"]["labels"], "annotations": pod["metadata"]["annotations"]},
            "spec": {
                "nodeSelector": pod["spec"].get("nodeSelector").cloned().unwrap_or(Value::Null),
                "tolerations": pod["spec"].get("tolerations").cloned().unwrap_or(Value::Null),
                "schedulingGates": pod["spec"].get("schedulingGates").cloned().unwrap_or(Value::Null),
            },
        },
    }});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

async fn ensure_service(client: &Client, js: &Value) -> Result<()> {
    let ns = str_at(js, "/metadata/namespace");
    let api: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), &ns);
    let name = subdomain(js);
    if api.get_opt(&name).await?.is_some() {
        return Ok(());
    }
    let publish = js.pointer("/spec/network/publishNotReadyAddresses").and_then(Value::as_bool).unwrap_or(true);
    let svc = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns, "ownerReferences": [owner(js)]},
        "spec": {
            "clusterIP": "None",
            "selector": {format!("{P}jobset-name"): str_at(js, "/metadata/name")},
            "publishNotReadyAddresses": publish,
        },
    });
    match api.create(&PostParams::default(), &serde_json::from_value(svc)?).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `status.replicatedJobsStatus` from the owned Jobs.
fn replicated_jobs_status(rjobs: &[Value], js_name: &str, owned: &BTreeMap<String, Arc<Job>>) -> Value {
    let mut out = Vec::new();
    for rjob in rjobs {
        let rname = str_at(rjob, "/name");
        let prefix = format!("{js_name}-{rname}-");
        let (mut ready, mut succeeded, mut failed, mut active, mut suspended) = (0, 0, 0, 0, 0);
        for (name, job) in owned {
            if name.strip_prefix(&prefix).is_none_or(|rest| rest.parse::<u32>().is_err()) {
                continue;
            }
            match job_finished(job) {
                Some("Complete") => succeeded += 1,
                Some(_) => failed += 1,
                None => {
                    let st = job.status.clone().unwrap_or_default();
                    let spec = job.spec.clone().unwrap_or_default();
                    let want = spec.parallelism.unwrap_or(1).min(spec.completions.unwrap_or(i32::MAX));
                    if st.succeeded.unwrap_or(0) + st.ready.unwrap_or(0) >= want {
                        ready += 1;
                    }
                    if st.active.unwrap_or(0) > 0 {
                        active += 1;
                    }
                    if spec.suspend == Some(true) {
                        suspended += 1;
                    }
                }
            }
        }
        out.push(json!({"name": rname, "ready": ready, "succeeded": succeeded, "failed": failed, "active": active, "suspended": suspended}));
    }
    Value::Array(out)
}

fn set_condition(conditions: &mut Vec<Value>, type_: &str, reason: &str, message: &str) {
    set(conditions, type_, "True", reason, message);
}

fn set_false(conditions: &mut Vec<Value>, type_: &str, reason: &str, message: &str) {
    set(conditions, type_, "False", reason, message);
}

fn set(conditions: &mut Vec<Value>, type_: &str, status: &str, reason: &str, message: &str) {
    if conditions.iter().any(|c| c["type"] == type_ && c["status"] == status && c["reason"] == reason) {
        return;
    }
    conditions.retain(|c| c["type"] != type_);
    conditions.push(json!({
        "type": type_, "status": status, "reason": reason, "message": message,
        "lastTransitionTime": Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobset() -> Value {
        json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "llm", "namespace": "team", "uid": "u-1"},
            "spec": {
                "network": {"enableDNSHostnames": true},
                "replicatedJobs": [
                    {"name": "launcher", "replicas": 1, "template": {"spec": {"parallelism": 1, "template": {"spec": {"containers": []}}}}},
                    {"name": "node", "replicas": 2, "template": {
                        "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                        "spec": {"parallelism": 4, "completions": 4, "completionMode": "Indexed",
                                 "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": []}}}}},
                ],
            },
        })
    }

    #[test]
    fn jobs_carry_upstreams_names_keys_and_owner() {
        let job = job_for(&jobset(), 1, 1);
        assert_eq!(job["metadata"]["name"], "llm-node-1");
        let labels = &job["metadata"]["labels"];
        assert_eq!(labels["jobset.sigs.k8s.io/replicatedjob-name"], "node");
        assert_eq!(labels["jobset.sigs.k8s.io/job-index"], "1");
        assert_eq!(labels["jobset.sigs.k8s.io/job-global-index"], "2", "the launcher's one job comes first");
        assert_eq!(labels["jobset.sigs.k8s.io/global-replicas"], "3");
        assert_eq!(labels["trainer.kubeflow.org/trainjob-ancestor-step"], "trainer", "the template's own labels stay");
        assert_eq!(job["metadata"]["annotations"]["jobset.sigs.k8s.io/job-index"], "1", "keys are annotations too");
        let pod = &job["spec"]["template"];
        assert_eq!(pod["metadata"]["labels"]["app"], "x");
        assert_eq!(pod["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"], "llm");
        assert_eq!(pod["spec"]["subdomain"], "llm");
        assert_eq!(job["spec"]["suspend"], false);
        assert_eq!(job["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(job["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(labels["jobset.sigs.k8s.io/job-key"].as_str().unwrap().len(), 40, "sha1 hex");
    }

    #[test]
    fn a_suspended_jobset_makes_suspended_jobs() {
        let mut js = jobset();
        js["spec"]["suspend"] = json!(true);
        assert_eq!(job_for(&js, 0, 0)["spec"]["suspend"], true);
    }

    #[test]
    fn a_condition_is_replaced_not_repeated() {
        let mut c = Vec::new();
        set_condition(&mut c, "Suspended", "SuspendedJobs", "m");
        set_condition(&mut c, "Suspended", "SuspendedJobs", "m");
        set_false(&mut c, "Suspended", "ResumeJobs", "r");
        assert_eq!(c.len(), 1);
        assert_eq!(c[0]["status"], "False");
    }
}
