//! Where the API commands connect and as whom: flags and environment first, then the
//! kubeconfig's current context (its user's token or login helper, its namespace, and a `trainyard` extension
//! naming the endpoint and its CA), as kubectl users expect.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use kube::config::{Cluster, ExecConfig, Kubeconfig};
use secrecy::ExposeSecret;

use super::exec_credential;
use crate::output::Output;
use trainyard::grpc::client::{Endpoint, Renew};

/// Connection and output flags of every API command.
#[derive(Clone, Debug, Args)]
pub struct Connection {
    /// The trainyard API, https://HOST:PORT. Default: `server` of the `trainyard` extension of
    /// the kubeconfig context.
    #[arg(long, env = "TRAINYARD_SERVER", value_name = "URL")]
    pub server: Option<String>,
    /// CA certificate(s) the API's certificate must chain to, PEM. Default:
    /// `certificate-authority` of the context's `trainyard` extension.
    #[arg(long, env = "TRAINYARD_CA_FILE", value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Name to check the API's certificate against, when it is not the server's host.
    #[arg(long, env = "TRAINYARD_TLS_SERVER_NAME", value_name = "NAME")]
    pub tls_server_name: Option<String>,
    /// Bearer token. Default: the context user's token, token file or exec plugin (run again
    /// when the API no longer takes its token).
    #[arg(long, env = "TRAINYARD_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub token: Option<String>,
    /// Kubeconfig file. Default: $KUBECONFIG, else ~/.kube/config.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context. Default: the current one.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Namespace. Default: the context's, else `default`.
    #[arg(short = 'n', long, value_name = "NAME")]
    pub namespace: Option<String>,
    /// Output format (`watch` prints one JSON object per line, one YAML document per event).
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Output,
}

/// What the kubeconfig context gives.
#[derive(Debug, Default)]
struct FromContext {
    server: Option<String>,
    ca_file: Option<PathBuf>,
    tls_server_name: Option<String>,
    token: Option<ContextToken>,
    namespace: Option<String>,
}

/// The token a kubeconfig user gives.
#[derive(Debug)]
enum ContextToken {
    /// `token` or `tokenFile`.
    Given(String),
    /// An exec plugin, with the context's cluster to tell it about.
    Exec(Box<(ExecConfig, Option<Cluster>)>),
}

impl Connection {
    /// The endpoint and the namespace to use.
    pub fn resolve(&self) -> Result<(Endpoint, String)> {
        let needs_context =
            self.server.is_none() || self.ca_file.is_none() || self.token.is_none() || self.namespace.is_none();
        let context = if needs_context { self.read_kubeconfig()? } else { FromContext::default() };
        let url = self.server.clone().or(context.server).ok_or_else(|| {
            anyhow!("no API endpoint: pass --server https://HOST:PORT, set TRAINYARD_SERVER, or add a `trainyard` extension with `server` to the kubeconfig context")
        })?;
        if !url.starts_with("https://") {
            bail!("--server {url:?}: the trainyard API is served over TLS only (https://HOST:PORT)");
        }
        let ca_file = self.ca_file.clone().or(context.ca_file).ok_or_else(|| {
            anyhow!("no CA certificate for the API: pass --ca-file FILE, set TRAINYARD_CA_FILE, or add `certificate-authority` to the context's `trainyard` extension")
        })?;
        let ca_pem = std::fs::read(&ca_file).with_context(|| format!("reading the CA file {}", ca_file.display()))?;
        // A login helper runs last: endpoint and CA problems are told before anyone logs in.
        let (token, renew) = match (self.token.clone(), context.token) {
            (Some(token), _) => (token, None),
            (None, Some(ContextToken::Given(token))) => (token, None),
            (None, Some(ContextToken::Exec(plugin))) => {
                let (exec, cluster) = *plugin;
                let token = exec_credential::token(&exec, cluster.as_ref())?;
                let again = move || exec_credential::token(&exec, cluster.as_ref());
                (token, Some(Renew(Arc::new(again))))
            }
            (None, None) => bail!(
                "no bearer token: pass --token, set TRAINYARD_TOKEN, or use a kubeconfig user with `token`, `tokenFile` or `exec`"
            ),
        };
        let namespace = self.namespace.clone().or(context.namespace).unwrap_or_else(|| "default".into());
        let tls_name = self.tls_server_name.clone().or(context.tls_server_name);
        Ok((Endpoint { url, ca_pem, tls_name, token, renew }, namespace))
    }

    fn read_kubeconfig(&self) -> Result<FromContext> {
        let config = match &self.kubeconfig {
            Some(path) => {
                Kubeconfig::read_from(path).with_context(|| format!("reading the kubeconfig {}", path.display()))?
            }
            None => match Kubeconfig::read() {
                Ok(config) => config,
                // Without a kubeconfig everything must come from flags; say what is missing then.
                Err(_) => return Ok(FromContext::default()),
            },
        };
        let name = self.context.clone().or(config.current_context.clone());
        let Some(name) = name else { return Ok(FromContext::default()) };
        let context = config
            .contexts
            .iter()
            .find(|c| c.name == name)
            .and_then(|c| c.context.clone())
            .ok_or_else(|| anyhow!("the kubeconfig has no context {name:?}"))?;
        let mut out = FromContext { namespace: context.namespace.clone(), ..Default::default() };
        if let Some(ext) = context.extensions.iter().flatten().find(|e| e.name == "trainyard") {
            let text = |k: &str| ext.extension.get(k).and_then(|v| v.as_str()).map(str::to_string);
            out.server = text("server");
            out.ca_file = text("certificate-authority").map(PathBuf::from);
            out.tls_server_name = text("tls-server-name");
        }
        if let Some(user) = &context.user
            && let Some(auth) = config.auth_infos.iter().find(|a| &a.name == user).and_then(|a| a.auth_info.as_ref())
        {
            out.token = match (&auth.token, &auth.token_file, &auth.exec) {
                (Some(token), _, _) => Some(ContextToken::Given(token.expose_secret().to_string())),
                (None, Some(file), _) => Some(ContextToken::Given(read_token(Path::new(file))?)),
                (None, None, Some(exec)) => {
                    let cluster = config.clusters.iter().find(|c| c.name == context.cluster);
                    Some(ContextToken::Exec(Box::new((exec.clone(), cluster.and_then(|c| c.cluster.clone())))))
                }
                _ => None,
            };
        }
        Ok(out)
    }
}

fn read_token(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading the token file {}", path.display()))?;
    Ok(text.trim().to_string())
}
