//! Error cases, legacy overrides and invariants of `render_jobset`.

use proptest::prelude::*;
use serde_json::json;
use trainyard_bridges::{Placement, RenderError, RenderOptions, TrainJob, TrainingRuntime, render_jobset};

fn runtime() -> TrainingRuntime {
    serde_saphyr::from_str(include_str!("fixtures/torch_multinode.runtime.yaml")).expect("runtime fixture")
}

fn job() -> TrainJob {
    serde_saphyr::from_str(include_str!("fixtures/torch_multinode.trainjob.yaml")).expect("trainjob fixture")
}

fn render(job: &TrainJob, runtime: &TrainingRuntime) -> Result<trainyard_bridges::JobSet, RenderError> {
    render_jobset(job, &runtime.spec, &RenderOptions::default())
}

fn patch(job: &mut TrainJob, spec: serde_json::Value) {
    job.spec.runtime_patches =
        serde_json::from_value(json!([{"manager": "example.com/t", "trainingRuntimeSpec": spec}]))
            .expect("patch shape");
}

#[test]
fn unknown_runtime_kind_names_the_field() {
    let mut job = job();
    job.spec.runtime_ref.kind = Some("MPIJob".into());
    let err = render(&job, &runtime()).unwrap_err();
    assert!(
        matches!(&err, RenderError::UnsupportedRuntime { field, value, .. } if field == "spec.runtimeRef.kind" && value == "MPIJob")
    );
    assert!(err.to_string().contains("vision/resnet-cpu"), "{err}");
}

#[test]
fn foreign_api_group_is_rejected() {
    let mut job = job();
    job.spec.runtime_ref.api_group = Some("kubeflow.org".into());
    let err = render(&job, &runtime()).unwrap_err();
    assert!(matches!(&err, RenderError::UnsupportedRuntime { field, .. } if field == "spec.runtimeRef.apiGroup"));
}

#[test]
fn missing_runtime_name_and_uid_are_reported() {
    let mut job = job();
    job.spec.runtime_ref.name.clear();
    let err = render(&job, &runtime()).unwrap_err();
    assert_eq!(
        err,
        RenderError::MissingField { job: "vision/resnet-cpu".into(), field: "spec.runtimeRef.name".into() }
    );
    let mut job = self::job();
    job.metadata.uid = None;
    let err = render(&job, &runtime()).unwrap_err();
    assert!(matches!(&err, RenderError::MissingField { field, .. } if field == "metadata.uid"));
}

#[test]
fn zero_nodes_names_the_source_field() {
    let mut job = job();
    job.spec.trainer.as_mut().unwrap().num_nodes = Some(0);
    let err = render(&job, &runtime()).unwrap_err();
    assert!(matches!(&err, RenderError::ZeroNodes { field, value: 0, .. } if field == "spec.trainer.numNodes"));
    job.spec.trainer.as_mut().unwrap().num_nodes = None;
    let mut rt = runtime();
    rt.spec.ml_policy.as_mut().unwrap().num_nodes = Some(0);
    let err = render(&job, &rt).unwrap_err();
    assert!(matches!(&err, RenderError::ZeroNodes { field, .. } if field.contains("mlPolicy.numNodes")));
}

#[test]
fn missing_node_container_names_the_replicated_job() {
    let mut rt = runtime();
    let node = rt.spec.template.spec.replicated_jobs.iter_mut().find(|r| r.name == "node").unwrap();
    node.template.spec.template.spec.containers[0].name = "trainer".into();
    let err = render(&job(), &rt).unwrap_err();
    assert!(matches!(&err, RenderError::MissingNodeContainer { replicated_job, .. } if replicated_job == "node"));
}

#[test]
fn runtime_without_trainer_ancestor_is_rejected() {
    let mut rt = runtime();
    for rjob in &mut rt.spec.template.spec.replicated_jobs {
        rjob.template.metadata.labels.clear();
    }
    let err = render(&job(), &rt).unwrap_err();
    assert!(matches!(err, RenderError::NoTrainerJob { .. }));
}

#[test]
fn patch_of_missing_replicated_job_names_the_patch_field() {
    let mut job = job();
    patch(&mut job, json!({"template": {"spec": {"replicatedJobs": [{"name": "node"}, {"name": "workers"}]}}}));
    let err = render(&job, &runtime()).unwrap_err();
    let field = "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[1].name";
    assert_eq!(
        err,
        RenderError::UnknownPatchTarget {
            job: "vision/resnet-cpu".into(),
            field: field.into(),
            name: "workers".into()
        }
    );
}

#[test]
fn patch_of_missing_container_or_protected_env_is_rejected() {
    let pod = |containers: serde_json::Value| json!({"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {"containers": containers}}}}}]}}});
    let mut job = job();
    patch(&mut job, pod(json!([{"name": "ghost"}])));
    let err = render(&job, &runtime()).unwrap_err();
    assert!(
        matches!(&err, RenderError::UnknownPatchTarget { name, field, .. } if name == "ghost" && field.ends_with("containers[0].name"))
    );
    patch(&mut job, pod(json!([{"name": "node", "env": [{"name": "X", "value": "1"}]}])));
    let err = render(&job, &runtime()).unwrap_err();
    assert!(matches!(&err, RenderError::Forbidden { field, .. } if field.ends_with("containers[0].env")));
}

#[test]
fn reserved_trainer_env_is_rejected() {
    let mut job = job();
    job.spec.trainer.as_mut().unwrap().env.push(trainyard_bridges::pod::EnvVar::literal("PET_NNODES", "9"));
    let err = render(&job, &runtime()).unwrap_err();
    assert!(matches!(&err, RenderError::Forbidden { field, .. } if field == "spec.trainer.env[2].name"));
}

#[test]
fn mpi_launcher_as_node_needs_both_jobs() {
    let mut rt: TrainingRuntime = serde_saphyr::from_str(include_str!("fixtures/mpi_deepspeed.runtime.yaml")).unwrap();
    let job: TrainJob = serde_saphyr::from_str(include_str!("fixtures/mpi_deepspeed.trainjob.yaml")).unwrap();
    rt.spec.template.spec.replicated_jobs.retain(|r| r.name != "node");
    let err = render(&job, &rt).unwrap_err();
    assert!(matches!(&err, RenderError::MissingReplicatedJob { replicated_job, .. } if replicated_job == "node"));
}

#[test]
fn legacy_overrides_and_labels_are_applied() {
    let mut job = job();
    job.spec.runtime_patches.clear();
    job.spec.labels = Some([("legacy".to_owned(), "yes".to_owned())].into());
    job.spec.pod_template_overrides = vec![json!({
        "targetJobs": [{"name": "node"}],
        "metadata": {"labels": {"tier": "gold"}},
        "spec": {"serviceAccountName": "trainer-sa", "nodeSelector": {"pool": "cpu"}}
    })];
    job.spec.pod_spec_overrides =
        vec![json!({"targetJobs": [{"name": "model-initializer"}], "serviceAccountName": "init-sa"})];
    let js = render(&job, &runtime()).unwrap();
    assert_eq!(js.metadata.labels.get("legacy").map(String::as_str), Some("yes"));
    let node = js.spec.replicated_jobs.iter().find(|r| r.name == "node").unwrap();
    let pod = &node.template.spec.template;
    assert_eq!(pod.metadata.labels.get("tier").map(String::as_str), Some("gold"));
    assert_eq!(pod.spec.node_selector.get("pool").map(String::as_str), Some("cpu"));
    assert_eq!(pod.spec.rest.get("serviceAccountName"), Some(&json!("trainer-sa")));
    let init = js.spec.replicated_jobs.iter().find(|r| r.name == "model-initializer").unwrap();
    assert_eq!(init.template.spec.template.spec.rest.get("serviceAccountName"), Some(&json!("init-sa")));
    job.spec.pod_template_overrides[0]["targetJobs"][0]["name"] = json!("nope");
    let err = render(&job, &runtime()).unwrap_err();
    assert!(
        matches!(&err, RenderError::UnknownPatchTarget { field, .. } if field == "spec.podTemplateOverrides[0].targetJobs[0].name")
    );
}

#[test]
fn unknown_fields_round_trip() {
    let mut rt = runtime();
    let node = rt.spec.template.spec.replicated_jobs.iter_mut().find(|r| r.name == "node").unwrap();
    node.template.spec.template.spec.containers[0]
        .rest
        .insert("livenessProbe".into(), json!({"exec": {"command": ["true"]}}));
    node.template.spec.rest.insert("backoffLimit".into(), json!(7));
    let js = render(&job(), &rt).unwrap();
    let node = js.spec.replicated_jobs.iter().find(|r| r.name == "node").unwrap();
    assert_eq!(node.template.spec.rest.get("backoffLimit"), Some(&json!(7)));
    assert!(node.template.spec.template.spec.containers[0].rest.contains_key("livenessProbe"));
    assert_eq!(js.spec.rest.get("ttlSecondsAfterFinished"), Some(&json!(3600)));
}

proptest! {
    #[test]
    fn render_is_deterministic_and_total(nodes in -3i32..5000, nproc in proptest::option::of(-2i64..4096), gated in any::<bool>()) {
        let mut job = job();
        let trainer = job.spec.trainer.as_mut().unwrap();
        trainer.num_nodes = Some(nodes);
        trainer.num_proc_per_node = nproc.map(trainyard_bridges::trainer::NumProcPerNode::Count);
        let placement = if gated { Placement::Gated { gang: "g".into() } } else { Placement::Unplaced };
        let opts = RenderOptions { placement, pod_group_markers: true, ..RenderOptions::default() };
        let first = render_jobset(&job, &runtime().spec, &opts);
        let second = render_jobset(&job, &runtime().spec, &opts);
        prop_assert_eq!(&first, &second);
        match first {
            Err(RenderError::ZeroNodes { .. }) => prop_assert!(nodes < 1),
            Err(other) => prop_assert!(false, "unexpected error {other}"),
            Ok(js) => {
                let node = js.spec.replicated_jobs.iter().find(|r| r.name == "node").unwrap();
                prop_assert_eq!(node.template.spec.parallelism, Some(nodes));
                prop_assert_eq!(node.template.spec.completions, Some(nodes));
                let env = &node.template.spec.template.spec.containers[0].env;
                let nnodes = env.iter().find(|e| e.name == "PET_NNODES").and_then(|e| e.value.clone());
                prop_assert_eq!(nnodes, Some(nodes.to_string()));
                prop_assert_eq!(serde_saphyr::to_string(&js).unwrap(), serde_saphyr::to_string(&second.unwrap()).unwrap());
            }
        }
    }
}

#[test]
fn mpi_hostfile_lists_launcher_then_workers() {
    let rt: TrainingRuntime = serde_saphyr::from_str(include_str!("fixtures/mpi_deepspeed.runtime.yaml")).unwrap();
    let job: TrainJob = serde_saphyr::from_str(include_str!("fixtures/mpi_deepspeed.trainjob.yaml")).unwrap();
    let js = render(&job, &rt).unwrap();
    let hosts = trainyard_bridges::render_mpi_hostfile(&job, &rt.spec, &js).unwrap();
    assert_eq!(hosts, "ds-t5-launcher-0-0.ds-t5 slots=4\nds-t5-node-0-0.ds-t5 slots=4\nds-t5-node-0-1.ds-t5 slots=4\n");
    assert_eq!(trainyard_bridges::render_mpi_hostfile(&self::job(), &runtime().spec, &js), None);
}

/// Trainer v2.4 refuses `resourcesPerNode.claims`: claims go in `resourceClaimsPerNode`.
#[test]
fn claims_in_resources_per_node_are_refused() {
    let mut job = job();
    job.spec.trainer.as_mut().unwrap().resources_per_node = Some(json!({"claims": [{"name": "gpu"}]}));
    let err = render(&job, &runtime()).unwrap_err();
    assert!(
        matches!(&err, RenderError::Forbidden { field, .. } if field == "spec.trainer.resourcesPerNode.claims"),
        "{err}"
    );
}

fn dra_options(templates: serde_json::Value) -> RenderOptions {
    let objects: Vec<serde_json::Value> = serde_json::from_value(templates).unwrap();
    RenderOptions {
        claim_gpus: trainyard_bridges::render::claims::gpus_by_template(&objects),
        ..RenderOptions::default()
    }
}

fn template(name: &str, requests: serde_json::Value) -> serde_json::Value {
    json!({"kind": "ResourceClaimTemplate", "metadata": {"name": name}, "spec": {"spec": {"devices": {"requests": requests}}}})
}

/// The GPU count comes from the first claim the `node` container uses, counting only exact-count
/// requests named `gpu`: MPI slots (and the hostfile) follow it when no extended GPUs are asked.
#[test]
fn dra_gpus_set_the_mpi_slots_of_a_job_without_extended_gpus() {
    let rt: TrainingRuntime = serde_saphyr::from_str(include_str!("fixtures/mpi_deepspeed.runtime.yaml")).unwrap();
    let mut job: TrainJob = serde_saphyr::from_str(include_str!("fixtures/mpi_deepspeed.trainjob.yaml")).unwrap();
    let trainer = job.spec.trainer.as_mut().unwrap();
    trainer.resources_per_node = None;
    trainer.resource_claims_per_node = serde_json::from_value(json!([
        {"name": "gpus", "resourceClaimTemplateName": "a100x2"},
        {"name": "extra", "resourceClaimTemplateName": "a100x8-all"}
    ]))
    .unwrap();
    let opts = dra_options(json!([
        template(
            "a100x2",
            json!([
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}},
                {"name": "gpu-admin", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 8, "adminAccess": true}},
                {"name": "nic", "exactly": {"deviceClassName": "nic", "count": 3}}
            ])
        ),
        template(
            "a100x8-all",
            json!([{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}}])
        )
    ]));
    assert_eq!(opts.claim_gpus.get("a100x2"), Some(&2));
    assert_eq!(opts.claim_gpus.get("a100x8-all"), Some(&0));
    let js = render_jobset(&job, &rt.spec, &opts).unwrap();
    let hosts = trainyard_bridges::render_mpi_hostfile(&job, &rt.spec, &js).unwrap();
    assert_eq!(hosts, "ds-t5-launcher-0-0.ds-t5 slots=2\nds-t5-node-0-0.ds-t5 slots=2\nds-t5-node-0-1.ds-t5 slots=2\n");
    // Without the template's count the slots fall back to the runtime's numProcPerNode.
    let js = render_jobset(&job, &rt.spec, &RenderOptions::default()).unwrap();
    let hosts = trainyard_bridges::render_mpi_hostfile(&job, &rt.spec, &js).unwrap();
    assert!(hosts.contains("slots=1"), "{hosts}");
}

/// Trainer v2.4's MPI wiring: Open MPI 5's PRTE variables beside Open MPI 4's on the launcher
/// (PRTE without fully qualified names), and the TrainJob's image on the launcher and the
/// workers, while its command stays the launcher's (the workers keep their SSH server).
#[test]
fn mpi_gangs_run_the_trainjobs_image_everywhere_and_speak_to_open_mpi_5() {
    let rt: TrainingRuntime = serde_saphyr::from_str(include_str!("fixtures/mpi_deepspeed.runtime.yaml")).unwrap();
    let mut job: TrainJob = serde_saphyr::from_str(include_str!("fixtures/mpi_deepspeed.trainjob.yaml")).unwrap();
    let trainer = job.spec.trainer.as_mut().unwrap();
    trainer.image = Some("example.org/app:2".into());
    trainer.command = Some(vec!["mpirun".into(), "python".into(), "train.py".into()]);
    let js = render(&job, &rt).unwrap();
    let node_of = |rjob: &str| {
        let r = js.spec.replicated_jobs.iter().find(|r| r.name == rjob).unwrap();
        r.template.spec.template.spec.containers.iter().find(|c| c.name == "node").unwrap().clone()
    };
    let (launcher, worker) = (node_of("launcher"), node_of("node"));
    assert_eq!(launcher.image.as_deref(), Some("example.org/app:2"));
    assert_eq!(worker.image.as_deref(), Some("example.org/app:2"));
    assert_eq!(launcher.command.as_ref().unwrap()[0], "mpirun");
    assert_eq!(worker.command.as_ref().unwrap()[0], "/usr/sbin/sshd");
    let value = |name: &str| launcher.env.iter().find(|e| e.name == name).and_then(|e| e.value.clone());
    assert_eq!(value("PRTE_MCA_prte_default_hostfile").as_deref(), Some("/etc/mpi/hostfile"));
    assert_eq!(value("PRTE_MCA_prte_keep_fqdn_hostnames").as_deref(), Some("false"));
    assert_eq!(value("PRTE_MCA_prte_set_default_slots"), value("OMPI_MCA_orte_set_default_slots"));
    assert_eq!(value("PRTE_MCA_plm_ssh_args"), value("OMPI_MCA_plm_rsh_args"));
    assert!(worker.env.iter().all(|e| !e.name.starts_with("PRTE_")), "the workers get no launcher variables");
}

/// The PRTE variables are trainyard's to set, as the ORTE ones are.
#[test]
fn prte_variables_are_reserved() {
    let rt: TrainingRuntime = serde_saphyr::from_str(include_str!("fixtures/mpi_deepspeed.runtime.yaml")).unwrap();
    let mut job: TrainJob = serde_saphyr::from_str(include_str!("fixtures/mpi_deepspeed.trainjob.yaml")).unwrap();
    job.spec
        .trainer
        .as_mut()
        .unwrap()
        .env
        .push(serde_json::from_value(json!({"name": "PRTE_MCA_plm_ssh_args", "value": "x"})).unwrap());
    let err = render(&job, &rt).unwrap_err();
    assert!(matches!(&err, RenderError::Forbidden { field, .. } if field.starts_with("spec.trainer.env[")), "{err}");
}
