//! A worker cluster of the fleet scenario: a control plane of its own, the stand-ins it needs,
//! its nodes, the CRDs and runtime, and its own trainyard in standalone mode, which launches the
//! copies the manager writes there.

use std::time::Duration;

use anyhow::{Result, anyhow};
use k8s_openapi::ByteString;
use serde_json::{Value, json};

use crate::kube_util::{Kube, name_of, wait_for};
use crate::plane::Plane;
use crate::scenarios::{install_trainer_crds_on, install_workload_crds_on};
use crate::standins::nodes::{FakeNode, Nodes};
use crate::suite::Suite;
use crate::trainyard::{Launch, Replica};
use crate::world::{RACK, torch_runtime};

/// The label a copy carries: the uid of the manager's TrainJob it copies.
pub const ORIGIN: &str = "trainyard.io/fleet-origin";

/// One worker cluster.
pub struct Worker {
    /// Its name in the fleet (its WorkerCluster's).
    pub name: String,
    /// Its control plane.
    pub plane: Plane,
    /// The harness's client of it.
    pub kube: Kube,
    /// Its trainyard.
    pub replica: Replica,
    /// Its nodes' stand-in kubelet (Leases renewed).
    pub nodes: Nodes,
}

impl Worker {
    /// Starts a control plane with `hosts` 8-GPU nodes in one rack, the namespace `ns` with the
    /// `torch` runtime, the Topology `topology` (the rack level) and a standalone trainyard.
    pub async fn start(suite: &Suite, name: &str, ns: &str, topology: &str, hosts: u32) -> Result<Worker> {
        let plane = Plane::start(&suite.assets, &suite.run_dir.join(format!("plane-{name}"))).await?;
        let kube = Kube::new(plane.admin.clone());
        crate::standins::kubelet::start(plane.admin.clone());
        crate::standins::jobset::start(plane.admin.clone());
        install_workload_crds_on(suite, &kube).await?;
        install_trainer_crds_on(suite, &kube).await?;
        kube.apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await?;
        wait_for("the worker namespace's default ServiceAccount", Duration::from_secs(30), || async {
            Ok(kube.get("v1", "ServiceAccount", Some(ns), "default").await?.map(|_| ()))
        })
        .await?;
        kube.apply(&json!({
            "apiVersion": "trainyard.io/v1alpha1", "kind": "Topology",
            "metadata": {"name": topology},
            "spec": {"levels": [{"nodeLabel": RACK}], "gpuResource": "nvidia.com/gpu"},
        }))
        .await?;
        kube.apply(&torch_runtime(ns, "torch", json!({}))).await?;
        let rack = format!("{name}-r0");
        let nodes: Vec<FakeNode> =
            (0..hosts).map(|h| FakeNode::gpu_host(&format!("{name}-h{h}"), &[(RACK, rack.as_str())])).collect();
        let stand_in = Nodes::start(kube.clone());
        stand_in.create(&kube, &nodes).await?;
        // A worker takes the manager's copies under whatever queue they name: no Queue objects,
        // undeclared queues unlimited (the manager holds the fleet's quota).
        let policy = suite.run_dir.join(format!("fleet-{name}-policy.yaml"));
        std::fs::write(&policy, "undeclared_queues: unlimited\nnode_loss: {action: wait, grace: 1m}\n")?;
        let launch = Launch {
            name: format!("trainyard-fleet-{name}"),
            kubeconfig: plane.admin_kubeconfig.clone(),
            args: vec![
                format!("--topology={topology}"),
                "--cycle=1".into(),
                format!("--policy={}", policy.display()),
                // The worker writes the devices the manager recorded to its pods' claims.
                "--dra-commit=allocate".into(),
            ],
        };
        let replica = Replica::start(&suite.binary, &launch, &plane.logs).await?;
        Ok(Worker { name: name.to_string(), plane, kube, replica, nodes: stand_in })
    }

    /// A kubeconfig of this worker with everything inline (as a Secret must hold it): the CA
    /// certificate and the harness's token.
    pub fn kubeconfig_text(&self) -> Result<String> {
        self.kubeconfig_with(&self.plane.pki.admin_token)
    }

    /// The same kubeconfig with another bearer token.
    pub fn kubeconfig_with(&self, token: &str) -> Result<String> {
        let ca = std::fs::read(&self.plane.pki.ca_cert)?;
        let ca = serde_json::to_value(ByteString(ca))?;
        let ca = ca.as_str().ok_or_else(|| anyhow!("the CA did not encode"))?;
        Ok(format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n\
             users:\n- name: admin\n  user:\n    token: {token}\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: admin\n\
             current-context: {name}\n",
            name = self.name,
            server = self.plane.server,
        ))
    }

    /// The TrainJobs of `ns` on this worker that copy a manager's TrainJob (not being deleted).
    pub async fn copies(&self, ns: &str) -> Result<Vec<Value>> {
        let jobs = self.kube.list("trainer.kubeflow.org/v1alpha1", "TrainJob", Some(ns), Some(ORIGIN)).await?;
        Ok(jobs.into_iter().filter(|j| j.pointer("/metadata/deletionTimestamp").is_none()).collect())
    }

    /// The copy named `name`, if there is one.
    pub async fn copy(&self, ns: &str, name: &str) -> Result<Option<Value>> {
        Ok(self.copies(ns).await?.into_iter().find(|c| name_of(c) == name))
    }

    /// The bound pods of gang `name` on this worker, as `(pod, node)`.
    pub async fn bound_pods(&self, ns: &str, name: &str) -> Result<Vec<(String, String)>> {
        let selector = format!("trainyard.io/gang={name}");
        let pods = self.kube.list("v1", "Pod", Some(ns), Some(&selector)).await?;
        Ok(pods
            .iter()
            .filter(|p| p.pointer("/metadata/deletionTimestamp").is_none())
            .filter_map(|p| Some((name_of(p), p.pointer("/spec/nodeName")?.as_str()?.to_string())))
            .collect())
    }

    /// Stops its trainyard and its control plane.
    pub async fn stop(mut self) {
        self.replica.process.terminate(Duration::from_secs(10)).await;
        self.plane.stop().await;
    }
}
