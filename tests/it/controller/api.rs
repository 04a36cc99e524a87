//! The researcher API over a real TCP + TLS socket, in process: each call, each denial, rate
//! limits, the exact requests Submit and Cancel send to Kubernetes, reflection, and a Watch that
//! survives a leader change; a watch of one queue sees its gangs end; a renewed certificate is
//! served without a restart.

use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::net::TcpListener;
use tonic::Code;
use trainyard::grpc::client::Endpoint;
use trainyard::grpc::rate::Limit;
use trainyard::grpc::v1;
use v1::event::Kind;

use super::api_world::*;
use super::cluster::{T0, trainjob};

/// A Submit of `job` in namespace `team`.
fn submit_in_team(job: v1::submit_request::Job, dry_run: bool) -> v1::SubmitRequest {
    v1::SubmitRequest { namespace: "team".into(), job: Some(job), dry_run }
}

fn generous() -> Limit {
    Limit { per_second: 1000.0, burst: 1000 }
}

#[tokio::test]
async fn get_list_explain_eta_and_queues_answer_what_the_scheduler_decided() {
    let replica = Replica::start("leader-a", harness(), generous(), true).await;
    let mut alice = client(replica.addr, "alice-token").await;

    let next = alice.get(v1::GetRequest { job: team("next") }).await.expect("get").into_inner();
    assert_eq!((next.namespace.as_str(), next.name.as_str(), next.queue.as_str()), ("team", "next", "team"));
    assert_eq!(next.state(), v1::JobState::Pending);
    assert_eq!((next.pods, next.gpus), (2, 16));
    let big = alice.get(v1::GetRequest { job: team("big") }).await.unwrap().into_inner();
    assert_eq!(big.state(), v1::JobState::Admitted);
    assert_eq!(big.nodes, vec!["n0", "n1"]);
    let huge = alice.get(v1::GetRequest { job: team("huge") }).await.unwrap().into_inner();
    assert_eq!(huge.state(), v1::JobState::Unschedulable, "{huge:?}");

    let all = alice.list(v1::ListRequest { namespace: "team".into(), ..Default::default() }).await.unwrap();
    let names: Vec<String> = all.into_inner().jobs.into_iter().map(|j| j.name).collect();
    assert_eq!(names, ["big", "huge", "next"]);
    let pending =
        v1::ListRequest { namespace: "team".into(), state: v1::JobState::Pending as i32, ..Default::default() };
    let names: Vec<String> = alice.list(pending).await.unwrap().into_inner().jobs.into_iter().map(|j| j.name).collect();
    assert_eq!(names, ["next"]);

    let why = alice.explain(v1::ExplainRequest { job: team("next") }).await.unwrap().into_inner();
    let waiting = why.counterfactuals.iter().find(|c| c.kind == "waiting_for").expect("a waiting_for answer");
    assert_eq!(waiting.jobs, vec![team("big").unwrap()], "{why:?}");
    assert!(waiting.text.contains("team/big"), "{}", waiting.text);

    // `big` was admitted at T0 and says it runs an hour: `next` starts when it ends.
    let eta = alice.eta(v1::EtaRequest { job: team("next") }).await.unwrap().into_inner();
    assert_eq!(eta.kind(), v1::eta_response::Kind::Estimate, "{eta:?}");
    assert_eq!((eta.earliest, eta.likely), (T0 + 3600, T0 + 3600), "{eta:?}");
    assert_eq!(eta.waits_for, vec![team("big").unwrap()]);
    let running = alice.eta(v1::EtaRequest { job: team("big") }).await.unwrap().into_inner();
    assert_eq!((running.kind(), running.started), (v1::eta_response::Kind::Running, T0));
    let never = alice.eta(v1::EtaRequest { job: team("huge") }).await.unwrap().into_inner();
    assert_eq!(never.kind(), v1::eta_response::Kind::Unschedulable, "{never:?}");
    assert!(!never.reason.is_empty());

    let queues = alice.list_queues(v1::ListQueuesRequest {}).await.unwrap().into_inner().queues;
    let q = queues.iter().find(|q| q.name == "team").expect("queue team");
    assert_eq!((q.nominal_gpus, q.has_nominal, q.used_gpus, q.borrowed_gpus), (64, true, 16, 0));
    assert_eq!((q.admitted, q.pending), (1, 2));
    assert_eq!(q.pending_by_reason.values().sum::<u32>(), 2, "{q:?}");

    let missing = alice.get(v1::GetRequest { job: team("nobody") }).await.expect_err("no such TrainJob");
    assert_eq!(missing.code(), Code::NotFound);
    // Reads never reach the Kubernetes API beyond the reviews.
    assert!(replica.sent().is_empty(), "{:?}", replica.sent());
}

#[tokio::test]
async fn submit_and_cancel_go_to_kubernetes_with_the_callers_own_token() {
    let replica = Replica::start("leader-a", harness(), generous(), true).await;
    let mut alice = client(replica.addr, "alice-token").await;
    let gang = v1::GangSpec {
        name: "llama".into(),
        queue: "team".into(),
        runtime: "gpu".into(),
        nodes: 4,
        gpus_per_node: 8,
        command: vec!["torchrun".into(), "train.py".into()],
        runtime_estimate_seconds: 7200,
        ..Default::default()
    };
    let submitted =
        alice.submit(submit_in_team(v1::submit_request::Job::Gang(gang), false)).await.expect("submit").into_inner();
    let job = submitted.job.expect("the job");
    assert_eq!((job.name.as_str(), job.uid.as_str(), job.queue.as_str()), ("llama", "uid-submitted", "team"));

    let manifest = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata:\n  name: bert\n  labels: {trainyard.io/queue: team}\nspec:\n  runtimeRef: {name: gpu}\n  futureField: kept\n";
    alice
        .submit(submit_in_team(v1::submit_request::Job::Manifest(manifest.into()), true))
        .await
        .expect("dry-run submit");
    let cancelled = alice.cancel(v1::CancelRequest { job: team("next"), dry_run: false }).await.unwrap().into_inner();
    assert_eq!(cancelled.uid, "uid-next");

    let sent = replica.sent();
    assert_eq!(sent.len(), 3, "{sent:#?}");
    assert_eq!(sent[0].method, "POST");
    assert_eq!(sent[0].uri, "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs?&fieldManager=trainyard");
    assert_eq!(sent[0].authorization.as_deref(), Some("Bearer alice-token"));
    assert_eq!(
        sent[0].body,
        json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "llama", "namespace": "team", "labels": {"trainyard.io/queue": "team"},
                         "annotations": {"trainyard.io/runtime-estimate": "7200s"}},
            "spec": {
                "runtimeRef": {"name": "gpu", "kind": "ClusterTrainingRuntime", "apiGroup": "trainer.kubeflow.org"},
                "trainer": {"numNodes": 4, "command": ["torchrun", "train.py"],
                            "resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}, "requests": {"nvidia.com/gpu": "8"}}}
            }
        })
    );
    assert_eq!(
        sent[1].uri,
        "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs?&dryRun=All&fieldManager=trainyard"
    );
    assert_eq!(sent[1].body["spec"]["futureField"], "kept", "unknown fields reach the server");
    assert_eq!(sent[1].body["metadata"]["namespace"], "team");
    assert_eq!(sent[2].method, "DELETE");
    assert_eq!(sent[2].uri, "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs/next?");
    assert_eq!(sent[2].body["propagationPolicy"], "Background");
    assert_eq!(sent[2].authorization.as_deref(), Some("Bearer alice-token"));
}

#[tokio::test]
async fn refused_calls_get_their_code_and_nothing_else() {
    let replica = Replica::start("leader-a", harness(), generous(), true).await;
    let addr = replica.addr;

    // No token, a token the cluster refuses: UNAUTHENTICATED, even for a malformed request.
    let mut anonymous = client(addr, "").await;
    let e = anonymous.get(v1::GetRequest { job: team("next") }).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    let mut stranger = client(addr, "stolen-token").await;
    let e = stranger.get(v1::GetRequest { job: None }).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    let e = stranger.list_queues(v1::ListQueuesRequest {}).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);

    // bob reads `team` but may not cancel, submit, read elsewhere or list queues; a TrainJob
    // that does not exist elsewhere is PERMISSION_DENIED, not NOT_FOUND.
    let mut bob = client(addr, "bob-token").await;
    assert!(bob.get(v1::GetRequest { job: team("next") }).await.is_ok());
    let e = bob.cancel(v1::CancelRequest { job: team("next"), dry_run: false }).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert!(e.message().contains("cannot delete trainjobs"), "{}", e.message());
    let gang =
        v1::GangSpec { name: "x".into(), queue: "team".into(), runtime: "gpu".into(), nodes: 1, ..Default::default() };
    let e = bob.submit(submit_in_team(v1::submit_request::Job::Gang(gang), false)).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    let elsewhere = Some(v1::JobRef { namespace: "other".into(), name: "ghost".into() });
    assert_eq!(bob.get(v1::GetRequest { job: elsewhere }).await.unwrap_err().code(), Code::PermissionDenied);
    assert_eq!(bob.list(v1::ListRequest::default()).await.unwrap_err().code(), Code::PermissionDenied);
    assert_eq!(bob.list_queues(v1::ListQueuesRequest {}).await.unwrap_err().code(), Code::PermissionDenied);
    let e = bob.watch(v1::WatchRequest { namespace: "other".into(), queue: String::new() }).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert!(replica.sent().is_empty(), "a refused call reached Kubernetes: {:?}", replica.sent());

    // Malformed requests of a caller who may call: INVALID_ARGUMENT naming the field.
    let mut alice = client(addr, "alice-token").await;
    let e = alice.get(v1::GetRequest { job: None }).await.unwrap_err();
    assert_eq!((e.code(), e.message()), (Code::InvalidArgument, "job: the TrainJob (namespace and name) is required"));
    let e = alice
        .eta(v1::EtaRequest { job: Some(v1::JobRef { namespace: "team".into(), name: "Bad_Name".into() }) })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().starts_with("job.name:"), "{}", e.message());
    let gang =
        v1::GangSpec { name: "x".into(), queue: "team".into(), runtime: "gpu".into(), nodes: 0, ..Default::default() };
    let e = alice.submit(submit_in_team(v1::submit_request::Job::Gang(gang), false)).await.unwrap_err();
    assert_eq!((e.code(), e.message()), (Code::InvalidArgument, "gang.nodes: a gang needs at least one node"));
    let other_ns = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: a, namespace: other, labels: {trainyard.io/queue: team}}\nspec: {runtimeRef: {name: gpu}}\n";
    let e = alice.submit(submit_in_team(v1::submit_request::Job::Manifest(other_ns.into()), false)).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().starts_with("manifest.metadata.namespace:"), "{}", e.message());
    let e = alice.list(v1::ListRequest { state: 42, ..Default::default() }).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(replica.sent().is_empty(), "{:?}", replica.sent());

    // Reviews are remembered: after the first call, the same question costs no review.
    alice.get(v1::GetRequest { job: team("next") }).await.unwrap();
    let before = replica.reviews();
    for _ in 0..20 {
        alice.get(v1::GetRequest { job: team("next") }).await.unwrap();
    }
    assert_eq!(replica.reviews(), before, "repeated calls asked the cluster again");
}

#[tokio::test]
async fn each_caller_has_a_rate_limit_of_their_own() {
    let replica = Replica::start("leader-a", harness(), Limit { per_second: 0.5, burst: 3 }, true).await;
    let mut alice = client(replica.addr, "alice-token").await;
    for i in 0..3 {
        alice.get(v1::GetRequest { job: team("next") }).await.unwrap_or_else(|e| panic!("call {i}: {e:?}"));
    }
    let e = alice.get(v1::GetRequest { job: team("next") }).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted);
    assert!(e.message().starts_with("rate limit: retry in"), "{}", e.message());
    // bob's calls are his own.
    let mut bob = client(replica.addr, "bob-token").await;
    assert!(bob.get(v1::GetRequest { job: team("next") }).await.is_ok());
}

#[tokio::test]
async fn a_standby_answers_unavailable_and_reflection_names_the_service() {
    let standby = Replica::start("standby", harness(), generous(), false).await;
    let mut alice = client(standby.addr, "alice-token").await;
    let e = alice.get(v1::GetRequest { job: team("next") }).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable);
    assert!(standby.reviews().is_empty(), "a standby reviewed a token");

    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    let channel = tonic::transport::Channel::from_shared(format!("https://localhost:{}", standby.addr.port()))
        .unwrap()
        .tls_config(
            tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(world_certificates().0)),
        )
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut reflection = ServerReflectionClient::new(channel);
    let ask = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut answers = reflection.server_reflection_info(futures::stream::iter([ask])).await.unwrap().into_inner();
    let answer = answers.message().await.unwrap().expect("an answer");
    let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else { panic!("{answer:?}") };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(names.contains(&"trainyard.v1.Trainyard".to_string()), "{names:?}");
}

/// A TCP forwarder standing for the Service in front of the replicas: each new connection goes to
/// the replica it points at then.
async fn service_in_front(target: Arc<Mutex<SocketAddr>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let to = *target.lock().unwrap();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    addr
}

/// A reconnecting Watch of namespace `team` (and `queue`, when not empty) as alice through
/// `addr`, its events sent to the receiver.
fn watch_as_alice(
    addr: SocketAddr,
    queue: &str,
) -> (tokio::task::JoinHandle<anyhow::Result<()>>, tokio::sync::mpsc::UnboundedReceiver<v1::Event>) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<v1::Event>();
    let request = v1::WatchRequest { namespace: "team".into(), queue: queue.into() };
    let watching = tokio::spawn(async move {
        trainyard::grpc::client::watch(&endpoint(addr, "alice-token"), request, |event| {
            let _ = tx.send(event);
            ControlFlow::Continue(())
        })
        .await
    });
    (watching, rx)
}

/// The next event of a watch, within 20 seconds.
async fn next_event(rx: &mut tokio::sync::mpsc::UnboundedReceiver<v1::Event>) -> v1::Event {
    tokio::time::timeout(Duration::from_secs(20), rx.recv()).await.expect("an event in time").expect("open")
}

#[tokio::test]
async fn a_watch_survives_a_leader_change() {
    let a = Replica::start("leader-a", harness(), generous(), true).await;
    let b = Replica::start("leader-b", harness(), generous(), false).await;
    let target = Arc::new(Mutex::new(a.addr));
    let front = service_in_front(target.clone()).await;

    let (watching, mut rx) = watch_as_alice(front, "");
    let mut next = async || next_event(&mut rx).await;

    // The stream opens with the state of every TrainJob in `team`.
    let mut opening = Vec::new();
    for _ in 0..3 {
        opening.push(next().await);
    }
    assert!(opening.iter().all(|e| e.kind() == Kind::Initial && e.leader == "leader-a"), "{opening:?}");
    assert_eq!(opening.iter().map(|e| e.sequence).collect::<Vec<_>>(), [1, 2, 3]);

    // A new TrainJob on the leader: its first decision is streamed.
    a.step(|h| {
        h.job(trainjob("small", "gpu", "team", 1, 8, 20));
        h.advance(1)
    })
    .await;
    let event = next().await;
    assert_eq!((event.kind(), event.job.as_ref().unwrap().name.as_str()), (Kind::Pending, "small"), "{event:?}");
    assert_eq!(event.sequence, 4);

    // The leader steps down (its streams end UNAVAILABLE) and the Service now reaches the new one.
    *target.lock().unwrap() = b.addr;
    b.serving.send(true).unwrap();
    a.serving.send(false).unwrap();

    // The client reconnects by itself and reads the state again from the new leader.
    let reopened = next().await;
    assert_eq!(
        (reopened.kind(), reopened.leader.as_str(), reopened.sequence),
        (Kind::Initial, "leader-b", 1),
        "{reopened:?}"
    );
    for _ in 0..2 {
        assert_eq!(next().await.kind(), Kind::Initial);
    }
    b.step(|h| {
        h.job(trainjob("late", "gpu", "team", 1, 8, 30));
        h.advance(1)
    })
    .await;
    let event = next().await;
    assert_eq!(
        (event.kind(), event.leader.as_str(), event.job.unwrap().name.as_str()),
        (Kind::Pending, "leader-b", "late")
    );
    // The old leader answers as a standby now.
    let mut direct = client(a.addr, "alice-token").await;
    assert_eq!(direct.get(v1::GetRequest { job: team("next") }).await.unwrap_err().code(), Code::Unavailable);
    watching.abort();
}

#[tokio::test]
async fn a_watch_of_a_queue_sees_its_gangs_end_finished_or_deleted() {
    let a = Replica::start("leader-a", harness(), generous(), true).await;
    let (watching, mut rx) = watch_as_alice(a.addr, "team");
    let mut next = async || next_event(&mut rx).await;
    for _ in 0..3 {
        assert_eq!(next().await.kind(), Kind::Initial);
    }
    // `huge` is deleted: its entry is gone, its label still names the queue.
    a.step(|h| {
        h.delete_job("huge");
        h.advance(1)
    })
    .await;
    let ended = next().await;
    let job = ended.job.clone().unwrap();
    assert_eq!((ended.kind(), job.name.as_str(), job.queue.as_str()), (Kind::Ended, "huge", "team"), "{ended:?}");
    // `big` completes: an entry with no intent left, named by its label too.
    a.step(|h| {
        let mut big = h.jobs["uid-big"].clone();
        big.status.get_or_insert_with(Default::default).conditions.push(condition("Complete"));
        h.job(big);
        h.advance(1)
    })
    .await;
    let mut seen = Vec::new();
    while seen.iter().all(|e: &v1::Event| e.job.as_ref().unwrap().name != "big") {
        seen.push(next().await);
    }
    let ended = seen.last().unwrap();
    assert_eq!((ended.kind(), ended.job.as_ref().unwrap().queue.as_str()), (Kind::Ended, "team"), "{seen:?}");
    watching.abort();
}

/// A condition of `type_` that is true.
fn condition(type_: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        type_: type_.into(),
        status: "True".into(),
        reason: "Done".into(),
        message: String::new(),
        last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(T0 as i64 + 100).unwrap(),
        ),
        observed_generation: None,
    }
}

#[tokio::test]
async fn a_renewed_certificate_is_served_without_a_restart() {
    let dir = crate::TempDir::create();
    let (cert, key) = (dir.path("tls.crt"), dir.path("tls.key"));
    let (old_ca, old_cert, old_key) = certificates();
    std::fs::write(&cert, &old_cert).unwrap();
    std::fs::write(&key, &old_key).unwrap();
    let tls = trainyard::grpc::tls::ServerTls::from_files(&cert, &key).unwrap();
    let replica = Replica::start_with("leader-a", harness(), generous(), true, tls).await;
    let trusting = |ca: &str| Endpoint { ca_pem: ca.as_bytes().to_vec(), ..endpoint(replica.addr, "alice-token") };
    let get = async |ca: &str| {
        let mut client = trainyard::grpc::client::connect(&trusting(ca)).await?;
        client.get(v1::GetRequest { job: team("next") }).await.map_err(anyhow::Error::from)
    };
    get(&old_ca).await.expect("the first certificate is served");

    // The Secret is renewed under a new CA: the files change in place.
    let (new_ca, new_cert, new_key) = certificates();
    std::fs::write(&cert, &new_cert).unwrap();
    std::fs::write(&key, &new_key).unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    get(&new_ca).await.expect("the renewed certificate is served");
    assert!(get(&old_ca).await.is_err(), "the old certificate is no longer served");

    // A renewal that cannot be used (a key of another certificate) keeps the last good one.
    std::fs::write(&key, &old_key).unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    get(&new_ca).await.expect("the last good certificate is still served");
    // At start, a pair that does not belong together is an error naming both files.
    let err = format!("{:#}", trainyard::grpc::tls::ServerTls::from_files(&cert, &key).unwrap_err());
    assert!(err.contains("tls.crt") && err.contains("tls.key"), "{err}");
}
