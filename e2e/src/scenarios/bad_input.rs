//! Bad input: TrainJobs with no queue, an unknown queue, a runtime that does not exist, a bad
//! annotation, a gang larger than the cluster, and a Queue whose quota tree is invalid each get
//! a condition naming the field at fault; none gets a JobSet, the controller neither panics nor
//! stops admitting the good TrainJob submitted after them.

use std::time::Duration;

use anyhow::{Result, anyhow};
use serde_json::{Value, json};

use crate::Options;
use crate::kube_util::{condition, wait_for};
use crate::suite::{Checks, Suite};
use crate::world::World;

/// Runs the scenario.
pub async fn run(suite: &mut Suite, _: &Options) -> Result<Checks> {
    let mut c = Checks::default();
    let mut w = World::new(suite, "bad").await?;
    w.grid(1, 1, 4).await?;
    let queue = w.queue("team", 128, None).await?;
    w.torch_runtime().await?;
    // As the chart's default policy: a TrainJob naming no declared queue waits for it.
    let policy = w.policy("undeclared_queues: reject\n")?;
    w.start_trainyard(&[&format!("--policy={}", policy.display())]).await?;

    let mut no_queue = w.trainjob("no-queue", &queue, 1, 8);
    no_queue["metadata"]["labels"] = json!({});
    let unknown_queue = w.trainjob("unknown-queue", "nobody", 1, 8);
    let mut no_runtime = w.trainjob("no-runtime", &queue, 1, 8);
    no_runtime["spec"]["runtimeRef"]["name"] = json!("missing");
    let mut bad_mode = w.trainjob("bad-mode", &queue, 1, 8);
    bad_mode["metadata"]["annotations"] = json!({"trainyard.io/placement-mode": "everywhere"});
    let mut bad_estimate = w.trainjob("bad-estimate", &queue, 1, 8);
    bad_estimate["metadata"]["annotations"] = json!({"trainyard.io/runtime-estimate": "soon"});
    let too_big = w.trainjob("too-big", &queue, 9, 8);
    w.submit(&[no_queue, unknown_queue, no_runtime, bad_mode, bad_estimate, too_big]).await?;

    let expect: [(&str, &str, &str); 6] = [
        ("no-queue", "NoQueue", "trainyard.io/queue"),
        ("unknown-queue", "QueueNotFound", "nobody"),
        ("no-runtime", "RuntimeNotFound", "missing"),
        ("bad-mode", "InvalidTopologyRequest", "trainyard.io/placement-mode"),
        ("bad-estimate", "InvalidSpec", "trainyard.io/runtime-estimate"),
        ("too-big", "NeverFits", ""),
    ];
    for (name, reason, names) in expect {
        let tj = wait_for(&format!("{name} to carry reason {reason}"), Duration::from_secs(30), || async {
            let tj = w.trainjob_now(name).await?;
            let found =
                ["Queued", "Admitted", "Failed"].iter().find_map(|t| condition(&tj, t).filter(|(_, r, _)| r == reason));
            match found {
                Some((_, _, message)) => Ok(Some(message)),
                None => Err(anyhow!("conditions: {}", crate::world::conditions_line(&tj))),
            }
        })
        .await?;
        c.that(tj.contains(names), format!("{name}'s condition names `{names}`: {tj:?}"))?;
        let js = w.kube().get("jobset.x-k8s.io/v1alpha2", "JobSet", Some(&w.ns), name).await?;
        c.that(js.is_none(), format!("no JobSet for the bad TrainJob {name}"))?;
    }

    // A cycle in the quota tree: the Queues say why; the tree in use stays, so a good TrainJob
    // is still admitted.
    let a = format!("{}-loop-a", w.tag);
    let b = format!("{}-loop-b", w.tag);
    w.cluster_object(json!({"apiVersion": "trainyard.io/v1alpha1", "kind": "Queue", "metadata": {"name": a}, "spec": {"parent": b, "nominal": {"gpus": 8}}})).await?;
    w.cluster_object(json!({"apiVersion": "trainyard.io/v1alpha1", "kind": "Queue", "metadata": {"name": b}, "spec": {"parent": a, "nominal": {"gpus": 8}}})).await?;
    let message = wait_for("the looping Queues to be marked inactive", Duration::from_secs(30), || async {
        let q = w.kube().get("trainyard.io/v1alpha1", "Queue", None, &a).await?.unwrap_or(Value::Null);
        match condition(&q, "Active") {
            Some((s, r, m)) if s == "False" && r == "InvalidQuotaTree" => Ok(Some(m)),
            other => Err(anyhow!("Active: {other:?}")),
        }
    })
    .await?;
    c.that(
        message.contains(&a) || message.contains(&b),
        format!("the quota-tree problem names a looping queue: {message}"),
    )?;
    w.submit(&[w.trainjob("good", &queue, 1, 8)]).await?;
    w.wait_admitted(&["good".to_string()], Duration::from_secs(30)).await?;
    c.done();
    c.that(w.replicas[0].panics().is_empty(), format!("the controller did not panic: {:?}", w.replicas[0].panics()))?;
    c.figure("6 bad TrainJobs and a looping quota tree reported by field; a good TrainJob admitted after them");
    w.teardown().await?;
    Ok(c)
}
