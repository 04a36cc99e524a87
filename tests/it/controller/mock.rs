//! Exact API requests, against a mock API server (tower-test): named scenarios of method, path,
//! query, content type and body, each answered as a real server would.

use http::{Request, Response, StatusCode};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use trainyard::controller::acting::actor::{Actor, ungate_patch};
use trainyard::controller::deciding::plan::Action;
use trainyard::controller::deciding::pod_bindings::Ungate;
use trainyard::controller::deciding::scheduling_loop::Decision;
use trainyard::controller::serving::lease::LeaseLock;

use super::common::*;

/// One expected request and the reply to it.
pub(super) struct Expect {
    method: &'static str,
    uri: String,
    content_type: Option<&'static str>,
    body: Option<Value>,
    reply: (StatusCode, Value),
}

pub(super) fn expect(method: &'static str, uri: impl Into<String>) -> Expect {
    Expect { method, uri: uri.into(), content_type: None, body: None, reply: (StatusCode::OK, json!({})) }
}

impl Expect {
    pub(super) fn content(mut self, content_type: &'static str) -> Expect {
        self.content_type = Some(content_type);
        self
    }
    pub(super) fn body(mut self, body: Value) -> Expect {
        self.body = Some(body);
        self
    }
    pub(super) fn reply(mut self, status: StatusCode, body: Value) -> Expect {
        self.reply = (status, body);
        self
    }
}

/// A client whose server checks `script` in order; the returned handle fails the test on the first
/// mismatch or on a request the script does not have.
pub(super) fn scenario(name: &'static str, script: Vec<Expect>) -> (Client, tokio::task::JoinHandle<()>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let verifier = tokio::spawn(async move {
        for (i, want) in script.into_iter().enumerate() {
            let (request, send) =
                handle.next_request().await.unwrap_or_else(|| panic!("{name}: request {i} never came"));
            let uri = request.uri().to_string();
            assert_eq!(request.method().as_str(), want.method, "{name}: request {i} ({uri})");
            assert_eq!(uri, want.uri, "{name}: request {i}");
            if let Some(ct) = want.content_type {
                let got = request.headers().get("content-type").map(|v| v.to_str().unwrap().to_string());
                assert_eq!(got.as_deref(), Some(ct), "{name}: content type of request {i}");
            }
            let bytes = request.into_body().collect_bytes().await.unwrap();
            if let Some(body) = want.body {
                let got: Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{name}: body {i}: {e}"));
                assert_eq!(got, body, "{name}: body of request {i}");
            }
            let reply = serde_json::to_vec(&want.reply.1).unwrap();
            send.send_response(Response::builder().status(want.reply.0).body(Body::from(reply)).unwrap());
        }
    });
    (Client::new(service, "default"), verifier)
}

pub(super) fn status_reply(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code, "message": reason})
}

const TRAINJOB_PATH: &str = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/vision/trainjobs/resnet-cpu";

#[tokio::test]
async fn apply_jobset_with_field_manager_trainyard() {
    let mut w = World::new(with_finalizer(job(TORCH_JOB)), TORCH_RUNTIME);
    w.decision = Some(Decision::Admit(record(&[("host-a", 3)])));
    let actions = w.plan();
    let jobset = actions.iter().find_map(|a| if let Action::Apply(v) = a { Some(v.clone()) } else { None }).unwrap();
    let (client, verifier) = scenario(
        "apply-jobset",
        vec![
            expect("PATCH", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/vision/jobsets/resnet-cpu?&force=true&fieldManager=trainyard")
                .content("application/apply-patch+yaml")
                .body(jobset.clone())
                .reply(StatusCode::OK, jobset.clone()),
        ],
    );
    Actor::new(client, None).execute(&w.job, &Action::Apply(jobset)).await.unwrap();
    verifier.await.unwrap();
}

#[tokio::test]
async fn status_patch_is_a_server_side_apply_of_trainyards_conditions() {
    let mut w = World::new(with_finalizer(job(TORCH_JOB)), TORCH_RUNTIME);
    w.decision = Some(Decision::Pending { reason: "QuotaExceeded".into(), message: "queue vision is full".into() });
    let actions = w.plan();
    let status = actions.iter().find(|a| matches!(a, Action::Status { .. })).unwrap().clone();
    let body = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "status": {"conditions": [
            {"type": "Queued", "status": "True", "reason": "QuotaExceeded", "message": "queue vision is full",
             "lastTransitionTime": "2027-01-15T08:00:00Z", "observedGeneration": 1},
            {"type": "Admitted", "status": "False", "reason": "Pending", "message": "queue vision is full",
             "lastTransitionTime": "2027-01-15T08:00:00Z", "observedGeneration": 1},
        ]},
    });
    let (client, verifier) = scenario(
        "status-patch",
        vec![
            expect("PATCH", format!("{TRAINJOB_PATH}/status?&force=true&fieldManager=trainyard"))
                .content("application/apply-patch+yaml")
                .body(body)
                .reply(StatusCode::OK, serde_json::to_value(&w.job).unwrap()),
        ],
    );
    Actor::new(client, None).execute(&w.job, &status).await.unwrap();
    verifier.await.unwrap();
}

#[tokio::test]
async fn gate_removal_sets_the_node_selector_in_the_same_checked_patch() {
    let w = World::new(with_finalizer(job(TORCH_JOB)), TORCH_RUNTIME);
    let ungate = Ungate {
        pod: "resnet-cpu-node-0-1-x7k2p".into(),
        node: "host-b".into(),
        gate_index: 1,
        has_node_selector: false,
    };
    let body = json!([
        {"op": "test", "path": "/spec/schedulingGates/1/name", "value": "trainyard.io/topology"},
        {"op": "remove", "path": "/spec/schedulingGates/1"},
        {"op": "add", "path": "/spec/nodeSelector", "value": {"kubernetes.io/hostname": "host-b"}},
    ]);
    assert_eq!(ungate_patch(&ungate), body);
    let with_selector = Ungate { has_node_selector: true, ..ungate.clone() };
    assert_eq!(ungate_patch(&with_selector)[2]["path"], "/spec/nodeSelector/kubernetes.io~1hostname");
    let (client, verifier) = scenario(
        "ungate",
        vec![
            expect("PATCH", "/api/v1/namespaces/vision/pods/resnet-cpu-node-0-1-x7k2p?&fieldManager=trainyard")
                .content("application/json-patch+json")
                .body(body)
                .reply(StatusCode::OK, json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})),
        ],
    );
    Actor::new(client, None).execute(&w.job, &Action::Ungate(ungate)).await.unwrap();
    verifier.await.unwrap();
}

#[tokio::test]
async fn a_pod_deleted_before_its_gate_is_removed_is_not_an_error() {
    let w = World::new(with_finalizer(job(TORCH_JOB)), TORCH_RUNTIME);
    let ungate = Ungate { pod: "gone".into(), node: "host-b".into(), gate_index: 0, has_node_selector: false };
    let (client, verifier) = scenario(
        "ungate-gone",
        vec![
            expect("PATCH", "/api/v1/namespaces/vision/pods/gone?&fieldManager=trainyard")
                .reply(StatusCode::NOT_FOUND, status_reply(404, "NotFound")),
        ],
    );
    Actor::new(client, None).execute(&w.job, &Action::Ungate(ungate)).await.unwrap();
    verifier.await.unwrap();
}

#[tokio::test]
async fn admission_record_finalizer_and_preemption_requests() {
    let mut w = World::new(job(TORCH_JOB), TORCH_RUNTIME);
    w.job.metadata.resource_version = Some("41".into());
    let mut after_finalizer = with_finalizer(w.job.clone());
    after_finalizer.metadata.resource_version = Some("42".into());
    let r = record(&[("host-a", 3)]);
    let (client, verifier) = scenario(
        "record-and-finalizer",
        vec![
            // The finalizer, the arrival order and the commit point in one patch, on the version
            // read: they land together or not at all.
            expect("PATCH", format!("{TRAINJOB_PATH}?&fieldManager=trainyard"))
                .content("application/merge-patch+json")
                .body(json!({"metadata": {
                    "resourceVersion": "41",
                    "finalizers": ["trainyard.io/finalizer"],
                    "annotations": {"trainyard.io/arrival": "7", "trainyard.io/admission": r.encode()},
                }}))
                .reply(StatusCode::OK, serde_json::to_value(&after_finalizer).unwrap()),
            expect("DELETE", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/vision/jobsets/resnet-cpu?")
                .body(json!({"propagationPolicy": "Background"}))
                .reply(StatusCode::NOT_FOUND, status_reply(404, "NotFound")),
        ],
    );
    let actor = Actor::new(client, None);
    let admit = [Action::AddFinalizer { arrival: Some(7) }, Action::RecordAdmission(r)];
    actor.run(&w.job, &admit).await.unwrap();
    let target = trainyard::controller::acting::workload_objects::workload_ref(
        trainyard_bridges::WorkloadKind::JobSet,
        "vision",
        "resnet-cpu",
    );
    actor.execute(&w.job, &Action::Delete(target)).await.unwrap();
    verifier.await.unwrap();
}

#[tokio::test]
async fn a_record_on_a_changed_trainjob_is_refused_and_planned_again() {
    let mut w = World::new(with_finalizer(job(TORCH_JOB)), TORCH_RUNTIME);
    w.job.metadata.resource_version = Some("41".into());
    let r = record(&[("host-a", 3)]);
    let (client, verifier) = scenario(
        "record-conflict",
        vec![
            expect("PATCH", format!("{TRAINJOB_PATH}?&fieldManager=trainyard"))
                .body(json!({"metadata": {"resourceVersion": "41", "annotations": {"trainyard.io/admission": r.encode()}}}))
                .reply(StatusCode::CONFLICT, status_reply(409, "Conflict")),
        ],
    );
    let err = Actor::new(client, None).run(&w.job, &[Action::RecordAdmission(r)]).await.unwrap_err();
    assert!(matches!(err, trainyard::controller::acting::actor::ActError::Conflict), "{err}");
    verifier.await.unwrap();
}

#[tokio::test]
async fn a_record_tests_spec_labels_and_annotations_not_the_version() {
    let mut w = World::new(with_finalizer(job(TORCH_JOB)), TORCH_RUNTIME);
    w.job.metadata.resource_version = Some("41".into());
    w.job.metadata.uid = Some("u-1".into());
    w.job.metadata.generation = Some(3);
    w.job.metadata.labels = Some([("trainyard.io/queue".to_string(), "team".to_string())].into());
    w.job.metadata.annotations = Some([("trainyard.io/arrival".to_string(), "7".to_string())].into());
    let r = record(&[("host-a", 3)]);
    let patch = json!([
        {"op": "test", "path": "/metadata/uid", "value": "u-1"},
        {"op": "test", "path": "/metadata/generation", "value": 3},
        {"op": "test", "path": "/metadata/labels", "value": {"trainyard.io/queue": "team"}},
        {"op": "test", "path": "/metadata/annotations", "value": {"trainyard.io/arrival": "7"}},
        {"op": "add", "path": "/metadata/annotations/trainyard.io~1admission", "value": r.encode()},
    ]);
    let (client, verifier) = scenario(
        "record-checked",
        vec![
            // A status written since the read moved the resourceVersion, not these: accepted.
            expect("PATCH", format!("{TRAINJOB_PATH}?&fieldManager=trainyard"))
                .content("application/json-patch+json")
                .body(patch.clone())
                .reply(StatusCode::OK, serde_json::to_value(&w.job).unwrap()),
            // The spec, a label or an annotation moved: the server's test fails, planned again.
            expect("PATCH", format!("{TRAINJOB_PATH}?&fieldManager=trainyard"))
                .content("application/json-patch+json")
                .body(patch)
                .reply(StatusCode::UNPROCESSABLE_ENTITY, status_reply(422, "Invalid")),
        ],
    );
    let actor = Actor::new(client, None);
    actor.run(&w.job, &[Action::RecordAdmission(r.clone())]).await.unwrap();
    let err = actor.run(&w.job, &[Action::RecordAdmission(r)]).await.unwrap_err();
    assert!(matches!(err, trainyard::controller::acting::actor::ActError::Conflict), "{err}");
    verifier.await.unwrap();
}

#[tokio::test]
async fn a_finalizer_that_moved_since_the_read_is_planned_again() {
    let w = World::new(with_finalizer(job(TORCH_JOB)), TORCH_RUNTIME);
    // The `test` op of the JSON patch fails (422) when the cache the plan read was stale.
    let (client, verifier) = scenario(
        "finalizer-moved",
        vec![
            expect("PATCH", format!("{TRAINJOB_PATH}?&fieldManager=trainyard"))
                .content("application/json-patch+json")
                .reply(StatusCode::UNPROCESSABLE_ENTITY, status_reply(422, "Invalid")),
        ],
    );
    let err = Actor::new(client, None).run(&w.job, &[Action::RemoveFinalizer]).await.unwrap_err();
    assert!(matches!(err, trainyard::controller::acting::actor::ActError::Conflict), "{err}");
    verifier.await.unwrap();
}

#[tokio::test]
async fn a_gate_already_removed_counts_as_done() {
    let w = World::new(with_finalizer(job(TORCH_JOB)), TORCH_RUNTIME);
    let ungate = Ungate { pod: "p0".into(), node: "host-b".into(), gate_index: 0, has_node_selector: false };
    let (client, verifier) = scenario(
        "ungate-twice",
        vec![
            // The JSON patch's `test` of the gate fails: an earlier reconcile removed it.
            expect("PATCH", "/api/v1/namespaces/vision/pods/p0?&fieldManager=trainyard")
                .content("application/json-patch+json")
                .body(ungate_patch(&ungate))
                .reply(StatusCode::UNPROCESSABLE_ENTITY, status_reply(422, "Invalid")),
        ],
    );
    Actor::new(client, None).execute(&w.job, &Action::Ungate(ungate)).await.unwrap();
    verifier.await.unwrap();
}

#[tokio::test]
async fn companion_admission_applies_the_runtime_patch_and_unsuspends() {
    let mut w = World::new(with_finalizer(job(TORCH_JOB)), TORCH_RUNTIME);
    w.mode = trainyard::controller::deciding::plan::Mode::Companion;
    w.job.spec.0.suspend = Some(true);
    w.decision = Some(Decision::Admit(record(&[("host-a", 3)])));
    let actions = w.plan();
    let patch = actions.iter().find(|a| matches!(a, Action::PatchTrainJob { .. })).unwrap().clone();
    let Action::PatchTrainJob { runtime_patch: Some(runtime_patch), .. } = &patch else { unreachable!() };
    let (client, verifier) = scenario(
        "companion-admit",
        vec![
            expect("PATCH", format!("{TRAINJOB_PATH}?&force=true&fieldManager=trainyard"))
                .content("application/apply-patch+yaml")
                .body(json!({
                    "apiVersion": "trainer.kubeflow.org/v1alpha1",
                    "kind": "TrainJob",
                    "metadata": {"name": "resnet-cpu", "namespace": "vision"},
                    "spec": {"suspend": false, "runtimePatches": [runtime_patch]},
                }))
                .reply(StatusCode::OK, serde_json::to_value(&w.job).unwrap()),
        ],
    );
    Actor::new(client, None).execute(&w.job, &patch).await.unwrap();
    verifier.await.unwrap();
}

fn lock(identity: &str) -> LeaseLock {
    LeaseLock {
        namespace: "trainyard-system".into(),
        name: "trainyard".into(),
        identity: identity.into(),
        duration_s: 15,
    }
}

const LEASE_PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/trainyard-system/leases";

#[tokio::test]
async fn lease_is_created_when_missing() {
    let now = Timestamp::from_second(1_800_000_000).unwrap();
    let (client, verifier) = scenario(
        "lease-create",
        vec![
            expect("GET", format!("{LEASE_PATH}/trainyard"))
                .reply(StatusCode::NOT_FOUND, status_reply(404, "NotFound")),
            expect("POST", format!("{LEASE_PATH}?"))
                .content("application/json")
                .body(json!({
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": "trainyard", "namespace": "trainyard-system"},
                    "spec": {
                        "acquireTime": "2027-01-15T08:00:00.000000Z",
                        "holderIdentity": "trainyard-0",
                        "leaseDurationSeconds": 15,
                        "leaseTransitions": 0,
                        "renewTime": "2027-01-15T08:00:00.000000Z",
                    },
                }))
                .reply(
                    StatusCode::CREATED,
                    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "trainyard"}}),
                ),
        ],
    );
    assert!(lock("trainyard-0").try_acquire(client, now).await.unwrap());
    verifier.await.unwrap();
}

#[tokio::test]
async fn a_live_lease_is_followed_and_an_expired_one_taken_over_with_its_resource_version() {
    let renewed = "2027-01-15T08:00:00.000000Z";
    let held = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "trainyard", "namespace": "trainyard-system", "resourceVersion": "41"},
        "spec": {"holderIdentity": "trainyard-0", "leaseDurationSeconds": 15, "renewTime": renewed, "acquireTime": renewed, "leaseTransitions": 0},
    });
    let soon = Timestamp::from_second(1_800_000_005).unwrap();
    let (client, verifier) = scenario(
        "lease-follow",
        vec![expect("GET", format!("{LEASE_PATH}/trainyard")).reply(StatusCode::OK, held.clone())],
    );
    assert!(!lock("trainyard-1").try_acquire(client, soon).await.unwrap());
    verifier.await.unwrap();

    let late = Timestamp::from_second(1_800_000_030).unwrap();
    let mut taken = held.clone();
    taken["spec"]["holderIdentity"] = json!("trainyard-1");
    taken["spec"]["acquireTime"] = json!("2027-01-15T08:00:30.000000Z");
    taken["spec"]["renewTime"] = json!("2027-01-15T08:00:30.000000Z");
    taken["spec"]["leaseTransitions"] = json!(1);
    let (client, verifier) = scenario(
        "lease-takeover",
        vec![
            expect("GET", format!("{LEASE_PATH}/trainyard")).reply(StatusCode::OK, held.clone()),
            expect("PUT", format!("{LEASE_PATH}/trainyard?")).body(taken.clone()).reply(StatusCode::OK, taken),
        ],
    );
    assert!(lock("trainyard-1").try_acquire(client, late).await.unwrap());
    verifier.await.unwrap();

    // Another candidate updated the lease between our read and write: the write loses, no error.
    let (client, verifier) = scenario(
        "lease-conflict",
        vec![
            expect("GET", format!("{LEASE_PATH}/trainyard")).reply(StatusCode::OK, held),
            expect("PUT", format!("{LEASE_PATH}/trainyard?"))
                .reply(StatusCode::CONFLICT, status_reply(409, "Conflict")),
        ],
    );
    assert!(!lock("trainyard-1").try_acquire(client, late).await.unwrap());
    verifier.await.unwrap();
}
