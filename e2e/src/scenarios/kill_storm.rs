//! A kill -9 storm: TrainJobs arrive in a burst while the controller is killed with SIGKILL and
//! started again, over and over. Afterwards nothing is lost or doubled: every TrainJob is admitted
//! or waits with a reason, the quota holds, no node is over its GPUs, one JobSet per admission,
//! every pod where its record says.

use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::json;

use crate::Options;
use crate::suite::{Checks, Suite, secs};
use crate::world::{RACK, World};

use super::invariants::{audit, settle};

/// Kills in the storm.
const KILLS: u32 = 24;

/// Runs the scenario.
pub async fn run(suite: &mut Suite, _: &Options) -> Result<Checks> {
    let mut c = Checks::default();
    let mut w = World::new(suite, "ks").await?;
    w.grid(2, 2, 4).await?;
    let quota = 96;
    let queue = w.queue("team", quota, None).await?;
    w.torch_runtime().await?;
    w.start_trainyard(&[]).await?;

    let jobs: Vec<_> = (0..40)
        .map(|i| match i % 4 {
            0 | 1 => w.trainjob(&format!("one-{i}"), &queue, 1, 8),
            2 => w.trainjob(&format!("two-{i}"), &queue, 2, 8),
            _ => {
                let mut j = w.trainjob(&format!("rack-{i}"), &queue, 4, 8);
                j["metadata"]["annotations"] = json!({"kueue.x-k8s.io/podset-required-topology": RACK});
                j
            }
        })
        .collect();
    let kube = w.kube().clone();
    let submitter = tokio::spawn(async move {
        for job in jobs {
            kube.create(&job).await?;
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        anyhow::Ok(())
    });
    // A fixed pseudo-random rhythm (a linear congruential generator): between 0.2 and 1.2 s.
    let mut seed: u64 = 42;
    let t = Instant::now();
    for _ in 0..KILLS {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        tokio::time::sleep(Duration::from_millis(200 + (seed >> 33) % 1000)).await;
        let replica = &mut w.replicas[0];
        replica.process.kill().await;
        replica.process.restart()?;
    }
    let storm = t.elapsed();
    submitter.await??;
    let settled = settle(&w, 40, Duration::from_secs(90)).await?;
    c.done();
    let held = audit(&w, &settled, u64::from(quota), Duration::from_secs(120)).await?;
    for _ in 0..held {
        c.done();
    }
    c.that(w.replicas[0].panics().is_empty(), format!("no panic: {:?}", w.replicas[0].panics()))?;
    c.figure(format!(
        "{KILLS} kills over {}; then {} admitted ({} GPUs of {quota}), {} waiting with a reason, settled {} after the last kill",
        secs(storm),
        settled.admitted.len(),
        settled.admitted.values().sum::<u64>(),
        settled.waiting.len(),
        secs(settled.took)
    ));
    w.teardown().await?;
    Ok(c)
}
