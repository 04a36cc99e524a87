//! A fleet on three control planes: the suite's plane is the manager, `east` and `west` are
//! workers of four 8-GPU hosts each, every one with its own trainyard. TrainJobs submitted to the
//! manager are placed in the worker where they fit, copied there and run by that worker's
//! trainyard; the manager mirrors their status back. A worker's API server killed past the
//! grace loses its gangs to the other worker; back, its stale copies are removed. Throughout:
//! never over the fleet quota, never two live copies of a gang on the workers the manager
//! reaches. Bad worker Secrets are named on their WorkerCluster. Last, a gang with device claims
//! goes to the one worker that publishes devices, with the devices the manager chose.

mod devices;
mod worker;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use serde_json::{Value, json};

use crate::Options;
use crate::helm::Helm;
use crate::kube_util::{Kube, condition, is_true, name_of, wait_for};
use crate::scenarios::api::token_for;
use crate::suite::{Checks, Suite, secs};
use crate::trainyard::{Launch, Replica};
use crate::world::{RACK, World, conditions_line, record_slots};
use worker::Worker;

/// The namespace of the scenario's TrainJobs, on the manager and the workers.
const NS: &str = "e2e-fleet";
/// GPUs per host.
const GPUS: u32 = 8;
/// The Helm release whose RBAC the manager runs with.
const RELEASE: &str = "trainyard-fleet";
/// The fleet queue's quota: six of the eight hosts.
const QUOTA_GPUS: u32 = 48;

/// The run.
pub async fn run(suite: &mut Suite, _: &Options) -> Result<Checks> {
    let mut c = Checks::default();
    let t = Instant::now();
    let east = Worker::start(suite, "east", NS, "fleet", 4).await?;
    let west = Worker::start(suite, "west", NS, "fleet", 4).await?;
    c.figure(format!("two worker planes up in {}", secs(t.elapsed())));
    let mut workers = BTreeMap::from([("east".to_string(), east), ("west".to_string(), west)]);
    let result = scenario(suite, &mut workers, &mut c).await;
    for (_, w) in workers {
        w.stop().await;
    }
    result.map(|()| c)
}

async fn scenario(suite: &mut Suite, workers: &mut BTreeMap<String, Worker>, c: &mut Checks) -> Result<()> {
    let mut w = World::new(suite, "fleet").await?;
    w.topology(&[RACK]).await?;
    let queue = w.queue("q", QUOTA_GPUS, None).await?;
    w.torch_runtime().await?;
    for worker in workers.values() {
        secret(&w, &format!("{}-kubeconfig", worker.name), &worker.kubeconfig_text()?).await?;
        worker_cluster(&mut w, &worker.name, &format!("{}-kubeconfig", worker.name)).await?;
    }
    secret(&w, "broken-kubeconfig", "{not: a kubeconfig").await?;
    worker_cluster(&mut w, "broken", "broken-kubeconfig").await?;
    worker_cluster(&mut w, "ghost", "ghost-kubeconfig").await?;
    secret(&w, "limited-kubeconfig", &limited_kubeconfig(&workers["east"]).await?).await?;
    worker_cluster(&mut w, "limited", "limited-kubeconfig").await?;
    let policy = w.policy("undeclared_queues: reject\nnode_loss: {action: requeue, grace: 5s}\n")?;
    // The manager runs with the chart's manager-mode RBAC, not as the suite's admin.
    let (helm, kubeconfig) = chart_rbac(&w).await?;
    c.figure("the manager runs as the ServiceAccount of the chart installed with mode: manager");
    let launch = Launch {
        name: "trainyard-fleet-manager".into(),
        kubeconfig,
        args: vec![
            "--mode=manager".into(),
            "--topology=fleet".into(),
            "--cycle=1".into(),
            format!("--policy={}", policy.display()),
            format!("--lease-namespace={NS}"),
        ],
    };
    let manager = Replica::start(&w.suite.binary, &launch, &w.suite.plane.logs).await?;
    w.replicas.push(manager);

    // Credentials: the good ones connect, the bad ones are named and left out.
    for name in workers.keys() {
        connected(w.kube(), name, "True").await?;
    }
    let (reason, message) = connected(w.kube(), "ghost", "False").await?;
    c.that(
        reason == "SecretNotFound" && message.contains("worker cluster ghost: spec.kubeconfigSecret.name"),
        format!("a missing Secret is named on its WorkerCluster: {reason}: {message}"),
    )?;
    let (reason, message) = connected(w.kube(), "broken", "False").await?;
    c.that(
        reason == "InvalidKubeconfig" && message.contains("worker cluster broken: spec.kubeconfigSecret"),
        format!("a malformed kubeconfig is named on its WorkerCluster: {reason}: {message}"),
    )?;

    let (reason, message) = connected(w.kube(), "limited", "False").await?;
    c.that(
        reason == "CredentialsRefused" && message.contains("worker cluster limited") && message.contains("nodes"),
        format!("credentials that may not list the worker's nodes are named and left out: {reason}: {message}"),
    )?;

    // Placement: the whole of one worker, then a gang that fits only in the other.
    let t = Instant::now();
    w.submit(&[fleet_job(&w, "big", &queue, 4)]).await?;
    let big = placed(&w, workers, "big", 4).await?;
    c.figure(format!("a 4-host gang running on worker {big} {} after its creation", secs(t.elapsed())));
    w.submit(&[fleet_job(&w, "a", &queue, 2)]).await?;
    let a = placed(&w, workers, "a", 2).await?;
    c.that(a != big, format!("gang a went to the worker with room ({a}), not the full one ({big})"))?;
    // 48 GPUs of quota are used: b waits for quota.
    w.submit(&[fleet_job(&w, "b", &queue, 1)]).await?;
    let waiting = w.wait_reason("b", "Queued", "QuotaExceeded", Duration::from_secs(30)).await;
    let waiting = match waiting {
        Ok(tj) => tj,
        Err(_) => w.trainjob_now("b").await?,
    };
    c.that(
        !is_true(&waiting, "Admitted") && record_slots(&waiting).is_none(),
        format!("gang b waits while the fleet quota is used: {}", conditions_line(&waiting)),
    )?;
    check_invariants(&w, workers, &[]).await?;

    // A warning about the copy on the worker is told on the manager's TrainJob, naming the worker.
    let lag = warning_lag(&w, &workers[&big], "big").await?;
    c.that(lag < Duration::from_secs(1), format!("a worker's warning about big mirrored in {}", secs(lag)))?;
    c.figure(format!("a Warning event on the copy mirrored to the manager's TrainJob in {} ms", lag.as_millis()));

    // Status mirrored: big's pods end on its worker, its copy completes there, the manager's
    // TrainJob says so within a second; the quota it frees admits b.
    let ended = crate::standins::kubelet::succeed(&workers[&big].plane.admin, NS, "trainyard.io/gang=big").await?;
    c.that(ended == 4, format!("the four pods of big ended on {big} (ended {ended})"))?;
    let lag = mirror_lag(&w, &workers[&big], "big").await?;
    c.that(lag < Duration::from_secs(1), format!("Complete mirrored to the manager in {}", secs(lag)))?;
    c.figure(format!("Complete on the worker's copy mirrored to the manager in {} ms", lag.as_millis()));
    let b = placed(&w, workers, "b", 1).await?;
    check_invariants(&w, workers, &[]).await?;

    // A worker lost past the grace: its gangs are requeued on the other one.
    let lost = a.clone();
    let other = if lost == "east" { "west".to_string() } else { "east".to_string() };
    let moving: Vec<&str> = [("a", &a), ("b", &b)].iter().filter(|(_, c)| **c == lost).map(|(n, _)| *n).collect();
    let t = Instant::now();
    workers.get_mut(&lost).expect("a worker").plane.kill_apiserver().await;
    connected(w.kube(), &lost, "False").await?;
    c.figure(format!("worker {lost} seen lost {} after its API server was killed", secs(t.elapsed())));
    for name in &moving {
        wait_for(&format!("gang {name} requeued on {other}"), Duration::from_secs(60), || async {
            check_invariants(&w, workers, &[lost.as_str()]).await?;
            let tj = w.trainjob_now(name).await?;
            let slots = record_slots(&tj).unwrap_or_default();
            if is_true(&tj, "Admitted")
                && slots.iter().all(|s| s.starts_with(&format!("{other}/")))
                && !slots.is_empty()
            {
                return Ok(Some(()));
            }
            Err(anyhow!("record {slots:?}; {}", conditions_line(&tj)))
        })
        .await?;
        let pods = if *name == "a" { 2 } else { 1 };
        bound_where_recorded(&w, &workers[&other], name, pods).await?;
    }
    c.figure(format!(
        "{} gang(s) of {lost} running again on {other} {} after the kill (grace 5 s)",
        moving.len(),
        secs(t.elapsed())
    ));

    // Back: the stale copies are removed, and the worker is connected again.
    let t = Instant::now();
    workers.get_mut(&lost).expect("a worker").plane.start_apiserver().await?;
    wait_for(&format!("the stale copies on {lost} removed"), Duration::from_secs(60), || async {
        let left = workers[&lost].copies(NS).await?;
        let stale: Vec<String> = left.iter().map(name_of).filter(|n| moving.contains(&n.as_str())).collect();
        if stale.is_empty() { Ok(Some(())) } else { Err(anyhow!("still there: {stale:?}")) }
    })
    .await?;
    connected(w.kube(), &lost, "True").await?;
    c.figure(format!("{lost} back: stale copies removed {} after its API server restarted", secs(t.elapsed())));
    check_invariants(&w, workers, &[]).await?;

    // Deleting on the manager deletes the copy.
    let deleted = moving.first().copied().unwrap_or("b");
    w.kube().delete("trainer.kubeflow.org/v1alpha1", "TrainJob", Some(NS), deleted).await?;
    wait_for(&format!("gang {deleted}'s copy deleted with it"), Duration::from_secs(30), || async {
        let left: usize = copies_of(workers, deleted).await?;
        let gone = w.kube().get("trainer.kubeflow.org/v1alpha1", "TrainJob", Some(NS), deleted).await?.is_none();
        if left == 0 && gone { Ok(Some(())) } else { Err(anyhow!("{left} copies; manager's gone: {gone}")) }
    })
    .await?;
    c.done();

    // A runtime the worker lacks: the gang waits with a condition naming it and the worker.
    w.kube().apply(&crate::world::torch_runtime(NS, "torch-manager-only", json!({}))).await?;
    let mut lonely = fleet_job(&w, "lonely", &queue, 1);
    lonely["spec"]["runtimeRef"]["name"] = json!("torch-manager-only");
    w.submit(&[lonely]).await?;
    let tj = w.wait_reason("lonely", "Admitted", "RuntimeNotFound", Duration::from_secs(30)).await?;
    let (_, _, message) = condition(&tj, "Admitted").unwrap_or_default();
    c.that(
        message.contains("TrainingRuntime torch-manager-only") && message.contains("worker cluster"),
        format!("the missing runtime and its worker are named: {message}"),
    )?;
    check_invariants(&w, workers, &[]).await?;

    // A TrainJob naming a worker the fleet lacks waits, naming it.
    let mut pinned = fleet_job(&w, "pinned", &queue, 1);
    pinned["metadata"]["annotations"] = json!({"trainyard.io/worker-cluster": "north"});
    w.submit(&[pinned]).await?;
    let tj = w.wait_reason("pinned", "Queued", "WorkerClusterNotFound", Duration::from_secs(30)).await?;
    let (_, _, message) = condition(&tj, "Queued").unwrap_or_default();
    c.that(
        message.contains("\"north\""),
        format!("a TrainJob naming no worker of the fleet waits naming it: {message}"),
    )?;

    devices::run(&w, workers, &queue, c).await?;
    check_invariants(&w, workers, &[]).await?;
    helm.uninstall(RELEASE, NS).await?;
    w.teardown().await
}

/// The chart installed on the manager's plane with `mode: manager` (its Deployment scaled to
/// none: the harness runs the manager), and a kubeconfig of the chart's ServiceAccount.
async fn chart_rbac(w: &World<'_>) -> Result<(Helm, PathBuf)> {
    let suite = &w.suite;
    let helm = Helm::new(
        suite.python.as_deref(),
        &suite.repo,
        &suite.plane.admin_kubeconfig,
        &suite.run_dir.join("helm-fleet"),
    )?;
    let values = json!({"mode": "manager", "replicas": 0});
    helm.install(&suite.repo.join("charts/trainyard"), RELEASE, NS, &values).await?;
    // The chart names its ServiceAccount after the release (which contains the chart's name).
    let token = token_for(&suite.kube, NS, RELEASE).await?;
    let kubeconfig = suite.plane.kubeconfig_for("fleet-manager-sa", "fleet-manager-sa", &token)?;
    Ok((helm, kubeconfig))
}

/// A TrainJob of `nodes` 8-GPU pods for the fleet (`spec.managedBy` marks it the manager's).
fn fleet_job(w: &World<'_>, name: &str, queue: &str, nodes: u32) -> Value {
    let mut job = w.trainjob(name, queue, nodes, GPUS);
    job["spec"]["managedBy"] = json!("kueue.x-k8s.io/multikueue");
    job
}

async fn secret(w: &World<'_>, name: &str, kubeconfig: &str) -> Result<()> {
    w.kube()
        .apply(&json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": NS},
            "stringData": {"kubeconfig": kubeconfig},
        }))
        .await?;
    Ok(())
}

async fn worker_cluster(w: &mut World<'_>, name: &str, secret: &str) -> Result<()> {
    w.cluster_object(json!({
        "apiVersion": "trainyard.io/v1alpha1", "kind": "WorkerCluster",
        "metadata": {"name": name},
        "spec": {"kubeconfigSecret": {"name": secret}},
    }))
    .await
}

/// A kubeconfig of `worker` whose ServiceAccount may list TrainJobs there but not nodes.
async fn limited_kubeconfig(worker: &Worker) -> Result<String> {
    let kube = &worker.kube;
    kube.apply(
        &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "fleet-limited", "namespace": NS}}),
    )
    .await?;
    kube.apply(&json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "fleet-limited"},
        "rules": [{"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": ["get", "list", "watch"]}]}))
    .await?;
    kube.apply(&json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "fleet-limited"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "fleet-limited"},
        "subjects": [{"kind": "ServiceAccount", "name": "fleet-limited", "namespace": NS}]}))
        .await?;
    worker.kubeconfig_with(&token_for(kube, NS, "fleet-limited").await?)
}

/// Waits until a WorkerCluster's `Connected` has `status`; its reason and message.
async fn connected(kube: &Kube, name: &str, status: &str) -> Result<(String, String)> {
    wait_for(&format!("WorkerCluster {name} Connected={status}"), Duration::from_secs(60), || async {
        let wc = kube.get("trainyard.io/v1alpha1", "WorkerCluster", None, name).await?;
        match wc.as_ref().and_then(|o| condition(o, "Connected")) {
            Some((s, reason, message)) if s == status => Ok(Some((reason, message))),
            other => Err(anyhow!("Connected: {other:?}")),
        }
    })
    .await
}

/// Waits until gang `name` is admitted on the manager, its copy carries the record in the
/// worker's names and its pods are bound there as recorded; the worker it went to.
async fn placed(w: &World<'_>, workers: &BTreeMap<String, Worker>, name: &str, pods: usize) -> Result<String> {
    w.wait_admitted(&[name.to_string()], Duration::from_secs(60)).await?;
    let slots = w.slots(name).await?;
    let cluster = slots.first().and_then(|s| s.split_once('/')).map(|(c, _)| c.to_string()).unwrap_or_default();
    if slots.len() != pods || !slots.iter().all(|s| s.starts_with(&format!("{cluster}/"))) {
        return Err(anyhow!("gang {name}'s record is not {pods} pods of one worker: {slots:?}"));
    }
    let worker = workers.get(&cluster).ok_or_else(|| anyhow!("gang {name} placed in unknown cluster {cluster}"))?;
    bound_where_recorded(w, worker, name, pods).await?;
    Ok(cluster)
}

/// Waits until the copy on `worker` carries the manager's record in its own names and the gang's
/// pods are bound to exactly those nodes.
async fn bound_where_recorded(w: &World<'_>, worker: &Worker, name: &str, pods: usize) -> Result<()> {
    wait_for(&format!("gang {name} bound on {} where recorded", worker.name), Duration::from_secs(60), || async {
        let manager: Vec<String> = w.slots(name).await?;
        let local: Vec<String> =
            manager.iter().filter_map(|s| s.strip_prefix(&format!("{}/", worker.name))).map(str::to_string).collect();
        let copy = worker.copy(NS, name).await?.ok_or_else(|| anyhow!("no copy on {}", worker.name))?;
        let mut copied = record_slots(&copy).unwrap_or_default();
        let mut want = local.clone();
        copied.sort();
        want.sort();
        if copied != want || want.len() != pods {
            return Err(anyhow!("the copy's record {copied:?}, the manager's {manager:?}"));
        }
        let mut bound: Vec<String> = worker.bound_pods(NS, name).await?.into_iter().map(|(_, n)| n).collect();
        bound.sort();
        if bound == want { Ok(Some(())) } else { Err(anyhow!("pods bound to {bound:?}, recorded {want:?}")) }
    })
    .await
}

/// The fleet's invariants as the harness sees them: the gangs admitted on the manager and not
/// ended take at most the quota, and no gang has two copies on the workers that answer (`away`: workers whose
/// API server is down, which nobody can see).
async fn check_invariants(w: &World<'_>, workers: &BTreeMap<String, Worker>, away: &[&str]) -> Result<()> {
    let jobs = w.kube().list("trainer.kubeflow.org/v1alpha1", "TrainJob", Some(NS), None).await?;
    let running = jobs.iter().filter(|j| !is_true(j, "Complete") && !is_true(j, "Failed"));
    let used: usize = running.filter_map(record_slots).map(|s| s.len() * GPUS as usize).sum();
    if used > QUOTA_GPUS as usize {
        return Err(anyhow!("the fleet admitted {used} GPUs over its quota of {QUOTA_GPUS}"));
    }
    let mut copies: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, worker) in workers.iter().filter(|(n, _)| !away.contains(&n.as_str())) {
        for copy in worker.copies(NS).await? {
            copies.entry(name_of(&copy)).or_default().push(name.clone());
        }
    }
    if let Some((gang, on)) = copies.iter().find(|(_, on)| on.len() > 1) {
        return Err(anyhow!("gang {gang} has live copies on {on:?}"));
    }
    Ok(())
}

/// How long after the copy on `worker` showed Complete the manager's TrainJob did.
async fn mirror_lag(w: &World<'_>, worker: &Worker, name: &str) -> Result<Duration> {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut copy_done: Option<Instant> = None;
    loop {
        if Instant::now() > deadline {
            return Err(anyhow!("gang {name} was not Complete on both sides within 90 s"));
        }
        if copy_done.is_none() && worker.copy(NS, name).await?.is_some_and(|c| is_true(&c, "Complete")) {
            copy_done = Some(Instant::now());
        }
        if is_true(&w.trainjob_now(name).await?, "Complete") {
            return Ok(copy_done.map_or(Duration::ZERO, |t| t.elapsed()));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Writes a Warning event about gang `name`'s copy on `worker` (as a component there would) and
/// waits until the manager's TrainJob has it, naming the worker; how long that took.
async fn warning_lag(w: &World<'_>, worker: &Worker, name: &str) -> Result<Duration> {
    let copy = worker.copy(NS, name).await?.ok_or_else(|| anyhow!("no copy of {name} on {}", worker.name))?;
    let uid = copy.pointer("/metadata/uid").cloned().unwrap_or_default();
    let now = k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let t = Instant::now();
    worker
        .kube
        .create(&json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": format!("{name}-e2e-warning"), "namespace": NS},
            "involvedObject": {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                               "name": name, "namespace": NS, "uid": uid},
            "type": "Warning", "reason": "E2EWarning", "message": "a warning raised on the worker",
            "source": {"component": "e2e"}, "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }))
        .await?;
    let manager_uid = w.trainjob_now(name).await?.pointer("/metadata/uid").cloned().unwrap_or_default();
    let want = format!("worker cluster {}: a warning raised on the worker", worker.name);
    wait_for(&format!("{name}'s warning on the manager"), Duration::from_secs(30), || async {
        let events = w.kube().list("v1", "Event", Some(NS), None).await?;
        let found = events.iter().any(|e| {
            e.pointer("/involvedObject/uid") == Some(&manager_uid)
                && e["reason"] == "E2EWarning"
                && e["message"].as_str() == Some(want.as_str())
        });
        if found { Ok(Some(t.elapsed())) } else { Err(anyhow!("not on the manager's TrainJob yet")) }
    })
    .await
}

/// Copies of `name` on every worker that answers.
async fn copies_of(workers: &BTreeMap<String, Worker>, name: &str) -> Result<usize> {
    let mut n = 0;
    for worker in workers.values() {
        n += usize::from(worker.copy(NS, name).await?.is_some());
    }
    Ok(n)
}
