//! TrainJobs of Slurm queues, by value: the Slurm job they become, the lifecycle steps that submit,
//! follow and cancel it, and the split of one cycle between the Kubernetes and the Slurm loop.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use trainyard::api::{ADMISSION_ANNOTATION, QUEUE_LABEL, SlurmTarget, TrainJob};
use trainyard::controller::acting::admission_record::AdmissionRecord;
use trainyard::controller::deciding::intent::GangIntent;
use trainyard::controller::deciding::plan::{Action, SLURM_REJECTED};
use trainyard::controller::deciding::scheduling_loop::{Decision, JobEntry, JobState, SchedulingLoop};
use trainyard::controller::slurm::cluster_view::{SlurmSnapshot, slurm_cluster, split_cycle};
use trainyard::controller::slurm::gang_job::{NOT_FOR_SLURM, gang_id, slurm_gang};
use trainyard_bridges::slurm::{GangState, SlurmPlacement, render_sbatch};
use trainyard_policies::PolicyConfig;
use trainyard_slurm::{JobInfo, NodeInfo};
use trainyard_topology::{Cluster, TopologyRequest};

use super::common::{TORCH_JOB, TORCH_RUNTIME, World, conditions, names, with_finalizer};

pub const RUNTIME: &str = r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: torch-slurm, labels: {trainer.kubeflow.org/framework: torch}}
spec:
  mlPolicy: {numNodes: 1, torch: {numProcPerNode: 1}}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec:
            template:
              spec:
                containers:
                - name: node
                  image: example.org/torch:2.9
                  command: [torchrun]
"#;

pub const JOB: &str = r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: llm, namespace: research, uid: 0f3c, labels: {trainyard.io/queue: hpc}}
spec:
  runtimeRef: {name: torch-slurm}
  activeDeadlineSeconds: 3601
  trainer:
    command: [/bin/bash, -c]
    args: ['echo "rank=${PET_NODE_RANK} master=${PET_MASTER_ADDR} host=${SLURMD_NODENAME} nnodes=$PET_NNODES seed=$(SEED)"']
    env: [{name: SEED, value: "42"}]
    numNodes: 2
    resourcesPerNode: {requests: {nvidia.com/gpu: 1, cpu: "2", memory: 1Gi}}
"#;

pub fn target() -> SlurmTarget {
    SlurmTarget {
        partition: Some("gpu".into()),
        account: None,
        qos: Some("normal".into()),
        workdir: "/shared/llm".into(),
    }
}

/// A TrainJob of queue `hpc`, which runs on Slurm, in a controller with a Slurm cluster.
pub fn world(job_text: &str, runtime_text: &str) -> World {
    let mut job: TrainJob = serde_saphyr::from_str(job_text).expect("fixture parses");
    job.metadata.generation = Some(1);
    let mut w = World::new(job, runtime_text);
    w.slurm_queues.insert("hpc".into(), target());
    w.slurm = Some(SlurmSnapshot { jobs: Some(BTreeMap::new()), ..SlurmSnapshot::default() });
    w
}

/// Admitted on n1 and n2 ten seconds before the tests' clock.
fn record() -> AdmissionRecord {
    AdmissionRecord { at: 1_800_000_000 - 10, slurm: true, ..super::common::record(&[("n1", 1), ("n2", 1)]) }
}

/// The fixture TrainJob admitted on [`record`], with the record and its gang id.
fn admitted_world() -> (World, AdmissionRecord, String) {
    let r = record();
    let mut w = world(JOB, RUNTIME);
    admitted(&mut w, &r);
    let gang = gang_id("research", "llm", "0f3c", &r);
    (w, r, gang)
}

fn admitted(w: &mut World, record: &AdmissionRecord) {
    w.job = with_finalizer(w.job.clone());
    w.job
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ADMISSION_ANNOTATION.into(), record.encode());
    w.decision = Some(Decision::Running);
}

fn slurm_job(gang: &str, state: GangState, reason: &str) -> JobInfo {
    JobInfo {
        id: 77,
        name: "llm".into(),
        gang: Some(gang.into()),
        slurm_state: format!("{state:?}").to_uppercase(),
        state,
        reason: reason.into(),
        nodes: "n[1-2]".into(),
        exit_code: Some(if state == GangState::Failed { 3 } else { 0 }),
        partition: "gpu".into(),
        node_count: 2,
        array: None,
    }
}

fn observe(w: &mut World, job: JobInfo) {
    let snapshot = w.slurm.as_mut().expect("a Slurm cluster");
    snapshot.observed(&[job], None);
}

#[test]
fn a_trainjob_becomes_one_slurm_job_on_its_hosts() {
    let w = world(JOB, RUNTIME);
    let intent = w.intent().unwrap();
    assert_eq!(intent.slurm, Some(target()));
    let job = w.job.to_bridge().unwrap();
    let runtime = w.runtimes.cluster.get("torch-slurm").unwrap();
    let r = AdmissionRecord { nodes: vec![("n3".into(), 1), ("n1".into(), 1)], ..record() };
    let gang = slurm_gang(&job, runtime, &target(), &intent.shape.sets[0].pod, &r).unwrap();
    assert_eq!(gang.gang, "research/llm/0f3c@1799999990");
    assert_eq!(gang.name, "llm");
    assert_eq!((gang.nodes, gang.tasks_per_node, gang.gpus_per_node), (2, 1, 1));
    assert_eq!((gang.cpus_per_task, gang.memory_mib, gang.time_limit_minutes), (Some(2), Some(1024), Some(61)));
    assert_eq!(gang.placement, Some(SlurmPlacement::Nodelist(vec!["n3".into(), "n1".into()])));
    assert_eq!(
        (gang.partition.as_deref(), gang.qos.as_deref(), gang.workdir.as_str()),
        (Some("gpu"), Some("normal"), "/shared/llm")
    );
    assert_eq!(gang.command[..2], ["/bin/bash", "-c"]);
    assert!(gang.command[2].ends_with("seed=42\""), "$(SEED) is expanded as the kubelet would: {}", gang.command[2]);
    assert_eq!(gang.rank_env, vec!["PET_NODE_RANK"]);
    assert_eq!(gang.master_env.get("PET_MASTER_ADDR").map(String::as_str), Some(""));
    assert_eq!(gang.env.get("PET_NNODES").map(String::as_str), Some("2"));
    assert_eq!(gang.env.get("SEED").map(String::as_str), Some("42"));
    assert!(!gang.env.contains_key("PET_NODE_RANK") && !gang.env.contains_key("PET_MASTER_ADDR"));
    let script = render_sbatch(&gang);
    assert!(script.contains("#SBATCH --comment=trainyard-gang=research/llm/0f3c@1799999990\n"), "{script}");
    assert!(script.contains("#SBATCH --nodelist=n3,n1\n"), "{script}");
}

#[test]
fn what_slurm_cannot_run_is_refused_before_admission() {
    let mut init = World::new(super::common::job(TORCH_JOB), TORCH_RUNTIME);
    init.job.metadata.labels.get_or_insert_with(Default::default).insert(QUEUE_LABEL.into(), "hpc".into());
    init.slurm_queues.insert("hpc".into(), target());
    init.slurm = Some(SlurmSnapshot::default());
    let p = init.intent().unwrap_err();
    assert_eq!(p.reason, NOT_FOR_SLURM);
    assert!(p.message.contains("dataset-initializer"), "{}", p.message);

    let secret = JOB.replace(
        r#"env: [{name: SEED, value: "42"}]"#,
        r#"env: [{name: TOKEN, valueFrom: {secretKeyRef: {name: s, key: k}}}]"#,
    );
    let p = world(&secret, RUNTIME).intent().unwrap_err();
    assert_eq!((p.reason, p.field.as_str()), (NOT_FOR_SLURM, "spec.trainer.env[TOKEN]"));

    let no_command = JOB.lines().filter(|l| !l.contains("command:") && !l.contains("args:")).collect::<Vec<_>>();
    let runtime = RUNTIME.replace("                  command: [torchrun]\n", "");
    let p = world(&no_command.join("\n"), &runtime).intent().unwrap_err();
    assert_eq!(p.field, "spec.trainer.command");

    let per_node = JOB.replace("seed=$(SEED)", "rank=$(PET_NODE_RANK)");
    let p = world(&per_node, RUNTIME).intent().unwrap_err();
    assert_eq!((p.reason, p.field.as_str()), (NOT_FOR_SLURM, "spec.trainer.command"));
    assert!(p.message.contains("$(PET_NODE_RANK) differs per node"), "{}", p.message);

    let url = JOB.replace(r#"{name: SEED, value: "42"}"#, r#"{name: URL, value: "tcp://llm-node-0-0.llm:29500"}"#);
    let p = world(&url, RUNTIME).intent().unwrap_err();
    assert_eq!(p.field, "spec.trainer.env[URL]");
    let addr = JOB.replace(r#"{name: SEED, value: "42"}"#, r#"{name: COORD, value: "llm-node-0-0.llm:1234"}"#);
    assert!(world(&addr.replace(" seed=$(SEED)", ""), RUNTIME).intent().is_ok(), "<host>:<port> is rewritten");

    let reserved = JOB.replace(r#"{name: SEED, value: "42"}"#, r#"{name: SLURM_JOB_ID, value: "1"}"#);
    let p = world(&reserved, RUNTIME).intent().unwrap_err();
    assert_eq!(p.field, "spec.trainer.env");
    assert!(p.message.contains("reserved for Slurm"), "{}", p.message);

    let mut off = world(JOB, RUNTIME);
    off.slurm = None;
    let p = off.intent().unwrap_err();
    assert_eq!(p.reason, "SlurmNotConfigured");
    assert!(!p.terminal, "it runs once the controller has a Slurm cluster");
}

#[test]
fn admission_records_then_submits() {
    let mut w = world(JOB, RUNTIME);
    w.job = with_finalizer(w.job.clone());
    let r = record();
    w.decision = Some(Decision::Admit(r.clone()));
    let actions = w.plan();
    let gang = gang_id("research", "llm", "0f3c", &r);
    assert_eq!(
        names(&actions),
        ["RecordAdmission", "Event Admitted", &format!("SubmitSlurm {gang}"), "Event SlurmSubmitted", "Status"]
    );
    assert!(conditions(&actions).contains(&("Admitted".into(), "True".into(), "SlurmSubmitted".into())));
    assert!(!names(&actions).iter().any(|n| n.starts_with("Apply")), "no JobSet for a Slurm gang");
}

#[test]
fn the_slurm_job_state_becomes_conditions() {
    let r = record();
    let gang = gang_id("research", "llm", "0f3c", &r);
    let cases = [
        (GangState::Pending, "Resources", "Admitted", "True", "SlurmPending"),
        (GangState::Running, "None", "Admitted", "True", "SlurmRunning"),
        (GangState::Requeued, "", "Admitted", "True", "SlurmRequeued"),
        (GangState::Completed, "", "Complete", "True", "Completed"),
        (GangState::Failed, "NonZeroExitCode", "Failed", "True", "SlurmJobFailed"),
        (GangState::Timeout, "TimeLimit", "Failed", "True", "SlurmTimeLimit"),
        (GangState::NodeFail, "NodeDown", "Failed", "True", "SlurmNodeFail"),
        (GangState::Cancelled, "", "Failed", "True", "SlurmJobCancelled"),
    ];
    for (state, reason, type_, status, code) in cases {
        let mut w = world(JOB, RUNTIME);
        admitted(&mut w, &r);
        observe(&mut w, slurm_job(&gang, state, reason));
        let actions = w.plan();
        assert!(
            conditions(&actions).contains(&(type_.into(), status.into(), code.into())),
            "{state:?}: {:?}",
            conditions(&actions)
        );
        assert!(!names(&actions).iter().any(|n| n.starts_with("SubmitSlurm")), "{state:?}: submitted again");
    }
    // A job that failed names its exit code and Slurm's reason.
    let mut w = world(JOB, RUNTIME);
    admitted(&mut w, &r);
    observe(&mut w, slurm_job(&gang, GangState::Failed, "NonZeroExitCode"));
    let message = status_message(&w.plan(), "Failed");
    assert_eq!(message, "Slurm job 77 failed, exit code 3: NonZeroExitCode");
}

fn status_message(actions: &[Action], type_: &str) -> String {
    actions
        .iter()
        .find_map(|a| match a {
            Action::Status { conditions, .. } => {
                conditions.iter().find(|c| c.type_ == type_).map(|c| c.message.clone())
            }
            _ => None,
        })
        .unwrap_or_default()
}

#[test]
fn refusals_and_jobs_that_can_never_start_fail_with_slurms_words() {
    let (mut w, r, gang) = admitted_world();
    w.slurm.as_mut().unwrap().refused.insert(gang.clone(), "Invalid partition name specified".into());
    let actions = w.plan();
    assert!(conditions(&actions).contains(&("Failed".into(), "True".into(), SLURM_REJECTED.into())));
    assert_eq!(status_message(&actions, "Failed"), "Slurm refused the job: Invalid partition name specified");

    let mut w = world(JOB, RUNTIME);
    admitted(&mut w, &r);
    w.slurm.as_mut().unwrap().partition_nodes.insert("gpu".into(), 1);
    observe(&mut w, slurm_job(&gang, GangState::Pending, "PartitionNodeLimit"));
    let actions = w.plan();
    assert_eq!(names(&actions)[0], format!("CancelSlurm {gang}"));
    assert!(status_message(&actions, "Failed").contains("can never start as submitted: PartitionNodeLimit"));
}

#[test]
fn a_job_slurm_forgot_after_it_was_seen_is_lost_not_submitted_again() {
    let (mut w, r, _) = admitted_world();
    let running = Condition {
        type_: "Admitted".into(),
        status: "True".into(),
        reason: "SlurmRunning".into(),
        message: "Slurm job 77 runs on n[1-2]".into(),
        last_transition_time: super::common::now(),
        observed_generation: Some(1),
    };
    w.job.status.get_or_insert_with(Default::default).conditions = vec![running];
    let actions = w.plan();
    assert!(!names(&actions).iter().any(|n| n.starts_with("SubmitSlurm")), "{:?}", names(&actions));
    assert!(conditions(&actions).contains(&("Failed".into(), "True".into(), "SlurmJobLost".into())));
    assert!(status_message(&actions, "Failed").starts_with("Slurm job 77 is no longer reported by Slurm"));

    // The same condition, True since before this admission, is an earlier run's: submit.
    let mut again = AdmissionRecord { at: 1_800_000_000 + 5, ..r };
    again.nodes = vec![("n3".into(), 1), ("n4".into(), 1)];
    admitted(&mut w, &again);
    let actions = w.plan();
    assert!(names(&actions).iter().any(|n| n.starts_with("SubmitSlurm")), "{:?}", names(&actions));
}

#[test]
fn a_gang_follows_the_cluster_of_its_record_not_its_queue_of_the_moment() {
    // Admitted on Slurm, then its queue became a Kubernetes one: the Slurm job is still followed.
    let (mut w, r, gang) = admitted_world();
    w.slurm_queues.clear();
    observe(&mut w, slurm_job(&gang, GangState::Running, "None"));
    let actions = w.plan();
    assert!(conditions(&actions).contains(&("Admitted".into(), "True".into(), "SlurmRunning".into())));
    assert!(!names(&actions).iter().any(|n| n.starts_with("Apply")), "no JobSet: {:?}", names(&actions));
    // Admitted on Kubernetes, then its queue became a Slurm one: nothing is sent to Slurm.
    let mut w = world(JOB, RUNTIME);
    admitted(&mut w, &AdmissionRecord { slurm: false, ..r });
    let actions = w.plan();
    assert!(!names(&actions).iter().any(|n| n.contains("Slurm")), "{:?}", names(&actions));
}

#[test]
fn while_slurm_is_unreachable_nothing_is_submitted_and_the_gang_says_why() {
    let (mut w, _, gang) = admitted_world();
    w.slurm.as_mut().unwrap().unreachable = Some("Slurm unreachable: connection refused".into());
    let actions = w.plan();
    assert!(!names(&actions).iter().any(|n| n.starts_with("SubmitSlurm")));
    assert!(conditions(&actions).contains(&("Admitted".into(), "True".into(), "SlurmUnreachable".into())));
    assert!(status_message(&actions, "Admitted").contains("connection refused"));

    // A running job keeps running; its condition says it was last seen running.
    observe(&mut w, slurm_job(&gang, GangState::Running, "None"));
    w.slurm.as_mut().unwrap().unreachable = Some("Slurm unreachable: timed out".into());
    let message = status_message(&w.plan(), "Admitted");
    assert_eq!(
        message,
        "Slurm job 77 runs on n[1-2] when last seen; Slurm does not answer now: Slurm unreachable: timed out"
    );
}

#[test]
fn delete_suspend_preempt_and_deadline_cancel_the_slurm_job() {
    let r = record();
    let gang = gang_id("research", "llm", "0f3c", &r);
    let running = |w: &mut World| observe(w, slurm_job(&gang, GangState::Running, "None"));

    let mut w = world(JOB, RUNTIME);
    admitted(&mut w, &r);
    running(&mut w);
    w.job.metadata.deletion_timestamp = Some(super::common::now());
    assert_eq!(names(&w.plan()), [format!("CancelSlurm {gang}"), "RemoveFinalizer".into()]);

    let mut w = world(JOB, RUNTIME);
    admitted(&mut w, &r);
    running(&mut w);
    w.job.spec.0.suspend = Some(true);
    let n = names(&w.plan());
    assert_eq!(n[..2], [format!("CancelSlurm {gang}"), "ClearAdmission".into()]);

    let mut w = world(JOB, RUNTIME);
    admitted(&mut w, &r);
    running(&mut w);
    w.decision = Some(Decision::Preempt { by: "research/big".into() });
    let n = names(&w.plan());
    assert_eq!(n[..2], [format!("CancelSlurm {gang}"), "ClearAdmission".into()]);

    let mut w = world(JOB, RUNTIME);
    let mut old = r.clone();
    old.at = 1_800_000_000 - 4000;
    admitted(&mut w, &old);
    observe(&mut w, slurm_job(&gang_id("research", "llm", "0f3c", &old), GangState::Running, "None"));
    let actions = w.plan();
    assert!(names(&actions)[0].starts_with("CancelSlurm"));
    assert!(conditions(&actions).contains(&("Failed".into(), "True".into(), "DeadlineExceeded".into())));

    // A job submitted after the last look at Slurm is cancelled too: the bridge looks it up live.
    let mut w = world(JOB, RUNTIME);
    admitted(&mut w, &r);
    w.job.metadata.deletion_timestamp = Some(super::common::now());
    assert_eq!(names(&w.plan()), [format!("CancelSlurm {gang}"), "RemoveFinalizer".into()]);

    // An ended job is not cancelled; before Slurm first answered, the cancel is sent anyway.
    let mut w = world(JOB, RUNTIME);
    admitted(&mut w, &r);
    observe(&mut w, slurm_job(&gang, GangState::Completed, ""));
    w.job.metadata.deletion_timestamp = Some(super::common::now());
    assert_eq!(names(&w.plan()), ["RemoveFinalizer"]);
    w.slurm = Some(SlurmSnapshot::default());
    assert_eq!(names(&w.plan()), [format!("CancelSlurm {gang}"), "RemoveFinalizer".into()]);
}

fn node(name: &str, gpus: u64) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        cpus: 8,
        memory_mib: 4096,
        gpus,
        gpu_type: None,
        state: vec!["IDLE".into()],
        features: vec![],
        partitions: vec!["gpu".into()],
    }
}

fn intent_on(queue: &str, pods: u32, gpus: u64, slurm: bool) -> GangIntent {
    GangIntent {
        queue: queue.into(),
        priority: 0,
        shape: trainyard_topology::GangShape::single(
            pods,
            trainyard_topology::Resources { gpus, cpu_milli: 1000, memory_mib: 1024 },
            TopologyRequest::Unconstrained,
        ),
        kind: trainyard_bridges::WorkloadKind::JobSet,
        domain_mode: false,
        slurm: slurm.then(target),
        hosts: Default::default(),
        runtime_estimate: None,
    }
}

fn entry(name: &str, intent: GangIntent) -> JobEntry {
    JobEntry { key: format!("ns/{name}"), uid: name.into(), created: 1, order: 0, state: JobState::Waiting(intent) }
}

const POLICY: &str = "queues:\n  - {name: k8s, nominal: {gpus: 64}}\n  - {name: hpc, nominal: {gpus: 64}}\n";

/// The Kubernetes side: two hosts of 8 GPUs.
fn kubernetes_loop() -> SchedulingLoop {
    let yaml = "name: k\nlevels: [host]\ngenerate:\n  counts: [2]\n  node: {gpus: 8, cpus: 16, memory_gib: 64}\n";
    SchedulingLoop::new(Cluster::from_yaml(yaml, "k").unwrap(), PolicyConfig::from_yaml(POLICY, "p").unwrap()).unwrap()
}

#[test]
fn each_gang_is_placed_on_its_queues_cluster_one_pod_per_slurm_node() {
    let policy = PolicyConfig::from_yaml(POLICY, "p").unwrap();
    let mut k8s = kubernetes_loop();
    let topology = "SwitchName=s1 Nodes=n[1-2]\nSwitchName=s2 Nodes=n[3-4]\n";
    let nodes: Vec<NodeInfo> = ["n1", "n2", "n3", "n4"].iter().map(|n| node(n, 2)).collect();
    let hpc_cluster = slurm_cluster("slurm", &nodes, Some(topology)).unwrap();
    let mut hpc = SchedulingLoop::new(hpc_cluster, policy).unwrap().with_node_slots();
    // Two 1-GPU pods would share one 2-GPU host if the loop packed them; on Slurm each is a node.
    let entries = [entry("packed", intent_on("k8s", 2, 1, false)), entry("spread", intent_on("hpc", 2, 1, true))];
    let (decisions, stats) = split_cycle(&mut k8s, Some(&mut hpc), &entries, 10, "unused");
    assert_eq!(stats.len(), 2);
    let Some(Decision::Admit(k)) = decisions.get("ns/packed") else { panic!("{decisions:?}") };
    assert_eq!(k.nodes.len(), 1, "Kubernetes packs pods: {k:?}");
    let Some(Decision::Admit(s)) = decisions.get("ns/spread") else { panic!("{decisions:?}") };
    assert_eq!(s.nodes.iter().map(|(_, n)| *n).collect::<Vec<_>>(), [1, 1], "one pod per Slurm node: {s:?}");
    assert!(s.nodes.iter().all(|(h, _)| h.starts_with('n')), "placed on Slurm's nodes: {s:?}");

    // Two nodes are left: a gang of three waits, though the used nodes still have free GPUs.
    let (decisions, _) = split_cycle(
        &mut k8s,
        Some(&mut hpc),
        &[entries[0].clone(), entries[1].clone(), entry("five", intent_on("hpc", 3, 1, true))],
        11,
        "unused",
    );
    assert!(
        matches!(decisions.get("ns/five"), Some(Decision::Pending { .. }) | Some(Decision::Unschedulable { .. })),
        "{decisions:?}"
    );
}

#[test]
fn without_a_slurm_cluster_slurm_gangs_wait_and_say_why() {
    let mut k8s = kubernetes_loop();
    let entries = [entry("hpc-job", intent_on("hpc", 2, 1, true))];
    let (decisions, _) = split_cycle(&mut k8s, None, &entries, 10, "Slurm unreachable: connection refused");
    assert_eq!(
        decisions.get("ns/hpc-job"),
        Some(&Decision::Pending {
            reason: "SlurmUnavailable".into(),
            message: "Slurm unreachable: connection refused".into()
        })
    );
    assert!(
        k8s.engine().quotas().find("hpc").is_some_and(|q| k8s.engine().quotas().usage(q).gpus == 0),
        "never charged on Kubernetes"
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
    /// Whatever gangs arrive, the Slurm loop never gives a host to two pods (of one gang or of
    /// two) and never admits part of a gang.
    #[test]
    fn slurm_hosts_hold_at_most_one_pod(gangs in proptest::collection::vec((1u32..5, 0u64..3), 1..12)) {
        let nodes: Vec<NodeInfo> = (1..=6).map(|i| node(&format!("n{i}"), 2)).collect();
        let topology = "SwitchName=s1 Nodes=n[1-3]\nSwitchName=s2 Nodes=n[4-6]\n";
        let policy = PolicyConfig::from_yaml(POLICY, "p").unwrap();
        let mut hpc = SchedulingLoop::new(slurm_cluster("slurm", &nodes, Some(topology)).unwrap(), policy).unwrap().with_node_slots();
        let entries: Vec<JobEntry> = gangs
            .iter()
            .enumerate()
            .map(|(i, (pods, gpus))| entry(&format!("g{i}"), intent_on("hpc", *pods, *gpus, true)))
            .collect();
        let (decisions, _) = hpc.cycle(&entries, 10);
        let mut used: BTreeMap<String, u32> = BTreeMap::new();
        for (e, (pods, _)) in entries.iter().zip(&gangs) {
            if let Some(Decision::Admit(r)) = decisions.get(&e.key) {
                proptest::prop_assert_eq!(r.pods(), *pods, "a gang is placed whole");
                for (host, n) in &r.nodes {
                    *used.entry(host.clone()).or_default() += n;
                }
            }
        }
        proptest::prop_assert!(used.values().all(|n| *n == 1), "{used:?}");
    }
}
