//! Serving the API: TLS from [`super::tls`] (each connection's handshake on a task of its own,
//! bounded in time), gRPC reflection of `trainyard.v1`, and a graceful stop.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

use super::service::TrainyardApi;
use super::tls::ServerTls;
use super::v1;

/// Longest a client may take over its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshakes under way at once; past them, accepting waits (the backlog holds the rest), so
/// idle connections cannot use up the process's file descriptors.
const HANDSHAKES_AT_ONCE: usize = 256;

/// Serves `api` (and reflection) on `listener` until `stop` resolves; plain text without `tls`.
pub async fn serve(
    listener: TcpListener,
    api: TrainyardApi,
    tls: Option<ServerTls>,
    stop: impl Future<Output = ()> + Send,
) -> Result<()> {
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(v1::DESCRIPTOR)
        .build_v1()
        .context("building gRPC reflection")?;
    let router = Server::builder()
        // Dead peers are noticed, so their Watch streams and rate buckets do not linger.
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .concurrency_limit_per_connection(64)
        .add_service(v1::trainyard_server::TrainyardServer::new(api))
        .add_service(reflection);
    let served = match tls {
        Some(tls) => router.serve_with_incoming_shutdown(handshaken(listener, tls), stop).await,
        None => router.serve_with_incoming_shutdown(TcpIncoming::from(listener), stop).await,
    };
    served.context("serving the trainyard API")
}

/// The connections of `listener` once their TLS handshake is done. A slow or failed handshake
/// holds up no one else; accepting stops when the server drops the stream.
fn handshaken(listener: TcpListener, tls: ServerTls) -> ReceiverStream<std::io::Result<TlsStream<TcpStream>>> {
    let acceptor = TlsAcceptor::from(tls.config);
    let (tx, rx) = mpsc::channel(64);
    let slots = Arc::new(Semaphore::new(HANDSHAKES_AT_ONCE));
    tokio::spawn(async move {
        loop {
            let slot = tokio::select! {
                slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
                () = tx.closed() => return,
            };
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = tx.closed() => return,
            };
            let (tcp, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, say: wait a little rather than spin.
                    tracing::warn!(error = %e, "accepting an API connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                let _slot = slot;
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let _ = tx.send(Ok(stream)).await;
                    }
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "API TLS handshake failed"),
                    Err(_) => tracing::debug!(%peer, "API TLS handshake timed out"),
                }
            });
        }
    });
    ReceiverStream::new(rx)
}
