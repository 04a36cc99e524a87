//! The chart installs beside Trainer and without it, with the real Helm v4 SDK on the real API
//! server. Without Trainer: Trainer's CRDs from their own chart, then trainyard's chart, an
//! upgrade, an uninstall that leaves every CRD. With Trainer's CRDs applied as Trainer's own
//! installation applies them: trainyard's chart installs and never touches them. Its
//! ServiceAccount then runs every later scenario's controller, so the chart's RBAC is what the
//! whole suite exercises.

use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use serde_json::{Value, json};

use crate::Options;
use crate::helm::Helm;
use crate::kube_util::{name_of, wait_for};
use crate::suite::{Checks, Suite};

use super::api::token_for;

/// The release namespace.
pub const NAMESPACE: &str = "trainyard-system";
const TRAINER_CRDS: [&str; 3] = [
    "trainjobs.trainer.kubeflow.org",
    "trainingruntimes.trainer.kubeflow.org",
    "clustertrainingruntimes.trainer.kubeflow.org",
];

/// The release's values: the researcher API on (its reviews need RBAC) and DRA allocate mode (an
/// allocator's claim writes need RBAC), so that the ServiceAccount can run every scenario.
fn values(extra: Value) -> Value {
    let mut v = json!({"api": {"enabled": true, "tlsSecret": "trainyard-api-tls"}, "draCommit": "allocate"});
    if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
        v.extend(extra.clone());
    }
    v
}

async fn crd(suite: &Suite, name: &str) -> Result<Option<Value>> {
    suite.kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, name).await
}

/// The field managers of an object.
fn managers(object: &Value) -> Vec<String> {
    object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|m| m.iter().filter_map(|f| f["manager"].as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

async fn deployment_args(suite: &Suite) -> Result<Option<Vec<String>>> {
    let d = suite.kube.get("apps/v1", "Deployment", Some(NAMESPACE), "trainyard").await?;
    Ok(d.map(|d| {
        d.pointer("/spec/template/spec/containers/0/args")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    }))
}

/// Runs the scenario.
pub async fn run(suite: &mut Suite, _: &Options) -> Result<Checks> {
    let mut c = Checks::default();
    let helm =
        Helm::new(suite.python.as_deref(), &suite.repo, &suite.plane.admin_kubeconfig, &suite.run_dir.join("helm"))?;
    let charts = suite.repo.join("charts");

    // 1. A cluster without Trainer.
    for name in TRAINER_CRDS {
        c.that(crd(suite, name).await?.is_none(), format!("the fresh cluster has no {name}"))?;
    }
    helm.install(&charts.join("trainer-crds"), "trainer-crds", NAMESPACE, &json!({}))
        .await
        .context("helm install trainer-crds")?;
    for name in TRAINER_CRDS {
        c.that(crd(suite, name).await?.is_some(), format!("the trainer-crds chart installs {name}"))?;
    }
    let installed = helm
        .install(&charts.join("trainyard"), "trainyard", NAMESPACE, &values(json!({})))
        .await
        .context("helm install trainyard")?;
    let kinds = installed["kinds"].clone();
    for kind in [
        "Deployment",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Service",
    ] {
        c.that(kinds.get(kind).is_some(), format!("the release has a {kind}: {kinds}"))?;
    }
    c.that(deployment_args(suite).await?.is_some(), "the Deployment exists on the server")?;
    c.that(crd(suite, "queues.trainyard.io").await?.is_some(), "trainyard's Queue CRD is installed")?;
    let upgraded = helm
        .upgrade(&charts.join("trainyard"), "trainyard", NAMESPACE, &values(json!({"startTimeoutSeconds": 300})))
        .await?;
    c.that(upgraded["version"] == 2, format!("the upgrade is revision 2: {upgraded}"))?;
    let args = deployment_args(suite).await?.unwrap_or_default();
    c.that(args.iter().any(|a| a == "--start-timeout=300"), format!("the upgrade reached the Deployment: {args:?}"))?;
    helm.uninstall("trainyard", NAMESPACE).await?;
    wait_for("the Deployment to go with the release", Duration::from_secs(30), || async {
        Ok(deployment_args(suite).await?.is_none().then_some(()))
    })
    .await?;
    for name in TRAINER_CRDS.iter().chain(&["queues.trainyard.io", "topologies.trainyard.io"]) {
        c.that(crd(suite, name).await?.is_some(), format!("uninstalling trainyard leaves {name}"))?;
    }
    helm.uninstall("trainer-crds", NAMESPACE).await?;
    for name in TRAINER_CRDS {
        c.that(
            crd(suite, name).await?.is_some(),
            format!("uninstalling trainer-crds leaves {name} (and its TrainJobs)"),
        )?;
    }
    // Back to a cluster without Trainer's CRDs, to install them as Trainer does.
    for name in TRAINER_CRDS {
        suite.kube.delete("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, name).await?;
    }
    wait_for("Trainer's CRDs to be gone", Duration::from_secs(60), || async {
        for name in TRAINER_CRDS {
            if crd(suite, name).await?.is_some() {
                return Err(anyhow!("{name} still there"));
            }
        }
        Ok(Some(()))
    })
    .await?;

    // 2. A cluster where Trainer's installation owns its CRDs.
    super::install_trainer_crds(suite).await?;
    let before: Vec<Value> =
        futures::future::try_join_all(TRAINER_CRDS.map(|n| crd(suite, n))).await?.into_iter().flatten().collect();
    let beside = helm
        .install(&charts.join("trainyard"), "trainyard", NAMESPACE, &values(json!({})))
        .await
        .context("helm install trainyard beside Trainer's CRDs")?;
    c.that(beside["status"] == "deployed", format!("the release is deployed: {}", beside["status"]))?;
    let notes = beside["notes"].as_str().unwrap_or_default();
    c.that(!notes.contains("does not serve"), "the notes do not ask for Trainer's CRDs where Trainer serves them")?;
    for old in &before {
        let name = name_of(old);
        let now = crd(suite, &name).await?.context("CRD gone")?;
        c.that(
            now["metadata"]["resourceVersion"] == old["metadata"]["resourceVersion"],
            format!("{name} is untouched by the chart (managers {:?})", managers(&now)),
        )?;
    }

    // The chart's ServiceAccount runs every later controller.
    let token = token_for(&suite.kube, NAMESPACE, "trainyard").await?;
    suite.controller_kubeconfig = suite.plane.kubeconfig_for("chart-sa", "trainyard-sa", &token)?;
    suite.chart_rbac = true;
    suite.lease_namespace = NAMESPACE.to_string();
    c.figure("installed without Trainer (own CRD chart), upgraded, uninstalled leaving CRDs; installed beside Trainer's CRDs untouched");
    Ok(c)
}
