//! Bearer tokens from a kubeconfig user's exec plugin (`client.authentication.k8s.io`), run as
//! kubectl runs it: the cloud login helpers (gke-gcloud-auth-plugin, `aws eks get-token`,
//! kubelogin) that most managed clusters' kubeconfigs name instead of a token.

use std::io::IsTerminal;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, anyhow, bail};
use kube::config::{Cluster, ExecConfig, ExecInteractiveMode};
use serde_json::{Value, json};

/// The version asked for when the kubeconfig names none.
const DEFAULT_API_VERSION: &str = "client.authentication.k8s.io/v1";

/// Runs the plugin and returns the token of its ExecCredential; `cluster` is passed on when the
/// plugin asks for it (`provideClusterInfo`). A relative command with a path separator was made
/// absolute against the kubeconfig's folder when the kubeconfig was read, as kubectl does.
pub fn token(exec: &ExecConfig, cluster: Option<&Cluster>) -> Result<String> {
    let name =
        exec.command.as_deref().filter(|c| !c.is_empty()).ok_or_else(|| anyhow!("the user's exec has no command"))?;
    let api_version = exec.api_version.clone().unwrap_or_else(|| DEFAULT_API_VERSION.into());
    let terminal = std::io::stdin().is_terminal();
    let interactive = match exec.interactive_mode {
        Some(ExecInteractiveMode::Never) => false,
        Some(ExecInteractiveMode::Always) if !terminal => {
            bail!("exec plugin {name}: it needs a terminal (interactiveMode: Always) and standard input is not one")
        }
        _ => terminal,
    };
    let mut spec = json!({"interactive": interactive});
    if exec.provide_cluster_info
        && let Some(cluster) = cluster
    {
        spec["cluster"] = cluster_info(cluster)?;
    }
    let info = json!({"apiVersion": api_version, "kind": "ExecCredential", "spec": spec});
    let mut command = Command::new(name);
    command.args(exec.args.iter().flatten()).env("KUBERNETES_EXEC_INFO", info.to_string());
    for pair in exec.env.iter().flatten() {
        if let (Some(key), Some(value)) = (pair.get("name"), pair.get("value")) {
            command.env(key, value);
        }
    }
    // The plugin talks to the person on stderr (and reads stdin when interactive); stdout is the credential.
    command.stdin(if interactive { Stdio::inherit() } else { Stdio::null() }).stderr(Stdio::inherit());
    let output = command.output().map_err(|e| {
        let hint = exec.install_hint.as_deref().map(|h| format!("\n{}", h.trim_end())).unwrap_or_default();
        anyhow!("exec plugin {name}: cannot run it: {e}{hint}")
    })?;
    if !output.status.success() {
        bail!("exec plugin {name}: {}", output.status);
    }
    let credential: Value = serde_json::from_slice(&output.stdout)
        .with_context(|| format!("exec plugin {name}: its output is not an ExecCredential"))?;
    if credential["kind"] != "ExecCredential" {
        bail!("exec plugin {name}: its output is kind {}, not ExecCredential", credential["kind"]);
    }
    if credential["apiVersion"] != api_version.as_str() {
        bail!("exec plugin {name}: it answered {} to a request for {api_version}", credential["apiVersion"]);
    }
    match credential["status"]["token"].as_str().filter(|t| !t.is_empty()) {
        Some(token) => Ok(token.to_string()),
        None if credential["status"]["clientCertificateData"].is_string() => bail!(
            "exec plugin {name}: it gives a client certificate; the trainyard API takes bearer tokens only (pass --token)"
        ),
        None => bail!("exec plugin {name}: its ExecCredential has no status.token"),
    }
}

/// The cluster as client-go describes it to a plugin: the CA as data (read from
/// `certificate-authority` when the kubeconfig names a file) and the cluster's
/// `client.authentication.k8s.io/exec` extension as `config`.
fn cluster_info(cluster: &Cluster) -> Result<Value> {
    let ca_data = match (&cluster.certificate_authority_data, &cluster.certificate_authority) {
        (Some(data), _) => Some(Value::String(data.clone())),
        (None, Some(file)) => {
            let pem =
                std::fs::read(file).with_context(|| format!("reading the cluster's certificate-authority {file}"))?;
            // Bytes travel as base64 in JSON, as the kubeconfig's own `-data` fields do.
            Some(serde_json::to_value(k8s_openapi::ByteString(pem))?)
        }
        (None, None) => None,
    };
    let config = cluster
        .extensions
        .iter()
        .flatten()
        .find(|e| e.name == "client.authentication.k8s.io/exec")
        .map(|e| e.extension.clone());
    Ok(json!({
        "server": cluster.server,
        "certificate-authority-data": ca_data,
        "tls-server-name": cluster.tls_server_name,
        "insecure-skip-tls-verify": cluster.insecure_skip_tls_verify.unwrap_or(false),
        "proxy-url": cluster.proxy_url,
        "config": config,
    }))
}
