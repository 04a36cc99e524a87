//! The cluster kube-scheduler sees: a pod trainyard did not place holds GPUs, a node is tainted,
//! one cordoned, one NotReady, one deleted. trainyard offers none of that capacity, the gang it
//! cannot place waits with `InsufficientCapacity`, and it is admitted once a node comes back.

use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use serde_json::json;

use crate::Options;
use crate::http::metric;
use crate::kube_util::wait_for;
use crate::standins::nodes;
use crate::suite::{Checks, Suite, secs};
use crate::world::World;

/// Runs the scenario.
pub async fn run(suite: &mut Suite, _: &Options) -> Result<Checks> {
    let mut c = Checks::default();
    let mut w = World::new(suite, "use").await?;
    let made = w.grid(1, 1, 6).await?;
    let name = |i: usize| made[i].name.clone();
    let queue = w.queue("team", 256, None).await?;
    w.torch_runtime().await?;
    w.start_trainyard(&[]).await?;

    // A pod of another workload, bound by name (as a DaemonSet's would be), holds 6 GPUs of h0.
    w.kube()
        .create(&json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "foreign", "namespace": w.ns},
            "spec": {"nodeName": name(0), "containers": [{"name": "c", "image": "example.org/other:1",
                "resources": {"limits": {"nvidia.com/gpu": "6"}}}]},
        }))
        .await?;
    let kube = w.kube().clone();
    nodes::taint(
        &kube,
        &name(1),
        json!([{"key": "e2e.trainyard.io/dedicated", "value": "other", "effect": "NoSchedule"}]),
    )
    .await?;
    nodes::cordon(&kube, &name(2), true).await?;
    nodes::set_ready_condition(&kube, &name(3), false).await?;
    w.suite.nodes.delete(&kube, &[name(4)]).await?;
    let replica = &w.replicas[0];
    wait_for("trainyard to count 2 unusable hosts and 6 foreign GPUs", Duration::from_secs(20), || async {
        let m = replica.metrics().await;
        let (unusable, foreign) =
            (metric(&m, "trainyard_hosts_unusable", &[]), metric(&m, "trainyard_foreign_gpus", &[]));
        if unusable == Some(2.0) && foreign == Some(6.0) {
            Ok(Some(()))
        } else {
            Err(anyhow!("unusable {unusable:?}, foreign {foreign:?}"))
        }
    })
    .await?;
    c.done();

    w.submit(&[
        w.trainjob("whole", &queue, 1, 8),
        w.trainjob("pair", &queue, 2, 8),
        w.trainjob("sliver", &queue, 1, 2),
    ])
    .await?;
    w.wait_admitted(&["whole".into(), "sliver".into()], Duration::from_secs(30)).await?;
    c.that(w.slots("whole").await? == vec![name(5)], "the only whole free node (h5) takes `whole`")?;
    c.that(w.slots("sliver").await? == vec![name(0)], "`sliver` (2 GPUs) fits beside the foreign pod on h0")?;
    w.wait_reason("pair", "Queued", "InsufficientCapacity", Duration::from_secs(30)).await?;
    c.done();
    for node in [name(1), name(2), name(3), name(4)] {
        for job in ["whole", "sliver"] {
            c.that(!w.slots(job).await?.contains(&node), format!("{job} avoids {node}"))?;
        }
    }

    // Uncordoned and Ready again, h2 and h3 take the waiting pair.
    let t = Instant::now();
    nodes::cordon(&kube, &name(2), false).await?;
    nodes::set_ready_condition(&kube, &name(3), true).await?;
    w.wait_admitted(&["pair".into()], Duration::from_secs(30)).await?;
    let mut pair = w.slots("pair").await?;
    pair.sort();
    c.that(pair == vec![name(2), name(3)], format!("`pair` goes to the recovered h2 and h3 (got {pair:?})"))?;
    c.figure(format!("a gang waiting for capacity admitted {} after two nodes recovered", secs(t.elapsed())));
    for job in ["whole", "sliver", "pair"] {
        w.wait_bound_as_recorded(job, if job == "pair" { 2 } else { 1 }, Duration::from_secs(60)).await?;
    }
    for (node, gpus) in w.gpus_per_node().await? {
        c.that(gpus <= 8, format!("node {node} holds {gpus} GPUs of 8"))?;
    }
    w.teardown().await?;
    Ok(c)
}
