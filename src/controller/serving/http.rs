//! The HTTP endpoints: `/metrics` for Prometheus, `/healthz` and `/readyz` for the kubelet.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::controller::serving::metrics::Metrics;

/// What the endpoints report.
#[derive(Debug, Default)]
pub struct Health {
    /// The leader's engine is built and has run its first cycle.
    pub ready: AtomicBool,
    /// This replica waits for the lease: it serves its endpoints and is Ready, but does not act.
    pub standby: AtomicBool,
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
                if health.standby.load(Ordering::Relaxed) {
                    (StatusCode::OK, "standby: another replica holds the lease").into_response()
                } else if health.ready.load(Ordering::Relaxed) {
                    (StatusCode::OK, "leader: scheduling").into_response()
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "leader: caches not synced yet").into_response()
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
