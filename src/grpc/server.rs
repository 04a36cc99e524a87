//! Serving the API: TLS (rustls with ring, like every other TLS in the process) from a
//! certificate and key in PEM, gRPC reflection of `trainyard.v1`, and a graceful stop.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Identity, Server, ServerTlsConfig};

use super::service::TrainyardApi;
use super::v1;

/// The server's TLS identity from PEM files (a kubernetes.io/tls Secret mounted as files).
pub fn tls_from_files(cert: &Path, key: &Path) -> Result<ServerTlsConfig> {
    let cert_pem = std::fs::read(cert).with_context(|| format!("reading the API certificate {}", cert.display()))?;
    let key_pem = std::fs::read(key).with_context(|| format!("reading the API key {}", key.display()))?;
    Ok(tls_from_pem(&cert_pem, &key_pem))
}

/// The server's TLS identity from PEM text.
pub fn tls_from_pem(cert_pem: &[u8], key_pem: &[u8]) -> ServerTlsConfig {
    ServerTlsConfig::new().identity(Identity::from_pem(cert_pem, key_pem))
}

/// Serves `api` (and reflection) on `listener` until `stop` resolves; plain text without `tls`.
pub async fn serve(
    listener: TcpListener,
    api: TrainyardApi,
    tls: Option<ServerTlsConfig>,
    stop: impl Future<Output = ()> + Send,
) -> Result<()> {
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(v1::DESCRIPTOR)
        .build_v1()
        .context("building gRPC reflection")?;
    let mut builder = Server::builder()
        // Dead peers are noticed, so their Watch streams and rate buckets do not linger.
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .concurrency_limit_per_connection(64);
    if let Some(tls) = tls {
        builder = builder.tls_config(tls).context("the API's TLS configuration")?;
    }
    builder
        .add_service(v1::trainyard_server::TrainyardServer::new(api))
        .add_service(reflection)
        .serve_with_incoming_shutdown(TcpIncoming::from(listener), stop)
        .await
        .context("serving the trainyard API")
}
