//! The API's TLS (rustls with ring): a certificate from PEM, or from files that are read again
//! when they change, so that a certificate cert-manager renews (the kubelet swaps the mounted
//! Secret's files) is served from the next handshake on, without a restart.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// How often a handshake may look at the files again (a read of two small files).
const RECHECK: Duration = Duration::from_secs(1);

/// The server side of the API's TLS.
#[derive(Clone, Debug)]
pub struct ServerTls {
    pub(super) config: Arc<ServerConfig>,
}

impl ServerTls {
    /// A fixed identity from PEM text.
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<ServerTls> {
        let key = certified(cert_pem, key_pem)?;
        ServerTls::with(Arc::new(Fixed(Arc::new(key))))
    }

    /// The identity in `cert` and `key` (a kubernetes.io/tls Secret mounted as files), read now
    /// (an error if it cannot be) and again whenever the files change; a renewal that cannot be
    /// read keeps the identity served so far, with a warning.
    pub fn from_files(cert: &Path, key: &Path) -> Result<ServerTls> {
        let (cert_pem, key_pem) = read_pair(cert, key)?;
        let certified = certified(&cert_pem, &key_pem)
            .with_context(|| format!("the API certificate {} and key {}", cert.display(), key.display()))?;
        let reloading = Reloading {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            state: Mutex::new(Loaded {
                pems: (cert_pem, key_pem),
                key: Arc::new(certified),
                checked: Instant::now(),
                rejected: None,
            }),
        };
        ServerTls::with(Arc::new(reloading))
    }

    fn with(resolver: Arc<dyn ResolvesServerCert>) -> Result<ServerTls> {
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .context("the API's TLS versions")?
            .with_no_client_auth()
            .with_cert_resolver(resolver);
        // gRPC is HTTP/2 only.
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(ServerTls { config: Arc::new(config) })
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A certificate chain and its key, checked to belong together.
fn certified(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow!("the certificate PEM: {e}"))?;
    if chain.is_empty() {
        return Err(anyhow!("the certificate PEM holds no certificate"));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| anyhow!("the key PEM: {e}"))?;
    CertifiedKey::from_der(chain, key, &provider()).map_err(|e| anyhow!("the certificate and key: {e}"))
}

fn read_pair(cert: &Path, key: &Path) -> Result<(Vec<u8>, Vec<u8>)> {
    let cert_pem = std::fs::read(cert).with_context(|| format!("reading the API certificate {}", cert.display()))?;
    let key_pem = std::fs::read(key).with_context(|| format!("reading the API key {}", key.display()))?;
    Ok((cert_pem, key_pem))
}

/// One identity for good.
#[derive(Debug)]
struct Fixed(Arc<CertifiedKey>);

impl ResolvesServerCert for Fixed {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// The identity of two files, read again at most every [`RECHECK`].
#[derive(Debug)]
struct Reloading {
    cert: PathBuf,
    key: PathBuf,
    state: Mutex<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    /// The files' bytes the key was made from.
    pems: (Vec<u8>, Vec<u8>),
    key: Arc<CertifiedKey>,
    checked: Instant,
    /// The last files' bytes found unusable, not tried again until they change.
    rejected: Option<(Vec<u8>, Vec<u8>)>,
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let (served, due) = {
            let mut loaded = self.state.lock().ok()?;
            let due = loaded.checked.elapsed() >= RECHECK;
            if due {
                loaded.checked = Instant::now();
            }
            (loaded.key.clone(), due)
        };
        if !due {
            return Some(served);
        }
        // Read and parsed without the lock: other handshakes go on with the identity served.
        let pems = match read_pair(&self.cert, &self.key) {
            Ok(pems) => pems,
            Err(e) => {
                tracing::warn!(error = %e, "the API certificate cannot be read; serving the last one");
                return Some(served);
            }
        };
        let mut loaded = self.state.lock().ok()?;
        if pems == loaded.pems || loaded.rejected.as_ref() == Some(&pems) {
            return Some(loaded.key.clone());
        }
        // The kubelet swaps both files at once; a pair that does not belong together is told
        // once and tried again only when the files change again.
        match certified(&pems.0, &pems.1) {
            Ok(key) => {
                tracing::info!(cert = %self.cert.display(), "serving the renewed API certificate");
                (loaded.pems, loaded.key, loaded.rejected) = (pems, Arc::new(key), None);
            }
            Err(e) => {
                tracing::warn!(error = %e, "the changed API certificate is not usable; serving the last one");
                loaded.rejected = Some(pems);
            }
        }
        Some(loaded.key.clone())
    }
}
