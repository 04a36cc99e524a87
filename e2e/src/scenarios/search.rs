//! A hyperparameter search run by trainyard in standalone mode: an OptimizationJob of 6 trials,
//! 2 at a time, on a queue with room for 2 gangs. Never more than 2 trials admitted at once, each
//! trial's values in its trainer's environment, every trial accounted for, and the best trial (the
//! lowest loss the trials report in their status) in the search's status; deleting the search
//! deletes its trials. A search whose parameter cannot reach a trial fails naming the field and
//! makes none; one the CRD's rules refuse is never stored; one whose trial name another TrainJob
//! holds fails naming it and leaves that TrainJob alone.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};

use crate::Options;
use crate::kube_util::{condition, is_true, name_of, wait_for};
use crate::scenarios::install_crd;
use crate::standins::kubelet;
use crate::suite::{Checks, Suite, secs};
use crate::world::World;

const API: &str = "trainer.kubeflow.org/v1alpha1";
/// The loss trial `i` reports: trial 3 is the best.
const LOSSES: [&str; 6] = ["0.92", "0.71", "0.55", "0.23", "0.64", "0.48"];

/// Runs the scenario.
pub async fn run(suite: &mut Suite, _: &Options) -> Result<Checks> {
    let mut c = Checks::default();
    let crd = optimization_crd(&suite.binary)?;
    let mut w = World::new(suite, "search").await?;
    w.grid(1, 1, 4).await?;
    let queue = w.queue("team", 16, None).await?;
    install_crd(w.kube(), "e2e", &crd).await?;
    w.cluster_object(crd).await?;
    w.torch_runtime().await?;
    w.start_trainyard(&[]).await?;

    let template = w.trainjob("template", &queue, 1, 8);
    let search = |name: &str, parameter: &str, trials: u32, parallel: u32| {
        json!({
            "apiVersion": API, "kind": "OptimizationJob",
            "metadata": {"name": name, "namespace": w.ns},
            "spec": {
                "objectives": [{"metric": "loss", "direction": "Minimize"}],
                "searchAlgorithm": {"random": {"seed": 7}},
                "parameters": [
                    {"name": parameter, "searchSpace": {"logUniform": {"min": "1e-4", "max": "1e-1"}}},
                    {"name": "batch", "searchSpace": {"categorical": {"choices": ["32", "64"]}}},
                ],
                "numTrials": trials,
                "parallelTrials": parallel,
                "trainJobTemplate": {"metadata": {"labels": template["metadata"]["labels"]}, "spec": template["spec"]},
            },
        })
    };
    // The CRD's own rule: never stored.
    let refused = w.kube().create(&search("too-wide", "lr", 2, 3)).await;
    c.that(refused.is_err(), "the API server refuses parallelTrials above numTrials")?;
    w.kube().create(&search("bad", "learning rate", 2, 1)).await?;
    w.kube().create(&search("tune", "learning-rate", 6, 2)).await?;

    let (reason, message) = failure(&w, "bad").await?;
    c.that(
        reason == "InvalidSpec" && message.contains("spec.parameters[0].name"),
        format!("the refusal names the field: {reason}: {message}"),
    )?;

    let started = Instant::now();
    let (mut most_admitted, mut finished) = (0usize, BTreeSet::new());
    let mut admitted_at: BTreeMap<String, Duration> = BTreeMap::new();
    let done = loop {
        if started.elapsed() > Duration::from_secs(240) {
            bail!("the search did not end in 240 s; trials finished: {finished:?}");
        }
        let trials = w.kube().list(API, "TrainJob", Some(&w.ns), Some("trainyard.io/search=tune")).await?;
        let admitted: Vec<&Value> =
            trials.iter().filter(|t| is_true(t, "Admitted") && !is_true(t, "Complete")).collect();
        most_admitted = most_admitted.max(admitted.len());
        for trial in admitted {
            let name = name_of(trial);
            admitted_at.entry(name.clone()).or_insert(started.elapsed());
            if finished.contains(&name) {
                continue;
            }
            let pods = w.gang_pods(&name).await?;
            if pods.is_empty() || pods.iter().any(|p| p["spec"]["nodeName"].as_str().is_none()) {
                continue;
            }
            // The trial reports its loss as Trainer's runtime does, then its pods end.
            let index: usize = trial["metadata"]["annotations"]["trainyard.io/trial"]
                .as_str()
                .and_then(|i| i.parse().ok())
                .with_context(|| format!("trial {name} has no index"))?;
            let at = k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
            let metrics = json!({"status": {"trainerStatus": {
                "metrics": [{"name": "loss", "value": LOSSES[index]}], "lastUpdatedTime": at,
            }}});
            w.kube().merge_status(API, "TrainJob", Some(&w.ns), &name, &metrics).await?;
            kubelet::succeed(&w.suite.kube.client, &w.ns, &format!("trainyard.io/gang={name}")).await?;
            finished.insert(name);
        }
        let now = w.kube().get(API, "OptimizationJob", Some(&w.ns), "tune").await?.context("tune is gone")?;
        if is_true(&now, "Complete") || is_true(&now, "Failed") {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    c.that(most_admitted <= 2, format!("at most 2 trials admitted at once, saw {most_admitted}"))?;
    c.that(most_admitted == 2, "two trials ran side by side")?;
    let trials = w.kube().list(API, "TrainJob", Some(&w.ns), Some("trainyard.io/search=tune")).await?;
    c.that(trials.len() == 6, format!("6 trials, found {}", trials.len()))?;
    c.that(trials.iter().all(|t| is_true(t, "Complete")), "every trial Complete")?;
    for trial in &trials {
        let env = trial["spec"]["trainer"]["env"].as_array().cloned().unwrap_or_default();
        let names: Vec<&str> = env.iter().filter_map(|e| e["name"].as_str()).collect();
        c.that(
            names.contains(&"KUBEFLOW_TRAINER_OPT_LEARNING_RATE") && names.contains(&"KUBEFLOW_TRAINER_OPT_BATCH"),
            format!("trial {} gets its values in its environment: {names:?}", name_of(trial)),
        )?;
    }
    c.that(
        done.pointer("/status/result/trainJobName") == Some(&json!("tune-trial-3")),
        format!("the best trial is trial 3 (loss 0.23): {}", done["status"]["result"]),
    )?;
    c.that(done["status"]["trials"].as_array().is_some_and(|t| t.len() == 6), "the search's status lists every trial")?;
    let none_bad = w.kube().list(API, "TrainJob", Some(&w.ns), Some("trainyard.io/search=bad")).await?;
    c.that(none_bad.is_empty(), "no trial for the refused search")?;
    c.figure(format!(
        "6 trials, at most {most_admitted} admitted at once, the search Complete after {}",
        secs(started.elapsed())
    ));

    w.kube().delete(API, "OptimizationJob", Some(&w.ns), "tune").await?;
    wait_for("the trials deleted with their search", Duration::from_secs(90), || async {
        let left = w.kube().list(API, "TrainJob", Some(&w.ns), Some("trainyard.io/search=tune")).await?;
        if left.is_empty() { Ok(Some(())) } else { Err(anyhow!("{} trials left", left.len())) }
    })
    .await?;
    // A TrainJob already holding a trial's name is never taken over: the search fails naming it.
    let mut squatter = w.trainjob("taken-trial-0", &queue, 1, 8);
    squatter["spec"]["suspend"] = json!(true);
    w.submit(&[squatter]).await?;
    w.kube().create(&search("taken", "lr", 2, 1)).await?;
    let (reason, message) = failure(&w, "taken").await?;
    c.that(
        reason == "TrialNameTaken" && message.contains("taken-trial-0"),
        format!("a trial name someone else holds is named: {reason}: {message}"),
    )?;
    let squatter = w.trainjob_now("taken-trial-0").await?;
    c.that(
        squatter["metadata"]["ownerReferences"].as_array().is_none_or(|o| o.is_empty()),
        "the TrainJob holding the name is left as it was",
    )?;
    c.done();
    w.teardown().await?;
    Ok(c)
}

/// The reason and message of an OptimizationJob once it has failed.
async fn failure(w: &World<'_>, name: &str) -> Result<(String, String)> {
    let failed = wait_for(&format!("OptimizationJob {name} Failed"), Duration::from_secs(60), || async {
        let now = w
            .kube()
            .get(API, "OptimizationJob", Some(&w.ns), name)
            .await?
            .with_context(|| format!("{name} is gone"))?;
        if is_true(&now, "Failed") { Ok(Some(now)) } else { Err(anyhow!("status: {}", now["status"])) }
    })
    .await?;
    let (_, reason, message) = condition(&failed, "Failed").unwrap_or_default();
    Ok((reason, message))
}

/// The OptimizationJob CRD as `trainyard crds` prints it.
fn optimization_crd(binary: &std::path::Path) -> Result<Value> {
    let out = std::process::Command::new(binary).arg("crds").output().context("trainyard crds")?;
    let text = String::from_utf8(out.stdout)?;
    text.split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(serde_saphyr::from_str::<Value>)
        .filter_map(Result::ok)
        .find(|d| d["metadata"]["name"] == "optimizationjobs.trainer.kubeflow.org")
        .context("trainyard crds printed no OptimizationJob CRD")
}
