//! One scenario's world on the shared control plane: its own namespace, nodes (named and
//! labelled after the scenario), Topology, Queues and runtimes, the trainyard replicas it
//! starts, and the teardown that leaves the cluster as it found it. Also what scenarios ask of
//! it: TrainJobs made, their conditions and admission records read, pods checked against them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use futures::{StreamExt, TryStreamExt};
use serde_json::{Value, json};

use crate::kube_util::{Kube, condition, is_true, name_of, wait_for};
use crate::standins::nodes::FakeNode;
use crate::suite::Suite;
use crate::trainyard::{Launch, Replica};

/// Node label of the block level.
pub const BLOCK: &str = "e2e.trainyard.io/block";
/// Node label of the rack level.
pub const RACK: &str = "e2e.trainyard.io/rack";
/// The queue label of TrainJobs.
pub const QUEUE_LABEL: &str = "trainyard.io/queue";
/// The admission record annotation.
pub const ADMISSION: &str = "trainyard.io/admission";
/// trainyard's scheduling gate.
pub const GATE: &str = "trainyard.io/topology";

/// One scenario's objects.
pub struct World<'s> {
    /// The shared run.
    pub suite: &'s mut Suite,
    /// Short tag: the prefix of every name.
    pub tag: String,
    /// The namespace of its TrainJobs.
    pub ns: String,
    /// Its nodes.
    pub nodes: Vec<FakeNode>,
    /// Its trainyard replicas.
    pub replicas: Vec<Replica>,
    cluster_objects: Vec<(String, String, String)>,
    namespaces: Vec<String>,
}

impl<'s> World<'s> {
    /// Makes the namespace `e2e-<tag>`.
    pub async fn new(suite: &'s mut Suite, tag: &str) -> Result<World<'s>> {
        let ns = format!("e2e-{tag}");
        let mut world = World {
            suite,
            tag: tag.to_string(),
            ns: ns.clone(),
            nodes: Vec::new(),
            replicas: Vec::new(),
            cluster_objects: Vec::new(),
            namespaces: Vec::new(),
        };
        world.namespace(&ns).await?;
        Ok(world)
    }

    /// The harness's client.
    pub fn kube(&self) -> &Kube {
        &self.suite.kube
    }

    /// Makes another namespace, removed at teardown.
    pub async fn namespace(&mut self, ns: &str) -> Result<()> {
        self.suite.kube.apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await?;
        self.namespaces.push(ns.to_string());
        // Pods need the namespace's default ServiceAccount, which kube-controller-manager makes.
        let kube = self.suite.kube.clone();
        wait_for("the namespace's default ServiceAccount", Duration::from_secs(30), || {
            let kube = kube.clone();
            let ns = ns.to_string();
            async move { Ok(kube.get("v1", "ServiceAccount", Some(&ns), "default").await?.map(|_| ())) }
        })
        .await
    }

    /// Applies a cluster-scoped object and remembers to delete it.
    pub async fn cluster_object(&mut self, object: Value) -> Result<()> {
        self.suite.kube.apply(&object).await?;
        let f = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default().to_string();
        self.cluster_objects.push((f("/apiVersion"), f("/kind"), f("/metadata/name")));
        Ok(())
    }

    /// A grid of 8-GPU hosts: `blocks` x `racks` x `hosts`, labelled with their block and rack,
    /// and the Topology `<tag>` naming those two levels.
    pub async fn grid(&mut self, blocks: u32, racks: u32, hosts: u32) -> Result<Vec<FakeNode>> {
        let mut made = Vec::new();
        for b in 0..blocks {
            for r in 0..racks {
                for h in 0..hosts {
                    let block = format!("{}-b{b}", self.tag);
                    let rack = format!("{block}r{r}");
                    made.push(FakeNode::gpu_host(&format!("{rack}h{h}"), &[(BLOCK, &block), (RACK, &rack)]));
                }
            }
        }
        self.add_nodes(made.clone()).await?;
        self.topology(&[BLOCK, RACK]).await?;
        Ok(made)
    }

    /// Registers nodes.
    pub async fn add_nodes(&mut self, nodes: Vec<FakeNode>) -> Result<()> {
        self.suite.nodes.create(&self.suite.kube, &nodes).await?;
        self.nodes.extend(nodes);
        Ok(())
    }

    /// Registers nodes the quick way: each in one request, with no Lease (nothing reads node
    /// Leases here: the node lifecycle controller is off), for thousands of nodes.
    pub async fn add_nodes_quietly(&mut self, nodes: Vec<FakeNode>) -> Result<()> {
        crate::standins::nodes::register_quietly(&self.suite.kube, &nodes).await?;
        self.nodes.extend(nodes);
        Ok(())
    }

    /// The Topology `<tag>` with these node label levels.
    pub async fn topology(&mut self, levels: &[&str]) -> Result<()> {
        let levels: Vec<Value> = levels.iter().map(|l| json!({"nodeLabel": l})).collect();
        self.cluster_object(json!({
            "apiVersion": "trainyard.io/v1alpha1", "kind": "Topology",
            "metadata": {"name": self.tag},
            "spec": {"levels": levels, "gpuResource": "nvidia.com/gpu"},
        }))
        .await
    }

    /// A Queue `<tag>-<name>` with a GPU quota (and a parent, given by its short name).
    pub async fn queue(&mut self, name: &str, gpus: u32, parent: Option<&str>) -> Result<String> {
        let full = format!("{}-{name}", self.tag);
        let mut spec = json!({"nominal": {"gpus": gpus}});
        if let Some(p) = parent {
            spec["parent"] = json!(format!("{}-{p}", self.tag));
        }
        self.cluster_object(json!({
            "apiVersion": "trainyard.io/v1alpha1", "kind": "Queue",
            "metadata": {"name": full}, "spec": spec,
        }))
        .await?;
        Ok(full)
    }

    /// A namespaced torch TrainingRuntime `torch` (one replicated job `node`).
    pub async fn torch_runtime(&self) -> Result<()> {
        self.torch_runtime_as("torch", json!({})).await
    }

    /// A namespaced torch TrainingRuntime called `name` with these annotations (one replicated
    /// job `node`).
    pub async fn torch_runtime_as(&self, name: &str, annotations: Value) -> Result<()> {
        self.suite.kube.apply(&torch_runtime(&self.ns, name, annotations)).await?;
        Ok(())
    }

    /// A TrainJob on the `torch` runtime: `nodes` pods of `gpus` GPUs each (none asked for when
    /// 0: they come through the runtime's claims), in `queue`.
    pub fn trainjob(&self, name: &str, queue: &str, nodes: u32, gpus: u32) -> Value {
        let mut trainer = json!({"numNodes": nodes});
        if gpus > 0 {
            trainer["resourcesPerNode"] = json!({"limits": {"nvidia.com/gpu": gpus.to_string()}});
        }
        json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": self.ns, "labels": {QUEUE_LABEL: queue}},
            "spec": {"runtimeRef": {"name": "torch", "kind": "TrainingRuntime"}, "trainer": trainer},
        })
    }

    /// Creates TrainJobs (a POST each, as `kubectl create` does).
    pub async fn submit(&self, jobs: &[Value]) -> Result<()> {
        for job in jobs {
            self.suite.kube.create(job).await.with_context(|| format!("creating TrainJob {}", name_of(job)))?;
        }
        Ok(())
    }

    /// Writes a policy file for this world and returns its path.
    pub fn policy(&self, text: &str) -> Result<PathBuf> {
        let path = self.suite.run_dir.join(format!("{}-policy.yaml", self.tag));
        std::fs::write(&path, text)?;
        Ok(path)
    }

    /// The launch of a replica named `<tag>-<n>` with the world's Topology and these extra args.
    pub fn launch(&self, n: usize, extra: &[&str]) -> Launch {
        let mut args = vec![format!("--topology={}", self.tag), "--cycle=1".to_string()];
        args.extend(extra.iter().map(|s| s.to_string()));
        Launch {
            name: format!("trainyard-{}-{n}", self.tag),
            kubeconfig: self.suite.controller_kubeconfig.clone(),
            args,
        }
    }

    /// Starts a replica and waits until it is ready.
    pub async fn start_trainyard(&mut self, extra: &[&str]) -> Result<usize> {
        let launch = self.launch(self.replicas.len(), extra);
        let replica = Replica::start(&self.suite.binary, &launch, &self.suite.plane.logs).await?;
        self.replicas.push(replica);
        Ok(self.replicas.len() - 1)
    }

    /// A TrainJob as it is now.
    pub async fn trainjob_now(&self, name: &str) -> Result<Value> {
        self.suite
            .kube
            .get("trainer.kubeflow.org/v1alpha1", "TrainJob", Some(&self.ns), name)
            .await?
            .ok_or_else(|| anyhow!("TrainJob {}/{name} is gone", self.ns))
    }

    /// Waits until every named TrainJob is Admitted; returns how long it took.
    pub async fn wait_admitted(&self, names: &[String], timeout: Duration) -> Result<Duration> {
        let started = Instant::now();
        for name in names {
            let left = timeout.saturating_sub(started.elapsed());
            wait_for(&format!("TrainJob {name} Admitted"), left, || async {
                let tj = self.trainjob_now(name).await?;
                if is_true(&tj, "Admitted") {
                    return Ok(Some(()));
                }
                Err(anyhow!("conditions: {}", conditions_line(&tj)))
            })
            .await?;
        }
        Ok(started.elapsed())
    }

    /// Waits until a TrainJob's condition of `type_` has `reason` (any status).
    pub async fn wait_reason(&self, name: &str, type_: &str, reason: &str, timeout: Duration) -> Result<Value> {
        wait_for(&format!("TrainJob {name} {type_} with reason {reason}"), timeout, || async {
            let tj = self.trainjob_now(name).await?;
            if condition(&tj, type_).is_some_and(|(_, r, _)| r == reason) {
                return Ok(Some(tj));
            }
            Err(anyhow!("conditions: {}", conditions_line(&tj)))
        })
        .await
    }

    /// The admission record of a TrainJob: one host per pod, in binding order.
    pub async fn slots(&self, name: &str) -> Result<Vec<String>> {
        let tj = self.trainjob_now(name).await?;
        record_slots(&tj).ok_or_else(|| anyhow!("TrainJob {name} has no admission record"))
    }

    /// The gang's pods in the world's namespace (label `trainyard.io/gang`).
    pub async fn gang_pods(&self, name: &str) -> Result<Vec<Value>> {
        let selector = format!("trainyard.io/gang={name}");
        let pods = self.suite.kube.list("v1", "Pod", Some(&self.ns), Some(&selector)).await?;
        Ok(pods.into_iter().filter(|p| p.pointer("/metadata/deletionTimestamp").is_none()).collect())
    }

    /// Waits until `count` pods of the gang are bound, each to the host its admission record gives
    /// its ordinal; returns how long it took. A pod bound elsewhere fails at once.
    pub async fn wait_bound_as_recorded(&self, name: &str, count: usize, timeout: Duration) -> Result<Duration> {
        let started = Instant::now();
        // `Some(Some(why))`: a pod is bound where its record does not say; that ends the wait.
        let wrong = wait_for(&format!("{count} pods of {name} bound where recorded"), timeout, || async {
            // Read each time: a gang relaunched after its admission gets its new JobSet (and the
            // pods' ordinals) a moment after the record, and the wait may start in between.
            let ordinals = self.ordinals(name).await?;
            let slots = self.slots(name).await?;
            let pods = self.gang_pods(name).await?;
            // Pods of a JobSet deleted before a relaunch are the garbage collector's until they
            // go: only the current JobSet's pods, not being deleted, are the gang's.
            let current = self
                .suite
                .kube
                .get("jobset.x-k8s.io/v1alpha2", "JobSet", Some(&self.ns), name)
                .await?
                .and_then(|js| js.pointer("/metadata/uid").and_then(Value::as_str).map(str::to_string));
            let of_current = |pod: &Value| {
                let uid = pod.pointer("/metadata/labels/jobset.sigs.k8s.io~1jobset-uid").and_then(Value::as_str);
                pod.pointer("/metadata/deletionTimestamp").is_none()
                    && match (uid, current.as_deref()) {
                        (Some(pod_uid), Some(current)) => pod_uid == current,
                        _ => true,
                    }
            };
            let pods: Vec<&Value> = pods.iter().filter(|p| of_current(p)).collect();
            let mut bound = 0;
            for pod in pods.iter().copied() {
                let Some(node) = pod.pointer("/spec/nodeName").and_then(Value::as_str) else { continue };
                let ordinal = ordinals(pod).ok_or_else(|| anyhow!("pod {} has no ordinal", name_of(pod)))?;
                let want = slots.get(ordinal as usize).ok_or_else(|| anyhow!("ordinal {ordinal} past the record"))?;
                if node != want {
                    return Ok(Some(Some(format!(
                        "pod {} is bound to {node}; its admission record says {want}",
                        name_of(pod)
                    ))));
                }
                bound += 1;
            }
            if bound == count {
                return Ok(Some(None));
            }
            Err(anyhow!("{bound} of {count} bound ({} pods seen)", pods.len()))
        })
        .await?;
        if let Some(why) = wrong {
            return Err(anyhow!(why));
        }
        Ok(started.elapsed())
    }

    /// How a gang's pods map to ordinals: the JobSet's gated replicated jobs in order (replicas
    /// times completions each), or a LeaderWorkerSet's worker index.
    pub async fn ordinals(&self, name: &str) -> Result<Box<dyn Fn(&Value) -> Option<u32> + Send + Sync>> {
        let js = self.suite.kube.get("jobset.x-k8s.io/v1alpha2", "JobSet", Some(&self.ns), name).await?;
        if let Some(js) = js {
            let mut sets: Vec<(String, u32, u32)> = Vec::new();
            for r in js.pointer("/spec/replicatedJobs").and_then(Value::as_array).cloned().unwrap_or_default() {
                let gated = r
                    .pointer("/template/spec/template/spec/schedulingGates")
                    .and_then(Value::as_array)
                    .is_some_and(|g| g.iter().any(|g| g["name"] == GATE));
                if gated {
                    let replicas = r.get("replicas").and_then(Value::as_u64).unwrap_or(1) as u32;
                    let per_job = r.pointer("/template/spec/completions").and_then(Value::as_u64).unwrap_or(1) as u32;
                    sets.push((r["name"].as_str().unwrap_or_default().to_string(), replicas, per_job));
                }
            }
            return Ok(Box::new(move |pod: &Value| {
                let label = |k: &str| pod.pointer(&format!("/metadata/labels/{}", k.replace('/', "~1")))?.as_str();
                let rjob = label("jobset.sigs.k8s.io/replicatedjob-name")?;
                let job: u32 = label("jobset.sigs.k8s.io/job-index")?.parse().ok()?;
                let index: u32 = label("batch.kubernetes.io/job-completion-index")?.parse().ok()?;
                let mut offset = 0;
                for (n, replicas, per_job) in &sets {
                    if n == rjob {
                        return Some(offset + job * per_job + index);
                    }
                    offset += replicas * per_job;
                }
                None
            }));
        }
        Ok(Box::new(|pod: &Value| {
            pod.pointer("/metadata/labels/leaderworkerset.sigs.k8s.io~1worker-index")?.as_str()?.parse().ok()
        }))
    }

    /// GPUs bound per node, over every pod in the cluster that is bound and not finished.
    pub async fn gpus_per_node(&self) -> Result<BTreeMap<String, u64>> {
        let pods = self.suite.kube.list("v1", "Pod", None, None).await?;
        let mut used: BTreeMap<String, u64> = BTreeMap::new();
        for pod in pods {
            let phase = pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or_default();
            if phase == "Succeeded" || phase == "Failed" {
                continue;
            }
            let Some(node) = pod.pointer("/spec/nodeName").and_then(Value::as_str) else { continue };
            let gpus: u64 = pod
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map(|cs| {
                    cs.iter()
                        .filter_map(|c| {
                            c.pointer("/resources/limits/nvidia.com~1gpu")
                                .or(c.pointer("/resources/requests/nvidia.com~1gpu"))
                        })
                        .filter_map(|q| q.as_str().and_then(|s| s.parse::<u64>().ok()).or(q.as_u64()))
                        .sum()
                })
                .unwrap_or(0);
            *used.entry(node.to_string()).or_default() += gpus;
        }
        Ok(used)
    }

    /// Stops the replicas, removes the TrainJobs (their finalizers first: no controller is left
    /// to release them), the namespaces, nodes and cluster-scoped objects.
    pub async fn teardown(mut self) -> Result<()> {
        for r in &mut self.replicas {
            r.process.terminate(Duration::from_secs(10)).await;
        }
        let kube = self.suite.kube.clone();
        for ns in &self.namespaces {
            let jobs = kube.list("trainer.kubeflow.org/v1alpha1", "TrainJob", Some(ns), None).await.unwrap_or_default();
            futures::stream::iter(jobs.iter().map(|tj| {
                let (kube, name) = (kube.clone(), name_of(tj));
                async move {
                    kube.strip_finalizers("trainer.kubeflow.org/v1alpha1", "TrainJob", Some(ns), &name).await?;
                    kube.delete("trainer.kubeflow.org/v1alpha1", "TrainJob", Some(ns), &name).await
                }
            }))
            .buffer_unordered(16)
            .try_collect::<Vec<()>>()
            .await?;
            kube.delete("v1", "Namespace", None, ns).await?;
        }
        let names: Vec<String> = self.nodes.iter().map(|n| n.name.clone()).collect();
        self.suite.nodes.delete(&kube, &names).await?;
        for (av, kind, name) in self.cluster_objects.iter().rev() {
            kube.delete(av, kind, None, name).await?;
        }
        Ok(())
    }
}

/// A namespaced torch TrainingRuntime (one replicated job `node`).
pub fn torch_runtime(ns: &str, name: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {"spec": {"replicatedJobs": [{
                "name": "node",
                "template": {
                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {"template": {"spec": {"containers": [{
                        "name": "node", "image": "example.org/torch:2.9", "command": ["torchrun", "train.py"],
                    }]}}},
                },
            }]}},
        },
    })
}

/// The slots of a TrainJob's admission record, if it has one.
pub fn record_slots(tj: &Value) -> Option<Vec<String>> {
    let text = tj.pointer(&format!("/metadata/annotations/{}", ADMISSION.replace('/', "~1")))?.as_str()?;
    let record: Value = serde_json::from_str(text).ok()?;
    let mut slots = Vec::new();
    for pair in record.get("nodes")?.as_array()? {
        let (node, count) = (pair.get(0)?.as_str()?, pair.get(1)?.as_u64()?);
        slots.extend(std::iter::repeat_n(node.to_string(), count as usize));
    }
    Some(slots)
}

/// A TrainJob's conditions in one line: `Type=Status(Reason)`.
pub fn conditions_line(tj: &Value) -> String {
    let Some(cs) = tj.pointer("/status/conditions").and_then(Value::as_array) else { return "none".into() };
    cs.iter()
        .map(|c| {
            format!(
                "{}={}({})",
                c["type"].as_str().unwrap_or("?"),
                c["status"].as_str().unwrap_or("?"),
                c["reason"].as_str().unwrap_or("")
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_expands_to_one_host_per_pod() {
        let tj = json!({"metadata": {"annotations": {"trainyard.io/admission": "{\"nodes\":[[\"a\",2],[\"b\",1]],\"at\":1}"}}});
        assert_eq!(record_slots(&tj), Some(vec!["a".into(), "a".into(), "b".into()]));
        assert_eq!(record_slots(&json!({})), None);
    }

    #[test]
    fn conditions_fit_on_a_line() {
        let tj = json!({"status": {"conditions": [
            {"type": "Queued", "status": "True", "reason": "QuotaExceeded"},
            {"type": "Admitted", "status": "False", "reason": "Pending"}]}});
        assert_eq!(conditions_line(&tj), "Queued=True(QuotaExceeded) Admitted=False(Pending)");
    }
}
