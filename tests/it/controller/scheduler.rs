//! The scheduling loop by value: admissions, repeats until recorded, restarts, endings, domains.

use trainyard::controller::deciding::intent::GangIntent;
use trainyard::controller::deciding::scheduling_loop::{Decision, JobEntry, JobState, SchedulingLoop};
use trainyard_bridges::WorkloadKind;
use trainyard_policies::PolicyConfig;
use trainyard_topology::{Cluster, GangShape, Resources, TopologyRequest};

fn cluster() -> Cluster {
    Cluster::from_yaml("name: t\nlevels: [rack, host]\ngenerate:\n  counts: [2, 2]\n  node: {gpus: 8}\n", "t.yaml")
        .unwrap()
}

fn intent(pods: u32, topology: TopologyRequest, domain_mode: bool) -> GangIntent {
    GangIntent {
        queue: "q".into(),
        priority: 0,
        shape: GangShape::single(pods, Resources::gpus(8), topology),
        kind: WorkloadKind::JobSet,
        domain_mode,
        slurm: None,
        hosts: Default::default(),
        runtime_estimate: None,
    }
}

fn entry(name: &str, created: u64, state: JobState) -> JobEntry {
    JobEntry { key: format!("ns/{name}"), uid: format!("uid-{name}"), created, order: 0, state }
}

fn looped() -> SchedulingLoop {
    SchedulingLoop::new(cluster(), PolicyConfig::builtin("fifo").unwrap()).unwrap()
}

#[test]
fn the_first_gang_is_admitted_and_the_second_waits_with_a_reason() {
    let mut s = looped();
    let jobs = vec![
        entry("a", 1, JobState::Waiting(intent(3, TopologyRequest::Unconstrained, false))),
        entry("b", 2, JobState::Waiting(intent(2, TopologyRequest::Unconstrained, false))),
    ];
    let (d, stats) = s.cycle(&jobs, 10);
    let Some(Decision::Admit(r)) = d.get("ns/a") else { panic!("{d:?}") };
    assert_eq!(r.pods(), 3);
    assert!(
        matches!(d.get("ns/b"), Some(Decision::Pending { reason, .. }) if reason == "InsufficientCapacity"),
        "{d:?}"
    );
    assert_eq!(stats.admitted, 1);
    assert_eq!(stats.pending_by_queue.get("q"), Some(&1));
    // Until the record reaches the object the same admission is repeated, never a second one.
    let (again, _) = s.cycle(&jobs, 11);
    assert_eq!(again.get("ns/a"), Some(&Decision::Admit(r.clone())));
}

#[test]
fn a_restarted_loop_adopts_recorded_admissions_and_frees_them_when_jobs_end() {
    let mut first = looped();
    let a = intent(3, TopologyRequest::Unconstrained, false);
    let (d, _) = first.cycle(&[entry("a", 1, JobState::Waiting(a.clone()))], 10);
    let Some(Decision::Admit(record)) = d.get("ns/a").cloned() else { panic!() };
    // A new process: `a` carries its record; `b` needs 2 hosts, only 1 is free while `a` runs.
    let mut s = looped();
    let b = intent(2, TopologyRequest::Unconstrained, false);
    let mut jobs =
        vec![entry("a", 1, JobState::Admitted(a.clone(), record.clone())), entry("b", 2, JobState::Waiting(b.clone()))];
    let (d, _) = s.cycle(&jobs, 20);
    assert_eq!(d.get("ns/a"), Some(&Decision::Running));
    assert!(matches!(d.get("ns/b"), Some(Decision::Pending { .. })), "{d:?}");
    assert_eq!(s.engine().cluster().total_free().gpus, 8);
    jobs[0].state = JobState::Inactive;
    let (d, _) = s.cycle(&jobs, 30);
    assert!(matches!(d.get("ns/b"), Some(Decision::Admit(_))), "{d:?}");
    assert!(!d.contains_key("ns/a"));
}

#[test]
fn a_gang_that_never_fits_is_unschedulable_and_stays_so_without_resubmission() {
    let mut s = looped();
    let jobs = vec![entry("big", 1, JobState::Waiting(intent(3, TopologyRequest::Required("rack".into()), false)))];
    let (d, _) = s.cycle(&jobs, 1);
    assert!(matches!(d.get("ns/big"), Some(Decision::Unschedulable { reason, .. }) if reason == "NeverFits"), "{d:?}");
    let (d2, _) = s.cycle(&jobs, 2);
    assert_eq!(d, d2);
    assert_eq!(s.engine().pending_len(), 0);
}

#[test]
fn domain_mode_records_the_selector_of_every_enclosing_level() {
    let mut s = looped();
    let jobs = vec![entry("d", 1, JobState::Waiting(intent(2, TopologyRequest::Required("rack".into()), true)))];
    let (d, _) = s.cycle(&jobs, 1);
    let Some(Decision::Admit(r)) = d.get("ns/d") else { panic!("{d:?}") };
    let selector = r.domain.clone().expect("domain mode");
    assert_eq!(selector.len(), 1);
    assert_eq!(selector[0].0, "rack");
    assert!(r.nodes.len() == 2, "{r:?}");
}

#[test]
fn queue_status_reports_usage_and_counts_and_a_broken_tree() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use trainyard::api::{Queue, QueueSpec};
    use trainyard::controller::deciding::queue_status::queue_statuses;
    let mut s = looped();
    let jobs = vec![
        entry("a", 1, JobState::Waiting(intent(3, TopologyRequest::Unconstrained, false))),
        entry("b", 2, JobState::Waiting(intent(2, TopologyRequest::Unconstrained, false))),
    ];
    let (d, _) = s.cycle(&jobs, 10);
    let queue = Queue::new("q", QueueSpec::default());
    let now = Time(k8s_openapi::jiff::Timestamp::from_second(10).unwrap());
    let refs: Vec<&JobEntry> = jobs.iter().collect();
    let lookup = |k: &str| d.get(k).cloned();
    let statuses = queue_statuses(&[&queue], s.engine(), &refs, &lookup, None, &now);
    let (name, status) = &statuses[0];
    assert_eq!(name, "q");
    assert_eq!((status.usage.gpus, status.admitted, status.pending), (Some(24), 1, 1));
    assert_eq!(status.conditions[0].status, "True");
    let broken = queue_statuses(&[&queue], s.engine(), &refs, &lookup, Some("Queue q: cycle"), &now);
    assert_eq!(broken[0].1.conditions[0].reason, "InvalidQuotaTree");
}

#[test]
fn an_edited_waiting_gang_is_queued_again_as_it_is_now() {
    let mut s = looped();
    let mut jobs = vec![entry("a", 1, JobState::Waiting(intent(5, TopologyRequest::Unconstrained, false)))];
    let (d, _) = s.cycle(&jobs, 1);
    assert!(matches!(d.get("ns/a"), Some(Decision::Unschedulable { .. })), "5 hosts of 4: {d:?}");
    // The user shrinks it: it is looked at again, not left refused.
    jobs[0].state = JobState::Waiting(intent(2, TopologyRequest::Unconstrained, false));
    let (d, _) = s.cycle(&jobs, 2);
    assert!(matches!(d.get("ns/a"), Some(Decision::Admit(r)) if r.pods() == 2), "{d:?}");
}

#[test]
fn a_running_gang_whose_spec_broke_keeps_its_hosts_until_it_ends() {
    let mut s = looped();
    let mut jobs = vec![
        entry("a", 1, JobState::Waiting(intent(3, TopologyRequest::Unconstrained, false))),
        entry("b", 2, JobState::Waiting(intent(2, TopologyRequest::Unconstrained, false))),
    ];
    let (d, _) = s.cycle(&jobs, 1);
    let Some(Decision::Admit(record)) = d.get("ns/a").cloned() else { panic!() };
    jobs[0].state = JobState::Admitted(intent(3, TopologyRequest::Unconstrained, false), record);
    s.cycle(&jobs, 2);
    // Its runtime was deleted: no intent any more, but it still runs.
    jobs[0].state = JobState::Kept;
    let (d, _) = s.cycle(&jobs, 3);
    assert_eq!(d.get("ns/a"), Some(&Decision::Running));
    assert!(matches!(d.get("ns/b"), Some(Decision::Pending { .. })), "a's hosts stay taken: {d:?}");
    jobs[0].state = JobState::Inactive;
    let (d, _) = s.cycle(&jobs, 4);
    assert!(matches!(d.get("ns/b"), Some(Decision::Admit(_))), "{d:?}");
}

#[test]
fn intents_are_rendered_again_only_when_their_inputs_change() {
    use super::common::*;
    use trainyard::controller::deciding::intent::IntentContext;
    use trainyard::controller::watching::scheduler_inputs::{IntentCache, Runtimes};
    let mut job = job(TORCH_JOB);
    job.metadata.resource_version = Some("7".into());
    job.metadata.generation = Some(1);
    let (present, absent) = (runtimes(TORCH_RUNTIME), Runtimes::default());
    let policy = policy();
    let ctx = IntentContext::new(&policy, "nvidia.com/gpu");
    let mut cache = IntentCache::default();
    assert!(cache.intent(&job, &present, &ctx, 1).is_ok());
    assert!(cache.intent(&job, &absent, &ctx, 1).is_ok(), "same job, same inputs: the cached intent");
    // A status write changes the resource version only: still the cached intent.
    job.metadata.resource_version = Some("8".into());
    assert!(cache.intent(&job, &absent, &ctx, 1).is_ok(), "a status write does not render again");
    assert!(cache.intent(&job, &absent, &ctx, 2).is_err(), "new inputs: looked at again");
    job.metadata.generation = Some(2);
    assert!(cache.intent(&job, &present, &ctx, 2).is_ok(), "a changed spec is looked at again");
    assert!(cache.intent(&job, &absent, &ctx, 2).is_ok(), "cached again");
    job.metadata.labels.get_or_insert_default().insert("team".into(), "x".into());
    assert!(cache.intent(&job, &absent, &ctx, 2).is_err(), "a changed label is looked at again");
}

/// A launcher (1 GPU) and its workers (2 x 8 GPUs), the launcher's replicated job first.
fn launcher_and_workers() -> GangIntent {
    use trainyard_topology::PodSetShape;
    let set = |name: &str, pods: u32, gpus: u64| PodSetShape::new(name, pods, Resources::gpus(gpus));
    let mut i = intent(1, TopologyRequest::Unconstrained, false);
    i.shape =
        GangShape { sets: vec![set("launcher", 1, 1), set("node", 2, 8)], topology: TopologyRequest::Unconstrained };
    i
}

#[test]
fn a_gang_of_pod_sets_is_recorded_set_by_set_and_adopted_where_it_runs() {
    let mut s = looped();
    let gang = launcher_and_workers();
    let (d, _) = s.cycle(&[entry("m", 1, JobState::Waiting(gang.clone()))], 10);
    let Some(Decision::Admit(record)) = d.get("ns/m").cloned() else { panic!("{d:?}") };
    assert_eq!(record.pods(), 3);
    // Slot 0 is the launcher's: its host keeps 7 GPUs free, the workers' hosts none.
    let slots = record.slots();
    let engine = s.engine();
    let free_on = |name: &str| {
        let topo = engine.cluster().topology();
        let host = topo.hosts().find(|&h| topo.host_name(h) == name).unwrap();
        engine.cluster().host_free(host).gpus
    };
    assert_eq!(free_on(slots[0]), 7, "{record:?}");
    assert_eq!((free_on(slots[1]), free_on(slots[2])), (0, 0), "{record:?}");
    // A new process takes it back exactly: 32 - 17 GPUs free.
    let mut again = looped();
    let (d, _) = again.cycle(&[entry("m", 1, JobState::Admitted(gang, record))], 20);
    assert_eq!(d.get("ns/m"), Some(&Decision::Running));
    assert_eq!(again.engine().cluster().total_free().gpus, 32 - 17);
}

#[test]
fn a_record_from_before_the_gang_had_its_launcher_is_charged_for_the_pods_it_placed() {
    let mut s = looped();
    let old = trainyard::controller::acting::admission_record::AdmissionRecord {
        nodes: vec![("host-0".into(), 1), ("host-1".into(), 1)],
        domain: None,
        at: 5,
        cost: 0,
        slurm: false,
        devices: Vec::new(),
    };
    let (d, _) = s.cycle(&[entry("m", 1, JobState::Admitted(launcher_and_workers(), old))], 20);
    assert_eq!(d.get("ns/m"), Some(&Decision::Running));
    assert_eq!(s.engine().cluster().total_free().gpus, 32 - 16, "two recorded pods at the largest pod shape");
}
