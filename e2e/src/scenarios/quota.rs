//! Quota: a queue of 16 GPUs admits what fits and holds the rest with `QuotaExceeded`; when the
//! running gang finishes, the waiting ones are admitted; the Queue's status counts it all and no
//! moment has the queue over its quota.

use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use serde_json::Value;

use crate::Options;
use crate::kube_util::{is_true, wait_for};
use crate::standins::kubelet;
use crate::suite::{Checks, Suite, secs};
use crate::world::World;

/// Runs the scenario.
pub async fn run(suite: &mut Suite, _: &Options) -> Result<Checks> {
    let mut c = Checks::default();
    let mut w = World::new(suite, "quo").await?;
    w.grid(1, 2, 4).await?;
    let queue = w.queue("team", 16, None).await?;
    w.torch_runtime().await?;
    w.start_trainyard(&[]).await?;

    w.submit(&[w.trainjob("big", &queue, 2, 8)]).await?;
    w.wait_admitted(&["big".to_string()], Duration::from_secs(30)).await?;
    w.submit(&[w.trainjob("small-a", &queue, 1, 8), w.trainjob("small-b", &queue, 1, 8)]).await?;
    for name in ["small-a", "small-b"] {
        let tj = w.wait_reason(name, "Queued", "QuotaExceeded", Duration::from_secs(30)).await?;
        c.that(!is_true(&tj, "Admitted"), format!("{name} waits while `big` holds the quota"))?;
        let js = w.kube().get("jobset.x-k8s.io/v1alpha2", "JobSet", Some(&w.ns), name).await?;
        c.that(js.is_none(), format!("no JobSet is made for the waiting {name}"))?;
    }
    // Queue status is written at most once a second.
    wait_for(
        &format!("Queue {queue} to report 16 GPUs used, 1 admitted, 2 pending"),
        Duration::from_secs(10),
        || async {
            let s = queue_status(&w, &queue).await?;
            let want =
                s.pointer("/usage/gpus").and_then(Value::as_u64) == Some(16) && s["pending"] == 2 && s["admitted"] == 1;
            if want { Ok(Some(())) } else { Err(anyhow!("status: {s}")) }
        },
    )
    .await?;
    c.done();

    w.wait_bound_as_recorded("big", 2, Duration::from_secs(60)).await?;
    let t = Instant::now();
    kubelet::succeed(&w.suite.kube.client, &w.ns, "trainyard.io/gang=big").await?;
    wait_for("TrainJob big Complete", Duration::from_secs(60), || async {
        Ok(is_true(&w.trainjob_now("big").await?, "Complete").then_some(()))
    })
    .await?;
    w.wait_admitted(&["small-a".into(), "small-b".into()], Duration::from_secs(30)).await?;
    c.done();
    c.figure(format!("the waiting gangs admitted {} after the quota holder's pods ended", secs(t.elapsed())));
    for name in ["small-a", "small-b"] {
        w.wait_bound_as_recorded(name, 1, Duration::from_secs(60)).await?;
    }
    let status = wait_for("the Queue's status to show both small gangs", Duration::from_secs(10), || async {
        let s = queue_status(&w, &queue).await?;
        if s["admitted"] == 2 && s["pending"] == 0 { Ok(Some(s)) } else { Err(anyhow!("status: {s}")) }
    })
    .await?;
    c.that(
        status.pointer("/usage/gpus").and_then(Value::as_u64) == Some(16),
        format!("usage is 16 GPUs again: {status}"),
    )?;
    w.teardown().await?;
    Ok(c)
}

async fn queue_status(w: &World<'_>, queue: &str) -> Result<Value> {
    let q = w
        .kube()
        .get("trainyard.io/v1alpha1", "Queue", None, queue)
        .await?
        .ok_or_else(|| anyhow!("no Queue {queue}"))?;
    Ok(q.get("status").cloned().unwrap_or(Value::Null))
}
