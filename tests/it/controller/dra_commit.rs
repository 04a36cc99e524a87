//! Committing a gang's devices, by value and as exact API requests: in allocate mode each
//! pod's claims get the recorded allocation before its gate goes, a pod whose claims are not
//! made yet keeps its gate, and a gang that stops or times out before its pods were bound gives
//! the allocations back; in delegate mode nothing is written to claims.

use http::StatusCode;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;
use trainyard::controller::acting::actor::Actor;
use trainyard::controller::acting::admission_record::{AdmissionRecord, SlotDevices};
use trainyard::controller::deciding::plan::{Action, DeviceCommit};
use trainyard::controller::deciding::pod_bindings::{PodClaim, PodView};
use trainyard::controller::deciding::scheduling_loop::Decision;

use super::common::*;
use super::mock::{expect, scenario, status_reply};

const DRA_JOB: &str = include_str!("../../../bridges/tests/fixtures/torch_dra.trainjob.yaml");
const DRA_RUNTIME: &str = include_str!("../../../bridges/tests/fixtures/torch_dra.runtime.yaml");

/// Four pods, two per node, each with eight GPUs of its node and one NIC.
fn record_with_devices() -> AdmissionRecord {
    let mut r = record(&[("node-a", 2), ("node-b", 2)]);
    r.devices = (0..4u32)
        .map(|slot| {
            let node = if slot < 2 { "node-a" } else { "node-b" };
            let gpus =
                (0..8).map(|i| ["gpu".into(), "gpu.nvidia.com".into(), node.into(), format!("gpu-{}", i)]).collect();
            let nic = vec![["nic".into(), "nic.example.com".into(), node.into(), format!("nic-{slot}")]];
            SlotDevices { slot, claims: vec![("ml/h100-8gpu".into(), gpus), ("ml/rdma-nic".into(), nic)] }
        })
        .collect();
    r
}

/// Gated pod `index` of the gang, with the claims kube-controller-manager made for it (or not yet).
fn pod_with_claims(index: u32, made: bool) -> PodView {
    let mut p = gated_pod("llm-dra", index, false);
    let made_name = |entry: &str| made.then(|| format!("llm-dra-node-0-{index}-{entry}-x7k2p"));
    p.claims = vec![
        PodClaim { name: "gpu".into(), template: "h100-8gpu".into(), claim: made_name("gpu") },
        PodClaim { name: "rdma".into(), template: "rdma-nic".into(), claim: made_name("rdma") },
    ];
    p
}

fn world(devices: DeviceCommit, pods: Vec<PodView>) -> World {
    let mut w = World::new(with_finalizer(job(DRA_JOB)), DRA_RUNTIME);
    let record = record_with_devices();
    w.job
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(trainyard::api::ADMISSION_ANNOTATION.into(), record.encode());
    w.decision = Some(Decision::Running);
    w.workload = Some(Default::default());
    w.pods = pods;
    w.devices = devices;
    w
}

/// A claim as the server answers an apply: its identity only.
fn claim_object(name: &str) -> serde_json::Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name, "namespace": "ml"}})
}

fn claim_steps(actions: &[Action]) -> Vec<String> {
    names(actions)
        .into_iter()
        .filter(|n| n.starts_with("AllocateClaim") || n.starts_with("Ungate") || n.starts_with("ReleaseClaim"))
        .collect()
}

#[test]
fn allocate_mode_writes_every_claim_of_a_pod_before_its_gate_goes() {
    let w = world(DeviceCommit::Allocate, vec![pod_with_claims(0, true), pod_with_claims(2, true)]);
    let actions = w.plan();
    assert_eq!(
        claim_steps(&actions),
        vec![
            "AllocateClaim llm-dra-node-0-0-gpu-x7k2p@node-a",
            "AllocateClaim llm-dra-node-0-0-rdma-x7k2p@node-a",
            "Ungate llm-dra-node-0-0->node-a",
            "AllocateClaim llm-dra-node-0-2-gpu-x7k2p@node-b",
            "AllocateClaim llm-dra-node-0-2-rdma-x7k2p@node-b",
            "Ungate llm-dra-node-0-2->node-b",
        ]
    );
    let Some(Action::AllocateClaim { results, .. }) =
        actions.iter().find(|a| matches!(a, Action::AllocateClaim { .. }))
    else {
        unreachable!()
    };
    assert_eq!(results.len(), 8);
    assert_eq!(results[0], ["gpu", "gpu.nvidia.com", "node-a", "gpu-0"].map(String::from));
}

#[test]
fn a_pod_whose_claims_are_not_made_yet_keeps_its_gate() {
    let w = world(DeviceCommit::Allocate, vec![pod_with_claims(0, false), pod_with_claims(1, true)]);
    let steps = claim_steps(&w.plan());
    assert!(steps.iter().all(|s| !s.contains("node-0-0")), "{steps:?}");
    assert_eq!(steps.last().map(String::as_str), Some("Ungate llm-dra-node-0-1->node-a"));
}

#[test]
fn delegate_mode_writes_nothing_to_claims() {
    let w = world(DeviceCommit::Delegate, vec![pod_with_claims(0, true), pod_with_claims(3, true)]);
    assert_eq!(claim_steps(&w.plan()), vec!["Ungate llm-dra-node-0-0->node-a", "Ungate llm-dra-node-0-3->node-b"]);
}

#[test]
fn a_gang_that_times_out_starting_gives_back_the_claims_of_its_unbound_pods() {
    let mut bound = pod_with_claims(1, true);
    bound.gates.clear();
    bound.node_name = Some("node-a".into());
    let mut waiting = pod_with_claims(2, true);
    waiting.gates.clear();
    let mut w = world(DeviceCommit::Allocate, vec![bound, waiting, pod_with_claims(3, false)]);
    w.start_timeout = Some(600);
    // Within the limit: nothing happens to claims.
    let early = Time(Timestamp::from_second(100 + 600).unwrap());
    assert!(claim_steps(&w.plan_at(early)).iter().all(|s| !s.starts_with("ReleaseClaim")));
    let late = Time(Timestamp::from_second(100 + 601).unwrap());
    let actions = w.plan_at(late.clone());
    let steps = names(&actions);
    let releases: Vec<&String> = steps.iter().filter(|s| s.starts_with("ReleaseClaim")).collect();
    // The bound pod's claims are reserved by kube-scheduler and follow the pod; pod 3's were never made.
    assert_eq!(releases, vec!["ReleaseClaim llm-dra-node-0-2-gpu-x7k2p", "ReleaseClaim llm-dra-node-0-2-rdma-x7k2p"]);
    let delete = steps.iter().position(|s| s.starts_with("Delete")).expect("the JobSet is deleted");
    let last_release = steps.iter().rposition(|s| s.starts_with("ReleaseClaim")).unwrap();
    assert!(last_release < delete, "claims are released before their pods go: {steps:?}");
    assert!(steps.contains(&"ClearAdmission".to_string()), "{steps:?}");
    assert!(steps.contains(&"Event StartTimeout".to_string()), "{steps:?}");
    // A gang waiting for lost nodes follows the node-loss policy instead.
    w.decision = Some(Decision::Degraded { nodes: vec!["node-b".into()], message: "node-b NotReady".into() });
    assert!(!names(&w.plan_at(late.clone())).iter().any(|s| s.contains("StartTimeout")));
    w.decision = Some(Decision::Running);
    // Pods made anew (a JobSet restart, say) start the clock again.
    w.pods[1].created = Some(100 + 500);
    assert!(!names(&w.plan_at(late)).iter().any(|s| s.starts_with("ReleaseClaim") || s.contains("StartTimeout")));
}

#[test]
fn a_preempted_gang_gives_back_its_allocations_in_allocate_mode_only() {
    let mut w = world(DeviceCommit::Allocate, vec![pod_with_claims(0, true)]);
    w.decision = Some(Decision::Preempt { by: "ml/urgent".into() });
    let steps = claim_steps(&w.plan());
    assert_eq!(steps, vec!["ReleaseClaim llm-dra-node-0-0-gpu-x7k2p", "ReleaseClaim llm-dra-node-0-0-rdma-x7k2p"]);
    w.devices = DeviceCommit::Delegate;
    assert!(claim_steps(&w.plan()).is_empty());
}

const CLAIMS: &str = "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims";

#[tokio::test]
async fn an_allocation_is_the_finalizer_then_the_status_then_the_gate() {
    let w = world(DeviceCommit::Allocate, vec![pod_with_claims(0, true)]);
    let actions = w.plan();
    let steps: Vec<Action> = actions
        .into_iter()
        .filter(|a| {
            matches!(a, Action::AllocateClaim { claim, .. } if claim.contains("-rdma-"))
                || matches!(a, Action::Ungate(_))
        })
        .collect();
    let claim = "llm-dra-node-0-0-rdma-x7k2p";
    let claim_object = claim_object(claim);
    let (client, verifier) = scenario(
        "allocate-then-ungate",
        vec![
            expect("PATCH", format!("{CLAIMS}/{claim}?&force=true&fieldManager=trainyard"))
                .content("application/apply-patch+yaml")
                .body(json!({
                    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"name": claim, "namespace": "ml", "finalizers": ["resource.kubernetes.io/delete-protection"]},
                }))
                .reply(StatusCode::OK, claim_object.clone()),
            expect("PATCH", format!("{CLAIMS}/{claim}/status?&force=true&fieldManager=trainyard"))
                .content("application/apply-patch+yaml")
                .body(json!({
                    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"name": claim, "namespace": "ml"},
                    "status": {"allocation": {
                        "devices": {"results": [
                            {"request": "nic", "driver": "nic.example.com", "pool": "node-a", "device": "nic-0"},
                        ]},
                        // Written with the allocation: kube-scheduler 1.36 would add it otherwise,
                        // and an allocation is immutable, so the pod would never be bound.
                        "allocationTimestamp": "2027-01-15T08:00:00Z",
                        "nodeSelector": {"nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]},
                        ]},
                    }},
                }))
                .reply(StatusCode::OK, claim_object.clone()),
            expect("PATCH", "/api/v1/namespaces/ml/pods/llm-dra-node-0-0?&fieldManager=trainyard")
                .content("application/json-patch+json")
                .reply(StatusCode::OK, json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})),
        ],
    );
    Actor::new(client, None).run(&w.job, &steps).await.unwrap();
    verifier.await.unwrap();
}

#[tokio::test]
async fn a_refused_allocation_leaves_the_pod_gated() {
    let w = world(DeviceCommit::Allocate, vec![pod_with_claims(0, true)]);
    let steps: Vec<Action> =
        w.plan().into_iter().filter(|a| matches!(a, Action::AllocateClaim { .. } | Action::Ungate(_))).collect();
    let claim = "llm-dra-node-0-0-gpu-x7k2p";
    let (client, verifier) = scenario(
        "allocation-refused",
        vec![
            expect("PATCH", format!("{CLAIMS}/{claim}?&force=true&fieldManager=trainyard")).reply(
                StatusCode::OK,
                json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": claim}}),
            ),
            expect("PATCH", format!("{CLAIMS}/{claim}/status?&force=true&fieldManager=trainyard"))
                .reply(StatusCode::UNPROCESSABLE_ENTITY, status_reply(422, "Invalid")),
        ],
    );
    // The first failure stops the reconcile: no other claim and no gate is touched.
    assert!(Actor::new(client, None).run(&w.job, &steps).await.is_err());
    verifier.await.unwrap();
}

#[tokio::test]
async fn a_release_takes_the_allocation_back_then_the_finalizer_and_a_claim_gone_is_done() {
    let w = world(DeviceCommit::Allocate, vec![]);
    let claim = "llm-dra-node-0-2-gpu-x7k2p";
    let claim_object = claim_object(claim);
    let (client, verifier) = scenario(
        "release",
        vec![
            expect("PATCH", format!("{CLAIMS}/{claim}/status?&force=true&fieldManager=trainyard"))
                .content("application/apply-patch+yaml")
                .body(claim_object.clone())
                .reply(StatusCode::OK, claim_object.clone()),
            expect("PATCH", format!("{CLAIMS}/{claim}?&force=true&fieldManager=trainyard"))
                .content("application/apply-patch+yaml")
                .body(claim_object.clone())
                .reply(StatusCode::OK, claim_object.clone()),
            expect("PATCH", format!("{CLAIMS}/gone/status?&force=true&fieldManager=trainyard"))
                .reply(StatusCode::NOT_FOUND, status_reply(404, "NotFound")),
            expect("PATCH", format!("{CLAIMS}/gone?&force=true&fieldManager=trainyard"))
                .reply(StatusCode::NOT_FOUND, status_reply(404, "NotFound")),
        ],
    );
    let actor = Actor::new(client, None);
    actor.execute(&w.job, &Action::ReleaseClaim { claim: claim.into() }).await.unwrap();
    actor.execute(&w.job, &Action::ReleaseClaim { claim: "gone".into() }).await.unwrap();
    verifier.await.unwrap();
}

#[test]
fn a_claim_every_pod_shares_goes_on_the_pod_group_and_is_not_placed_per_pod() {
    use trainyard::controller::acting::gang_api::GangApi;
    let runtime = DRA_RUNTIME.replace(
        "                - {name: gpu, resourceClaimTemplateName: one-gpu}\n",
        "                - {name: gpu, resourceClaimTemplateName: one-gpu}\n                - {name: imex, resourceClaimName: llm-imex-channel}\n",
    );
    let mut w = World::new(with_finalizer(job(DRA_JOB)), &runtime);
    let intent = w.intent().expect("a gang");
    assert_eq!(intent.shape.sets[0].claims, vec!["ml/h100-8gpu", "ml/rdma-nic"], "templates only, namespaced");
    w.gang_api = Some(GangApi::V1alpha2);
    w.decision = Some(Decision::Admit(record(&[("node-a", 2), ("node-b", 2)])));
    let actions = w.plan();
    let group = actions
        .iter()
        .find_map(|a| match a {
            Action::Apply(v) if v["kind"] == "PodGroup" => Some(v.clone()),
            _ => None,
        })
        .expect("a PodGroup");
    assert_eq!(group["spec"]["resourceClaims"], json!([{"name": "imex", "resourceClaimName": "llm-imex-channel"}]));
}
