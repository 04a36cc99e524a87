//! Admission: TrainJobs of four shapes on a 16-host, two-block cluster are admitted, their
//! JobSets made, every pod bound by kube-scheduler to the node its admission record names, rack
//! and block requests kept, and a finished gang ends its TrainJob `Complete`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::{Value, json};

use crate::Options;
use crate::kube_util::{is_true, wait_for};
use crate::standins::kubelet;
use crate::suite::{Checks, Suite, secs};
use crate::world::{BLOCK, RACK, World};

/// Runs the scenario.
pub async fn run(suite: &mut Suite, _: &Options) -> Result<Checks> {
    let mut c = Checks::default();
    let mut w = World::new(suite, "adm").await?;
    w.grid(2, 2, 4).await?;
    let queue = w.queue("team", 128, None).await?;
    w.torch_runtime().await?;
    w.start_trainyard(&[]).await?;

    let mut rack = w.trainjob("rack4", &queue, 4, 8);
    rack["metadata"]["annotations"] = json!({"kueue.x-k8s.io/podset-required-topology": RACK});
    let mut block = w.trainjob("block8", &queue, 8, 8);
    block["metadata"]["annotations"] = json!({"kueue.x-k8s.io/podset-required-topology": BLOCK});
    let jobs = vec![w.trainjob("one", &queue, 1, 8), rack, w.trainjob("halves", &queue, 2, 4), block];
    let names: Vec<String> = jobs.iter().map(crate::kube_util::name_of).collect();
    let t0 = Instant::now();
    w.submit(&jobs).await?;
    let admitted = w.wait_admitted(&names, Duration::from_secs(30)).await?;
    c.done();
    let pods = [1, 4, 2, 8];
    for (name, count) in names.iter().zip(pods) {
        w.wait_bound_as_recorded(name, count, Duration::from_secs(60)).await?;
        c.done();
    }
    let bound = t0.elapsed();
    c.figure(format!("4 TrainJobs admitted in {}, their 15 pods bound as recorded in {}", secs(admitted), secs(bound)));

    for name in &names {
        let js = w.kube().get("jobset.x-k8s.io/v1alpha2", "JobSet", Some(&w.ns), name).await?;
        let owner = js.as_ref().and_then(|j| j.pointer("/metadata/ownerReferences/0/kind")).and_then(Value::as_str);
        c.that(
            owner == Some("TrainJob"),
            format!("JobSet {name} exists and is owned by its TrainJob (owner: {owner:?})"),
        )?;
    }
    let label_of = |node: &str, key: &str| {
        w.nodes.iter().find(|n| n.name == node).and_then(|n| n.labels.get(key).cloned()).unwrap_or_default()
    };
    let racks: BTreeSet<String> = w.slots("rack4").await?.iter().map(|n| label_of(n, RACK)).collect();
    c.that(racks.len() == 1, format!("rack4 is inside one rack (got {racks:?})"))?;
    let blocks: BTreeSet<String> = w.slots("block8").await?.iter().map(|n| label_of(n, BLOCK)).collect();
    c.that(blocks.len() == 1, format!("block8 is inside one block (got {blocks:?})"))?;
    for (node, gpus) in w.gpus_per_node().await? {
        c.that(gpus <= 8, format!("node {node} holds {gpus} GPUs of 8"))?;
    }

    // The 1-pod gang runs to the end: its pod exits 0, the Job controller completes its Job, the
    // JobSet completes, and trainyard says so on the TrainJob.
    let t1 = Instant::now();
    let ended = kubelet::succeed(&w.suite.kube.client, &w.ns, "trainyard.io/gang=one").await?;
    c.that(ended == 1, format!("one pod of gang `one` ended (ended {ended})"))?;
    wait_for("TrainJob one Complete", Duration::from_secs(60), || async {
        let tj = w.trainjob_now("one").await?;
        Ok(is_true(&tj, "Complete").then_some(()))
    })
    .await?;
    c.done();
    c.figure(format!("a finished gang's TrainJob Complete {} after its pod ended", secs(t1.elapsed())));
    w.teardown().await?;
    Ok(c)
}
