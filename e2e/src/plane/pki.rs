//! The control plane's certificates and tokens, made fresh for every run: a CA, the API server's
//! serving certificate, the service-account signing key, and static bearer tokens for the
//! harness (system:masters), kube-controller-manager and kube-scheduler.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose, SanType};

/// Where the files are, once written.
#[derive(Clone, Debug)]
pub struct Pki {
    /// The CA certificate clients trust.
    pub ca_cert: PathBuf,
    /// The API server's serving certificate and key.
    pub serving_cert: PathBuf,
    /// Its key.
    pub serving_key: PathBuf,
    /// The service-account signing key (private, PKCS#8).
    pub sa_key: PathBuf,
    /// Its public half.
    pub sa_pub: PathBuf,
    /// `--token-auth-file`.
    pub tokens_file: PathBuf,
    /// Bearer token of the harness (group system:masters).
    pub admin_token: String,
    /// Bearer token of kube-controller-manager.
    pub kcm_token: String,
    /// Bearer token of kube-scheduler.
    pub scheduler_token: String,
}

/// A random token: 24 bytes of a freshly generated key's public point (the randomness at hand
/// is ring's, through rcgen), as hex.
fn token() -> Result<String> {
    let key = KeyPair::generate()?;
    let raw = key.public_key_raw();
    Ok(raw.iter().skip(1).take(24).map(|b| format!("{b:02x}")).collect())
}

/// Writes every file under `dir`.
pub fn make(dir: &Path) -> Result<Pki> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.distinguished_name.push(DnType::CommonName, "trainyard-e2e-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let ca = ca_params.self_signed(&ca_key)?;
    let issuer = rcgen::Issuer::new(ca_params, ca_key);

    let serving_key = KeyPair::generate()?;
    let mut serving = CertificateParams::new(vec![
        "localhost".to_string(),
        "kubernetes".to_string(),
        "kubernetes.default".to_string(),
        "kubernetes.default.svc".to_string(),
    ])?;
    serving.subject_alt_names.push(SanType::IpAddress("127.0.0.1".parse()?));
    serving.distinguished_name.push(DnType::CommonName, "kube-apiserver");
    let serving_cert = serving.signed_by(&serving_key, &issuer)?;

    let sa = KeyPair::generate()?;
    let (admin_token, kcm_token, scheduler_token) = (token()?, token()?, token()?);
    let tokens = format!(
        "{admin_token},e2e-admin,e2e-admin-uid,system:masters\n\
         {kcm_token},system:kube-controller-manager,kcm-uid\n\
         {scheduler_token},system:kube-scheduler,scheduler-uid\n"
    );

    let write = |name: &str, text: &str| -> Result<PathBuf> {
        let path = dir.join(name);
        fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    };
    Ok(Pki {
        ca_cert: write("ca.crt", &ca.pem())?,
        serving_cert: write("apiserver.crt", &serving_cert.pem())?,
        serving_key: write("apiserver.key", &serving_key.serialize_pem())?,
        sa_key: write("sa.key", &sa.serialize_pem())?,
        sa_pub: write("sa.pub", &sa.public_key_pem())?,
        tokens_file: write("tokens.csv", &tokens)?,
        admin_token,
        kcm_token,
        scheduler_token,
    })
}

/// A kubeconfig for `server` that authenticates with `token`.
pub fn kubeconfig(server: &str, ca: &Path, user: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: {server}\n    certificate-authority: {}\n\
         users:\n- name: {user}\n  user:\n    token: {token}\ncontexts:\n- name: e2e\n  context:\n    cluster: e2e\n    user: {user}\n\
         current-context: e2e\n",
        ca.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_differ_and_are_hex() {
        let (a, b) = (token().unwrap(), token().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.len(), 48);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn every_file_is_written() {
        let dir = std::env::temp_dir().join(format!("trainyard-e2e-pki-{}", std::process::id()));
        let pki = make(&dir).unwrap();
        for path in [&pki.ca_cert, &pki.serving_cert, &pki.serving_key, &pki.sa_key, &pki.sa_pub, &pki.tokens_file] {
            assert!(fs::metadata(path).unwrap().len() > 0, "{} is empty", path.display());
        }
        let tokens = fs::read_to_string(&pki.tokens_file).unwrap();
        assert!(tokens.contains(&format!("{},e2e-admin,", pki.admin_token)));
        fs::remove_dir_all(dir).ok();
    }
}
