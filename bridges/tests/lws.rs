//! Folding rules, error cases and invariants of `render_leader_worker_set`.

use proptest::prelude::*;
use serde_json::json;
use trainyard_bridges::jobset::ReplicatedJob;
use trainyard_bridges::pod::{EnvVar, PodTemplate};
use trainyard_bridges::{
    LeaderWorkerSet, Placement, RenderError, RenderOptions, TrainJob, TrainingRuntime, render_jobset,
    render_leader_worker_set, render_lws_mpi_hostfile,
};

fn load<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
    serde_saphyr::from_str(yaml).expect("fixture")
}

fn torch() -> (TrainJob, TrainingRuntime) {
    (load(include_str!("fixtures/torch_lws.trainjob.yaml")), load(include_str!("fixtures/torch_lws.runtime.yaml")))
}

fn mpi() -> (TrainJob, TrainingRuntime) {
    (load(include_str!("fixtures/mpi_lws.trainjob.yaml")), load(include_str!("fixtures/mpi_lws.runtime.yaml")))
}

fn render(job: &TrainJob, runtime: &TrainingRuntime) -> Result<LeaderWorkerSet, RenderError> {
    render_leader_worker_set(job, &runtime.spec, &RenderOptions::default())
}

fn templates(lws: &LeaderWorkerSet) -> Vec<&PodTemplate> {
    let t = &lws.spec.leader_worker_template;
    t.leader_template.iter().chain([&t.worker_template]).collect()
}

fn all_env(pod: &PodTemplate) -> Vec<&EnvVar> {
    pod.spec.containers.iter().chain(&pod.spec.init_containers).flat_map(|c| &c.env).collect()
}

fn env<'a>(pod: &'a PodTemplate, container: &str, name: &str) -> Option<&'a str> {
    let c = pod.spec.containers.iter().find(|c| c.name == container)?;
    c.env.iter().find(|e| e.name == name)?.value.as_deref()
}

#[test]
fn initializers_cannot_be_folded_and_are_named() {
    let job: TrainJob = load(include_str!("fixtures/torch_multinode.trainjob.yaml"));
    let runtime: TrainingRuntime = load(include_str!("fixtures/torch_multinode.runtime.yaml"));
    let err = render(&job, &runtime).unwrap_err();
    assert!(
        matches!(&err, RenderError::NotFoldable { replicated_job, job, .. } if replicated_job == "dataset-initializer" && job == "vision/resnet-cpu"),
        "{err}"
    );
    assert!(err.to_string().contains("initializer"), "{err}");
}

#[test]
fn lone_trainer_is_leader_and_workers_with_lws_addresses() {
    let (job, runtime) = torch();
    let lws = render(&job, &runtime).unwrap();
    let template = &lws.spec.leader_worker_template;
    assert!(template.leader_template.is_none());
    assert_eq!((lws.spec.replicas, template.size), (Some(1), Some(4)));
    let worker = &template.worker_template;
    assert_eq!(env(worker, "node", "PET_MASTER_ADDR"), Some("$(LWS_LEADER_ADDRESS)"));
    assert_eq!(env(worker, "node", "PET_NODE_RANK"), Some("$(LWS_WORKER_INDEX)"));
    assert_eq!(env(worker, "profiler", "PET_NODE_RANK"), Some("$(LWS_WORKER_INDEX)"));
    assert_eq!(worker.spec.restart_policy.as_deref(), Some("Always"));
    assert!(all_env(worker).iter().all(|e| e.value_from.is_none()), "no Job completion index in an LWS pod");
    assert_eq!(lws.metadata.owner_references[0].kind, "TrainJob");
    assert_eq!(lws.metadata.labels.get("example.org/queue").map(String::as_str), Some("research"));
}

#[test]
fn suspended_job_renders_zero_groups() {
    let (mut job, runtime) = torch();
    job.spec.suspend = Some(true);
    assert_eq!(render(&job, &runtime).unwrap().spec.replicas, Some(0));
}

#[test]
fn launcher_becomes_leader_and_adds_one_pod() {
    let (job, runtime) = mpi();
    let lws = render(&job, &runtime).unwrap();
    let template = &lws.spec.leader_worker_template;
    let leader = template.leader_template.as_ref().expect("launcher leads");
    assert_eq!(template.size, Some(3));
    assert_eq!(env(leader, "node", "OMPI_MCA_orte_default_hostfile"), Some("/etc/mpi/hostfile"));
    assert_eq!(env(&template.worker_template, "node", "OMPI_MCA_orte_default_hostfile"), None);
    let hosts = render_lws_mpi_hostfile(&job, &runtime.spec, &lws).unwrap();
    assert_eq!(hosts, "osu-bench-0-1.osu-bench slots=2\nosu-bench-0-2.osu-bench slots=2\n");
}

#[test]
fn launcher_as_node_is_in_the_hostfile() {
    let (job, mut runtime) = mpi();
    runtime.spec.ml_policy.as_mut().unwrap().mpi.as_mut().unwrap().run_launcher_as_node = Some(true);
    let lws = render(&job, &runtime).unwrap();
    // numNodes 2 with the launcher as a node: one sshd worker plus the launcher.
    assert_eq!(lws.spec.leader_worker_template.size, Some(2));
    let hosts = render_lws_mpi_hostfile(&job, &runtime.spec, &lws).unwrap();
    assert_eq!(hosts, "osu-bench-0.osu-bench slots=2\nosu-bench-0-1.osu-bench slots=2\n");
    let (torch_job, torch_runtime) = torch();
    assert_eq!(render_lws_mpi_hostfile(&torch_job, &torch_runtime.spec, &lws), None);
}

#[test]
fn a_third_replicated_job_is_rejected_by_name() {
    let (job, mut runtime) = mpi();
    let mut extra: ReplicatedJob = runtime.spec.template.spec.replicated_jobs[1].clone();
    extra.name = "evaluator".into();
    runtime.spec.template.spec.replicated_jobs.push(extra);
    let err = render(&job, &runtime).unwrap_err();
    assert!(matches!(&err, RenderError::NotFoldable { replicated_job, .. } if replicated_job == "evaluator"), "{err}");
}

#[test]
fn multi_replica_jobs_and_ranked_workers_behind_a_launcher_are_rejected() {
    let (job, mut runtime) = mpi();
    runtime.spec.template.spec.replicated_jobs[1].replicas = Some(2);
    let err = render(&job, &runtime).unwrap_err();
    assert!(
        matches!(&err, RenderError::NotFoldable { replicated_job, message, .. } if replicated_job == "node" && message.contains("replicas = 2")),
        "{err}"
    );

    let (job, mut runtime) = mpi();
    let rank = json!({"name": "RANK", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}});
    runtime.spec.template.spec.replicated_jobs[1].template.spec.template.spec.containers[0]
        .env
        .push(serde_json::from_value(rank).unwrap());
    let err = render(&job, &runtime).unwrap_err();
    assert!(matches!(&err, RenderError::NotFoldable { replicated_job, .. } if replicated_job == "node"), "{err}");
}

#[test]
fn jax_and_xgboost_addresses_point_at_the_leader() {
    let job: TrainJob = load(include_str!("fixtures/jax.trainjob.yaml"));
    let runtime: TrainingRuntime = load(include_str!("fixtures/jax.runtime.yaml"));
    let worker = render(&job, &runtime).unwrap().spec.leader_worker_template.worker_template;
    assert_eq!(env(&worker, "node", "JAX_COORDINATOR_ADDRESS"), Some("$(LWS_LEADER_ADDRESS):29500"));
    assert_eq!(env(&worker, "node", "JAX_PROCESS_ID"), Some("$(LWS_WORKER_INDEX)"));
    let job: TrainJob = load(include_str!("fixtures/xgboost.trainjob.yaml"));
    let runtime: TrainingRuntime = load(include_str!("fixtures/xgboost.runtime.yaml"));
    let worker = render(&job, &runtime).unwrap().spec.leader_worker_template.worker_template;
    assert_eq!(env(&worker, "node", "DMLC_TRACKER_URI"), Some("$(LWS_LEADER_ADDRESS)"));
    assert_eq!(env(&worker, "node", "DMLC_TASK_ID"), Some("$(LWS_WORKER_INDEX)"));
    assert_eq!(env(&worker, "node", "DMLC_NUM_WORKER"), Some("6"));
}

proptest! {
    /// The fold keeps the JobSet's pods: same size, containers, images, resources, env names and pod
    /// metadata; only rank and address values and the restart policy change.
    #[test]
    fn fold_preserves_the_rendered_pods(nodes in 1i32..2000, gated in any::<bool>(), launcher in any::<bool>()) {
        let (mut job, runtime) = if launcher { mpi() } else { torch() };
        job.spec.trainer.as_mut().unwrap().num_nodes = Some(nodes);
        let placement = if gated { Placement::Gated { gang: "g".into() } } else { Placement::Unplaced };
        let opts = RenderOptions { placement, pod_group_markers: true, ..RenderOptions::default() };
        let jobset = render_jobset(&job, &runtime.spec, &opts).unwrap();
        let lws = render_leader_worker_set(&job, &runtime.spec, &opts).unwrap();
        prop_assert_eq!(&lws, &render_leader_worker_set(&job, &runtime.spec, &opts).unwrap());
        let pods: i32 = jobset.spec.replicated_jobs.iter().map(|r| r.template.spec.parallelism.unwrap_or(1)).sum();
        prop_assert_eq!(lws.spec.leader_worker_template.size, Some(pods));
        prop_assert_eq!(lws.spec.replicas, Some(1));
        let folded = templates(&lws);
        prop_assert_eq!(folded.len(), jobset.spec.replicated_jobs.len());
        for (pod, rjob) in folded.iter().zip(&jobset.spec.replicated_jobs) {
            let original = &rjob.template.spec.template;
            prop_assert_eq!(&pod.metadata, &original.metadata);
            prop_assert_eq!(&pod.spec.scheduling_gates, &original.spec.scheduling_gates);
            prop_assert_eq!(pod.spec.containers.len(), original.spec.containers.len());
            for (c, o) in pod.spec.containers.iter().zip(&original.spec.containers) {
                prop_assert_eq!((&c.name, &c.image, &c.resources, &c.ports), (&o.name, &o.image, &o.resources, &o.ports));
                let names = |env: &[EnvVar]| env.iter().map(|e| e.name.clone()).collect::<Vec<_>>();
                prop_assert_eq!(names(&c.env), names(&o.env));
                prop_assert!(c.env.iter().all(|e| e.value_from.is_none() && !e.value.as_deref().unwrap_or("").contains("-node-0-0.")));
            }
        }
    }
}
