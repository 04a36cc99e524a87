//! A LeaderWorkerSet runtime: the TrainJob is launched as a LeaderWorkerSet; the stand-in's
//! StatefulSets make the leader and worker pods, kube-controller-manager creates them gated, and
//! trainyard binds each (by worker index) to the node its admission record names, in one rack.

use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::json;

use crate::Options;
use crate::suite::{Checks, Suite, secs};
use crate::world::{RACK, World};

/// Runs the scenario.
pub async fn run(suite: &mut Suite, _: &Options) -> Result<Checks> {
    let mut c = Checks::default();
    let mut w = World::new(suite, "lws").await?;
    w.grid(1, 2, 4).await?;
    let queue = w.queue("team", 256, None).await?;
    w.torch_runtime_as("torch-lws", json!({"trainyard.io/workload": "LeaderWorkerSet"})).await?;
    w.start_trainyard(&[]).await?;
    let mut job = w.trainjob("group", &queue, 4, 8);
    job["spec"]["runtimeRef"]["name"] = json!("torch-lws");
    job["metadata"]["annotations"] = json!({"kueue.x-k8s.io/podset-required-topology": RACK});
    w.submit(&[job]).await?;
    let admitted = w.wait_admitted(&["group".into()], Duration::from_secs(30)).await?;
    let lws = w
        .kube()
        .get("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", Some(&w.ns), "group")
        .await?
        .context("no LeaderWorkerSet")?;
    c.that(
        lws.pointer("/spec/leaderWorkerTemplate/size") == Some(&json!(4)),
        format!("the group has 4 pods: {}", lws["spec"]["leaderWorkerTemplate"]["size"]),
    )?;
    let bound = w.wait_bound_as_recorded("group", 4, Duration::from_secs(90)).await?;
    c.done();
    let racks: std::collections::BTreeSet<String> = w
        .slots("group")
        .await?
        .iter()
        .map(|n| w.nodes.iter().find(|x| &x.name == n).and_then(|x| x.labels.get(RACK).cloned()).unwrap_or_default())
        .collect();
    c.that(racks.len() == 1, format!("the group is in one rack: {racks:?}"))?;
    c.figure(format!(
        "LeaderWorkerSet of 4 admitted in {}, leader and workers bound as recorded {} later",
        secs(admitted),
        secs(bound)
    ));
    w.teardown().await?;
    Ok(c)
}
