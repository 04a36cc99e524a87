//! A worker's credentials: its WorkerCluster's Secret read into a client configuration, or the
//! reason it cannot be, naming the field at fault. A worker whose credentials fail is left out of
//! the fleet, never guessed.

use k8s_openapi::api::core::v1::Secret;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::api::WorkerCluster;

/// Why a worker is not part of the fleet now; said on its WorkerCluster's `Connected` condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// CamelCase reason.
    pub reason: &'static str,
    /// The message, naming the cluster and the field.
    pub message: String,
}

impl Refusal {
    fn new(reason: &'static str, message: String) -> Refusal {
        Refusal { reason, message }
    }
}

/// The kubeconfig text a worker's Secret holds (`secret`: the Secret as read, `None` when it is
/// not there), checked for what a manager needs: one current context with a server.
pub fn kubeconfig_of(worker: &WorkerCluster, secret: Option<&Secret>, namespace: &str) -> Result<Kubeconfig, Refusal> {
    let cluster = worker.metadata.name.as_deref().unwrap_or_default();
    let reference = &worker.spec.kubeconfig_secret;
    let field = "spec.kubeconfigSecret";
    let Some(secret) = secret else {
        let message =
            format!("worker cluster {cluster}: {field}.name: Secret {namespace}/{} does not exist", reference.name);
        return Err(Refusal::new("SecretNotFound", message));
    };
    let key = reference.key();
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .or_else(|| secret.string_data.as_ref().and_then(|d| d.get(key)).map(|s| s.clone().into_bytes()));
    let Some(bytes) = bytes else {
        let message =
            format!("worker cluster {cluster}: {field}.key: Secret {namespace}/{} has no key {key:?}", reference.name);
        return Err(Refusal::new("KeyNotFound", message));
    };
    let invalid = |why: String| {
        let message = format!(
            "worker cluster {cluster}: {field}: data[{key:?}] of Secret {namespace}/{} is not a usable kubeconfig: {why}",
            reference.name
        );
        Refusal::new("InvalidKubeconfig", message)
    };
    let text = String::from_utf8(bytes).map_err(|_| invalid("not UTF-8".into()))?;
    let config = Kubeconfig::from_yaml(&text).map_err(|e| invalid(e.to_string()))?;
    let context_name = config.current_context.clone().or_else(|| config.contexts.first().map(|c| c.name.clone()));
    let Some(context_name) = context_name else { return Err(invalid("it names no context".into())) };
    let Some(context) = config.contexts.iter().find(|c| c.name == context_name).and_then(|c| c.context.as_ref()) else {
        return Err(invalid(format!("its current context {context_name:?} is not defined")));
    };
    let server = config
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.server.clone());
    if server.is_none_or(|s| s.is_empty()) {
        return Err(invalid(format!("cluster {:?} of its current context has no server", context.cluster)));
    }
    Ok(config)
}

/// The client configuration of a checked kubeconfig. Files it names are read from the manager's
/// file system, so a kubeconfig for a Secret carries its certificates and token inline.
pub async fn client_config(cluster: &str, config: Kubeconfig) -> Result<kube::Config, Refusal> {
    let mut built = kube::Config::from_custom_kubeconfig(config, &KubeConfigOptions::default()).await.map_err(|e| {
        let message = format!("worker cluster {cluster}: spec.kubeconfigSecret: the kubeconfig cannot be used: {e}");
        Refusal::new("InvalidKubeconfig", message)
    })?;
    // A worker away must not hold a manager request for the default 295 s.
    built.read_timeout = Some(std::time::Duration::from_secs(30));
    built.connect_timeout = Some(std::time::Duration::from_secs(3));
    Ok(built)
}

/// The refusal of a worker whose API server turned the credentials down.
pub fn refused(cluster: &str, error: &kube::Error) -> Option<Refusal> {
    match error {
        kube::Error::Api(s) if s.code == 401 || s.code == 403 => Some(Refusal::new(
            "CredentialsRefused",
            format!(
                "worker cluster {cluster}: spec.kubeconfigSecret: the worker's API server refused the credentials ({}: {})",
                s.code, s.message
            ),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn worker(key: Option<&str>) -> WorkerCluster {
        let mut w = WorkerCluster::new(
            "east",
            crate::api::WorkerClusterSpec {
                kubeconfig_secret: crate::api::worker_cluster::SecretKey {
                    name: "east-kubeconfig".into(),
                    key: key.map(str::to_string),
                },
            },
        );
        w.metadata.name = Some("east".into());
        w
    }

    fn secret(key: &str, text: &str) -> Secret {
        Secret { data: Some([(key.to_string(), ByteString(text.as_bytes().to_vec()))].into()), ..Secret::default() }
    }

    const GOOD: &str = "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\nclusters:\n- name: k\n  cluster: {server: 'https://127.0.0.1:6443'}\nusers:\n- name: u\n  user: {token: t}\n";

    #[test]
    fn a_good_secret_gives_its_kubeconfig() {
        let config = kubeconfig_of(&worker(None), Some(&secret("kubeconfig", GOOD)), "trainyard").unwrap();
        assert_eq!(config.current_context.as_deref(), Some("c"));
        let other = kubeconfig_of(&worker(Some("config")), Some(&secret("config", GOOD)), "trainyard");
        assert!(other.is_ok(), "the key named is read");
    }

    #[test]
    fn every_bad_secret_names_the_cluster_and_the_field() {
        let missing = kubeconfig_of(&worker(None), None, "trainyard").unwrap_err();
        assert_eq!(missing.reason, "SecretNotFound");
        assert!(
            missing
                .message
                .contains("worker cluster east: spec.kubeconfigSecret.name: Secret trainyard/east-kubeconfig")
        );
        let key = kubeconfig_of(&worker(Some("cfg")), Some(&secret("kubeconfig", GOOD)), "trainyard").unwrap_err();
        assert_eq!(key.reason, "KeyNotFound");
        assert!(key.message.contains("spec.kubeconfigSecret.key"), "{}", key.message);
        for (text, says) in [
            ("{not yaml", "not a usable kubeconfig"),
            ("apiVersion: v1\nkind: Config\n", "names no context"),
            ("apiVersion: v1\nkind: Config\ncurrent-context: x\ncontexts: []\n", "\"x\" is not defined"),
            (
                "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {cluster: k}\nclusters:\n- name: k\n  cluster: {}\n",
                "has no server",
            ),
        ] {
            let bad = kubeconfig_of(&worker(None), Some(&secret("kubeconfig", text)), "trainyard").unwrap_err();
            assert_eq!(bad.reason, "InvalidKubeconfig", "{text}");
            assert!(bad.message.contains(says), "{text}: {}", bad.message);
            assert!(bad.message.starts_with("worker cluster east: spec.kubeconfigSecret: data[\"kubeconfig\"]"));
        }
    }
}
