//! Every request the controller sends to the API server, counted and timed by verb and resource:
//! a tower layer on the client, so that no call site can forget it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use http::{Method, Request, Uri};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

/// Verb and resource of one request, as the API server's own audit names them.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabel {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `apply`, `delete` or `deletecollection`.
    pub verb: String,
    /// The plural resource with its subresource, e.g. `trainjobs/status`; `other` for anything
    /// that is not a resource path (discovery, version).
    pub resource: String,
}

type HistogramFamily = Family<RequestLabel, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 1 ms to about 33 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// The counters the layer writes to.
#[derive(Clone, Debug)]
pub struct ApiRequests {
    /// Requests sent.
    pub sent: Family<RequestLabel, Counter>,
    /// Seconds until the response headers came (watches: until the stream opened).
    pub seconds: HistogramFamily,
    /// Responses with a status of 400 or more, by verb and resource.
    pub refused: Family<RequestLabel, Counter>,
}

impl Default for ApiRequests {
    fn default() -> ApiRequests {
        ApiRequests {
            sent: Family::default(),
            seconds: Family::new_with_constructor(latency_histogram),
            refused: Family::default(),
        }
    }
}

/// Names a request by verb and resource from its method, path, query and content type.
pub fn classify(method: &Method, uri: &Uri, content_type: Option<&str>) -> RequestLabel {
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    // /api/v1/... or /apis/<group>/<version>/...
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => &[][..],
    };
    let rest = match rest {
        ["namespaces", _ns, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let (resource, named) = match rest {
        [] => ("other".to_string(), false),
        [resource] => ((*resource).to_string(), false),
        [resource, _name] => ((*resource).to_string(), true),
        [resource, _name, sub, ..] => (format!("{resource}/{sub}"), true),
    };
    let watch = uri.query().is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    let verb = match *method {
        Method::GET if watch => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH if content_type.is_some_and(|c| c.starts_with("application/apply-patch")) => "apply",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => "other",
    };
    RequestLabel { verb: verb.to_string(), resource }
}

/// The layer that counts: `ClientBuilder::with_layer(&CountLayer(requests))`.
#[derive(Clone, Debug)]
pub struct CountLayer(pub std::sync::Arc<ApiRequests>);

impl<S> tower::Layer<S> for CountLayer {
    type Service = Counted<S>;
    fn layer(&self, inner: S) -> Counted<S> {
        Counted { inner, requests: self.0.clone() }
    }
}

/// A client service whose requests are counted.
#[derive(Clone, Debug)]
pub struct Counted<S> {
    inner: S,
    requests: std::sync::Arc<ApiRequests>,
}

type Answer<R, E> = Pin<Box<dyn Future<Output = Result<http::Response<R>, E>> + Send>>;

impl<S, B, R> tower::Service<Request<B>> for Counted<S>
where
    S: tower::Service<Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<R>;
    type Error = S::Error;
    type Future = Answer<R, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let content_type = request.headers().get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
        let label = classify(request.method(), request.uri(), content_type);
        self.requests.sent.get_or_create(&label).inc();
        let requests = self.requests.clone();
        let started = Instant::now();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let result = answer.await;
            requests.seconds.get_or_create(&label).observe(started.elapsed().as_secs_f64());
            match &result {
                Ok(response) if response.status().as_u16() < 400 => {}
                _ => {
                    requests.refused.get_or_create(&label).inc();
                }
            }
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(method: Method, uri: &str, content_type: Option<&str>) -> (String, String) {
        let l = classify(&method, &uri.parse().expect("a uri"), content_type);
        (l.verb, l.resource)
    }

    fn pair(verb: &str, resource: &str) -> (String, String) {
        (verb.to_string(), resource.to_string())
    }

    #[test]
    fn requests_are_named_as_the_api_server_names_them() {
        let tj = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs";
        assert_eq!(label(Method::GET, &format!("{tj}?watch=true&resourceVersion=5"), None), pair("watch", "trainjobs"));
        assert_eq!(label(Method::GET, tj, None), pair("list", "trainjobs"));
        assert_eq!(label(Method::GET, &format!("{tj}/a"), None), pair("get", "trainjobs"));
        assert_eq!(
            label(
                Method::PATCH,
                &format!("{tj}/a/status?fieldManager=trainyard&force=true"),
                Some("application/apply-patch+yaml")
            ),
            pair("apply", "trainjobs/status")
        );
        assert_eq!(
            label(Method::PATCH, &format!("{tj}/a"), Some("application/merge-patch+json")),
            pair("patch", "trainjobs")
        );
        assert_eq!(label(Method::POST, "/api/v1/namespaces/team/events", None), pair("create", "events"));
        assert_eq!(label(Method::GET, "/api/v1/nodes?watch=1", None), pair("watch", "nodes"));
        assert_eq!(label(Method::DELETE, "/api/v1/namespaces/team/pods/p", None), pair("delete", "pods"));
        assert_eq!(label(Method::DELETE, "/api/v1/namespaces/team/pods", None), pair("deletecollection", "pods"));
        assert_eq!(label(Method::GET, "/api/v1/namespaces", None), pair("list", "namespaces"));
        assert_eq!(label(Method::GET, "/api/v1/namespaces/team", None), pair("get", "namespaces"));
        assert_eq!(
            label(Method::PUT, "/apis/coordination.k8s.io/v1/namespaces/x/leases/l", None),
            pair("update", "leases")
        );
        assert_eq!(label(Method::GET, "/apis/scheduling.k8s.io", None), pair("list", "other"));
        assert_eq!(label(Method::GET, "/version", None), pair("list", "other"));
    }

    #[tokio::test]
    async fn the_layer_counts_and_times_each_request() {
        use tower::{Layer, Service, ServiceExt};
        let requests = std::sync::Arc::new(ApiRequests::default());
        let inner = tower::service_fn(|r: Request<()>| async move {
            let status = if r.uri().path().ends_with("/missing") { 404 } else { 200 };
            Ok::<_, std::convert::Infallible>(http::Response::builder().status(status).body(()).expect("a response"))
        });
        let mut svc = CountLayer(requests.clone()).layer(inner);
        for path in ["/api/v1/namespaces/a/pods/p", "/api/v1/namespaces/a/pods/missing"] {
            let request = Request::get(path).body(()).expect("a request");
            svc.ready().await.expect("ready").call(request).await.expect("answered");
        }
        let get = RequestLabel { verb: "get".into(), resource: "pods".into() };
        assert_eq!(requests.sent.get_or_create(&get).get(), 2);
        assert_eq!(requests.refused.get_or_create(&get).get(), 1);
    }
}
