//! The cluster's own binder in plans: its PodGroup made with the launch and removed when the gang
//! stops, its markers on the gang's pods, and a TrainJob held while its binder is not served.

use serde_json::json;
use trainyard::controller::acting::binders::{BinderKind, BinderSupport};
use trainyard::controller::acting::gang_api::GangApi;
use trainyard::controller::deciding::plan::{Action, Mode, WorkloadView};
use trainyard::controller::deciding::scheduling_loop::Decision;
use trainyard_bridges::trainer::PodGroupPolicy;

use super::common::*;

/// The torch fixture's runtime with this `podGroupPolicy`.
fn world_with_policy(policy: serde_json::Value) -> World {
    let mut w = World::new(with_finalizer(job(TORCH_JOB)), TORCH_RUNTIME);
    let policy: PodGroupPolicy = serde_json::from_value(policy).expect("a podGroupPolicy");
    for runtime in w.runtimes.cluster.values_mut() {
        runtime.spec.pod_group_policy = Some(policy.clone());
    }
    w
}

fn admitted(mut w: World) -> World {
    let r = record(&[("host-a", 2), ("host-b", 1)]);
    w.job
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(trainyard::api::ADMISSION_ANNOTATION.into(), r.encode());
    w.decision = Some(Decision::Running);
    w.workload = Some(WorkloadView::default());
    w
}

fn applied<'a>(actions: &'a [Action], kind: &str) -> &'a serde_json::Value {
    actions
        .iter()
        .find_map(|a| match a {
            Action::Apply(v) if v["kind"] == kind => Some(v),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no {kind} applied: {:?}", names(actions)))
}

/// The pod template of the `node` replicated job of an applied JobSet.
fn node_pod(jobset: &serde_json::Value) -> &serde_json::Value {
    let rjobs = jobset["spec"]["replicatedJobs"].as_array().expect("replicated jobs");
    &rjobs.iter().find(|r| r["name"] == "node").expect("a node job")["template"]["spec"]["template"]
}

#[test]
fn a_volcano_runtime_launches_with_its_pod_group_before_the_jobset() {
    let mut w = world_with_policy(json!({"volcano": {"networkTopology": {"mode": "hard", "highestTierAllowed": 2}}}));
    w.gang_api = Some(GangApi::V1alpha2);
    w.decision = Some(Decision::Admit(record(&[("host-a", 2), ("host-b", 1)])));
    let actions = w.plan();
    assert_eq!(names(&actions), vec!["RecordAdmission", "Event Admitted", "Apply PodGroup", "Apply JobSet", "Status"]);
    let group = applied(&actions, "PodGroup");
    assert_eq!(group["apiVersion"], "scheduling.volcano.sh/v1beta1", "the binder's, not kube-scheduler's");
    assert_eq!(group["metadata"]["name"], "resnet-cpu");
    assert_eq!(group["spec"]["minMember"], 3);
    assert_eq!(group["spec"]["networkTopology"], json!({"mode": "hard", "highestTierAllowed": 2}));
    assert_eq!(group["metadata"]["ownerReferences"][0]["kind"], "TrainJob");
    let jobset = applied(&actions, "JobSet");
    let pod = node_pod(jobset);
    assert_eq!(pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"], "resnet-cpu");
    assert_eq!(pod["spec"]["schedulerName"], "volcano");
    assert!(pod["spec"].get("schedulingGroup").is_none(), "no kube-scheduler group beside the binder's");
    assert!(pod["spec"]["schedulingGates"].is_array(), "trainyard still places: the pods are gated");
}

#[test]
fn a_binder_not_served_holds_the_trainjob_naming_field_and_kind() {
    let mut w = world_with_policy(json!({"coscheduling": {}}));
    w.binders = BinderSupport::new(None, &[BinderKind::Volcano]);
    w.decision = Some(Decision::Admit(record(&[("host-a", 3)])));
    let problem = w.intent().expect_err("the binder is not served");
    assert_eq!(problem.reason, "BinderNotServed");
    assert!(problem.field.starts_with("spec.podGroupPolicy.coscheduling of runtime"), "{}", problem.field);
    assert!(problem.message.contains("scheduling.x-k8s.io/v1alpha1 PodGroup"), "{}", problem.message);
    let actions = w.plan();
    assert!(names(&actions).iter().all(|n| !n.starts_with("Apply") && n != "RecordAdmission"), "{:?}", names(&actions));
    let queued = conditions(&actions).into_iter().find(|(t, ..)| t == "Queued").expect("a Queued condition");
    assert_eq!((queued.1.as_str(), queued.2.as_str()), ("False", "BinderNotServed"));
}

#[test]
fn the_pod_group_goes_when_the_gang_completes_or_is_suspended() {
    let mut w = admitted(world_with_policy(json!({"coscheduling": {"scheduleTimeoutSeconds": 5}})));
    w.workload =
        Some(WorkloadView { completed: Some(("AllJobsCompleted".into(), "done".into())), ..Default::default() });
    let actions = w.plan();
    assert!(names(&actions).contains(&"Delete PodGroup".to_string()), "{:?}", names(&actions));

    let mut w = admitted(world_with_policy(json!({"coscheduling": {}})));
    w.job.spec.0.suspend = Some(true);
    let actions = w.plan();
    let names = names(&actions);
    assert!(names.contains(&"Apply JobSet".to_string()) && names.contains(&"Delete PodGroup".to_string()), "{names:?}");
    assert!(!actions.iter().any(|a| matches!(a, Action::Apply(v) if v["kind"] == "PodGroup")), "not made again");
}

#[test]
fn a_running_gang_does_not_apply_its_pod_group_again() {
    let w = admitted(world_with_policy(json!({"volcano": {}})));
    let actions = w.plan();
    assert!(!names(&actions).iter().any(|n| n.ends_with("PodGroup")), "{:?}", names(&actions));
}

#[test]
fn the_cluster_default_binder_serves_runtimes_that_name_none_and_not_companion_mode() {
    let mut w = World::new(with_finalizer(job(TORCH_JOB)), TORCH_RUNTIME);
    w.binders = BinderSupport::new(Some(BinderKind::Kai), &[BinderKind::Kai]);
    w.decision = Some(Decision::Admit(record(&[("host-a", 3)])));
    let actions = w.plan();
    let group = applied(&actions, "PodGroup");
    assert_eq!(group["apiVersion"], "scheduling.run.ai/v2alpha2");
    assert_eq!(group["spec"]["queue"], "default-queue");
    let jobset = applied(&actions, "JobSet");
    assert_eq!(jobset["metadata"]["annotations"]["kai.scheduler/skip-podgrouper"], "true");
    let pod = node_pod(jobset);
    assert_eq!(pod["metadata"]["annotations"]["pod-group-name"], "resnet-cpu");

    let mut companion = world_with_policy(json!({"volcano": {}}));
    companion.mode = Mode::Companion;
    companion.job.spec.0.suspend = Some(true);
    companion.decision = Some(Decision::Admit(record(&[("host-a", 3)])));
    let actions = companion.plan();
    assert!(!names(&actions).iter().any(|n| n.ends_with("PodGroup")), "Trainer makes it: {:?}", names(&actions));
}

#[test]
fn the_trainjob_names_its_scheduler() {
    let mut w = world_with_policy(json!({"coscheduling": {}}));
    w.job
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("trainyard.io/scheduler-name".into(), "default-scheduler".into());
    w.decision = Some(Decision::Admit(record(&[("host-a", 3)])));
    let actions = w.plan();
    let pod = node_pod(applied(&actions, "JobSet"));
    assert_eq!(pod["spec"]["schedulerName"], "default-scheduler");
    assert_eq!(pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"], "resnet-cpu");
}
