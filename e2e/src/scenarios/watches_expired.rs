//! Every watch expired at once: the controller is frozen (SIGSTOP) while the cluster changes
//! under it (a TrainJob created, a node deleted and another added, a foreign pod on a free node,
//! a queue's quota cut, a running gang finished), then the API server restarts over an etcd
//! compacted to its head, so that every watch the controller resumes is answered 410 Expired and
//! has to list again. Thawed, it converges to what a fresh start sees: a second controller started
//! fresh afterwards changes nothing.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use serde_json::json;

use crate::Options;
use crate::kube_util::{is_true, name_of, wait_for};
use crate::standins::kubelet;
use crate::standins::nodes::FakeNode;
use crate::suite::{Checks, Suite, secs};
use crate::world::{BLOCK, RACK, World, conditions_line, record_slots};

/// Runs the scenario.
pub async fn run(suite: &mut Suite, _: &Options) -> Result<Checks> {
    let mut c = Checks::default();
    let mut w = World::new(suite, "wex").await?;
    let made = w.grid(1, 1, 6).await?;
    let queue = w.queue("team", 48, None).await?;
    w.torch_runtime().await?;
    w.start_trainyard(&[]).await?;
    w.submit(&[w.trainjob("runs", &queue, 2, 8), w.trainjob("ends", &queue, 1, 8)]).await?;
    w.wait_admitted(&["runs".into(), "ends".into()], Duration::from_secs(30)).await?;
    w.wait_bound_as_recorded("runs", 2, Duration::from_secs(60)).await?;
    w.wait_bound_as_recorded("ends", 1, Duration::from_secs(60)).await?;
    let used: Vec<String> = [w.slots("runs").await?, w.slots("ends").await?].concat();
    let free: Vec<String> = made.iter().map(|n| n.name.clone()).filter(|n| !used.contains(n)).collect();

    // Frozen, the controller misses all of this.
    w.replicas[0].process.pause(true).await;
    let kube = w.kube().clone();
    w.suite.nodes.delete(&kube, &[free[0].clone()]).await?;
    w.nodes.retain(|n| n.name != free[0]);
    let newcomer = FakeNode::gpu_host(
        &format!("{}-new", w.tag),
        &[(BLOCK, &format!("{}-b0", w.tag)), (RACK, &format!("{}-b0r0", w.tag))],
    );
    w.add_nodes(vec![newcomer.clone()]).await?;
    kube.create(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "foreign", "namespace": w.ns},
        "spec": {"nodeName": free[1], "containers": [{"name": "c", "image": "example.org/other:1",
            "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}))
        .await?;
    kube.merge("trainyard.io/v1alpha1", "Queue", None, &queue, &json!({"spec": {"nominal": {"gpus": 40}}})).await?;
    kubelet::succeed(&kube.client, &w.ns, "trainyard.io/gang=ends").await?;
    wait_for("the finished gang's JobSet Completed", Duration::from_secs(60), || async {
        let js = kube.get("jobset.x-k8s.io/v1alpha2", "JobSet", Some(&w.ns), "ends").await?.unwrap_or_default();
        Ok(is_true(&js, "Completed").then_some(()))
    })
    .await?;
    // 3 pods: room only on the new node, the other free one, and the node `ends` gives back.
    w.submit(&[w.trainjob("fresh", &queue, 3, 8)]).await?;

    w.suite.plane.stop_apiserver().await;
    let revision = w.suite.plane.compact_etcd().await?;
    w.suite.plane.start_apiserver().await?;
    let t = Instant::now();
    w.replicas[0].process.pause(false).await;

    let ends = wait_for("`ends` Complete", Duration::from_secs(30), || async {
        let tj = w.trainjob_now("ends").await?;
        if is_true(&tj, "Complete") { Ok(Some(())) } else { Err(anyhow!("{}", conditions_line(&tj))) }
    })
    .await;
    c.that(ends.is_ok(), format!("the gang that ended while the controller was frozen is Complete: {ends:?}"))?;
    w.wait_admitted(&["fresh".into()], Duration::from_secs(30)).await?;
    let converged = t.elapsed();
    let fresh = w.slots("fresh").await?;
    c.that(!fresh.contains(&free[0]), format!("`fresh` avoids the deleted node {} ({fresh:?})", free[0]))?;
    c.that(!fresh.contains(&free[1]), format!("`fresh` avoids the node the foreign pod holds ({fresh:?})"))?;
    c.that(fresh.contains(&newcomer.name), format!("`fresh` uses the node added meanwhile ({fresh:?})"))?;
    let charged = 16 + 24;
    c.that(charged <= 40, "runs (16) + fresh (24) fit the cut quota of 40")?;
    w.wait_bound_as_recorded("fresh", 3, Duration::from_secs(60)).await?;
    let expired = std::fs::read_to_string(&w.replicas[0].process.log).unwrap_or_default().matches("xpired").count();
    c.that(expired > 0, "the controller's watches were answered Expired and listed again")?;

    // A fresh controller, started on the same cluster, changes nothing.
    let snapshot = decisions(&w).await?;
    w.replicas[0].process.terminate(Duration::from_secs(20)).await;
    w.start_trainyard(&[]).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let again = decisions(&w).await?;
    c.that(
        snapshot == again,
        format!("a fresh start agrees with the converged controller: {snapshot:?} vs {again:?}"),
    )?;
    c.figure(format!(
        "etcd compacted at revision {revision}; every watch expired; converged {} after the thaw; a fresh start changed nothing",
        secs(converged)
    ));
    w.teardown().await?;
    Ok(c)
}

/// Each TrainJob's record and conditions (type, status, reason).
async fn decisions(w: &World<'_>) -> Result<BTreeMap<String, (Option<Vec<String>>, String)>> {
    let jobs = w.kube().list("trainer.kubeflow.org/v1alpha1", "TrainJob", Some(&w.ns), None).await?;
    Ok(jobs.iter().map(|j| (name_of(j), (record_slots(j), conditions_line(j)))).collect())
}
