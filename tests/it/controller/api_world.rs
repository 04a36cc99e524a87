//! The researcher API's test world: a real TLS server on a loopback port, a scheduling task
//! that answers from a live picture of TrainJobs (the controller's own `answer` and events), and
//! a mock Kubernetes API (tower-test) that reviews tokens and access by rule and records every
//! request it is sent.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use http::{Request, Response, StatusCode};
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, mpsc, watch};
use trainyard::controller::serving::api_answers::{Asked, answer};
use trainyard::controller::serving::api_events::events_of;
use trainyard::controller::watching::live::Changed;
use trainyard::grpc::auth::Authorizer;
use trainyard::grpc::client::{ApiClient, Endpoint, connect};
use trainyard::grpc::rate::Limit;
use trainyard::grpc::service::{ApiSettings, Backend, ClientFor, TrainyardApi};
use trainyard::grpc::tls::ServerTls;
use trainyard::grpc::v1;
use trainyard_policies::RuntimeHistory;

use super::cluster::*;

/// A CA and a server certificate for `localhost` signed by it, PEM: (ca, cert, key).
pub fn certificates() -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).expect("CA certificate");
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().expect("server key");
    let cert = CertificateParams::new(vec!["localhost".to_string()])
        .expect("server params")
        .signed_by(&key, &issuer)
        .expect("server certificate");
    (ca.pem(), cert.pem(), key.serialize_pem())
}

/// A request the mock API server was sent.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub uri: String,
    pub authorization: Option<String>,
    pub body: Value,
}

/// Who each token is: alice (group `researchers`), bob, and an admin; any other token is refused.
fn user_of(token: &str) -> Option<(&'static str, Vec<&'static str>)> {
    match token {
        "alice-token" => Some(("alice", vec!["researchers", "system:authenticated"])),
        "bob-token" => Some(("bob", vec!["system:authenticated"])),
        "admin-token" => Some(("admin", vec!["system:masters"])),
        _ => None,
    }
}

/// RBAC of the world: the admin may do anything; alice anything to TrainJobs in `team` and list
/// Queues; bob may only read TrainJobs in `team`.
fn allowed(user: &str, attrs: &Value) -> bool {
    let field = |k: &str| attrs.get(k).and_then(Value::as_str).unwrap_or("");
    let (verb, resource, namespace) = (field("verb"), field("resource"), field("namespace"));
    match user {
        "admin" => true,
        "alice" => (resource == "trainjobs" && namespace == "team") || (resource == "queues" && verb == "list"),
        "bob" => resource == "trainjobs" && namespace == "team" && matches!(verb, "get" | "list" | "watch"),
        _ => false,
    }
}

/// The mock API server's end of a client.
pub type MockApi = tower_test::mock::Mock<Request<Body>, Response<Body>>;

/// A mock API server answering by rule; every request is recorded.
pub fn mock_cluster() -> (MockApi, Arc<Mutex<Vec<Seen>>>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let method = request.method().as_str().to_string();
            let uri = request.uri().to_string();
            let path = request.uri().path().to_string();
            let authorization =
                request.headers().get("authorization").map(|v| v.to_str().unwrap_or_default().to_string());
            let bytes = request.into_body().collect_bytes().await.unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            record.lock().unwrap().push(Seen { method: method.clone(), uri, authorization, body: body.clone() });
            let (status, reply) = respond(&method, &path, &body);
            let reply = serde_json::to_vec(&reply).unwrap();
            send.send_response(Response::builder().status(status).body(Body::from(reply)).unwrap());
        }
    });
    (service, seen)
}

fn respond(method: &str, path: &str, body: &Value) -> (StatusCode, Value) {
    match (method, path) {
        ("POST", "/apis/authentication.k8s.io/v1/tokenreviews") => {
            let token = body["spec"]["token"].as_str().unwrap_or_default();
            let status = match user_of(token) {
                Some((name, groups)) => {
                    json!({"authenticated": true, "user": {"username": name, "uid": format!("uid-{name}"), "groups": groups}})
                }
                None => json!({"authenticated": false, "error": "invalid bearer token"}),
            };
            let mut reply = body.clone();
            reply["status"] = status;
            (StatusCode::CREATED, reply)
        }
        ("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews") => {
            let user = body["spec"]["user"].as_str().unwrap_or_default();
            let yes = allowed(user, &body["spec"]["resourceAttributes"]);
            let mut reply = body.clone();
            reply["status"] = json!({"allowed": yes});
            (StatusCode::CREATED, reply)
        }
        ("POST", p) if p.ends_with("/trainjobs") => {
            let mut reply = body.clone();
            reply["metadata"]["uid"] = json!("uid-submitted");
            reply["metadata"]["resourceVersion"] = json!("7");
            (StatusCode::CREATED, reply)
        }
        ("DELETE", p) if p.contains("/trainjobs/") => {
            let name = p.rsplit('/').next().unwrap_or_default();
            let reply = json!({
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": name, "namespace": "team", "uid": format!("uid-{name}"),
                             "deletionTimestamp": "2027-01-01T00:00:00Z"}
            });
            (StatusCode::OK, reply)
        }
        _ => (
            StatusCode::NOT_FOUND,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"}),
        ),
    }
}

/// Clients acting with the caller's token: the mock service with the header a real client sends.
fn clients_for(mock: MockApi) -> ClientFor {
    Arc::new(move |token: &str| {
        let header = format!("Bearer {token}");
        let service = tower::util::MapRequest::new(mock.clone(), move |mut request: Request<Body>| {
            request.headers_mut().insert("authorization", header.parse().unwrap());
            request
        });
        Ok(Client::new(service, "default"))
    })
}

/// A change to the live picture, run by the scheduling task; returns the decisions it changed.
pub type Step = Box<dyn FnOnce(&mut Harness) -> Changed + Send>;

/// One replica: its scheduling task and its API server.
pub struct Replica {
    pub addr: SocketAddr,
    pub serving: watch::Sender<bool>,
    pub steps: mpsc::Sender<Step>,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

/// The scenarios' cluster: two 8-GPU nodes. `big` (2 x 8 GPUs, one hour) runs; `next` (2 x 8)
/// waits for it; `huge` (4 x 8) can never fit.
pub fn harness() -> Harness {
    let nodes: Vec<Node> = (0..2).map(|i| node(&format!("n{i}"), 8)).collect();
    let mut h = Harness::new(&nodes, runtimes(&[runtime_yaml("gpu", "")]));
    let mut big = trainjob("big", "gpu", "team", 2, 8, 0);
    big.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("trainyard.io/runtime-estimate".into(), "1h".into());
    h.job(big);
    h.cycle();
    h.admit("big");
    h.job(trainjob("next", "gpu", "team", 2, 8, 5));
    h.job(trainjob("huge", "gpu", "team", 4, 8, 6));
    h.advance(10);
    h
}

impl Replica {
    /// Starts a replica named `leader` over `h`, serving (leading) at once when `serving`.
    pub async fn start(leader: &str, h: Harness, limit: Limit, serving: bool) -> Replica {
        let (_, cert, key) = world_certificates();
        let tls = trainyard::grpc::tls::ServerTls::from_pem(cert.as_bytes(), key.as_bytes()).unwrap();
        Replica::start_with(leader, h, limit, serving, tls).await
    }

    /// [`Replica::start`] serving the identity of `tls`.
    pub async fn start_with(leader: &str, h: Harness, limit: Limit, serving: bool, tls: ServerTls) -> Replica {
        let (queries_tx, mut queries) = mpsc::channel::<Asked>(64);
        let (steps_tx, mut steps) = mpsc::channel::<Step>(16);
        let (events, _) = broadcast::channel(256);
        let (serving_tx, serving_rx) = watch::channel(serving);
        let name = leader.to_string();
        let sender = events.clone();
        tokio::spawn(async move {
            let mut h = h;
            let history = RuntimeHistory::default();
            loop {
                tokio::select! {
                    Some(asked) = queries.recv() => {
                        let _ = asked.reply.send(answer(&h.live, &asked.query, &history, h.now));
                    }
                    Some(step) = steps.recv() => {
                        let changed = step(&mut h);
                        for event in events_of(&h.live, &changed, &name, h.now) {
                            let _ = sender.send(event);
                        }
                    }
                    else => return,
                }
            }
        });
        let (mock, seen) = mock_cluster();
        let backend = Backend { queries: queries_tx, events, serving: serving_rx };
        let settings = ApiSettings { leader: leader.to_string(), per_caller: limit, ..Default::default() };
        let auth = Arc::new(Authorizer::new(Client::new(mock.clone(), "default")));
        let api = TrainyardApi::new(backend, auth, clients_for(mock), settings);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(trainyard::grpc::server::serve(listener, api, Some(tls), std::future::pending()));
        Replica { addr, serving: serving_tx, steps: steps_tx, seen }
    }

    /// Runs `step` on the replica's live picture (and sends its events).
    pub async fn step(&self, step: impl FnOnce(&mut Harness) -> Changed + Send + 'static) {
        self.steps.send(Box::new(step)).await.unwrap();
    }

    /// The requests its Kubernetes API was sent, leaving out token and access reviews.
    pub fn sent(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().iter().filter(|s| !s.uri.contains("review")).cloned().collect()
    }

    /// How many reviews were asked, of each kind.
    pub fn reviews(&self) -> BTreeMap<&'static str, usize> {
        let mut out = BTreeMap::new();
        for s in self.seen.lock().unwrap().iter() {
            if s.uri.contains("tokenreviews") {
                *out.entry("token").or_default() += 1;
            } else if s.uri.contains("subjectaccessreviews") {
                *out.entry("access").or_default() += 1;
            }
        }
        out
    }
}

/// The world's certificates, made once: every replica serves the same identity.
pub fn world_certificates() -> (String, String, String) {
    static CERTS: std::sync::OnceLock<(String, String, String)> = std::sync::OnceLock::new();
    CERTS.get_or_init(certificates).clone()
}

/// The endpoint of `addr` for `token`.
pub fn endpoint(addr: SocketAddr, token: &str) -> Endpoint {
    Endpoint {
        url: format!("https://localhost:{}", addr.port()),
        ca_pem: world_certificates().0.into_bytes(),
        tls_name: None,
        token: token.to_string(),
        renew: None,
    }
}

/// A connected client calling as `token`.
pub async fn client(addr: SocketAddr, token: &str) -> ApiClient {
    connect(&endpoint(addr, token)).await.expect("connects over TLS")
}

/// A job reference in namespace `team`.
pub fn team(name: &str) -> Option<v1::JobRef> {
    Some(v1::JobRef { namespace: "team".into(), name: name.into() })
}
