//! Binders: a runtime whose `podGroupPolicy` names coscheduling or Volcano gets that binder's
//! PodGroup with the gang (`minMember`, `minResources`, owned by the TrainJob), its pods the
//! binder's marker and scheduler name, and the PodGroup goes when the gang ends or is suspended.
//! A binder the API server does not serve holds the TrainJob with a condition naming the field and
//! the kind, nothing created, until its CRD is installed. The binders themselves are absent: the objects are checked, and the
//! coscheduling gang is bound by kube-scheduler through the TrainJob's scheduler-name annotation.
//! Then a controller started with `--binder kai` gives a runtime that names none KAI's PodGroup.

use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use serde_json::{Value, json};

use crate::Options;
use crate::kube_util::{condition, is_true, wait_for};
use crate::scenarios::install_crd;
use crate::standins::binder_crds::pod_group_crd;
use crate::standins::kubelet;
use crate::suite::{Checks, Suite, secs};
use crate::world::World;

const COSCHEDULING: &str = "scheduling.x-k8s.io/v1alpha1";
const VOLCANO: &str = "scheduling.volcano.sh/v1beta1";
const KAI: &str = "scheduling.run.ai/v2alpha2";

/// Runs the scenario.
pub async fn run(suite: &mut Suite, _: &Options) -> Result<Checks> {
    let mut c = Checks::default();
    let mut w = World::new(suite, "bind").await?;
    w.grid(1, 1, 4).await?;
    let queue = w.queue("team", 64, None).await?;
    install(&mut w, "scheduling.x-k8s.io").await?;
    runtime(&w, "torch-cosched", json!({"coscheduling": {"scheduleTimeoutSeconds": 30}})).await?;
    runtime(&w, "torch-volcano", json!({"volcano": {"networkTopology": {"mode": "soft"}}})).await?;
    w.start_trainyard(&[]).await?;

    let mut cs = w.trainjob("cs", &queue, 2, 8);
    cs["spec"]["runtimeRef"]["name"] = json!("torch-cosched");
    // No coscheduling scheduler runs here: kube-scheduler binds this gang.
    cs["metadata"]["annotations"] = json!({"trainyard.io/scheduler-name": "default-scheduler"});
    let mut vc = w.trainjob("vc", &queue, 2, 8);
    vc["spec"]["runtimeRef"]["name"] = json!("torch-volcano");
    w.submit(&[cs, vc]).await?;

    let admitted = w.wait_admitted(&["cs".into()], Duration::from_secs(30)).await?;
    let group = wait_object(&w, COSCHEDULING, "cs").await?;
    c.that(group["spec"]["minMember"] == json!(2), format!("coscheduling minMember 2: {}", group["spec"]))?;
    c.that(
        group["spec"]["minResources"]["nvidia.com/gpu"] == json!("16"),
        format!("coscheduling minResources hold the gang's 16 GPUs: {}", group["spec"]),
    )?;
    c.that(group["spec"]["scheduleTimeoutSeconds"] == json!(30), "the runtime's scheduleTimeoutSeconds")?;
    c.that(
        group.pointer("/metadata/ownerReferences/0/kind") == Some(&json!("TrainJob")),
        "the PodGroup is owned by its TrainJob",
    )?;
    let bound = w.wait_bound_as_recorded("cs", 2, Duration::from_secs(60)).await?;
    for pod in w.gang_pods("cs").await? {
        c.that(
            pod.pointer("/metadata/labels/scheduling.x-k8s.io~1pod-group") == Some(&json!("cs")),
            format!("pod {} names its PodGroup", crate::kube_util::name_of(&pod)),
        )?;
        c.that(pod["spec"]["schedulerName"] == json!("default-scheduler"), "the TrainJob's scheduler name")?;
    }
    c.figure(format!(
        "coscheduling PodGroup with the gang admitted in {}, bound {} later",
        secs(admitted),
        secs(bound)
    ));

    // Volcano is not served yet: the TrainJob waits, named, and nothing is made for it.
    let tj = w.wait_reason("vc", "Queued", "BinderNotServed", Duration::from_secs(30)).await?;
    let (_, _, message) = condition(&tj, "Queued").unwrap_or_default();
    c.that(
        message.contains("spec.podGroupPolicy.volcano") && message.contains(VOLCANO),
        format!("the condition names the field and the kind: {message}"),
    )?;
    let jobset = w.kube().get("jobset.x-k8s.io/v1alpha2", "JobSet", Some(&w.ns), "vc").await?;
    c.that(jobset.is_none(), "no JobSet for a TrainJob whose binder is not served")?;

    // The coscheduling gang ends: its PodGroup goes with it.
    let ended = kubelet::succeed(&w.suite.kube.client, &w.ns, "trainyard.io/gang=cs").await?;
    c.that(ended == 2, format!("both pods of cs ended ({ended})"))?;
    wait_for("TrainJob cs Complete", Duration::from_secs(60), || async {
        Ok(is_true(&w.trainjob_now("cs").await?, "Complete").then_some(()))
    })
    .await?;
    wait_gone(&w, COSCHEDULING, "cs").await?;
    c.done();

    // Volcano's CRD installed: trainyard finds it within its 30 s look, without a restart.
    let t = std::time::Instant::now();
    install(&mut w, "scheduling.volcano.sh").await?;
    w.wait_admitted(&["vc".into()], Duration::from_secs(60)).await?;
    let found = t.elapsed();
    let group = wait_object(&w, VOLCANO, "vc").await?;
    c.that(group["spec"]["minMember"] == json!(2), format!("Volcano minMember 2: {}", group["spec"]))?;
    c.that(
        group["spec"]["networkTopology"] == json!({"mode": "soft", "highestTierAllowed": 1}),
        format!("the runtime's networkTopology: {}", group["spec"]),
    )?;
    let pods = wait_for("vc's pods", Duration::from_secs(60), || async {
        let pods = w.gang_pods("vc").await?;
        if pods.len() == 2 { Ok(Some(pods)) } else { Err(anyhow!("{} pods", pods.len())) }
    })
    .await?;
    for pod in &pods {
        c.that(
            pod.pointer("/metadata/annotations/scheduling.k8s.io~1group-name") == Some(&json!("vc")),
            "a Volcano pod names its PodGroup",
        )?;
        c.that(pod["spec"]["schedulerName"] == json!("volcano"), "and Volcano as its scheduler")?;
    }

    // Suspended, the gang stops and its PodGroup goes.
    w.kube()
        .merge("trainer.kubeflow.org/v1alpha1", "TrainJob", Some(&w.ns), "vc", &json!({"spec": {"suspend": true}}))
        .await?;
    wait_gone(&w, VOLCANO, "vc").await?;
    c.done();
    c.figure(format!(
        "Volcano's CRD found and its TrainJob admitted {} after the install, its PodGroup removed on suspension",
        secs(found)
    ));
    w.teardown().await?;
    kai(suite, &mut c).await?;
    Ok(c)
}

/// A controller started with `--binder kai`: a runtime that names no binder gets KAI's PodGroup,
/// its JobSet and pods tell KAI's own grouper to skip them, and the group goes when the gang ends.
async fn kai(suite: &mut Suite, c: &mut Checks) -> Result<()> {
    let mut w = World::new(suite, "bindk").await?;
    w.grid(1, 1, 2).await?;
    let queue = w.queue("team", 16, None).await?;
    install(&mut w, "scheduling.run.ai").await?;
    w.torch_runtime().await?;
    w.start_trainyard(&["--binder", "kai"]).await?;
    let mut job = w.trainjob("kj", &queue, 2, 8);
    job["metadata"]["labels"]["kai.scheduler/queue"] = json!("team-a");
    job["metadata"]["annotations"] = json!({"trainyard.io/scheduler-name": "default-scheduler"});
    w.submit(&[job]).await?;
    w.wait_admitted(&["kj".into()], Duration::from_secs(30)).await?;
    let group = wait_object(&w, KAI, "kj").await?;
    c.that(
        group["spec"]["minMember"] == json!(2) && group["spec"]["queue"] == json!("team-a"),
        format!("KAI's PodGroup holds the gang in the TrainJob's KAI queue: {}", group["spec"]),
    )?;
    let jobset = w.kube().get("jobset.x-k8s.io/v1alpha2", "JobSet", Some(&w.ns), "kj").await?.context("no JobSet")?;
    c.that(
        jobset.pointer("/metadata/annotations/kai.scheduler~1skip-podgrouper") == Some(&json!("true")),
        "the JobSet tells KAI's grouper to skip it",
    )?;
    w.wait_bound_as_recorded("kj", 2, Duration::from_secs(60)).await?;
    for pod in w.gang_pods("kj").await? {
        c.that(
            pod.pointer("/metadata/annotations/pod-group-name") == Some(&json!("kj"))
                && pod.pointer("/metadata/labels/kai.scheduler~1queue") == Some(&json!("team-a")),
            "a KAI pod names its PodGroup and queue",
        )?;
    }
    kubelet::succeed(&w.suite.kube.client, &w.ns, "trainyard.io/gang=kj").await?;
    wait_gone(&w, KAI, "kj").await?;
    c.done();
    c.figure("KAI PodGroup from --binder kai, removed when the gang completed".to_string());
    w.teardown().await
}

/// Installs a binder's PodGroup CRD, removed again at teardown.
async fn install(w: &mut World<'_>, group: &str) -> Result<()> {
    let crd = pod_group_crd(group).with_context(|| format!("no CRD for {group}"))?;
    install_crd(w.kube(), "e2e", &crd).await?;
    w.cluster_object(crd).await
}

/// A torch runtime named `name` with this `podGroupPolicy`.
async fn runtime(w: &World<'_>, name: &str, policy: Value) -> Result<()> {
    w.torch_runtime_as(name, json!({})).await?;
    w.kube()
        .merge(
            "trainer.kubeflow.org/v1alpha1",
            "TrainingRuntime",
            Some(&w.ns),
            name,
            &json!({"spec": {"podGroupPolicy": policy}}),
        )
        .await?;
    Ok(())
}

async fn wait_object(w: &World<'_>, api_version: &str, name: &str) -> Result<Value> {
    wait_for(&format!("PodGroup {name} ({api_version})"), Duration::from_secs(30), || async {
        w.kube().get(api_version, "PodGroup", Some(&w.ns), name).await?.map(Some).ok_or_else(|| anyhow!("not there"))
    })
    .await
}

async fn wait_gone(w: &World<'_>, api_version: &str, name: &str) -> Result<()> {
    wait_for(&format!("PodGroup {name} ({api_version}) gone"), Duration::from_secs(60), || async {
        match w.kube().get(api_version, "PodGroup", Some(&w.ns), name).await? {
            None => Ok(Some(())),
            Some(_) => Err(anyhow!("still there")),
        }
    })
    .await
}
