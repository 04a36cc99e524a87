//! kube-apiserver killed (SIGKILL) two seconds into a burst of 30 TrainJobs and started again 15 s
//! later, several times over. After each return every TrainJob the quota allows is admitted and
//! the rest carry a reason within 10 s; a TrainJob created afterwards is admitted within 1 s;
//! nothing admitted before the kill loses its admission or moves; the controller never restarts.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};

use crate::Options;
use crate::kube_util::{is_true, name_of, wait_for};
use crate::suite::{Checks, Suite, secs, spread};
use crate::world::{World, record_slots};

use super::invariants::{audit, settle};

const BURST: usize = 30;
/// GPUs of the burst's queue: 14 one-node gangs of 8.
const QUOTA: u32 = 112;
/// The acceptance bounds.
const SETTLE_BOUND: Duration = Duration::from_secs(10);
const LATE_BOUND: Duration = Duration::from_secs(1);

/// Runs the scenario.
pub async fn run(suite: &mut Suite, options: &Options) -> Result<Checks> {
    let mut c = Checks::default();
    let mut w = World::new(suite, "asr").await?;
    w.grid(1, 2, 8).await?;
    let burst_queue = w.queue("burst", QUOTA, None).await?;
    let late_queue = w.queue("late", 16, None).await?;
    w.torch_runtime().await?;
    w.start_trainyard(&[]).await?;
    let pid = w.replicas[0].process.pid();
    let (mut settles, mut lates) = (Vec::new(), Vec::new());

    for rep in 0..options.restarts {
        let jobs: Vec<_> = (0..BURST).map(|k| w.trainjob(&format!("r{rep}-{k}"), &burst_queue, 1, 8)).collect();
        let kube = w.kube().clone();
        let started = Instant::now();
        let submitter = tokio::spawn(async move {
            for job in jobs {
                kube.create_retrying(&job, Duration::from_secs(60)).await?;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            anyhow::Ok(())
        });
        tokio::time::sleep(Duration::from_secs(2).saturating_sub(started.elapsed())).await;
        let before = admitted_records(&w).await?;
        w.suite.plane.kill_apiserver().await;
        tokio::time::sleep(Duration::from_secs(15)).await;
        w.suite.plane.start_apiserver().await?;
        let back = Instant::now();
        submitter.await??;
        let settled = settle(&w, BURST, Duration::from_secs(60)).await?;
        let took = back.elapsed();
        c.that(
            settled.admitted.len() == (QUOTA / 8) as usize,
            format!("restart {rep}: the quota's {} gangs are admitted (got {})", QUOTA / 8, settled.admitted.len()),
        )?;
        c.that(
            took <= SETTLE_BOUND,
            format!(
                "restart {rep}: settled {} after the API server returned (bound {})",
                secs(took),
                secs(SETTLE_BOUND)
            ),
        )?;
        settles.push(took);
        let after = admitted_records(&w).await?;
        for (name, slots) in &before {
            c.that(
                after.get(name) == Some(slots),
                format!("restart {rep}: {name}, admitted before the kill, keeps its admission"),
            )?;
        }
        for _ in 0..audit(&w, &settled, u64::from(QUOTA), Duration::from_secs(120)).await? {
            c.done();
        }

        let late = format!("late-{rep}");
        let t = Instant::now();
        w.submit(&[w.trainjob(&late, &late_queue, 1, 8)]).await?;
        wait_for(&format!("{late} admitted"), Duration::from_secs(30), || async {
            Ok(is_true(&w.trainjob_now(&late).await?, "Admitted").then_some(()))
        })
        .await?;
        let late_took = t.elapsed();
        c.that(
            late_took <= LATE_BOUND,
            format!(
                "restart {rep}: a TrainJob created afterwards admitted in {} (bound {})",
                secs(late_took),
                secs(LATE_BOUND)
            ),
        )?;
        lates.push(late_took);
        clear(&w).await?;
    }
    c.that(
        w.replicas[0].process.pid() == pid && w.replicas[0].process.exited().is_none(),
        "the controller ran throughout",
    )?;
    c.that(w.replicas[0].panics().is_empty(), "no panic")?;
    c.figure(format!(
        "after each of {} restarts: settled {}; a new TrainJob admitted {}",
        options.restarts,
        spread(settles),
        spread(lates)
    ));
    w.teardown().await?;
    Ok(c)
}

/// The admitted TrainJobs and their records.
async fn admitted_records(w: &World<'_>) -> Result<BTreeMap<String, Vec<String>>> {
    let jobs = w.kube().list("trainer.kubeflow.org/v1alpha1", "TrainJob", Some(&w.ns), None).await?;
    Ok(jobs.iter().filter(|j| is_true(j, "Admitted")).filter_map(|j| Some((name_of(j), record_slots(j)?))).collect())
}

/// Deletes every TrainJob of the round and waits until their JobSets and pods are gone.
async fn clear(w: &World<'_>) -> Result<()> {
    for tj in w.kube().list("trainer.kubeflow.org/v1alpha1", "TrainJob", Some(&w.ns), None).await? {
        w.kube().delete("trainer.kubeflow.org/v1alpha1", "TrainJob", Some(&w.ns), &name_of(&tj)).await?;
    }
    wait_for("the round's TrainJobs and JobSets to be gone", Duration::from_secs(60), || async {
        let left = (
            w.kube().list("trainer.kubeflow.org/v1alpha1", "TrainJob", Some(&w.ns), None).await?.len(),
            w.kube().list("jobset.x-k8s.io/v1alpha2", "JobSet", Some(&w.ns), None).await?.len(),
        );
        if left == (0, 0) { Ok(Some(())) } else { Err(anyhow!("left (TrainJobs, JobSets): {left:?}")) }
    })
    .await?;
    // kube-controller-manager's garbage collector, restarted under it, may take minutes to
    // collect the Jobs and pods of deleted JobSets; the suite removes them as it would.
    for job in w.kube().list("batch/v1", "Job", Some(&w.ns), None).await? {
        w.kube().delete("batch/v1", "Job", Some(&w.ns), &name_of(&job)).await?;
    }
    for pod in w.kube().list("v1", "Pod", Some(&w.ns), None).await? {
        w.kube().delete("v1", "Pod", Some(&w.ns), &name_of(&pod)).await?;
    }
    wait_for("the round's TrainJobs, JobSets and pods to be gone", Duration::from_secs(60), || async {
        // The Job controller lifts its tracking finalizer from the pods of a deleted Job; after
        // the restart it can lag as the garbage collector does, and the suite lifts it instead.
        let pods = w.kube().list("v1", "Pod", Some(&w.ns), None).await?;
        for pod in pods.iter().filter(|p| p.pointer("/metadata/deletionTimestamp").is_some()) {
            w.kube().strip_finalizers("v1", "Pod", Some(&w.ns), &name_of(pod)).await?;
        }
        let left = (
            w.kube().list("trainer.kubeflow.org/v1alpha1", "TrainJob", Some(&w.ns), None).await?.len(),
            w.kube().list("jobset.x-k8s.io/v1alpha2", "JobSet", Some(&w.ns), None).await?.len(),
            pods.len(),
        );
        if left == (0, 0, 0) { Ok(Some(())) } else { Err(anyhow!("left (TrainJobs, JobSets, pods): {left:?}")) }
    })
    .await
}
