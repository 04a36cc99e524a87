//! Nodes lost under a running gang, under each `node_loss` action of the policy: `wait` reports
//! the lost node on the TrainJob and keeps the gang where it is until the node is back; `requeue`
//! stops the gang after the grace and admits it again on healthy nodes; `replace` rewrites the
//! admission record with a free node for the deleted one, and the Job controller's new pod is
//! bound there while the other pod stays put.

use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use serde_json::Value;

use crate::Options;
use crate::kube_util::{condition, is_true, name_of, wait_for};
use crate::standins::nodes;
use crate::suite::{Checks, Suite, secs};
use crate::world::World;

/// A world with four hosts, one 2-pod gang admitted and bound under `action`.
async fn setup<'s>(suite: &'s mut Suite, tag: &str, action: &str) -> Result<(World<'s>, Vec<String>)> {
    let mut w = World::new(suite, tag).await?;
    w.grid(1, 1, 4).await?;
    let queue = w.queue("team", 64, None).await?;
    w.torch_runtime().await?;
    let policy = w.policy(&format!("node_loss: {{action: {action}, grace: 2s}}\n"))?;
    w.start_trainyard(&[&format!("--policy={}", policy.display())]).await?;
    w.submit(&[w.trainjob("gang", &queue, 2, 8)]).await?;
    w.wait_admitted(&["gang".into()], Duration::from_secs(30)).await?;
    w.wait_bound_as_recorded("gang", 2, Duration::from_secs(60)).await?;
    let slots = w.slots("gang").await?;
    Ok((w, slots))
}

async fn nodes_ready(w: &World<'_>, want: &str, reason: &str) -> Result<String> {
    wait_for(&format!("NodesReady={want} ({reason})"), Duration::from_secs(30), || async {
        let tj = w.trainjob_now("gang").await?;
        match condition(&tj, "NodesReady") {
            Some((s, r, m)) if s == want && r == reason => Ok(Some(m)),
            other => Err(anyhow!("NodesReady: {other:?}")),
        }
    })
    .await
}

/// `wait`: the gang stays, the TrainJob says which node is lost and when it is back.
pub async fn wait(suite: &mut Suite, _: &Options) -> Result<Checks> {
    let mut c = Checks::default();
    let (w, slots) = setup(suite, "nlw", "wait").await?;
    let lost = slots[0].clone();
    nodes::set_ready_condition(w.kube(), &lost, false).await?;
    let message = nodes_ready(&w, "False", "NodeLost").await?;
    c.that(message.contains(&lost), format!("the condition names the lost node {lost}: {message}"))?;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let tj = w.trainjob_now("gang").await?;
    c.that(
        is_true(&tj, "Admitted") && w.slots("gang").await? == slots,
        "past the grace the gang keeps its admission and nodes",
    )?;
    nodes::set_ready_condition(w.kube(), &lost, true).await?;
    nodes_ready(&w, "True", "NodesRecovered").await?;
    c.done();
    c.figure("NodeLost reported and recovered; the gang never moved");
    w.teardown().await?;
    Ok(c)
}

/// `requeue`: after the grace the gang is stopped and admitted again away from the lost node.
pub async fn requeue(suite: &mut Suite, _: &Options) -> Result<Checks> {
    let mut c = Checks::default();
    let (w, slots) = setup(suite, "nlq", "requeue").await?;
    let lost = slots[1].clone();
    let uid =
        |js: Option<Value>| js.and_then(|j| j.pointer("/metadata/uid").and_then(Value::as_str).map(str::to_string));
    let first = uid(w.kube().get("jobset.x-k8s.io/v1alpha2", "JobSet", Some(&w.ns), "gang").await?);
    let t = Instant::now();
    nodes::cordon(w.kube(), &lost, true).await?;
    let moved = wait_for("the gang admitted again without the lost node", Duration::from_secs(60), || async {
        let tj = w.trainjob_now("gang").await?;
        let slots = crate::world::record_slots(&tj).unwrap_or_default();
        if is_true(&tj, "Admitted") && !slots.is_empty() && !slots.contains(&lost) {
            Ok(Some(slots))
        } else {
            Err(anyhow!("record {slots:?}"))
        }
    })
    .await?;
    w.wait_bound_as_recorded("gang", 2, Duration::from_secs(60)).await?;
    c.that(!moved.contains(&lost), format!("the new placement {moved:?} avoids {lost}"))?;
    // Stopped and launched again (not patched in place): its JobSet is a new one.
    let second = uid(w.kube().get("jobset.x-k8s.io/v1alpha2", "JobSet", Some(&w.ns), "gang").await?);
    c.that(
        first.is_some() && second.is_some() && first != second,
        format!("the gang was relaunched: JobSet {first:?} -> {second:?}"),
    )?;
    let events = w.kube().list("v1", "Event", Some(&w.ns), None).await?;
    c.that(events.iter().any(|e| e["reason"] == "NodeLost"), "a NodeLost event says why")?;
    c.figure(format!("requeued and running again on healthy nodes {} after the cordon (grace 2 s)", secs(t.elapsed())));
    w.teardown().await?;
    Ok(c)
}

/// `replace`: a deleted node's pod moves to a free node; the other pod stays.
pub async fn replace(suite: &mut Suite, _: &Options) -> Result<Checks> {
    let mut c = Checks::default();
    let (mut w, slots) = setup(suite, "nlr", "replace").await?;
    let (lost, kept) = (slots[0].clone(), slots[1].clone());
    let t = Instant::now();
    let kube = w.kube().clone();
    w.suite.nodes.delete(&kube, std::slice::from_ref(&lost)).await?;
    w.nodes.retain(|n| n.name != lost);
    let moved =
        wait_for("the admission record rewritten without the deleted node", Duration::from_secs(30), || async {
            let s = w.slots("gang").await?;
            if !s.contains(&lost) { Ok(Some(s)) } else { Err(anyhow!("record {s:?}")) }
        })
        .await?;
    c.that(moved.contains(&kept), format!("the pod on {kept} keeps its node (record {moved:?})"))?;
    // The pod of the deleted node is gone as the pod garbage collector would remove it.
    for pod in w.gang_pods("gang").await? {
        if pod.pointer("/spec/nodeName").and_then(Value::as_str) == Some(lost.as_str()) {
            kube.delete("v1", "Pod", Some(&w.ns), &name_of(&pod)).await?;
        }
    }
    w.wait_bound_as_recorded("gang", 2, Duration::from_secs(60)).await?;
    c.done();
    let tj = w.trainjob_now("gang").await?;
    c.that(is_true(&tj, "Admitted"), "the gang stays admitted through the move")?;
    c.figure(format!(
        "the lost pod replaced and bound on a free node {} after the node was deleted",
        secs(t.elapsed())
    ));
    w.teardown().await?;
    Ok(c)
}
