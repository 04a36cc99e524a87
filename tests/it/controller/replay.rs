//! Crash safety: a reconcile cut short after any of its steps is finished by the next one, and
//! nothing is created twice. The API server is modelled by applying each step to the world the
//! planner reads, with a JobSet controller that creates the gated pods of a new JobSet.

use std::collections::BTreeMap;

use trainyard::api::trainer::TrainJobStatus;
use trainyard::api::{ADMISSION_ANNOTATION, ARRIVAL_ANNOTATION, FINALIZER};
use trainyard::controller::deciding::plan::{Action, WorkloadView, recorded};
use trainyard::controller::deciding::scheduling_loop::Decision;

use super::common::*;

#[derive(Default, Debug, PartialEq, Eq)]
struct Counts {
    jobsets_created: u32,
    configmaps_created: u32,
    records_written: u32,
}

struct Server {
    world: World,
    counts: Counts,
    bound: BTreeMap<String, String>,
}

impl Server {
    fn new() -> Server {
        Server { world: World::new(job(MPI_JOB), MPI_RUNTIME), counts: Counts::default(), bound: BTreeMap::new() }
    }

    /// What the scheduling loop says: it admits until it finds its record on the object.
    fn decide(&mut self, admission: &trainyard::controller::acting::admission_record::AdmissionRecord) {
        self.world.decision = Some(if recorded(&self.world.job).is_some() {
            Decision::Running
        } else {
            Decision::Admit(admission.clone())
        });
    }

    fn apply(&mut self, action: &Action) {
        let w = &mut self.world;
        match action {
            Action::AddFinalizer { arrival } => {
                w.job.metadata.finalizers.get_or_insert_with(Vec::new).push(FINALIZER.into());
                if let Some(n) = arrival {
                    w.job
                        .metadata
                        .annotations
                        .get_or_insert_with(Default::default)
                        .insert(ARRIVAL_ANNOTATION.into(), n.to_string());
                }
            }
            Action::MarkArrival(n) => {
                w.job
                    .metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert(ARRIVAL_ANNOTATION.into(), n.to_string());
            }
            Action::RemoveFinalizer => {
                w.job.metadata.finalizers.get_or_insert_with(Vec::new).retain(|f| f != FINALIZER)
            }
            Action::RecordAdmission(r) => {
                self.counts.records_written += 1;
                w.job
                    .metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert(ADMISSION_ANNOTATION.into(), r.encode());
            }
            Action::ClearAdmission => {
                w.job.metadata.annotations.get_or_insert_with(Default::default).remove(ADMISSION_ANNOTATION);
            }
            Action::Apply(object) if object["kind"] == "JobSet" => {
                let suspended = object["spec"]["suspend"].as_bool().unwrap_or(false);
                if w.workload.is_none() {
                    self.counts.jobsets_created += 1;
                }
                w.workload = Some(WorkloadView { suspended, ..Default::default() });
                if !suspended && w.pods.is_empty() {
                    // The gang's replicated jobs are the gated ones (the launcher and the workers).
                    for rjob in object["spec"]["replicatedJobs"].as_array().unwrap() {
                        let pod = &rjob["template"]["spec"]["template"]["spec"];
                        let gated = pod["schedulingGates"]
                            .as_array()
                            .is_some_and(|g| g.iter().any(|x| x["name"] == trainyard_bridges::TOPOLOGY_GATE));
                        if !gated {
                            continue;
                        }
                        let name = rjob["name"].as_str().unwrap();
                        let count = rjob["template"]["spec"]["parallelism"].as_u64().unwrap_or(1) as u32;
                        w.pods.extend((0..count).map(|i| gated_pod_of("ds-t5", name, i, false)));
                    }
                }
            }
            Action::Apply(object) => {
                assert_eq!(object["kind"], "ConfigMap");
                if !w.hostfile_exists {
                    self.counts.configmaps_created += 1;
                }
                w.hostfile_exists = true;
            }
            Action::Delete(r) if r.kind == "JobSet" => {
                w.workload = None;
                w.pods.clear();
            }
            Action::Delete(_) => w.hostfile_exists = false,
            Action::Ungate(u) => {
                let pod = w.pods.iter_mut().find(|p| p.name == u.pod).expect("ungating an existing pod");
                assert_eq!(pod.gates[u.gate_index], trainyard_bridges::TOPOLOGY_GATE, "the gate the patch tests for");
                pod.gates.remove(u.gate_index);
                pod.has_node_selector = true;
                assert!(self.bound.insert(u.pod.clone(), u.node.clone()).is_none(), "{} bound twice", u.pod);
            }
            Action::Status { conditions, .. } => {
                w.job.status.get_or_insert_with(TrainJobStatus::default).conditions = conditions.clone();
            }
            Action::PatchTrainJob { .. } => unreachable!("standalone mode"),
            Action::SubmitSlurm(_) | Action::CancelSlurm { .. } => unreachable!("no Slurm queue"),
            Action::Dispatch { .. } | Action::Withdraw { .. } => unreachable!("standalone mode"),
            Action::AllocateClaim { .. } | Action::ReleaseClaim { .. } => unreachable!("no DRA claims"),
            Action::CreateSshSecret { .. } | Action::Create(_) => {
                unreachable!("the replay world never looks at Secrets")
            }
            Action::Event { .. } => {}
        }
    }

    /// Reconciles until nothing is left to do, at most `budget` steps; returns the steps taken.
    fn reconcile(
        &mut self,
        admission: &trainyard::controller::acting::admission_record::AdmissionRecord,
        mut budget: usize,
    ) -> usize {
        let mut taken = 0;
        for _ in 0..20 {
            self.decide(admission);
            let actions = self.world.plan();
            if actions.is_empty() {
                return taken;
            }
            for a in &actions {
                if budget == 0 {
                    return taken;
                }
                self.apply(a);
                budget -= 1;
                taken += 1;
            }
        }
        panic!("reconcile does not converge: {:?}", names(&self.world.plan()));
    }
}

#[test]
fn a_crash_after_any_step_creates_nothing_twice_and_ends_in_the_same_state() {
    // The DeepSpeed runtime runs the launcher as a node: the gang is the launcher (ordinal 0)
    // and the 2 pods of `node`.
    let admission = record(&[("host-a", 1), ("host-b", 2)]);
    let mut reference = Server::new();
    let total = reference.reconcile(&admission, usize::MAX);
    assert!(total >= 8, "the scenario has steps to cut: {total}");
    assert_eq!(Server::new().world.intent().unwrap().shape.pods(), 3);
    assert_eq!(reference.counts, Counts { jobsets_created: 1, configmaps_created: 1, records_written: 1 });
    let expected_bindings: BTreeMap<String, String> =
        [("ds-t5-launcher-0-0", "host-a"), ("ds-t5-node-0-0", "host-b"), ("ds-t5-node-0-1", "host-b")]
            .into_iter()
            .map(|(p, n)| (p.to_string(), n.to_string()))
            .collect();
    assert_eq!(reference.bound, expected_bindings);
    for cut in 0..total {
        let mut server = Server::new();
        server.reconcile(&admission, cut);
        // The process dies here; a new one starts from what the API server holds.
        server.reconcile(&admission, usize::MAX);
        assert_eq!(server.counts, reference.counts, "after a crash at step {cut}");
        assert_eq!(server.bound, reference.bound, "after a crash at step {cut}");
        assert_eq!(server.world.job.metadata.annotations, reference.world.job.metadata.annotations);
        assert_eq!(server.world.job.metadata.finalizers, reference.world.job.metadata.finalizers);
        assert_eq!(server.world.job.status, reference.world.job.status, "after a crash at step {cut}");
        assert_eq!(server.world.workload, reference.world.workload);
    }
}
