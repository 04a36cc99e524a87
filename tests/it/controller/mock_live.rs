//! From what the live picture decided to the exact requests the API server receives, for each
//! scenario of a real cluster: a foreign 8-GPU pod, a tainted node, a required node affinity, a
//! cordoned, NotReady or deleted node under a running gang, a relist, and a restart. Events are
//! best effort and checked by value; every write is checked here (method, path, body).

use http::StatusCode;
use serde_json::{Value, json};
use trainyard::api::TrainJob;
use trainyard::controller::acting::actor::Actor;
use trainyard::controller::acting::admission_record::AdmissionRecord;
use trainyard::controller::deciding::plan::{Action, WorkloadView};
use trainyard::controller::deciding::scheduling_loop::Decision;

use super::cluster::*;
use super::common::{World, conditions};
use super::mock::{Expect, expect, scenario};

const JOBS: &str = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs";

/// The planner's inputs for a TrainJob of the harness, as the objects stand.
fn world(h: &Harness, name: &str, runtime: &str) -> World {
    let mut w = World::new(h.jobs[&format!("uid-{name}")].clone(), runtime);
    w.decision = h.decision(name);
    w
}

/// The same as its first reconcile sees it: the loop has handed out its arrival order, which the
/// object does not carry yet.
fn first_reconcile(h: &Harness, name: &str, runtime: &str) -> World {
    let mut job = h.jobs[&format!("uid-{name}")].clone();
    let arrival = job.metadata.annotations.as_mut().and_then(|a| a.remove("trainyard.io/arrival"));
    let mut w = World::new(job, runtime);
    w.arrival = arrival.and_then(|a| a.parse().ok());
    w.decision = h.decision(name);
    w
}

/// The job as the server returns it after a write: one resourceVersion later.
fn written(job: &TrainJob, rv: &str) -> Value {
    let mut j = job.clone();
    j.metadata.resource_version = Some(rv.into());
    serde_json::to_value(&j).unwrap()
}

/// The writes of an admission: finalizer, arrival order and record in one patch on the version
/// read, the JobSet, the status.
fn admission_script(job: &TrainJob, record: &AdmissionRecord, arrival: u64) -> Vec<Expect> {
    let name = job.metadata.name.clone().unwrap();
    vec![
        expect("PATCH", format!("{JOBS}/{name}?&fieldManager=trainyard")).content("application/merge-patch+json").body(json!({
            "metadata": {
                "resourceVersion": "1",
                "finalizers": ["trainyard.io/finalizer"],
                "annotations": {"trainyard.io/arrival": arrival.to_string(), "trainyard.io/admission": record.encode()},
            },
        }))
        .reply(StatusCode::OK, written(job, "3")),
        expect("PATCH", format!("/apis/jobset.x-k8s.io/v1alpha2/namespaces/team/jobsets/{name}?&force=true&fieldManager=trainyard"))
            .content("application/apply-patch+yaml")
            .reply(StatusCode::OK, json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name}})),
        expect("PATCH", format!("{JOBS}/{name}/status?&force=true&fieldManager=trainyard"))
            .content("application/apply-patch+yaml")
            .reply(StatusCode::OK, written(job, "4")),
    ]
}

/// Carries out a plan's writes against a scripted server.
async fn carry_out(name: &'static str, w: &World, script: Vec<Expect>) -> Vec<Action> {
    let actions = w.plan();
    let writes: Vec<Action> = actions.iter().filter(|a| !matches!(a, Action::Event { .. })).cloned().collect();
    let (client, verifier) = scenario(name, script);
    Actor::new(client, None).run(&w.job, &writes).await.unwrap_or_else(|e| panic!("{name}: {e}"));
    verifier.await.unwrap();
    actions
}

fn events(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| if let Action::Event { reason, .. } = a { Some(reason.clone()) } else { None })
        .collect()
}

#[tokio::test]
async fn a_foreign_8_gpu_pod_keeps_the_record_off_its_node() {
    let mut h = Harness::new(&[node("n0", 8), node("n1", 8), node("n2", 8)], runtimes(&[runtime_yaml("gpu", "")]));
    h.pod(pod("foreign", "n0", 8, None));
    h.job(trainjob("g1", "gpu", "team", 2, 8, 0));
    h.cycle();
    let record = h.admitted("g1");
    assert_eq!(hosts_of(&record), vec!["n1", "n2"]);
    let w = first_reconcile(&h, "g1", &runtime_yaml("gpu", ""));
    let actions = carry_out("foreign-pod", &w, admission_script(&w.job, &record, 0)).await;
    assert_eq!(events(&actions), vec!["Admitted"]);
}

#[tokio::test]
async fn a_tainted_node_is_recorded_only_for_the_gang_that_tolerates_it() {
    let toleration = "                tolerations: [{key: dedicated, operator: Exists, effect: NoSchedule}]\n";
    let tolerant = runtime_yaml("dedicated", toleration);
    let all = [tainted(node("n0", 8), "dedicated", "ml", "NoSchedule"), node("n1", 8)];
    let mut h = Harness::new(&all, runtimes(&[runtime_yaml("gpu", ""), tolerant.clone()]));
    h.job(trainjob("plain", "gpu", "team", 2, 8, 0));
    h.job(trainjob("owner", "dedicated", "team", 2, 8, 1));
    h.cycle();
    let record = h.admitted("owner");
    assert_eq!(hosts_of(&record), vec!["n0", "n1"]);
    let w = first_reconcile(&h, "owner", &tolerant);
    carry_out("tainted-owner", &w, admission_script(&w.job, &record, 1)).await;
    // The other gang can never fit without the toleration: its status says so, nothing is created.
    let mut w = world(&h, "plain", &runtime_yaml("gpu", ""));
    w.job = super::common::with_finalizer(w.job);
    let status = expect("PATCH", format!("{JOBS}/plain/status?&force=true&fieldManager=trainyard"))
        .reply(StatusCode::OK, written(&w.job, "2"));
    let actions = carry_out("tainted-plain", &w, vec![status]).await;
    assert!(conditions(&actions).contains(&("Queued".into(), "False".into(), "NeverFits".into())), "{actions:?}");
}

#[tokio::test]
async fn a_required_affinity_is_honoured_in_the_record() {
    let affinity = "                affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [train]}]}]}}}\n";
    let rt = runtime_yaml("pinned", affinity);
    let all = [node("n0", 8), labelled(node("n1", 8), "pool", "train"), labelled(node("n2", 8), "pool", "train")];
    let mut h = Harness::new(&all, runtimes(std::slice::from_ref(&rt)));
    h.job(trainjob("g1", "pinned", "team", 2, 8, 0));
    h.cycle();
    let record = h.admitted("g1");
    assert_eq!(hosts_of(&record), vec!["n1", "n2"]);
    let w = first_reconcile(&h, "g1", &rt);
    carry_out("affinity", &w, admission_script(&w.job, &record, 0)).await;
}

/// A gang running on two of three nodes, with its JobSet.
fn running() -> (Harness, Vec<String>) {
    let mut h = Harness::new(&[node("n0", 8), node("n1", 8), node("n2", 8)], runtimes(&[runtime_yaml("gpu", "")]));
    h.job(trainjob("g1", "gpu", "team", 2, 8, 0));
    h.cycle();
    let hosts = hosts_of(&h.admit("g1"));
    (h, hosts)
}

async fn lost_node_status(h: &Harness, scenario_name: &'static str, why: &str) {
    let mut w = world(h, "g1", &runtime_yaml("gpu", ""));
    w.job = super::common::with_finalizer(w.job);
    w.workload = Some(WorkloadView::default());
    let status = expect("PATCH", format!("{JOBS}/g1/status?&force=true&fieldManager=trainyard"))
        .reply(StatusCode::OK, written(&w.job, "9"));
    let actions = carry_out(scenario_name, &w, vec![status]).await;
    assert!(conditions(&actions).contains(&("NodesReady".into(), "False".into(), "NodeLost".into())), "{actions:?}");
    assert_eq!(events(&actions), vec!["NodeLost"]);
    let Action::Status { conditions, .. } = actions.iter().find(|a| matches!(a, Action::Status { .. })).unwrap() else {
        unreachable!()
    };
    let lost = conditions.iter().find(|c| c.type_ == "NodesReady").unwrap();
    assert!(lost.message.contains(why), "{}", lost.message);
}

#[tokio::test]
async fn a_cordoned_node_under_a_running_gang_is_named_in_its_status() {
    let (mut h, hosts) = running();
    h.node(cordoned(node(&hosts[0], 8)));
    h.cycle();
    lost_node_status(&h, "cordon", &format!("{} (cordoned)", hosts[0])).await;
}

#[tokio::test]
async fn a_not_ready_node_under_a_running_gang_is_named_in_its_status() {
    let (mut h, hosts) = running();
    h.node(not_ready(node(&hosts[0], 8)));
    h.cycle();
    lost_node_status(&h, "not-ready", &format!("{} (not ready)", hosts[0])).await;
}

#[tokio::test]
async fn a_deleted_node_under_a_running_gang_requeues_it_by_policy() {
    let policy = format!("{POLICY}node_loss: {{action: requeue, grace: 1m}}\n");
    let mut h = Harness::with_policy(
        &policy,
        &[node("n0", 8), node("n1", 8), node("n2", 8)],
        runtimes(&[runtime_yaml("gpu", "")]),
    );
    h.job(trainjob("g1", "gpu", "team", 2, 8, 0));
    h.cycle();
    let hosts = hosts_of(&h.admit("g1"));
    h.delete_node(&hosts[0]);
    h.cycle();
    lost_node_status(&h, "deleted", &format!("{} (removed from the cluster)", hosts[0])).await;
    h.advance(60);
    assert!(matches!(h.decision("g1"), Some(Decision::Requeue { .. })), "{:?}", h.decision("g1"));
    let mut w = world(&h, "g1", &runtime_yaml("gpu", ""));
    w.job = super::common::with_finalizer(w.job);
    w.workload = Some(WorkloadView::default());
    let script = vec![
        expect("DELETE", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/team/jobsets/g1?")
            .body(json!({"propagationPolicy": "Background"}))
            .reply(StatusCode::OK, json!({})),
        expect("PATCH", format!("{JOBS}/g1?&fieldManager=trainyard"))
            .content("application/merge-patch+json")
            .body(json!({"metadata": {"annotations": {"trainyard.io/admission": null}}}))
            .reply(StatusCode::OK, written(&w.job, "10")),
        expect("PATCH", format!("{JOBS}/g1/status?&force=true&fieldManager=trainyard"))
            .reply(StatusCode::OK, written(&w.job, "11")),
    ];
    let actions = carry_out("requeue", &w, script).await;
    assert!(conditions(&actions).contains(&("Queued".into(), "True".into(), "NodeLost".into())), "{actions:?}");
}

#[tokio::test]
async fn after_a_relist_a_new_gang_is_recorded_on_the_nodes_that_are_left() {
    let (mut h, hosts) = running();
    let spare = h.nodes.keys().find(|n| !hosts.contains(n)).unwrap().clone();
    // While the watch was down the spare node went and another came.
    h.nodes.remove(&spare);
    h.nodes.insert("n7".into(), node("n7", 8));
    h.relist();
    h.job(trainjob("g2", "gpu", "team", 1, 8, 1));
    h.cycle();
    let record = h.admitted("g2");
    assert_eq!(hosts_of(&record), vec!["n7"]);
    let w = first_reconcile(&h, "g2", &runtime_yaml("gpu", ""));
    carry_out("relist", &w, admission_script(&w.job, &record, 1)).await;
}

#[tokio::test]
async fn a_restarted_controller_writes_nothing_for_a_running_gang() {
    let (h, _) = running();
    let restarted = h.restarted();
    assert_eq!(restarted.decision("team/g1"), Some(&Decision::Running));
    let mut w = world(&h, "g1", &runtime_yaml("gpu", ""));
    w.decision = restarted.decision("team/g1").cloned();
    w.job = super::common::with_finalizer(w.job);
    w.job.metadata.annotations.get_or_insert_with(Default::default).insert("trainyard.io/arrival".into(), "0".into());
    w.workload = Some(WorkloadView::default());
    // Its status already says Admitted: a restart adds no write at all.
    let plan = w.plan();
    let status = plan.iter().find(|a| matches!(a, Action::Status { .. })).cloned();
    if let Some(Action::Status { conditions, .. }) = status {
        w.job.status = Some(trainyard::api::trainer::TrainJobStatus { conditions, ..Default::default() });
    }
    let actions = carry_out("restart", &w, vec![]).await;
    assert!(actions.is_empty(), "{actions:?}");
}
