//! A manager TrainJob's copy on a worker cluster: the object written there, what the manager
//! reads back of it, and whether a copy found on a worker is still wanted. Pure.
//!
//! The copy carries the manager's admission record in the worker's own node names, so the
//! worker's trainyard (standalone mode) takes it as an admission it made itself: it holds the
//! recorded hosts and launches the gang exactly as it would after a restart of its own.

use serde_json::{Value, json};

use crate::api::worker_cluster::{ADMITTED_AT_ANNOTATION, CLUSTER_ANNOTATION, CLUSTER_LEVEL_LABEL, ORIGIN_LABEL};
use crate::api::{ADMISSION_ANNOTATION, ARRIVAL_ANNOTATION, TrainJob};
use crate::controller::acting::admission_record::{AdmissionRecord, SlotDevices};
use crate::controller::deciding::conditions::{COMPLETE, FAILED};
use crate::controller::deciding::plan::{WorkloadView, recorded};
use crate::controller::fleet::devices::local_pool;
use crate::controller::fleet::merge::{fleet_name, split_fleet_name};

/// The worker a fleet record places the gang in, and the record in the worker's own node and
/// device pool names; `None` for a record whose nodes and pools are not all of one worker (never
/// written by a manager).
pub fn local_record(record: &AdmissionRecord) -> Option<(String, AdmissionRecord)> {
    let mut cluster: Option<&str> = None;
    let mut nodes = Vec::with_capacity(record.nodes.len());
    for (name, pods) in &record.nodes {
        let (c, local) = split_fleet_name(name)?;
        if cluster.is_some_and(|known| known != c) {
            return None;
        }
        cluster = Some(c);
        nodes.push((local.to_string(), *pods));
    }
    let cluster = cluster?.to_string();
    let domain = record
        .domain
        .as_ref()
        .map(|d| d.iter().filter(|(key, _)| key != CLUSTER_LEVEL_LABEL).cloned().collect::<Vec<_>>());
    let devices = renamed_pools(&record.devices, |pool| local_pool(&cluster, pool).map(str::to_string))?;
    Some((cluster, AdmissionRecord { nodes, domain, devices, ..record.clone() }))
}

/// Devices of a record with each pool renamed by `rename`; `None` if a pool has no new name.
fn renamed_pools(devices: &[SlotDevices], rename: impl Fn(&str) -> Option<String>) -> Option<Vec<SlotDevices>> {
    devices
        .iter()
        .map(|slot| {
            let claims = slot
                .claims
                .iter()
                .map(|(template, results)| {
                    let results = results
                        .iter()
                        .map(|[request, driver, pool, device]| {
                            Some([request.clone(), driver.clone(), rename(pool)?, device.clone()])
                        })
                        .collect::<Option<Vec<_>>>()?;
                    Some((template.clone(), results))
                })
                .collect::<Option<Vec<_>>>()?;
            Some(SlotDevices { slot: slot.slot, claims })
        })
        .collect()
}

/// A worker's record in the fleet's names (what the manager records when the worker moved pods).
pub fn fleet_record(cluster: &str, local: &AdmissionRecord) -> AdmissionRecord {
    let nodes = local.nodes.iter().map(|(n, pods)| (fleet_name(cluster, n), *pods)).collect();
    let domain = local.domain.as_ref().map(|d| {
        let mut with = vec![(CLUSTER_LEVEL_LABEL.to_string(), cluster.to_string())];
        with.extend(d.iter().cloned());
        with
    });
    let devices = renamed_pools(&local.devices, |pool| Some(fleet_name(cluster, pool))).unwrap_or_default();
    AdmissionRecord { nodes, domain, devices, ..local.clone() }
}

/// The worker cluster a manager TrainJob's record places it in.
pub fn placed_in(job: &TrainJob) -> Option<String> {
    recorded(job).and_then(|r| local_record(&r)).map(|(c, _)| c)
}

/// The copy written to the worker: the manager's TrainJob without its `managedBy` (so the
/// worker's trainyard launches it), labelled with the uid it copies, carrying the record.
pub fn copy_body(job: &TrainJob, cluster: &str, local: &AdmissionRecord) -> Value {
    let mut labels = job.metadata.labels.clone().unwrap_or_default();
    labels.insert(ORIGIN_LABEL.to_string(), job.metadata.uid.clone().unwrap_or_default());
    let mut annotations = job.metadata.annotations.clone().unwrap_or_default();
    annotations.remove(ARRIVAL_ANNOTATION);
    annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    annotations.insert(ADMISSION_ANNOTATION.to_string(), local.encode());
    annotations.insert(CLUSTER_ANNOTATION.to_string(), cluster.to_string());
    annotations.insert(ADMITTED_AT_ANNOTATION.to_string(), local.at.to_string());
    let mut spec = serde_json::to_value(&job.spec).unwrap_or(Value::Null);
    if let Some(map) = spec.as_object_mut() {
        map.remove("managedBy");
        map.insert("suspend".into(), Value::Bool(false));
    }
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": job.metadata.name,
            "namespace": job.metadata.namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    })
}

/// The admission time of the manager's record a copy was written for.
pub fn admitted_at(copy: &TrainJob) -> Option<u64> {
    copy.metadata.annotations.as_ref()?.get(ADMITTED_AT_ANNOTATION)?.parse().ok()
}

/// The manager TrainJob uid a worker's TrainJob copies, if it is a copy.
pub fn origin_of(copy: &TrainJob) -> Option<&str> {
    copy.metadata.labels.as_ref()?.get(ORIGIN_LABEL).map(String::as_str).filter(|o| !o.is_empty())
}

/// What the manager reads of its copy: the worker's verdict, and the copy's record.
#[derive(Clone, Debug, PartialEq)]
pub struct CopyView {
    /// The worker it is on.
    pub cluster: String,
    /// The manager TrainJob uid it copies.
    pub origin: String,
    /// Its record, in the fleet's names (`None`: the worker requeued it, or has not taken it).
    pub record: Option<AdmissionRecord>,
    /// The admission time of the manager's record it was written for.
    pub admitted_at: Option<u64>,
    /// Being deleted.
    pub deleting: bool,
    /// Its end and per-job counts, as the planner reads a workload's.
    pub workload: WorkloadView,
}

/// Reads a worker's TrainJob as a copy; `None` when it copies nothing.
pub fn copy_view(cluster: &str, copy: &TrainJob) -> Option<CopyView> {
    let origin = origin_of(copy)?.to_string();
    let condition = |type_: &str| {
        copy.condition(type_).filter(|c| c.status == "True").map(|c| (c.reason.clone(), c.message.clone()))
    };
    let workload = WorkloadView {
        suspended: copy.spec.0.suspend == Some(true),
        completed: condition(COMPLETE),
        failed: condition(FAILED),
        jobs_status: copy.status.as_ref().map(|s| s.jobs_status.clone()).unwrap_or_default(),
    };
    Some(CopyView {
        cluster: cluster.to_string(),
        origin,
        record: recorded(copy).map(|r| fleet_record(cluster, &r)),
        admitted_at: admitted_at(copy),
        deleting: copy.metadata.deletion_timestamp.is_some(),
        workload,
    })
}

/// The copy's end and per-job counts, when it is `job`'s own (a copy of an earlier TrainJob of
/// the name is not).
pub fn own_workload(copy: Option<&CopyView>, job: &TrainJob) -> Option<WorkloadView> {
    copy.filter(|c| Some(&c.origin) == job.metadata.uid.as_ref()).map(|c| c.workload.clone())
}

/// Whether a copy of `origin` found on `cluster` is still wanted: the manager's TrainJob of that
/// name exists with that uid, is not being deleted, and its record places it on that cluster.
/// Every other copy (its TrainJob deleted or replaced, requeued, suspended, moved to another
/// worker while this one was away) is removed.
pub fn wanted(origin: &str, cluster: &str, manager: Option<&TrainJob>) -> bool {
    manager.is_some_and(|job| {
        job.metadata.uid.as_deref() == Some(origin)
            && job.metadata.deletion_timestamp.is_none()
            && placed_in(job).as_deref() == Some(cluster)
    })
}

/// Whether a copy seen on a worker's watch is surely stale, judged on the manager's TrainJob as
/// its cache shows it, which may lag the manager's own writes: its TrainJob is gone, replaced or
/// being deleted, or its record is of a later placement than the copy's. A copy newer than the
/// record the cache shows, or of a TrainJob queued again, is left to the TrainJob's own reconcile.
pub fn surely_stale(copy: &TrainJob, cluster: &str, manager: Option<&TrainJob>) -> bool {
    let Some(job) = manager else { return true };
    if job.metadata.uid.as_deref() != origin_of(copy) || job.metadata.deletion_timestamp.is_some() {
        return true;
    }
    let (Some(record), Some(copied_at)) = (recorded(job), admitted_at(copy)) else { return false };
    record.at > copied_at || (record.at == copied_at && placed_in(job).as_deref() != Some(cluster))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(nodes: &[(&str, u32)]) -> AdmissionRecord {
        AdmissionRecord {
            nodes: nodes.iter().map(|(n, c)| (n.to_string(), *c)).collect(),
            domain: None,
            at: 5,
            cost: 2,
            slurm: false,
            devices: Vec::new(),
        }
    }

    fn job(uid: &str, record: Option<&AdmissionRecord>) -> TrainJob {
        let mut annotations = serde_json::Map::new();
        if let Some(r) = record {
            annotations.insert(ADMISSION_ANNOTATION.into(), r.encode().into());
        }
        annotations.insert(ARRIVAL_ANNOTATION.into(), "7".into());
        serde_json::from_value(json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "t", "namespace": "ns", "uid": uid, "labels": {"trainyard.io/queue": "q"},
                         "annotations": annotations, "finalizers": ["trainyard.io/finalizer"]},
            "spec": {"runtimeRef": {"name": "torch"}, "managedBy": "kueue.x-k8s.io/multikueue"}
        }))
        .unwrap()
    }

    #[test]
    fn records_go_to_one_worker_in_its_own_names_and_back() {
        let mut fleet = record(&[("east/n1", 2), ("east/n2", 1)]);
        fleet.domain = Some(vec![(CLUSTER_LEVEL_LABEL.into(), "east".into()), ("rack".into(), "r1".into())]);
        let (cluster, local) = local_record(&fleet).unwrap();
        assert_eq!(cluster, "east");
        assert_eq!(local.nodes, vec![("n1".to_string(), 2), ("n2".to_string(), 1)]);
        assert_eq!(local.domain, Some(vec![("rack".to_string(), "r1".to_string())]));
        assert_eq!(fleet_record("east", &local), fleet);
        assert_eq!(local_record(&record(&[("east/n1", 1), ("west/n1", 1)])), None, "never two workers");
        assert_eq!(local_record(&record(&[("n1", 1)])), None, "a standalone record is no fleet record");
    }

    #[test]
    fn recorded_devices_go_to_the_worker_in_its_pool_names_and_back() {
        let result =
            |pool: &str, device: &str| ["gpus".to_string(), "gpu.example.com".into(), pool.into(), device.into()];
        let mut fleet = record(&[("east/n1", 2)]);
        fleet.devices = vec![
            SlotDevices {
                slot: 0,
                claims: vec![("ns/pair".into(), vec![result("east/n1", "gpu-0"), result("east/n1", "gpu-1")])],
            },
            SlotDevices { slot: 1, claims: vec![("ns/pair".into(), vec![result("east/fabric/a", "nic-0")])] },
        ];
        let (_, local) = local_record(&fleet).unwrap();
        assert_eq!(local.devices[0].claims[0].1, vec![result("n1", "gpu-0"), result("n1", "gpu-1")]);
        assert_eq!(local.devices[1].claims[0].1, vec![result("fabric/a", "nic-0")]);
        assert_eq!(fleet_record("east", &local), fleet);
        fleet.devices[1].claims[0].1[0] = result("west/n1", "nic-0");
        assert_eq!(local_record(&fleet), None, "a device of another worker is no record of one worker");
    }

    #[test]
    fn the_copy_launches_on_the_worker_and_names_what_it_copies() {
        let fleet = record(&[("east/n1", 2)]);
        let manager = job("u1", Some(&fleet));
        let (cluster, local) = local_record(&fleet).unwrap();
        let body = copy_body(&manager, &cluster, &local);
        assert_eq!(body["spec"].get("managedBy"), None, "the worker's trainyard launches it");
        assert_eq!(body["spec"]["suspend"], false);
        assert_eq!(body["metadata"]["labels"][ORIGIN_LABEL], "u1");
        assert_eq!(body["metadata"]["labels"]["trainyard.io/queue"], "q");
        assert_eq!(body["metadata"]["annotations"].get(ARRIVAL_ANNOTATION), None);
        assert_eq!(body["metadata"].get("finalizers"), None);
        let copy: TrainJob = serde_json::from_value(body).unwrap();
        assert_eq!(recorded(&copy), Some(local));
        let view = copy_view("east", &copy).unwrap();
        assert_eq!((view.origin.as_str(), view.record.as_ref()), ("u1", Some(&fleet)));
        assert_eq!(view.admitted_at, Some(5), "a copy says which placement it was written for");
        assert_eq!(copy_view("east", &job("u9", None)).map(|v| v.origin), None, "not a copy");
    }

    #[test]
    fn a_copy_is_surely_stale_only_when_the_cache_cannot_be_behind() {
        let fleet = record(&[("east/n1", 1)]);
        let (_, local) = local_record(&fleet).unwrap();
        let manager = job("u1", Some(&fleet));
        let copy: TrainJob = serde_json::from_value(copy_body(&manager, "east", &local)).unwrap();
        assert!(!surely_stale(&copy, "east", Some(&manager)), "the current copy");
        assert!(surely_stale(&copy, "east", None), "its TrainJob is gone");
        assert!(surely_stale(&copy, "east", Some(&job("u2", Some(&fleet)))), "a TrainJob of the name made anew");
        let later = AdmissionRecord { at: 9, ..record(&[("west/n1", 1)]) };
        assert!(surely_stale(&copy, "east", Some(&job("u1", Some(&later)))), "placed again since");
        let earlier = AdmissionRecord { at: 1, ..record(&[("west/n1", 1)]) };
        assert!(!surely_stale(&copy, "east", Some(&job("u1", Some(&earlier)))), "the cache is behind the copy");
        assert!(!surely_stale(&copy, "east", Some(&job("u1", None))), "queued again: its reconcile withdraws it");
    }

    #[test]
    fn only_the_copy_the_record_places_is_wanted() {
        let manager = job("u1", Some(&record(&[("east/n1", 1)])));
        assert!(wanted("u1", "east", Some(&manager)));
        assert!(!wanted("u1", "west", Some(&manager)), "moved to east");
        assert!(!wanted("u0", "east", Some(&manager)), "a TrainJob of the same name made anew");
        assert!(!wanted("u1", "east", None), "deleted");
        assert!(!wanted("u1", "east", Some(&job("u1", None))), "requeued or suspended");
        let mut deleting = manager.clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert!(!wanted("u1", "east", Some(&deleting)));
    }
}
