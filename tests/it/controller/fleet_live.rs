//! The manager's live picture by value. The workers' DRA devices: each worker's ResourceSlices
//! and ResourceClaims come through the fleet merge under fleet names, the manager's own classes
//! and templates resolve the claims, and a claim gang goes to the worker whose devices are free,
//! with a record whose pools name that worker (and go back to the worker's names in its copy).
//! A TrainJob that names its worker cluster goes there, or waits naming it.

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::runtime::watcher::Event;
use trainyard::api::TrainJob;
use trainyard::api::worker_cluster::{CLUSTER_LEVEL_LABEL, FLEET_MANAGED_BY, WORKER_CLUSTER_ANNOTATION};
use trainyard::controller::deciding::intent::IntentContext;
use trainyard::controller::deciding::scheduling_loop::Decision;
use trainyard::controller::fleet::copies::local_record;
use trainyard::controller::fleet::merge::{FleetMerge, WorkerEvent};
use trainyard::controller::watching::live::{Change, DraChange, Initial, Live};
use trainyard::controller::watching::scheduler_inputs::intent_of;
use trainyard_policies::PolicyConfig;

use super::cluster::{POLICY, T0, listed, node, pod, runtime_yaml, runtimes, trainjob};
use super::dra::{Dra, allocated_claim, claim_job, dra_nodes, gpus_of, listed_dra};
use super::fleet_props::manager_settings;

/// One worker as its API server lists it.
struct Worker {
    name: &'static str,
    nodes: Vec<Node>,
    pods: Vec<Pod>,
    slices: Vec<ResourceSlice>,
    claims: Vec<ResourceClaim>,
}

impl Worker {
    /// A worker of DRA-only HGX H100 hosts named `hosts` (8 GPUs and 8 NICs each, as slices).
    fn of(name: &'static str, hosts: &[&str]) -> Worker {
        let dra = Dra::of(hosts);
        Worker { name, nodes: dra_nodes(hosts), pods: Vec::new(), slices: dra.slices, claims: Vec::new() }
    }

    /// Its first lists, as its watches give them to the merge.
    fn first_lists(&self) -> Vec<WorkerEvent> {
        let mut events = first_list(WorkerEvent::Node, &self.nodes);
        events.extend(first_list(WorkerEvent::Pod, &self.pods));
        events.extend(first_list(WorkerEvent::Slice, &self.slices));
        events.extend(first_list(WorkerEvent::Claim, &self.claims));
        events
    }
}

/// One kind's first list as a worker's watch gives it: `Init`, each object, `InitDone`.
fn first_list<K: Clone>(wrap: fn(Box<Event<K>>) -> WorkerEvent, items: &[K]) -> Vec<WorkerEvent> {
    let mut events = vec![wrap(Box::new(Event::Init))];
    events.extend(items.iter().map(|i| wrap(Box::new(Event::InitApply(i.clone())))));
    events.push(wrap(Box::new(Event::InitDone)));
    events
}

/// A manager whose DeviceClasses and templates are its own and whose nodes, pods, slices and
/// claims are the workers'.
fn start(workers: &[Worker], jobs: &[TrainJob]) -> (Live, FleetMerge) {
    let (mut merge, first) = FleetMerge::new(workers.iter().map(|w| w.name.to_string()), true);
    let mut initial = Initial::default();
    initial.expect_dra = true;
    for change in first {
        initial.take(change);
    }
    let own = Dra::of(&[]);
    let wrap = |c: DraChange| Change::Dra(Box::new(c));
    for change in listed_dra(&own.classes, |e| wrap(DraChange::Class(e)))
        .into_iter()
        .chain(listed_dra(&own.templates, |e| wrap(DraChange::Template(e))))
        .chain(listed(Change::Job, jobs))
        .chain(listed(Change::Queue, &[]))
        .chain(listed(Change::Topology, &[]))
    {
        initial.take(change);
    }
    initial.take(Change::Runtimes(runtimes(&[runtime_yaml("gpu", "")])));
    for worker in workers {
        assert!(!initial.complete(), "the first list waits for every worker's devices ({} not listed)", worker.name);
        for event in worker.first_lists() {
            for change in merge.apply(worker.name, event) {
                initial.take(change);
            }
        }
    }
    assert!(initial.complete(), "waiting for {:?}", initial.waiting_for());
    (Live::start(initial, manager_settings(POLICY), T0).expect("the engine builds").0, merge)
}

/// A claim gang of whole-node pods (8 GPUs and 8 NICs each) for the fleet.
fn fleet_claim_job(name: &str, pods: u32) -> TrainJob {
    let mut job = claim_job(name, pods, "node-8gpu-8nic", 0);
    job.spec.0.managed_by = Some(FLEET_MANAGED_BY.into());
    job
}

fn feed(live: &mut Live, merge: &mut FleetMerge, cluster: &str, event: WorkerEvent, now: u64) {
    for change in merge.apply(cluster, event) {
        live.apply(change, now);
    }
}

fn decision(live: &Live, name: &str) -> Option<Decision> {
    live.decision(&format!("team/{name}")).cloned()
}

#[test]
fn a_claim_gang_goes_to_the_worker_whose_devices_are_free_with_pools_in_fleet_names() {
    // Both workers name their hosts alike; one GPU of east's n0 is held by another workload.
    let mut east = Worker::of("east", &["n0", "n1"]);
    east.claims.push(allocated_claim("c1", "foreign-pod", "n0", &[3]));
    let west = Worker::of("west", &["n0", "n1"]);
    let (mut live, _) = start(&[east, west], &[fleet_claim_job("g1", 2)]);
    live.cycle(T0);
    let record = match decision(&live, "g1") {
        Some(Decision::Admit(r)) => r,
        other => panic!("g1 is not admitted: {other:?}"),
    };
    let mut hosts = record.slots();
    hosts.sort();
    assert_eq!(hosts, ["west/n0", "west/n1"], "east's n0 lacks a GPU for a whole-node claim");
    for (slot, devices) in gpus_of(&record) {
        let host = record.slots()[slot as usize];
        assert_eq!(devices.len(), 8);
        assert!(
            devices.iter().all(|d| d.starts_with(&format!("{host}/gpu-"))),
            "the pool is the worker's host: {devices:?}"
        );
    }
    let in_use = live.scheduling_loop().engine().cluster().devices_in_use().unwrap().devices.clone();
    assert!(
        in_use.iter().any(|d| d.pool == "east/n0" && d.device == "gpu-3"),
        "east's foreign claim holds: {in_use:?}"
    );
    // The copy's record names the worker's own pools.
    let (cluster, local) = local_record(&record).expect("one worker");
    assert_eq!(cluster, "west");
    for (slot, devices) in gpus_of(&local) {
        let host = local.slots()[slot as usize];
        assert!(devices.iter().all(|d| d.starts_with(&format!("{host}/gpu-"))), "{devices:?}");
        assert!(["n0", "n1"].contains(&host));
    }
}

#[test]
fn claims_of_a_workers_gang_pods_are_the_engines_own_and_other_claims_follow_the_merge() {
    // A copy's pod on west holds GPU 0 of west's n0 through its claim: the engine accounts for the
    // gang itself, so the claim is not counted again (pod and owner uids are qualified alike).
    let mut west = Worker::of("west", &["n0"]);
    west.pods.push(pod("p1", "n0", 0, Some("g0")));
    west.claims.push(allocated_claim("c1", "p1", "n0", &[0]));
    let east = Worker::of("east", &["n0"]);
    let (mut live, mut merge) = start(&[east, west], &[]);
    live.cycle(T0);
    let held = |l: &Live| l.scheduling_loop().engine().cluster().devices_in_use().unwrap().devices.clone();
    assert!(held(&live).is_empty(), "{:?}", held(&live));
    // Another workload's claim on east holds its device, under east's pool name.
    let claim = allocated_claim("c2", "x", "n0", &[5]);
    feed(&mut live, &mut merge, "east", WorkerEvent::Claim(Box::new(Event::Apply(claim.clone()))), T0 + 1);
    live.sync_devices(T0 + 1);
    let in_use = held(&live);
    assert_eq!(in_use.len(), 1);
    assert!(in_use.iter().any(|d| d.pool == "east/n0" && d.device == "gpu-5"), "{in_use:?}");
    // Its deletion on east frees it.
    feed(&mut live, &mut merge, "east", WorkerEvent::Claim(Box::new(Event::Delete(claim))), T0 + 2);
    live.sync_devices(T0 + 2);
    assert!(held(&live).is_empty());
}

#[test]
fn a_worker_that_leaves_takes_its_devices_and_a_claim_gang_waits_for_the_others() {
    // West's only host has a GPU held; east has room until it leaves the fleet.
    let east = Worker::of("east", &["n0"]);
    let mut west = Worker::of("west", &["n0"]);
    west.claims.push(allocated_claim("c1", "foreign-pod", "n0", &[0]));
    let (mut live, mut merge) = start(&[east, west], &[]);
    live.cycle(T0);
    feed(&mut live, &mut merge, "east", WorkerEvent::Gone, T0 + 1);
    live.apply(Change::Job(Box::new(Event::Apply(fleet_claim_job("g1", 1)))), T0 + 1);
    live.cycle(T0 + 1);
    assert!(
        !matches!(decision(&live, "g1"), Some(Decision::Admit(_))),
        "east is gone and west's host lacks a GPU: {:?}",
        decision(&live, "g1")
    );
    // West's relist no longer shows the claim: the device is free and the gang goes there.
    let relist = [Event::Init, Event::InitDone].map(|e| WorkerEvent::Claim(Box::new(e)));
    for event in relist {
        feed(&mut live, &mut merge, "west", event, T0 + 2);
    }
    live.cycle(T0 + 2);
    match decision(&live, "g1") {
        Some(Decision::Admit(r)) => assert_eq!(r.slots(), ["west/n0"]),
        other => panic!("g1 is not admitted on west: {other:?}"),
    }
}

/// A TrainJob of one 8-GPU pod for the fleet, naming its worker cluster when `pin` is given.
fn pinned_job(name: &str, pin: Option<&str>) -> TrainJob {
    let mut job = trainjob(name, "gpu", "team", 1, 8, 0);
    job.spec.0.managed_by = Some(FLEET_MANAGED_BY.into());
    if let Some(cluster) = pin {
        job.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(WORKER_CLUSTER_ANNOTATION.into(), cluster.into());
    }
    job
}

#[test]
fn a_gang_naming_its_worker_goes_there_and_one_naming_no_worker_waits_naming_it() {
    let gpu_worker = |name: &'static str| Worker {
        name,
        nodes: vec![node("n0", 8), node("n1", 8)],
        pods: Vec::new(),
        slices: Vec::new(),
        claims: Vec::new(),
    };
    let jobs = [pinned_job("free", None), pinned_job("west", Some("west")), pinned_job("lost", Some("north"))];
    let (mut live, merge) = start(&[gpu_worker("east"), gpu_worker("west")], &jobs);
    live.cycle(T0);
    let slots = |live: &Live, name: &str| match decision(live, name) {
        Some(Decision::Admit(r)) => r.slots().iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        other => panic!("{name} is not admitted: {other:?}"),
    };
    assert!(slots(&live, "free")[0].starts_with("east/"), "an unpinned gang takes the first worker with room");
    assert!(slots(&live, "west")[0].starts_with("west/"), "a pinned one its own");
    match decision(&live, "lost") {
        Some(Decision::Pending { reason, message }) => {
            assert_eq!(reason, "WorkerClusterNotFound");
            assert!(
                message.contains("\"north\"") && message.contains("east, west"),
                "names it and the fleet: {message}"
            );
            assert!(message.contains(WORKER_CLUSTER_ANNOTATION), "and the annotation: {message}");
        }
        other => panic!("a gang naming no worker of the fleet must wait: {other:?}"),
    }
    // The worker joins the fleet: the gang goes there.
    let north = gpu_worker("north");
    let mut merge = merge;
    for event in north.first_lists() {
        feed(&mut live, &mut merge, "north", event, T0 + 1);
    }
    live.cycle(T0 + 1);
    assert!(slots(&live, "lost")[0].starts_with("north/"), "{:?}", decision(&live, "lost"));
}

#[test]
fn a_worker_name_that_cannot_be_one_is_refused_by_field_and_only_a_manager_reads_it() {
    let policy = PolicyConfig::from_yaml(POLICY, "policy.yaml").expect("policy");
    let rts = runtimes(&[runtime_yaml("gpu", "")]);
    let manager = IntentContext { fleet: true, ..IntentContext::new(&policy, "nvidia.com/gpu") };
    let (intent, _) = intent_of(&pinned_job("bad", Some("East_1")), &rts, &manager);
    let problem = intent.expect_err("not a DNS subdomain");
    assert_eq!(problem.reason, "InvalidSpec");
    assert_eq!(problem.field, format!("metadata.annotations[\"{WORKER_CLUSTER_ANNOTATION}\"]"));
    let (intent, _) = intent_of(&pinned_job("ok", Some("west")), &rts, &manager);
    assert_eq!(intent.unwrap().hosts.node_selector.get(CLUSTER_LEVEL_LABEL).map(String::as_str), Some("west"));
    // A worker's trainyard reads the annotation on the copy and leaves it be.
    let worker = IntentContext::new(&policy, "nvidia.com/gpu");
    let (intent, _) = intent_of(&pinned_job("bad", Some("East_1")), &rts, &worker);
    assert!(intent.unwrap().hosts.node_selector.is_empty());
}
