//! DRA in the live picture, by value: ResourceSlices, DeviceClasses and ResourceClaimTemplates
//! watched into the engine's devices, nodes whose GPUs come through DRA alone, claims of other
//! workloads holding their devices, slices replaced while gangs run, and a restart holding the
//! recorded devices again.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use trainyard::api::{QUEUE_LABEL, TrainJob};
use trainyard::controller::acting::admission_record::AdmissionRecord;
use trainyard::controller::deciding::plan::Mode;
use trainyard::controller::deciding::scheduling_loop::Decision;
use trainyard::controller::watching::live::{Change, DraChange, Initial, Live, LiveSettings};
use trainyard_topology::devices::synth::{CLASSES_AND_TEMPLATES, SynthNode, slices_yaml};

use super::cluster::*;

/// The objects of a multi-document YAML text, as JSON.
fn documents(text: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).expect("YAML");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// What the DRA watches list for nodes `names`: their slices, the classes, and the templates in
/// namespace `team`.
pub(super) struct Dra {
    pub(super) classes: Vec<DeviceClass>,
    pub(super) slices: Vec<ResourceSlice>,
    pub(super) templates: Vec<ResourceClaimTemplate>,
    pub(super) claims: Vec<ResourceClaim>,
}

impl Dra {
    pub(super) fn of(names: &[&str]) -> Dra {
        let nodes: Vec<SynthNode> = names.iter().map(|n| SynthNode::hgx_h100(*n)).collect();
        let mut dra = Dra { classes: Vec::new(), slices: Vec::new(), templates: Vec::new(), claims: Vec::new() };
        let text = format!(
            "{}\n---\n{}",
            CLASSES_AND_TEMPLATES.replace("namespace: ml", "namespace: team"),
            slices_yaml(&nodes)
        );
        for doc in documents(&text) {
            match doc["kind"].as_str() {
                Some("DeviceClass") => dra.classes.push(serde_json::from_value(doc).unwrap()),
                Some("ResourceSlice") => dra.slices.push(serde_json::from_value(doc).unwrap()),
                Some("ResourceClaimTemplate") => dra.templates.push(serde_json::from_value(doc).unwrap()),
                other => panic!("unexpected {other:?}"),
            }
        }
        dra
    }

    fn changes(&self) -> Vec<Change> {
        let wrap = |c: DraChange| Change::Dra(Box::new(c));
        let mut out = Vec::new();
        out.extend(listed_dra(&self.classes, |e| wrap(DraChange::Class(e))));
        out.extend(listed_dra(&self.slices, |e| wrap(DraChange::Slice(e))));
        out.extend(listed_dra(&self.templates, |e| wrap(DraChange::Template(e))));
        out.extend(listed_dra(&self.claims, |e| wrap(DraChange::Claim(e))));
        out
    }
}

pub(super) fn listed_dra<K: Clone>(items: &[K], wrap: impl Fn(Event<K>) -> Change) -> Vec<Change> {
    let mut out = vec![wrap(Event::Init)];
    out.extend(items.iter().map(|i| wrap(Event::InitApply(i.clone()))));
    out.push(wrap(Event::InitDone));
    out
}

/// A TrainJob of `nodes` pods, each with one claim of `template` and no GPU request.
pub(super) fn claim_job(name: &str, nodes: u32, template: &str, created: u64) -> TrainJob {
    let yaml = format!(
        "apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {{name: {name}, namespace: team, uid: uid-{name}}}
spec:
  runtimeRef: {{name: gpu, kind: ClusterTrainingRuntime}}
  trainer:
    numNodes: {nodes}
    resourcesPerNode: {{requests: {{cpu: '8'}}}}
    resourceClaimsPerNode:
    - {{name: devices, resourceClaimTemplateName: {template}}}
"
    );
    let mut job: TrainJob = serde_saphyr::from_str(&yaml).expect("trainjob parses");
    let plain = trainjob(name, "gpu", "team", nodes, 0, created);
    job.metadata = plain.metadata;
    job.metadata.labels.get_or_insert_with(Default::default).insert(QUEUE_LABEL.into(), "team".into());
    job
}

/// A claim allocated with GPUs `gpus` of `node`, owned by pod `owner`.
pub(super) fn allocated_claim(uid: &str, owner: &str, node: &str, gpus: &[u32]) -> ResourceClaim {
    let results: Vec<Value> = gpus
        .iter()
        .map(|i| json!({"request": "gpu", "driver": "gpu.nvidia.com", "pool": node, "device": format!("gpu-{i}")}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("claim-{uid}"), "namespace": "team", "uid": uid,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": format!("pod-{owner}"), "uid": owner}],
        },
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
        "status": {"allocation": {"devices": {"results": results}}},
    }))
    .unwrap()
}

fn start_with(
    nodes: &[k8s_openapi::api::core::v1::Node],
    pods: &[Pod],
    jobs: &[TrainJob],
    dra: &Dra,
    now: u64,
) -> Live {
    let mut initial = Initial::default();
    initial.expect_dra = true;
    let changes = listed(Change::Node, nodes)
        .into_iter()
        .chain(listed(Change::Pod, pods))
        .chain(listed(Change::Job, jobs))
        .chain(listed(Change::Queue, &[]))
        .chain(listed(Change::Topology, &[]));
    for c in changes {
        initial.take(c);
    }
    assert!(!initial.complete(), "DRA kinds are waited for");
    for c in dra.changes() {
        initial.take(c);
    }
    initial.take(Change::Runtimes(runtimes(&[runtime_yaml("gpu", "")])));
    assert!(initial.complete(), "waiting for {:?}", initial.waiting_for());
    let settings = LiveSettings {
        mode: Mode::Standalone,
        policy_text: POLICY.into(),
        policy_name: "policy.yaml".into(),
        topology: "default".into(),
        slurm_configured: false,
        binders: trainyard::controller::acting::binders::BinderSupport::ANY,
    };
    Live::start(initial, settings, now).expect("the engine builds").0
}

/// DRA-only nodes: no GPU extended resource.
pub(super) fn dra_nodes(names: &[&str]) -> Vec<k8s_openapi::api::core::v1::Node> {
    names.iter().map(|n| node(n, 0)).collect()
}

fn decision(live: &Live, name: &str) -> Option<Decision> {
    live.decision(&format!("team/{name}")).cloned()
}

fn admitted(live: &Live, name: &str) -> AdmissionRecord {
    match decision(live, name) {
        Some(Decision::Admit(r)) => r,
        other => panic!("{name} is not admitted: {other:?}"),
    }
}

pub(super) fn gpus_of(record: &AdmissionRecord) -> BTreeMap<u32, Vec<String>> {
    record
        .devices
        .iter()
        .map(|d| {
            let devices = d.claims.iter().flat_map(|(_, r)| r.iter()).filter(|r| r[1] == "gpu.nvidia.com");
            (d.slot, devices.map(|r| format!("{}/{}", r[2], r[3])).collect())
        })
        .collect()
}

#[test]
fn dra_only_nodes_count_their_gpus_and_a_claim_gang_is_admitted_with_its_devices() {
    let nodes = dra_nodes(&["n0", "n1"]);
    let job = claim_job("g1", 2, "node-8gpu-8nic", 0);
    let mut live = start_with(&nodes, &[], &[job], &Dra::of(&["n0", "n1"]), T0);
    live.cycle(T0);
    let record = admitted(&live, "g1");
    let mut hosts: Vec<&str> = record.slots();
    hosts.sort();
    assert_eq!(hosts, vec!["n0", "n1"]);
    let gpus = gpus_of(&record);
    assert_eq!(gpus.len(), 2, "both pods carry devices: {record:?}");
    for (slot, devices) in &gpus {
        let node = record.slots()[*slot as usize];
        assert_eq!(devices.len(), 8);
        assert!(devices.iter().all(|d| d.starts_with(&format!("{node}/"))), "devices of the pod's node: {devices:?}");
    }
    assert!(record.devices.iter().all(|d| d.claims[0].0 == "team/node-8gpu-8nic"));
    // The quota counts the GPUs the claims get: 16 of the queue's 64.
    let engine = live.scheduling_loop().engine();
    assert_eq!(engine.cluster().devices_in_use().unwrap().devices.len(), 32, "8 GPUs and 8 NICs per pod");
}

#[test]
fn devices_other_claims_hold_are_not_offered_until_they_go() {
    let nodes = dra_nodes(&["n0", "n1"]);
    let mut dra = Dra::of(&["n0", "n1"]);
    dra.claims.push(allocated_claim("c1", "foreign-pod", "n0", &[3]));
    let job = claim_job("g1", 2, "node-8gpu-8nic", 0);
    let mut live = start_with(&nodes, &[], &[job], &dra, T0);
    live.cycle(T0);
    assert!(
        matches!(decision(&live, "g1"), Some(Decision::Pending { .. })),
        "n0 lacks a GPU for a whole-node claim: {:?}",
        decision(&live, "g1")
    );
    let claim = dra.claims.pop().unwrap();
    live.apply(Change::Dra(Box::new(DraChange::Claim(Event::Delete(claim)))), T0 + 1);
    live.cycle(T0 + 1);
    assert_eq!(admitted(&live, "g1").pods(), 2);
}

#[test]
fn claims_of_gang_pods_are_the_engines_own_and_count_once_their_pod_goes() {
    let nodes = dra_nodes(&["n0"]);
    let mut dra = Dra::of(&["n0"]);
    // A pod of a trainyard gang holds GPU 0 of n0 through its claim: the engine accounts for the
    // gang itself, so the claim is not counted again.
    let gang_pod = pod("p1", "n0", 0, Some("g0"));
    dra.claims.push(allocated_claim("c1", "p1", "n0", &[0]));
    let mut live = start_with(&nodes, std::slice::from_ref(&gang_pod), &[], &dra, T0);
    live.cycle(T0);
    let held = |l: &Live| l.scheduling_loop().engine().cluster().devices_in_use().unwrap().devices.clone();
    assert!(held(&live).is_empty(), "{:?}", held(&live));
    // Once the pod is being deleted its claim holds the GPU like any other.
    let mut leaving = gang_pod.clone();
    leaving.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(T0 as i64).unwrap(),
    ));
    live.apply(Change::Pod(Box::new(Event::Apply(leaving))), T0 + 1);
    live.sync_devices(T0 + 1);
    let in_use = held(&live);
    assert_eq!(in_use.len(), 1);
    assert!(in_use.iter().any(|d| d.pool == "n0" && d.device == "gpu-0"), "{in_use:?}");
    // A foreign pod's claim counts from the start.
    live.apply(Change::Dra(Box::new(DraChange::Claim(Event::Apply(allocated_claim("c2", "x", "n0", &[5]))))), T0 + 2);
    live.sync_devices(T0 + 2);
    assert_eq!(held(&live).len(), 2);
}

#[test]
fn slices_that_go_take_their_nodes_gpus_and_a_relist_brings_them_back() {
    let nodes = dra_nodes(&["n0", "n1"]);
    let dra = Dra::of(&["n0", "n1"]);
    let mut live = start_with(&nodes, &[], &[], &dra, T0);
    live.cycle(T0);
    let (gone, kept): (Vec<ResourceSlice>, Vec<ResourceSlice>) =
        dra.slices.iter().cloned().partition(|s| s.spec.node_name.as_deref() == Some("n1"));
    for slice in gone.clone() {
        live.apply(Change::Dra(Box::new(DraChange::Slice(Event::Delete(slice)))), T0 + 1);
    }
    live.apply(Change::Job(Box::new(Event::Apply(claim_job("g1", 2, "node-8gpu-8nic", 1)))), T0 + 1);
    live.cycle(T0 + 1);
    assert!(
        matches!(decision(&live, "g1"), Some(Decision::Unschedulable { .. })),
        "one node of devices left for two whole-node pods: {:?}",
        decision(&live, "g1")
    );
    // A relist that lists every slice again converges to them.
    let wrap = |e| Change::Dra(Box::new(DraChange::Slice(e)));
    live.apply(wrap(Event::Init), T0 + 2);
    for slice in kept.iter().chain(&gone) {
        live.apply(wrap(Event::InitApply(slice.clone())), T0 + 2);
    }
    live.apply(wrap(Event::InitDone), T0 + 2);
    live.cycle(T0 + 2);
    assert_eq!(admitted(&live, "g1").pods(), 2);
    assert_eq!(live.device_rebuilds(), 1, "slices of node pools change only their pools after the first build");
    // A DeviceClass changed: every need may resolve differently, so the devices go whole.
    let class = dra.classes[0].clone();
    live.apply(Change::Dra(Box::new(DraChange::Class(Event::Apply(class)))), T0 + 3);
    let mut changed = dra.classes[0].clone();
    changed.metadata.labels = Some([("edited".to_string(), "yes".to_string())].into());
    changed
        .spec
        .selectors
        .get_or_insert_with(Vec::new)
        .push(serde_json::from_value(json!({"cel": {"expression": "true"}})).unwrap());
    live.apply(Change::Dra(Box::new(DraChange::Class(Event::Apply(changed)))), T0 + 3);
    live.sync_devices(T0 + 3);
    assert_eq!(live.device_rebuilds(), 2);
}

#[test]
fn a_restart_holds_the_recorded_devices_again() {
    let nodes = dra_nodes(&["n0", "n1"]);
    let dra = Dra::of(&["n0", "n1"]);
    let mut live = start_with(&nodes, &[], &[claim_job("g1", 4, "gpu-nic-pair", 0)], &dra, T0);
    live.cycle(T0);
    let record = admitted(&live, "g1");
    let mut job = claim_job("g1", 4, "gpu-nic-pair", 0);
    job.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(trainyard::api::ADMISSION_ANNOTATION.into(), record.encode());
    let restarted = start_with(&nodes, &[], &[job], &dra, T0 + 5);
    let held = |l: &Live| l.scheduling_loop().engine().cluster().devices_in_use().unwrap().devices.clone();
    assert_eq!(held(&restarted), held(&live), "the same devices, read back from the record");
    assert_eq!(held(&restarted).len(), 8);
}

#[test]
fn a_template_that_is_missing_makes_the_job_unschedulable_naming_it() {
    let nodes = dra_nodes(&["n0"]);
    let mut live = start_with(&nodes, &[], &[claim_job("g1", 1, "no-such-template", 0)], &Dra::of(&["n0"]), T0);
    live.cycle(T0);
    match decision(&live, "g1") {
        Some(Decision::Unschedulable { message, .. }) => {
            assert!(message.contains("team/no-such-template"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_claim_gang_keeps_off_a_tainted_dra_node_it_does_not_tolerate() {
    let mut nodes = dra_nodes(&["n0", "n1", "n2"]);
    nodes[0] = tainted(nodes[0].clone(), "dedicated", "vision", "NoSchedule");
    let mut live =
        start_with(&nodes, &[], &[claim_job("g1", 2, "node-8gpu-8nic", 0)], &Dra::of(&["n0", "n1", "n2"]), T0);
    live.cycle(T0);
    let record = admitted(&live, "g1");
    let mut hosts: Vec<&str> = record.slots();
    hosts.sort();
    assert_eq!(hosts, vec!["n1", "n2"]);
    for devices in gpus_of(&record).values() {
        assert!(devices.iter().all(|d| !d.starts_with("n0/")), "no device of the tainted node: {devices:?}");
    }
}

#[test]
fn devices_of_a_node_lost_under_a_running_claim_gang_stay_held() {
    let nodes = dra_nodes(&["n0", "n1"]);
    let mut live = start_with(&nodes, &[], &[claim_job("g1", 2, "node-8gpu-8nic", 0)], &Dra::of(&["n0", "n1"]), T0);
    live.cycle(T0);
    admitted(&live, "g1");
    let held = |l: &Live| l.scheduling_loop().engine().cluster().devices_in_use().unwrap().devices.len();
    assert_eq!(held(&live), 32);
    // n1 is cordoned, then goes: g1 still runs there as far as anyone can tell, so its devices
    // stay taken and a second gang gets none of them.
    live.apply(Change::Node(Box::new(Event::Apply(cordoned(nodes[1].clone())))), T0 + 1);
    live.apply(Change::Node(Box::new(Event::Delete(nodes[1].clone()))), T0 + 2);
    live.apply(Change::Job(Box::new(Event::Apply(claim_job("g2", 1, "node-8gpu-8nic", 2)))), T0 + 2);
    live.cycle(T0 + 2);
    assert_eq!(held(&live), 32, "g1's devices are all still held");
    assert!(
        !matches!(decision(&live, "g2"), Some(Decision::Admit(_))),
        "no node has devices left for g2: {:?}",
        decision(&live, "g2")
    );
}
