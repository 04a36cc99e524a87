//! The researcher API over TLS, with the real server answering TokenReview and
//! SubjectAccessReview: ServiceAccount tokens from TokenRequest, RBAC Roles that let alice use
//! TrainJobs of her namespace and bob only read another one. Each CLI command runs as a user would
//! run it; the denials are the real server's answers.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use serde_json::{Value, json};
use tokio::process::Command;

use crate::Options;
use crate::kube_util::{Kube, wait_for};
use crate::plane::process::free_port;
use crate::suite::{Checks, Suite};
use crate::world::World;

/// A token for an existing ServiceAccount, through the TokenRequest API.
pub async fn token_for(kube: &Kube, ns: &str, sa: &str) -> Result<String> {
    let body =
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}});
    let req = http::Request::post(format!("/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body)?)?;
    let answer: Value = kube.client.request(req).await.with_context(|| format!("TokenRequest for {ns}/{sa}"))?;
    answer
        .pointer("/status/token")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| anyhow!("no token in {answer}"))
}

/// A CA and a serving certificate for 127.0.0.1, written to `dir`: (ca, cert, key) paths.
fn api_certificates(dir: &Path) -> Result<(String, String, String)> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec!["localhost".to_string()])?;
    params.subject_alt_names.push(SanType::IpAddress("127.0.0.1".parse()?));
    let cert = params.signed_by(&key, &issuer)?;
    let write = |name: &str, text: String| -> Result<String> {
        let p = dir.join(name);
        std::fs::write(&p, text)?;
        Ok(p.display().to_string())
    };
    Ok((write("api-ca.crt", ca.pem())?, write("api.crt", cert.pem())?, write("api.key", key.serialize_pem())?))
}

/// Runs `trainyard <args>`; returns (success, stdout, stderr).
async fn cli(binary: &Path, args: &[&str]) -> Result<(bool, String, String)> {
    let out = Command::new(binary).args(args).env_remove("KUBECONFIG").env("HOME", "/nonexistent").output().await?;
    Ok((out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into()))
}

/// Runs the scenario.
pub async fn run(suite: &mut Suite, _: &Options) -> Result<Checks> {
    let mut c = Checks::default();
    let mut w = World::new(suite, "api").await?;
    let other = format!("{}-other", w.ns);
    w.namespace(&other).await?;
    w.grid(1, 1, 4).await?;
    let queue = w.queue("team", 16, None).await?;
    w.torch_runtime().await?;
    let (ca, cert, key) = api_certificates(&w.suite.run_dir)?;
    let port = free_port()?;
    w.start_trainyard(&[
        &format!("--api-bind=127.0.0.1:{port}"),
        &format!("--api-tls-cert={cert}"),
        &format!("--api-tls-key={key}"),
    ])
    .await?;
    let kube = w.kube().clone();
    let (ns, binary) = (w.ns.clone(), w.suite.binary.clone());

    // alice edits TrainJobs in her namespace and lists queues; bob reads TrainJobs elsewhere only.
    let rule =
        |verbs: &[&str]| json!([{"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": verbs}]);
    for (who, role_ns, verbs) in [
        ("alice", ns.as_str(), vec!["get", "list", "watch", "create", "delete"]),
        ("bob", other.as_str(), vec!["get", "list"]),
    ] {
        kube.apply(&json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": who, "namespace": role_ns}, "rules": rule(&verbs)})).await?;
        kube.apply(&json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": who, "namespace": role_ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": who},
            "subjects": [{"kind": "ServiceAccount", "name": who, "namespace": ns}]})).await?;
    }
    for sa in ["alice", "bob"] {
        kube.apply(&json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa, "namespace": ns}}))
            .await?;
    }
    let alice = token_for(&kube, &ns, "alice").await?;
    let bob = token_for(&kube, &ns, "bob").await?;

    w.submit(&[w.trainjob("visible", &queue, 1, 8)]).await?;
    let mut hidden = w.trainjob("hidden", &queue, 1, 8);
    hidden["metadata"]["namespace"] = json!(other);
    w.submit(&[hidden]).await?;
    w.wait_admitted(&["visible".into()], Duration::from_secs(30)).await?;

    let server = format!("https://127.0.0.1:{port}");
    let base = |token: &str| {
        vec![
            "--server".to_string(),
            server.clone(),
            "--ca-file".to_string(),
            ca.clone(),
            "--token".to_string(),
            token.to_string(),
        ]
    };
    let run_as = |token: &str, words: &[&str]| {
        let mut args: Vec<String> = words.iter().map(|s| s.to_string()).collect();
        args.extend(base(token));
        let binary = binary.clone();
        async move {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            cli(&binary, &refs).await
        }
    };

    let (ok, out, err) = run_as(&alice, &["list", "-n", &ns, "-o", "json"]).await?;
    c.that(
        ok && out.contains("visible"),
        format!("alice lists her TrainJobs (ok {ok}, out {out:.200}, err {err:.200})"),
    )?;
    let (ok, _, err) = run_as(&alice, &["get", "hidden", "-n", &other]).await?;
    c.that(
        !ok && err.to_lowercase().contains("permission"),
        format!("alice may not read another namespace: {err:.300}"),
    )?;
    let (ok, out, err) = run_as(&bob, &["get", "hidden", "-n", &other, "-o", "json"]).await?;
    c.that(ok && out.contains("hidden"), format!("bob reads the namespace RBAC gives him (ok {ok}, err {err:.200})"))?;
    let (ok, _, err) = run_as(&bob, &["cancel", "hidden", "-n", &other]).await?;
    c.that(!ok && err.to_lowercase().contains("permission"), format!("bob may not cancel: {err:.300}"))?;
    let (ok, _, err) = run_as("not-a-token", &["list", "-n", &ns]).await?;
    c.that(!ok && err.to_lowercase().contains("unauthenticated"), format!("a bad token is refused: {err:.300}"))?;

    // alice submits through the API with her own token; the job is admitted.
    let manifest = w.suite.run_dir.join("api-submit.json");
    std::fs::write(&manifest, w.trainjob("submitted", &queue, 1, 8).to_string())?;
    let (ok, _, err) = run_as(&alice, &["submit", "-n", &ns, "-f", &manifest.display().to_string()]).await?;
    c.that(ok, format!("alice submits a TrainJob: {err:.300}"))?;
    w.wait_admitted(&["submitted".into()], Duration::from_secs(30)).await?;
    // The queue is full now (16 GPUs): a third waits, and explain says why.
    let (ok, _, err) = run_as(
        &alice,
        &["submit", "-n", &ns, "-f", &{
            let p = w.suite.run_dir.join("api-submit-2.json");
            std::fs::write(&p, w.trainjob("waiting", &queue, 1, 8).to_string())?;
            p.display().to_string()
        }],
    )
    .await?;
    c.that(ok, format!("alice submits a second TrainJob: {err:.300}"))?;
    let explained = wait_for("explain to give the quota reason", Duration::from_secs(20), || async {
        let (ok, out, err) = run_as(&alice, &["explain", "waiting", "-n", &ns]).await?;
        if ok && out.to_lowercase().contains("quota") {
            Ok(Some(out))
        } else {
            Err(anyhow!("ok {ok}: {out:.200} {err:.200}"))
        }
    })
    .await?;
    c.that(explained.contains("waiting"), "explain names the TrainJob")?;
    let (ok, _, err) = run_as(&alice, &["cancel", "waiting", "-n", &ns]).await?;
    c.that(ok, format!("alice cancels her TrainJob: {err:.300}"))?;
    wait_for("the cancelled TrainJob to be gone", Duration::from_secs(20), || async {
        Ok(w.kube()
            .get("trainer.kubeflow.org/v1alpha1", "TrainJob", Some(&ns), "waiting")
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;
    c.done();
    c.figure("list, get, submit, explain, cancel over TLS; denials by the real TokenReview and SubjectAccessReview");
    w.teardown().await?;
    Ok(c)
}
