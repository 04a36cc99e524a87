//! Leader hand-over: two replicas with leader election; the standby is Ready and does nothing;
//! the leader stops gracefully (SIGTERM) and gives the Lease up; the standby leads within about
//! a second and admits a TrainJob created after the hand-over; nothing admitted before is touched.

use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};

use crate::Options;
use crate::kube_util::wait_for;
use crate::suite::{Checks, Suite, secs};
use crate::world::World;

/// Runs the scenario.
pub async fn run(suite: &mut Suite, _: &Options) -> Result<Checks> {
    let mut c = Checks::default();
    let lease_ns = suite.lease_namespace.clone();
    let mut w = World::new(suite, "ldr").await?;
    w.grid(1, 1, 4).await?;
    let queue = w.queue("team", 64, None).await?;
    w.torch_runtime().await?;
    let election = ["--leader-elect", &format!("--lease-namespace={lease_ns}"), "--lease-name=trainyard-e2e-ldr"]
        .map(String::from);
    let args: Vec<&str> = election.iter().map(String::as_str).collect();
    let a = w.start_trainyard(&args).await?;
    wait_for("replica 0 to lead", Duration::from_secs(30), || async {
        Ok(w.replicas[a].leading().await.then_some(()))
    })
    .await?;
    let b = w.start_trainyard(&args).await?;
    let standby = w.replicas[b].readyz().await.unwrap_or_default();
    c.that(standby.starts_with("standby"), format!("the second replica is a Ready standby: {standby:?}"))?;

    w.submit(&[w.trainjob("before", &queue, 2, 8)]).await?;
    w.wait_admitted(&["before".into()], Duration::from_secs(30)).await?;
    let record = w.slots("before").await?;

    let t = Instant::now();
    w.replicas[a].process.terminate(Duration::from_secs(20)).await;
    let stopped = t.elapsed();
    wait_for("the standby to lead", Duration::from_secs(30), || async {
        if w.replicas[b].leading().await { Ok(Some(())) } else { Err(anyhow!("{:?}", w.replicas[b].readyz().await)) }
    })
    .await?;
    let handover = t.elapsed();
    c.that(handover < Duration::from_secs(5), format!("the standby leads {} after SIGTERM", secs(handover)))?;
    let t2 = Instant::now();
    w.submit(&[w.trainjob("after", &queue, 1, 8)]).await?;
    w.wait_admitted(&["after".into()], Duration::from_secs(30)).await?;
    let admitted = t2.elapsed();
    c.that(w.slots("before").await? == record, "the new leader keeps the earlier admission")?;
    w.wait_bound_as_recorded("before", 2, Duration::from_secs(60)).await?;
    w.wait_bound_as_recorded("after", 1, Duration::from_secs(60)).await?;
    c.figure(format!(
        "leader stopped in {}, standby leading {} after SIGTERM, a new TrainJob admitted {} after creation",
        secs(stopped),
        secs(handover),
        secs(admitted)
    ));
    w.teardown().await?;
    Ok(c)
}
