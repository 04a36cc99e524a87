//! The HTTP endpoints: `/metrics` for Prometheus, `/healthz` and `/readyz` for the kubelet.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use super::metrics::Metrics;

/// What the endpoints report.
#[derive(Debug, Default)]
pub struct Health {
    /// The caches have synced (a replica that lost its lease stays ready: it is a warm standby).
    pub ready: AtomicBool,
}

/// The metrics router.
pub fn metrics_router(metrics: Arc<Metrics>) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let metrics = metrics.clone();
            async move {
                (
                    [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
                    metrics.render(),
                )
            }
        }),
    )
}

/// The health router.
pub fn health_router(health: Arc<Health>) -> Router {
    Router::new().route("/healthz", get(|| async { "ok" })).route(
        "/readyz",
        get(move || {
            let health = health.clone();
            async move {
                if health.ready.load(Ordering::Relaxed) {
                    (StatusCode::OK, "ready").into_response()
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "caches not synced").into_response()
                }
            }
        }),
    )
}

/// Serves `router` on `addr` until the process ends.
pub async fn serve(addr: SocketAddr, router: Router) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, router).await
}
