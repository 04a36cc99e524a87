//! The API's client side: a TLS channel to the endpoint with the caller's bearer token on every
//! call, and a Watch that reconnects when its stream breaks (a leader change, a restart) and
//! carries on from the state the new leader sends first.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tonic::Code;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

use super::v1;
use super::v1::trainyard_client::TrainyardClient;

/// Where the API is and who calls it.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// `https://host:port`.
    pub url: String,
    /// CA certificate(s) the server's certificate must chain to, PEM.
    pub ca_pem: Vec<u8>,
    /// The name to check the server's certificate against, when it differs from the URL's host.
    pub tls_name: Option<String>,
    /// The caller's Kubernetes bearer token.
    pub token: String,
    /// Where a fresh token comes from when the server no longer takes this one (a kubeconfig
    /// exec plugin's tokens expire within the hour); `None` when the token is all there is.
    pub renew: Option<Renew>,
}

/// Gets a fresh bearer token (blocking: it may run a login helper).
#[derive(Clone)]
pub struct Renew(pub Arc<dyn Fn() -> Result<String> + Send + Sync>);

impl std::fmt::Debug for Renew {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Renew")
    }
}

/// Puts the bearer token on every call.
#[derive(Clone)]
pub struct Bearer(MetadataValue<Ascii>);

impl Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        request.metadata_mut().insert("authorization", self.0.clone());
        Ok(request)
    }
}

/// A connected client.
pub type ApiClient = TrainyardClient<InterceptedService<Channel, Bearer>>;

/// Connects to `endpoint` over TLS.
pub async fn connect(endpoint: &Endpoint) -> Result<ApiClient> {
    let token: MetadataValue<Ascii> =
        format!("Bearer {}", endpoint.token).parse().context("the bearer token is not header text")?;
    let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&endpoint.ca_pem));
    if let Some(name) = &endpoint.tls_name {
        tls = tls.domain_name(name.clone());
    }
    let channel = Channel::from_shared(endpoint.url.clone())
        .with_context(|| format!("{:?} is not an endpoint URL", endpoint.url))?
        .tls_config(tls)
        .context("the client's TLS configuration")?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .with_context(|| format!("connecting to the trainyard API at {}", endpoint.url))?;
    Ok(TrainyardClient::with_interceptor(channel, Bearer(token)))
}

/// Codes a reconnect can cure: the replica stopped leading or went away, the stream fell behind.
fn passing(code: Code) -> bool {
    matches!(code, Code::Unavailable | Code::Aborted | Code::Unknown | Code::Cancelled | Code::Internal)
}

/// Longest wait between two connection attempts.
const MOST_BACKOFF: Duration = Duration::from_secs(5);

/// Watches until `on_event` breaks, reconnecting with backoff whenever the stream or the
/// connection breaks for a passing reason; a refusal (UNAUTHENTICATED, PERMISSION_DENIED,
/// INVALID_ARGUMENT) ends it with an error, except that an UNAUTHENTICATED token is renewed
/// once where the endpoint can ([`Endpoint::renew`]), as kubectl does on a 401. Each
/// reconnection opens with the new stream's `initial` events, so the caller sees the whole
/// state again.
pub async fn watch(
    endpoint: &Endpoint,
    request: v1::WatchRequest,
    mut on_event: impl FnMut(v1::Event) -> ControlFlow<()>,
) -> Result<()> {
    let mut endpoint = endpoint.clone();
    let mut backoff = Duration::from_millis(100);
    // Whether the token in use is fresh from `renew` and has not been taken yet.
    let mut renewed = false;
    loop {
        let failure = match connect(&endpoint).await {
            Err(e) => format!("{e:#}"),
            Ok(mut client) => match client.watch(request.clone()).await {
                Err(status) if status.code() == Code::Unauthenticated && !renewed && endpoint.renew.is_some() => {
                    endpoint.token = renew(&endpoint).await?;
                    renewed = true;
                    continue;
                }
                Err(status) if !passing(status.code()) => bail!("{}: {}", status.code(), status.message()),
                Err(status) => format!("{}: {}", status.code(), status.message()),
                Ok(response) => {
                    renewed = false;
                    let mut stream = response.into_inner();
                    loop {
                        match stream.message().await {
                            Ok(Some(event)) => {
                                backoff = Duration::from_millis(100);
                                if on_event(event).is_break() {
                                    return Ok(());
                                }
                            }
                            Ok(None) => break "the stream ended".to_string(),
                            Err(status) if !passing(status.code()) => {
                                bail!("{}: {}", status.code(), status.message())
                            }
                            Err(status) => break format!("{}: {}", status.code(), status.message()),
                        }
                    }
                }
            },
        };
        tracing::info!(reason = %failure, wait_ms = backoff.as_millis() as u64, "watch reconnecting");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MOST_BACKOFF);
    }
}

/// A fresh token from the endpoint's [`Renew`], off the async threads.
async fn renew(endpoint: &Endpoint) -> Result<String> {
    let Some(Renew(get)) = endpoint.renew.clone() else { bail!("the token cannot be renewed") };
    tracing::info!("the API refused the token; getting a fresh one");
    tokio::task::spawn_blocking(move || get()).await.context("renewing the token")?
}
