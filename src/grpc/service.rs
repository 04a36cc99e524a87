//! The `trainyard.v1.Trainyard` service. Every call goes the same way: a replica that does not
//! lead answers UNAVAILABLE; then the peer's and the caller's rate limits, the token's review,
//! the request's fields, and the SubjectAccessReview for what kubectl would need; only then is
//! anything looked up. Reads are questions to the scheduling task; Submit and Cancel go to the
//! API server with the caller's own token, so RBAC and admission judge them as kubectl calls.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::Stream;
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tonic::{Request, Response, Status};

use super::auth::{Access, Authorizer, Caller, bearer};
use super::rate::{Limit, RateLimiter};
use super::submit::{self, FieldError};
use super::v1;
use super::v1::trainyard_server::Trainyard;
use crate::controller::serving::api_answers::{Answer, Asked, Query};
use crate::controller::serving::api_events::initial_events;

/// Makes a Kubernetes client that acts with the caller's bearer token.
pub type ClientFor = Arc<dyn Fn(&str) -> Result<Client, String> + Send + Sync>;

/// What the service reads from and listens to: the scheduling task of this replica.
#[derive(Clone)]
pub struct Backend {
    /// Questions to the scheduling task.
    pub queries: mpsc::Sender<Asked>,
    /// Events of each cycle.
    pub events: broadcast::Sender<v1::Event>,
    /// True while this replica leads and its engine is built.
    pub serving: watch::Receiver<bool>,
}

/// How the service behaves.
#[derive(Clone, Debug)]
pub struct ApiSettings {
    /// This replica's name, stamped on events.
    pub leader: String,
    /// Extended resource that gang specs ask GPUs as.
    pub gpu_resource: String,
    /// Each caller's limit.
    pub per_caller: Limit,
    /// The limit of each peer address, over all its callers and failed calls.
    pub per_peer: Limit,
    /// How long a question may wait for the scheduling task.
    pub answer_within: Duration,
}

impl Default for ApiSettings {
    fn default() -> ApiSettings {
        ApiSettings {
            leader: String::new(),
            gpu_resource: "nvidia.com/gpu".into(),
            per_caller: Limit::default(),
            per_peer: Limit { per_second: 100.0, burst: 400 },
            answer_within: Duration::from_secs(5),
        }
    }
}

/// The service.
pub struct TrainyardApi {
    backend: Backend,
    auth: Arc<Authorizer>,
    client_for: ClientFor,
    settings: ApiSettings,
    callers: RateLimiter,
    peers: RateLimiter,
}

fn invalid(e: FieldError) -> Status {
    Status::invalid_argument(e.to_string())
}

fn exhausted(wait: Duration) -> Status {
    Status::resource_exhausted(format!("rate limit: retry in {} ms", wait.as_millis().max(1)))
}

impl TrainyardApi {
    /// A service over `backend`, judging calls through `auth`.
    pub fn new(backend: Backend, auth: Arc<Authorizer>, client_for: ClientFor, settings: ApiSettings) -> TrainyardApi {
        TrainyardApi {
            callers: RateLimiter::new(settings.per_caller),
            peers: RateLimiter::new(settings.per_peer),
            backend,
            auth,
            client_for,
            settings,
        }
    }

    /// Leadership, rate limits and the token: who calls, with the token they called with.
    async fn caller<T>(&self, request: &Request<T>) -> Result<(Caller, String), Status> {
        if !*self.backend.serving.borrow() {
            return Err(Status::unavailable("this replica does not lead the scheduler now; retry"));
        }
        let now = Instant::now();
        let peer = request.remote_addr().map(|a| a.ip().to_string()).unwrap_or_default();
        self.peers.take(&format!("peer:{peer}"), now).map_err(exhausted)?;
        let token = bearer(request.metadata())?;
        let caller = self.auth.authenticate(token).await?;
        self.callers.take(&format!("user:{}", caller.user), now).map_err(exhausted)?;
        Ok((caller, token.to_string()))
    }

    async fn ask(&self, query: Query) -> Result<Answer, Status> {
        let (reply, answer) = oneshot::channel();
        self.backend
            .queries
            .try_send(Asked { query, reply })
            .map_err(|_| Status::unavailable("the scheduler has too many questions waiting; retry"))?;
        match tokio::time::timeout(self.settings.answer_within, answer).await {
            Ok(Ok(answer)) => Ok(answer),
            _ => Err(Status::unavailable("the scheduler did not answer in time; retry")),
        }
    }

    /// Asks about one TrainJob the caller may `get`.
    async fn ask_one(
        &self,
        request: Request<Option<v1::JobRef>>,
        query: fn(String) -> Query,
    ) -> Result<Answer, Status> {
        let (caller, _) = self.caller(&request).await?;
        let key = submit::job_key(request.get_ref().as_ref()).map_err(invalid)?;
        let (ns, name) = key.split_once('/').unwrap_or_default();
        self.auth.authorize(&caller, &Access::trainjobs("get", ns, name)).await?;
        match self.ask(query(key)).await? {
            Answer::NotFound(key) => Err(Status::not_found(format!("no TrainJob {key}"))),
            answer => Ok(answer),
        }
    }

    fn trainjobs(&self, token: &str, ns: &str) -> Result<Api<DynamicObject>, Status> {
        let client =
            (self.client_for)(token).map_err(|e| Status::internal(format!("cannot reach the cluster: {e}")))?;
        Ok(Api::namespaced_with(client, ns, &ApiResource::erase::<crate::api::TrainJob>(&())))
    }
}

fn unexpected(answer: Answer) -> Status {
    Status::internal(format!("the scheduler answered out of turn: {answer:?}"))
}

/// The API server's refusal, as the status kubectl's user would recognise.
fn from_kube(e: kube::Error) -> Status {
    match e {
        kube::Error::Api(s) => {
            let message = format!("{} ({})", s.message, s.reason);
            match s.code {
                400 | 422 => Status::invalid_argument(message),
                401 => Status::unauthenticated(message),
                403 => Status::permission_denied(message),
                404 => Status::not_found(message),
                409 => Status::already_exists(message),
                429 => Status::resource_exhausted(message),
                _ => Status::unavailable(message),
            }
        }
        other => Status::unavailable(format!("the cluster did not answer: {other}")),
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<v1::Event, Status>> + Send>>;

#[tonic::async_trait]
impl Trainyard for TrainyardApi {
    async fn submit(&self, request: Request<v1::SubmitRequest>) -> Result<Response<v1::SubmitResponse>, Status> {
        let (caller, token) = self.caller(&request).await?;
        let body = submit::trainjob_of(request.get_ref(), &self.settings.gpu_resource).map_err(invalid)?;
        let ns = request.get_ref().namespace.as_str();
        let name = body["metadata"]["name"].as_str().unwrap_or_default().to_string();
        self.auth.authorize(&caller, &Access::trainjobs("create", ns, "")).await?;
        let object: DynamicObject =
            serde_json::from_value(body).map_err(|e| Status::invalid_argument(format!("manifest: {e}")))?;
        let params =
            PostParams { dry_run: request.get_ref().dry_run, field_manager: Some(crate::api::FIELD_MANAGER.into()) };
        let created = self.trainjobs(&token, ns)?.create(&params, &object).await.map_err(from_kube)?;
        let labels = created.metadata.labels.clone().unwrap_or_default();
        let mut job = v1::Job {
            namespace: ns.to_string(),
            name: created.metadata.name.clone().unwrap_or(name),
            uid: created.metadata.uid.clone().unwrap_or_default(),
            queue: labels.get(crate::api::QUEUE_LABEL).cloned().unwrap_or_default(),
            reason: "Submitted".into(),
            ..Default::default()
        };
        job.set_state(v1::JobState::Pending);
        let manifest = serde_json::to_string(&created).unwrap_or_default();
        Ok(Response::new(v1::SubmitResponse { job: Some(job), manifest }))
    }

    async fn get(&self, request: Request<v1::GetRequest>) -> Result<Response<v1::Job>, Status> {
        match self.ask_one(request.map(|r| r.job), Query::Get).await? {
            Answer::Job(job) => Ok(Response::new(job)),
            other => Err(unexpected(other)),
        }
    }

    async fn list(&self, request: Request<v1::ListRequest>) -> Result<Response<v1::ListResponse>, Status> {
        let (caller, _) = self.caller(&request).await?;
        let filter = request.into_inner();
        if !filter.namespace.is_empty() {
            submit::namespace(&filter.namespace, "namespace").map_err(invalid)?;
        }
        if v1::JobState::try_from(filter.state).is_err() {
            return Err(Status::invalid_argument(format!("state: {} is not a JobState", filter.state)));
        }
        self.auth.authorize(&caller, &Access::trainjobs("list", &filter.namespace, "")).await?;
        match self.ask(Query::List(filter)).await? {
            Answer::Jobs(jobs) => Ok(Response::new(v1::ListResponse { jobs })),
            other => Err(unexpected(other)),
        }
    }

    async fn cancel(&self, request: Request<v1::CancelRequest>) -> Result<Response<v1::CancelResponse>, Status> {
        let (caller, token) = self.caller(&request).await?;
        let key = submit::job_key(request.get_ref().job.as_ref()).map_err(invalid)?;
        let (ns, name) = key.split_once('/').unwrap_or_default();
        self.auth.authorize(&caller, &Access::trainjobs("delete", ns, name)).await?;
        let params = DeleteParams { dry_run: request.get_ref().dry_run, ..DeleteParams::background() };
        let gone = self.trainjobs(&token, ns)?.delete(name, &params).await.map_err(from_kube)?;
        let uid = gone.either(|o| o.metadata.uid.unwrap_or_default(), |s| s.details.map(|d| d.uid).unwrap_or_default());
        Ok(Response::new(v1::CancelResponse { uid }))
    }

    async fn explain(&self, request: Request<v1::ExplainRequest>) -> Result<Response<v1::Explanation>, Status> {
        match self.ask_one(request.map(|r| r.job), Query::Explain).await? {
            Answer::Explanation(e) => Ok(Response::new(e)),
            other => Err(unexpected(other)),
        }
    }

    async fn eta(&self, request: Request<v1::EtaRequest>) -> Result<Response<v1::EtaResponse>, Status> {
        match self.ask_one(request.map(|r| r.job), Query::Eta).await? {
            Answer::Eta(e) => Ok(Response::new(e)),
            other => Err(unexpected(other)),
        }
    }

    async fn list_queues(
        &self,
        request: Request<v1::ListQueuesRequest>,
    ) -> Result<Response<v1::ListQueuesResponse>, Status> {
        let (caller, _) = self.caller(&request).await?;
        self.auth.authorize(&caller, &Access::list_queues()).await?;
        match self.ask(Query::Queues).await? {
            Answer::Queues(queues) => Ok(Response::new(v1::ListQueuesResponse { queues })),
            other => Err(unexpected(other)),
        }
    }

    type WatchStream = EventStream;

    async fn watch(&self, request: Request<v1::WatchRequest>) -> Result<Response<EventStream>, Status> {
        let (caller, _) = self.caller(&request).await?;
        let filter = request.into_inner();
        if !filter.namespace.is_empty() {
            submit::namespace(&filter.namespace, "namespace").map_err(invalid)?;
        }
        self.auth.authorize(&caller, &Access::trainjobs("watch", &filter.namespace, "")).await?;
        // Listen before reading the current state: an event of the cycle in between is sent
        // twice at worst, never lost.
        let mut events = self.backend.events.subscribe();
        let listed =
            v1::ListRequest { namespace: filter.namespace.clone(), queue: filter.queue.clone(), ..Default::default() };
        let jobs = match self.ask(Query::List(listed)).await? {
            Answer::Jobs(jobs) => jobs,
            other => return Err(unexpected(other)),
        };
        let initial = initial_events(jobs, &self.settings.leader);
        let mut serving = self.backend.serving.clone();
        let (tx, rx) = mpsc::channel::<Result<v1::Event, Status>>(256);
        tokio::spawn(async move {
            let mut sequence = 0u64;
            let mut send = |mut event: v1::Event| {
                sequence += 1;
                event.sequence = sequence;
                event
            };
            for event in initial {
                if tx.send(Ok(send(event))).await.is_err() {
                    return;
                }
            }
            loop {
                let next = tokio::select! {
                    event = events.recv() => match event {
                        Ok(event) if matches(&event, &filter) => Ok(send(event)),
                        Ok(_) => continue,
                        Err(broadcast::error::RecvError::Lagged(n)) => Err(Status::aborted(format!(
                            "the stream fell {n} events behind; reconnect to read the state again"
                        ))),
                        Err(broadcast::error::RecvError::Closed) => {
                            Err(Status::unavailable("the scheduler stopped; reconnect"))
                        }
                    },
                    changed = serving.changed() => {
                        if changed.is_ok() && *serving.borrow() {
                            continue;
                        }
                        Err(Status::unavailable("this replica stopped leading; reconnect"))
                    }
                    _ = tx.closed() => return,
                };
                let last = next.is_err();
                if tx.send(next).await.is_err() || last {
                    return;
                }
            }
        });
        let stream = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) });
        Ok(Response::new(Box::pin(stream)))
    }
}

/// Whether a watch asked for this event.
fn matches(event: &v1::Event, filter: &v1::WatchRequest) -> bool {
    let Some(job) = &event.job else { return false };
    (filter.namespace.is_empty() || job.namespace == filter.namespace)
        && (filter.queue.is_empty() || job.queue == filter.queue)
}
