//! What must hold after any storm (kills, restarts, expired watches): every TrainJob admitted or
//! waiting with a reason, one JobSet per admitted TrainJob and none for the others, no node over
//! its GPUs, no queue over its quota, every bound pod where its record says.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use serde_json::Value;

use crate::kube_util::{condition, is_true, name_of, wait_for};
use crate::world::{World, record_slots};

/// The TrainJobs of the world's namespace that are admitted, and those waiting with a reason.
pub struct Settled {
    /// Admitted: name and GPUs.
    pub admitted: BTreeMap<String, u64>,
    /// Waiting: name and reason.
    pub waiting: BTreeMap<String, String>,
    /// How long it took.
    pub took: Duration,
}

fn gpus_of(tj: &Value) -> u64 {
    let nodes = tj.pointer("/spec/trainer/numNodes").and_then(Value::as_u64).unwrap_or(1);
    let per = tj
        .pointer("/spec/trainer/resourcesPerNode/limits/nvidia.com~1gpu")
        .and_then(|q| q.as_str().and_then(|s| s.parse().ok()).or(q.as_u64()))
        .unwrap_or(0);
    nodes * per
}

/// Waits until each of `expected` TrainJobs is admitted or waits with a Queued reason.
pub async fn settle(w: &World<'_>, expected: usize, timeout: Duration) -> Result<Settled> {
    let started = Instant::now();
    wait_for(&format!("{expected} TrainJobs each admitted or waiting with a reason"), timeout, || async {
        let jobs = w.kube().list("trainer.kubeflow.org/v1alpha1", "TrainJob", Some(&w.ns), None).await?;
        settled_from(&jobs, expected, started).map(Some)
    })
    .await
}

/// The TrainJobs as settled when each of `expected` is admitted or waits with a Queued reason;
/// otherwise an error saying how far they are.
pub fn settled_from(jobs: &[Value], expected: usize, started: Instant) -> Result<Settled> {
    let mut admitted = BTreeMap::new();
    let mut waiting = BTreeMap::new();
    let mut unsettled = Vec::new();
    for tj in jobs {
        if tj.pointer("/metadata/deletionTimestamp").is_some() {
            continue;
        }
        let name = name_of(tj);
        if is_true(tj, "Admitted") && record_slots(tj).is_some() {
            admitted.insert(name, gpus_of(tj));
        } else if let Some((_, reason, _)) =
            condition(tj, "Queued").filter(|(_, r, _)| !r.is_empty() && r != "Admitted")
        {
            waiting.insert(name, reason);
        } else {
            unsettled.push(name);
        }
    }
    if admitted.len() + waiting.len() == expected && unsettled.is_empty() {
        return Ok(Settled { admitted, waiting, took: started.elapsed() });
    }
    unsettled.truncate(10);
    Err(anyhow!(
        "{} admitted, {} waiting, unsettled {:?} of {} seen",
        admitted.len(),
        waiting.len(),
        unsettled,
        jobs.len()
    ))
}

/// Checks the invariants; returns how many checks held. Every admitted gang's pods must be bound
/// where recorded within `bound_within` (one deadline for all: kube-scheduler binds thousands of
/// pods at its own pace).
pub async fn audit(w: &World<'_>, settled: &Settled, quota_gpus: u64, bound_within: Duration) -> Result<usize> {
    let deadline = Instant::now() + bound_within;
    let mut held = 0;
    let used: u64 = settled.admitted.values().sum();
    if used > quota_gpus {
        return Err(anyhow!("admitted gangs hold {used} GPUs, over the quota of {quota_gpus}"));
    }
    held += 1;
    let jobsets = w.kube().list("jobset.x-k8s.io/v1alpha2", "JobSet", Some(&w.ns), None).await?;
    for js in &jobsets {
        let name = name_of(js);
        if js.pointer("/metadata/deletionTimestamp").is_none() && !settled.admitted.contains_key(&name) {
            return Err(anyhow!("JobSet {name} exists but its TrainJob is not admitted"));
        }
    }
    held += 1;
    for name in settled.admitted.keys() {
        if !jobsets.iter().any(|j| &name_of(j) == name) {
            return Err(anyhow!("admitted TrainJob {name} has no JobSet"));
        }
    }
    held += 1;
    for (node, gpus) in w.gpus_per_node().await? {
        if gpus > 8 {
            return Err(anyhow!("node {node} holds {gpus} GPUs of 8"));
        }
    }
    held += 1;
    for name in settled.admitted.keys() {
        let pods = usize::try_from(
            w.trainjob_now(name).await?.pointer("/spec/trainer/numNodes").and_then(Value::as_u64).unwrap_or(1),
        )?;
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_secs(5));
        w.wait_bound_as_recorded(name, pods, left).await?;
        held += 1;
    }
    Ok(held)
}
