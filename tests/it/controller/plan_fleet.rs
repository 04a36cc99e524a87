//! Manager mode's plan by value: the record and the copy in one reconcile, the worker's verdict
//! mirrored, copies withdrawn when the gang stops, the worker's own requeue taken back, and what
//! waits on a worker that lacks the runtime or cannot be reached.

use trainyard::api::ADMISSION_ANNOTATION;
use trainyard::api::trainer::JobStatus;
use trainyard::api::worker_cluster::{ADMITTED_AT_ANNOTATION, ORIGIN_LABEL};
use trainyard::controller::acting::admission_record::AdmissionRecord;
use trainyard::controller::deciding::plan::{Action, Mode, WorkloadView};
use trainyard::controller::deciding::scheduling_loop::Decision;
use trainyard::controller::fleet::copies::CopyView;

use super::common::*;

const UID: &str = "uid-fleet-1";

/// A fleet TrainJob of the torch fixture with trainyard's finalizer, seen by a manager.
fn manager_world() -> World {
    let mut j = with_finalizer(job(TORCH_JOB));
    j.metadata.uid = Some(UID.into());
    j.spec.0.managed_by = Some(trainyard::api::worker_cluster::FLEET_MANAGED_BY.into());
    let mut w = World::new(j, TORCH_RUNTIME);
    w.mode = Mode::Manager;
    w
}

fn east_record() -> AdmissionRecord {
    record(&[("east/n1", 1), ("east/n2", 1)])
}

fn recorded_on(w: &mut World, r: &AdmissionRecord) {
    w.job.metadata.annotations.get_or_insert_with(Default::default).insert(ADMISSION_ANNOTATION.into(), r.encode());
}

/// The copy on `east` as the worker shows it: written for `at`, with `record` (fleet names).
fn copy(record: Option<AdmissionRecord>, at: u64, workload: WorkloadView) -> CopyView {
    CopyView { cluster: "east".into(), origin: UID.into(), record, admitted_at: Some(at), deleting: false, workload }
}

fn on_east(copy: Option<CopyView>, reachable: bool) -> Option<FleetSeen> {
    Some(FleetSeen { cluster: "east".into(), copy, reachable, runtime_missing: None })
}

#[test]
fn an_admission_writes_the_record_then_the_copy_in_one_reconcile() {
    let mut w = manager_world();
    w.decision = Some(Decision::Admit(east_record()));
    w.fleet = on_east(None, true);
    let actions = w.plan();
    let names = names(&actions);
    let record = names.iter().position(|n| n == "RecordAdmission").expect("recorded");
    let dispatch = names.iter().position(|n| n == "Dispatch east").expect("dispatched");
    assert!(record < dispatch, "the record is the commit point, written first: {names:?}");
    assert!(!names.iter().any(|n| n.starts_with("Apply") || n.starts_with("Ungate")), "nothing launched here");
    let Some(Action::Dispatch { copy, .. }) = actions.iter().find(|a| matches!(a, Action::Dispatch { .. })) else {
        unreachable!()
    };
    assert_eq!(copy["metadata"]["labels"][ORIGIN_LABEL], UID);
    assert_eq!(copy["metadata"]["annotations"][ADMITTED_AT_ANNOTATION], "100");
    let local = copy["metadata"]["annotations"][ADMISSION_ANNOTATION].as_str().unwrap();
    assert!(local.contains("[\"n1\",1]") && !local.contains("east/"), "the worker's own names: {local}");
    let conds = conditions(&actions);
    assert!(conds.contains(&("Admitted".to_string(), "True".to_string(), "Admitted".to_string())), "{conds:?}");
}

#[test]
fn a_worker_out_of_reach_gets_no_copy_until_it_is_back() {
    let mut w = manager_world();
    recorded_on(&mut w, &east_record());
    w.decision = Some(Decision::Running);
    w.fleet = on_east(None, false);
    assert!(!names(&w.plan()).iter().any(|n| n.starts_with("Dispatch")));
    w.fleet = on_east(None, true);
    assert!(names(&w.plan()).contains(&"Dispatch east".to_string()), "written on the next look");
}

#[test]
fn the_workers_verdict_is_mirrored() {
    let mut w = manager_world();
    recorded_on(&mut w, &east_record());
    w.decision = Some(Decision::Running);
    let jobs = vec![JobStatus { name: "node".into(), ready: 2, active: 2, ..JobStatus::default() }];
    let running = WorkloadView { jobs_status: jobs.clone(), ..WorkloadView::default() };
    w.fleet = on_east(Some(copy(Some(east_record()), 100, running.clone())), true);
    w.workload = Some(running);
    let actions = w.plan();
    assert!(!names(&actions).iter().any(|n| n.starts_with("Dispatch")), "the copy is current");
    let mirrored = actions.iter().find_map(|a| match a {
        Action::Status { jobs_status, .. } => jobs_status.clone(),
        _ => None,
    });
    assert_eq!(mirrored, Some(jobs), "jobsStatus mirrored");
    let done =
        WorkloadView { completed: Some(("JobSetCompleted".into(), "all done".into())), ..WorkloadView::default() };
    w.fleet = on_east(Some(copy(Some(east_record()), 100, done.clone())), true);
    w.workload = Some(done);
    let conds = conditions(&w.plan());
    assert!(conds.contains(&("Complete".into(), "True".into(), "JobSetCompleted".into())), "{conds:?}");
}

#[test]
fn deleting_or_suspending_on_the_manager_withdraws_the_copy() {
    let mut w = manager_world();
    recorded_on(&mut w, &east_record());
    w.decision = Some(Decision::Running);
    w.fleet = on_east(Some(copy(Some(east_record()), 100, WorkloadView::default())), true);
    w.workload = Some(WorkloadView::default());
    let mut suspended = w.job.clone();
    suspended.spec.0.suspend = Some(true);
    w.job.metadata.deletion_timestamp = Some(now());
    assert_eq!(names(&w.plan()), ["Withdraw east", "RemoveFinalizer"]);
    w.job = suspended;
    let names = names(&w.plan());
    assert!(names.starts_with(&["Withdraw east".to_string(), "ClearAdmission".to_string()]), "{names:?}");
}

#[test]
fn a_copy_the_worker_queued_again_is_queued_again_here() {
    let mut w = manager_world();
    recorded_on(&mut w, &east_record());
    w.decision = Some(Decision::Running);
    w.fleet = on_east(Some(copy(None, 100, WorkloadView::default())), true);
    let actions = w.plan();
    let names = names(&actions);
    assert!(names.starts_with(&["Withdraw east".to_string(), "ClearAdmission".to_string()]), "{names:?}");
    let conds = conditions(&actions);
    assert!(conds.contains(&("Admitted".into(), "False".into(), "RequeuedByWorker".into())), "{conds:?}");
}

#[test]
fn a_copy_of_an_earlier_placement_goes_before_the_new_one_is_written() {
    let mut w = manager_world();
    let now_record = AdmissionRecord { at: 200, ..east_record() };
    recorded_on(&mut w, &now_record);
    w.decision = Some(Decision::Running);
    // Written for the placement at 100, which was withdrawn while east was away.
    w.fleet = on_east(Some(copy(Some(east_record()), 100, WorkloadView::default())), true);
    let names = names(&w.plan());
    assert!(names.contains(&"Withdraw east".to_string()), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("Dispatch") || n == "ClearAdmission"), "{names:?}");
}

#[test]
fn a_runtime_the_worker_lacks_keeps_the_gang_waiting_naming_both() {
    let mut w = manager_world();
    w.decision = Some(Decision::Admit(east_record()));
    w.fleet = Some(FleetSeen {
        cluster: "east".into(),
        copy: None,
        reachable: true,
        runtime_missing: Some("ClusterTrainingRuntime torch".into()),
    });
    let actions = w.plan();
    assert!(!names(&actions).iter().any(|n| n.starts_with("Dispatch")));
    let message = actions
        .iter()
        .find_map(|a| match a {
            Action::Status { conditions, .. } => {
                conditions.iter().find(|c| c.type_ == "Admitted").map(|c| (c.reason.clone(), c.message.clone()))
            }
            _ => None,
        })
        .expect("an Admitted condition");
    assert_eq!(message.0, "RuntimeNotFound");
    assert!(
        message.1.contains("ClusterTrainingRuntime torch") && message.1.contains("worker cluster east"),
        "{message:?}"
    );
}

#[test]
fn a_lost_worker_is_reported_and_its_gang_requeued_when_the_loop_says_so() {
    let mut w = manager_world();
    recorded_on(&mut w, &east_record());
    w.fleet = on_east(Some(copy(Some(east_record()), 100, WorkloadView::default())), false);
    w.decision = Some(Decision::Degraded { nodes: vec!["east/n1".into()], message: "lost".into() });
    let conds = conditions(&w.plan());
    assert!(conds.contains(&("NodesReady".into(), "False".into(), "WorkerClusterUnreachable".into())), "{conds:?}");
    w.decision = Some(Decision::Requeue { reason: "NodeLost".into(), message: "past the grace".into() });
    // The copy cannot be withdrawn while east is away: the record goes, and east is swept on return.
    let names = names(&w.plan());
    assert!(
        names.contains(&"ClearAdmission".to_string()) && !names.iter().any(|n| n.starts_with("Withdraw")),
        "{names:?}"
    );
}
