//! Lifecycle plans by value: one test per path a TrainJob can take.

use trainyard::api::trainer::TrainJobStatus;
use trainyard::api::{ADMISSION_ANNOTATION, REQUIRED_TOPOLOGY};
use trainyard::controller::deciding::plan::{Action, Mode, PATCH_MANAGER, SecretSeen, WorkloadView};
use trainyard::controller::deciding::scheduling_loop::Decision;
use trainyard_bridges::TOPOLOGY_GATE;

use super::common::*;

fn c(t: &str, s: &str, r: &str) -> (String, String, String) {
    (t.into(), s.into(), r.into())
}

fn admitted_world(nodes: &[(&str, u32)]) -> World {
    let mut w = World::new(with_finalizer(job(TORCH_JOB)), TORCH_RUNTIME);
    let r = record(nodes);
    w.job.metadata.annotations.get_or_insert_with(Default::default).insert(ADMISSION_ANNOTATION.into(), r.encode());
    w.decision = Some(Decision::Running);
    w
}

/// Applies the status a plan sets, as the API server would.
fn settle_status(w: &mut World, actions: &[Action]) {
    for a in actions {
        if let Action::Status { conditions, .. } = a {
            w.job.status.get_or_insert_with(TrainJobStatus::default).conditions = conditions.clone();
        }
    }
}

#[test]
fn a_new_job_gets_the_finalizer_and_waits_with_the_engine_reason() {
    let mut w = World::new(job(TORCH_JOB), TORCH_RUNTIME);
    w.decision = Some(Decision::Pending { reason: "QuotaExceeded".into(), message: "queue vision is full".into() });
    let actions = w.plan();
    assert_eq!(names(&actions), vec!["AddFinalizer", "Status"]);
    assert_eq!(conditions(&actions), vec![c("Queued", "True", "QuotaExceeded"), c("Admitted", "False", "Pending")]);
}

#[test]
fn an_admission_is_recorded_before_the_jobset_is_applied() {
    let mut w = World::new(with_finalizer(job(TORCH_JOB)), TORCH_RUNTIME);
    w.decision = Some(Decision::Admit(record(&[("host-a", 2), ("host-b", 1)])));
    let actions = w.plan();
    assert_eq!(names(&actions), vec!["RecordAdmission", "Event Admitted", "Apply JobSet", "Status"]);
    let Action::Apply(jobset) = &actions[2] else { unreachable!() };
    let node = jobset["spec"]["replicatedJobs"].as_array().unwrap().iter().find(|r| r["name"] == "node").unwrap();
    let pod = &node["template"]["spec"]["template"];
    assert_eq!(pod["spec"]["schedulingGates"][0]["name"], TOPOLOGY_GATE);
    assert_eq!(pod["metadata"]["labels"]["trainyard.io/gang"], "resnet-cpu");
    assert_eq!(jobset["spec"]["suspend"], false);
    assert_eq!(conditions(&actions), vec![c("Admitted", "True", "Admitted"), c("Queued", "False", "Admitted")]);
}

#[test]
fn gated_pods_are_bound_to_their_slots_and_a_converged_job_plans_nothing() {
    let mut w = admitted_world(&[("host-a", 2), ("host-b", 1)]);
    w.workload = Some(WorkloadView::default());
    w.pods = vec![gated_pod("resnet-cpu", 2, true), gated_pod("resnet-cpu", 0, true), gated_pod("resnet-cpu", 1, true)];
    let actions = w.plan();
    assert_eq!(
        names(&actions),
        vec![
            "Ungate resnet-cpu-node-0-0->host-a",
            "Ungate resnet-cpu-node-0-1->host-a",
            "Ungate resnet-cpu-node-0-2->host-b",
            "Status"
        ]
    );
    settle_status(&mut w, &actions);
    w.pods.iter_mut().for_each(|p| p.gates.clear());
    assert_eq!(w.plan(), vec![], "nothing left to do once pods are bound and conditions set");
}

#[test]
fn a_completed_jobset_completes_the_trainjob_then_the_finalizer_goes() {
    let mut w = admitted_world(&[("host-a", 3)]);
    w.workload =
        Some(WorkloadView { completed: Some(("AllJobsCompleted".into(), "done".into())), ..Default::default() });
    let actions = w.plan();
    assert_eq!(names(&actions), vec!["Event AllJobsCompleted", "Status"]);
    assert_eq!(conditions(&actions), vec![c("Complete", "True", "AllJobsCompleted")]);
    settle_status(&mut w, &actions);
    assert_eq!(names(&w.plan()), vec!["RemoveFinalizer"]);
}

#[test]
fn a_failed_jobset_fails_the_trainjob_with_its_reason() {
    let mut w = admitted_world(&[("host-a", 3)]);
    w.workload =
        Some(WorkloadView { failed: Some(("ReachedMaxRestarts".into(), "3 restarts".into())), ..Default::default() });
    let actions = w.plan();
    assert_eq!(conditions(&actions), vec![c("Failed", "True", "ReachedMaxRestarts")]);
    assert!(names(&actions).contains(&"Event ReachedMaxRestarts".to_string()));
}

#[test]
fn deleting_a_job_deletes_what_it_launched_then_releases_the_finalizer() {
    let mut w = admitted_world(&[("host-a", 3)]);
    w.workload = Some(WorkloadView::default());
    w.job.metadata.deletion_timestamp = Some(now());
    assert_eq!(names(&w.plan()), vec!["Delete JobSet", "RemoveFinalizer"]);
    w.job.metadata.finalizers = None;
    assert_eq!(w.plan(), vec![], "without our finalizer a deleted job is not ours to hold");
}

#[test]
fn a_preempted_job_loses_its_workload_and_record_and_waits_again() {
    let mut w = admitted_world(&[("host-a", 3)]);
    w.workload = Some(WorkloadView::default());
    w.decision = Some(Decision::Preempt { by: "vision/urgent".into() });
    let actions = w.plan();
    assert_eq!(names(&actions), vec!["Delete JobSet", "ClearAdmission", "Event Preempted", "Status"]);
    assert_eq!(conditions(&actions), vec![c("Admitted", "False", "Preempted"), c("Queued", "True", "Preempted")]);
}

#[test]
fn suspending_a_running_job_suspends_the_jobset_in_place_and_resuming_reports_it() {
    let mut w = admitted_world(&[("host-a", 3)]);
    w.workload = Some(WorkloadView::default());
    w.job.spec.0.suspend = Some(true);
    let actions = w.plan();
    assert_eq!(names(&actions), vec!["Apply JobSet", "ClearAdmission", "Event Suspended", "Status"]);
    let Action::Apply(jobset) = &actions[0] else { unreachable!() };
    assert_eq!(jobset["spec"]["suspend"], true);
    assert_eq!(conditions(&actions)[0], c("Suspended", "True", "Suspended"));
    // Resumed and admitted again: the JobSet is applied unsuspended and Suspended turns False.
    settle_status(&mut w, &actions);
    w.job.spec.0.suspend = Some(false);
    w.workload = Some(WorkloadView { suspended: true, ..Default::default() });
    w.decision = Some(Decision::Admit(record(&[("host-b", 3)])));
    let actions = w.plan();
    assert!(names(&actions).contains(&"Apply JobSet".to_string()));
    assert!(conditions(&actions).contains(&c("Suspended", "False", "Resumed")));
}

#[test]
fn zero_nodes_fails_the_job_naming_the_field_and_creates_nothing() {
    let mut w = World::new(job(TORCH_JOB), TORCH_RUNTIME);
    w.job.spec.0.trainer.as_mut().unwrap().num_nodes = Some(0);
    let problem = w.intent().unwrap_err();
    assert_eq!(problem.field, "spec.trainer.numNodes");
    let actions = w.plan();
    assert_eq!(names(&actions), vec!["AddFinalizer", "Event InvalidSpec", "Status"]);
    assert_eq!(conditions(&actions), vec![c("Failed", "True", "InvalidSpec"), c("Admitted", "False", "InvalidSpec")]);
    let Action::Status { conditions, .. } = &actions[2] else { unreachable!() };
    assert!(conditions[0].message.starts_with("spec.trainer.numNodes:"), "{}", conditions[0].message);
}

#[test]
fn an_unknown_runtime_keeps_the_job_queued_false_naming_the_field() {
    let mut w = World::new(job(TORCH_JOB), TORCH_RUNTIME);
    w.job.spec.0.runtime_ref.name = "no-such-runtime".into();
    let actions = w.plan();
    assert_eq!(conditions(&actions)[0], c("Queued", "False", "RuntimeNotFound"));
    let Action::Status { conditions, .. } = actions.last().unwrap() else { unreachable!() };
    assert!(conditions[0].message.starts_with("spec.runtimeRef.name:"));
    assert!(!names(&actions).iter().any(|n| n.starts_with("Apply")));
}

#[test]
fn a_malformed_topology_annotation_names_the_annotation() {
    let mut w = World::new(job(TORCH_JOB), TORCH_RUNTIME);
    w.job.metadata.annotations.get_or_insert_with(Default::default).insert(REQUIRED_TOPOLOGY.into(), "".into());
    let actions = w.plan();
    assert_eq!(conditions(&actions)[0], c("Queued", "False", "InvalidTopologyRequest"));
    let Action::Status { conditions, .. } = actions.last().unwrap() else { unreachable!() };
    assert!(conditions[0].message.contains(REQUIRED_TOPOLOGY), "{}", conditions[0].message);
}

#[test]
fn a_runtime_estimate_that_is_not_a_duration_names_the_annotation() {
    let mut w = World::new(job(TORCH_JOB), TORCH_RUNTIME);
    let annotations = w.job.metadata.annotations.get_or_insert_with(Default::default);
    annotations.insert("trainyard.io/runtime-estimate".into(), "soon".into());
    let actions = w.plan();
    assert_eq!(conditions(&actions)[0], c("Queued", "False", "InvalidSpec"));
    let Action::Status { conditions, .. } = actions.last().unwrap() else { unreachable!() };
    assert!(conditions[0].message.contains("trainyard.io/runtime-estimate"), "{}", conditions[0].message);
    assert!(!names(&actions).iter().any(|n| n.starts_with("Apply")));
}

#[test]
fn a_gang_larger_than_any_domain_is_reported_unschedulable_and_nothing_is_created() {
    let mut w = World::new(with_finalizer(job(TORCH_JOB)), TORCH_RUNTIME);
    w.decision =
        Some(Decision::Unschedulable { reason: "NeverFits".into(), message: "needs 3 hosts in one rack".into() });
    let actions = w.plan();
    assert_eq!(names(&actions), vec!["Event NeverFits", "Status"]);
    assert_eq!(conditions(&actions)[0], c("Queued", "False", "NeverFits"));
}

#[test]
fn mpi_jobs_get_their_ssh_key_and_hostfile_before_the_jobset() {
    let mut w = World::new(with_finalizer(job(MPI_JOB)), MPI_RUNTIME);
    w.decision = Some(Decision::Admit(record(&[("host-a", 3)])));
    w.ssh_secret = Some(SecretSeen::Absent);
    let actions = w.plan();
    assert_eq!(
        names(&actions),
        vec![
            "RecordAdmission",
            "Event Admitted",
            "CreateSshSecret ds-t5-mpi-ssh-auth",
            "Apply ConfigMap",
            "Apply JobSet",
            "Status"
        ]
    );
    let Action::Apply(cm) = &actions[3] else { unreachable!() };
    assert_eq!(cm["metadata"]["name"], "ds-t5-mpi-hostfile");
    assert_eq!(cm["metadata"]["labels"]["trainyard.io/gang"], "ds-t5");
}

#[test]
fn an_mpi_gang_whose_key_exists_makes_no_other() {
    let mut w = World::new(with_finalizer(job(MPI_JOB)), MPI_RUNTIME);
    w.decision = Some(Decision::Admit(record(&[("host-a", 3)])));
    w.ssh_secret = Some(SecretSeen::Ours);
    assert!(!names(&w.plan()).iter().any(|n| n.starts_with("CreateSshSecret")));
}

#[test]
fn an_mpi_gang_waits_while_an_earlier_trainjobs_key_is_collected() {
    let mut w = World::new(with_finalizer(job(MPI_JOB)), MPI_RUNTIME);
    let r = record(&[("host-a", 3)]);
    w.job.metadata.annotations.get_or_insert_with(Default::default).insert(ADMISSION_ANNOTATION.into(), r.encode());
    w.decision = Some(Decision::Running);
    w.ssh_secret = Some(SecretSeen::Previous);
    let actions = w.plan();
    assert!(
        !names(&actions).iter().any(|n| n.starts_with("Apply") || n.starts_with("Create")),
        "{:?}",
        names(&actions)
    );
    w.ssh_secret = Some(SecretSeen::Absent);
    assert!(names(&w.plan()).iter().any(|n| n.starts_with("CreateSshSecret")), "launched once it is gone");
}

#[test]
fn a_secret_trainyard_did_not_make_fails_the_trainjob_and_is_left_alone() {
    let mut w = World::new(with_finalizer(job(MPI_JOB)), MPI_RUNTIME);
    w.decision = Some(Decision::Admit(record(&[("host-a", 3)])));
    w.ssh_secret = Some(SecretSeen::Foreign("Secret ml/ds-t5-mpi-ssh-auth exists".into()));
    let actions = w.plan();
    assert_eq!(names(&actions), vec!["Event SshSecretConflict", "Status"]);
    let failed = conditions(&actions).into_iter().find(|c| c.0 == "Failed");
    assert_eq!(failed, Some(c("Failed", "True", "SshSecretConflict")));
}

#[test]
fn companion_mode_admits_by_patching_and_unsuspending_the_trainjob() {
    let mut w = World::new(with_finalizer(job(TORCH_JOB)), TORCH_RUNTIME);
    w.mode = Mode::Companion;
    w.job.spec.0.suspend = Some(true);
    w.decision = Some(Decision::Admit(record(&[("host-a", 3)])));
    let actions = w.plan();
    assert_eq!(names(&actions), vec!["RecordAdmission", "Event Admitted", "PatchTrainJob suspend=false", "Status"]);
    let Action::PatchTrainJob { runtime_patch: Some(patch), .. } = &actions[2] else { unreachable!() };
    assert_eq!(patch["manager"], PATCH_MANAGER);
    let rjob = &patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0];
    assert_eq!(rjob["name"], "node");
    assert_eq!(rjob["template"]["spec"]["template"]["spec"]["schedulingGates"][0]["name"], TOPOLOGY_GATE);
    // Kubeflow owns Suspended/Complete/Failed in companion mode: trainyard writes only its own.
    assert_eq!(conditions(&actions), vec![c("Admitted", "True", "Admitted"), c("Queued", "False", "Admitted")]);
}

#[test]
fn companion_mode_leaves_unsuspended_jobs_alone_and_says_why() {
    let mut w = World::new(with_finalizer(job(TORCH_JOB)), TORCH_RUNTIME);
    w.mode = Mode::Companion;
    let actions = w.plan();
    assert_eq!(names(&actions), vec!["Event NotSuspended", "Status"]);
    assert_eq!(conditions(&actions), vec![c("Queued", "False", "NotSuspended")]);
}

#[test]
fn companion_preemption_suspends_the_trainjob_and_drops_the_patch() {
    let mut w = admitted_world(&[("host-a", 3)]);
    w.mode = Mode::Companion;
    w.decision = Some(Decision::Preempt { by: "vision/urgent".into() });
    let actions = w.plan();
    assert_eq!(names(&actions), vec!["PatchTrainJob suspend=true", "ClearAdmission", "Event Preempted", "Status"]);
    assert!(matches!(&actions[0], Action::PatchTrainJob { runtime_patch: None, suspend: true }));
}

#[test]
fn with_the_gang_api_the_pod_group_is_applied_before_the_jobset_and_pods_join_it() {
    use trainyard::controller::acting::gang_api::GangApi;
    let mut w = World::new(with_finalizer(job(TORCH_JOB)), TORCH_RUNTIME);
    w.gang_api = Some(GangApi::V1alpha2);
    w.decision = Some(Decision::Admit(record(&[("host-a", 3)])));
    let actions = w.plan();
    assert_eq!(
        names(&actions),
        vec!["RecordAdmission", "Event Admitted", "Apply Workload", "Apply PodGroup", "Apply JobSet", "Status"]
    );
    let Action::Apply(group) = &actions[3] else { unreachable!() };
    assert_eq!(group["apiVersion"], "scheduling.k8s.io/v1alpha2");
    assert_eq!(group["spec"]["schedulingPolicy"]["gang"]["minCount"], 3);
    assert_eq!(group["metadata"]["ownerReferences"][0]["kind"], "TrainJob");
    let Action::Apply(jobset) = &actions[4] else { unreachable!() };
    for rjob in jobset["spec"]["replicatedJobs"].as_array().unwrap() {
        let link = &rjob["template"]["spec"]["template"]["spec"]["schedulingGroup"];
        if rjob["name"] == "node" {
            assert_eq!(link["podGroupName"], "resnet-cpu-gang");
        } else {
            assert!(link.is_null(), "initializers are not in the gang");
        }
    }
}

#[test]
fn a_gang_of_one_pod_gets_no_pod_group() {
    use trainyard::controller::acting::gang_api::GangApi;
    let mut w = World::new(with_finalizer(job(&TORCH_JOB.replace("numNodes: 3", "numNodes: 1"))), TORCH_RUNTIME);
    w.gang_api = Some(GangApi::V1alpha2);
    w.decision = Some(Decision::Admit(record(&[("host-a", 1)])));
    let actions = w.plan();
    assert_eq!(names(&actions), vec!["RecordAdmission", "Event Admitted", "Apply JobSet", "Status"]);
    let Action::Apply(jobset) = &actions[2] else { unreachable!() };
    assert!(!jobset.to_string().contains("schedulingGroup"), "the pod names no group");
}

#[test]
fn a_job_past_its_active_deadline_fails_and_its_jobset_goes() {
    let mut w = admitted_world(&[("host-a", 3)]);
    w.workload = Some(WorkloadView::default());
    // Admitted at t=100 with a 60 s deadline; "now" in these tests is far later.
    w.job.spec.0.active_deadline_seconds = Some(60);
    let actions = w.plan();
    assert_eq!(names(&actions), vec!["Delete JobSet", "Event DeadlineExceeded", "Status"]);
    assert_eq!(conditions(&actions), vec![c("Failed", "True", "DeadlineExceeded")]);
    w.job.spec.0.active_deadline_seconds = Some(10_000_000_000);
    assert!(!names(&w.plan()).contains(&"Delete JobSet".to_string()), "a deadline in the future changes nothing");
}

#[test]
fn a_recorded_admission_wins_over_a_new_decision() {
    let mut w = admitted_world(&[("host-a", 3)]);
    w.workload = Some(WorkloadView::default());
    w.decision = Some(Decision::Admit(record(&[("host-b", 3)])));
    let actions = w.plan();
    assert!(!names(&actions).contains(&"RecordAdmission".to_string()), "the running placement is not overwritten");
}

#[test]
fn a_running_job_whose_runtime_vanished_is_not_failed_or_withdrawn() {
    let mut w = admitted_world(&[("host-a", 3)]);
    w.workload = Some(WorkloadView::default());
    w.job.spec.0.runtime_ref.name = "deleted-runtime".into();
    let actions = w.plan();
    assert!(conditions(&actions).iter().all(|(t, _, _)| t != "Failed" && t != "Queued"), "{actions:?}");
    assert!(!names(&actions).iter().any(|n| n.starts_with("Delete")));
}
