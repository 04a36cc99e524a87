//! The scenarios, in the order they run, and the CRDs every run installs first. The chart
//! scenario comes first: it installs trainyard's chart and hands the later scenarios its
//! ServiceAccount, so that every controller of the run acts with the chart's RBAC.

mod admission;
mod api;
mod apiserver_restart;
mod bad_input;
mod binders;
mod chart;
mod dra;
mod fleet;
mod invariants;
mod kill_storm;
mod leader;
mod lws;
mod mpi;
mod node_loss;
mod quota;
mod scale;
mod scale_figures;
mod search;
mod slices;
mod unusable_nodes;
mod watches_expired;

use std::time::Duration;

use anyhow::{Result, anyhow};
use futures::future::LocalBoxFuture;
use serde_json::Value;

use crate::Options;
use crate::kube_util::{Kube, wait_for};
use crate::suite::{Checks, Suite};

/// How a scenario is run.
pub type Runner = for<'a> fn(&'a mut Suite, &'a Options) -> LocalBoxFuture<'a, Result<Checks>>;

/// One scenario.
pub struct Scenario {
    /// Its name (for `--only`).
    pub name: &'static str,
    /// What it shows.
    pub about: &'static str,
    /// The scenario.
    pub run: Runner,
}

/// Wraps an `async fn(&mut Suite, &Options) -> Result<Checks>` as a [`Runner`].
macro_rules! runner {
    ($f:path) => {{
        fn boxed<'a>(suite: &'a mut Suite, options: &'a Options) -> LocalBoxFuture<'a, Result<Checks>> {
            Box::pin($f(suite, options))
        }
        boxed as Runner
    }};
}

/// Every scenario, in order.
pub const ALL: &[Scenario] = &[
    Scenario {
        name: "chart",
        about: "the chart with the real Helm SDK: without Trainer (own CRD chart), upgrade, uninstall; beside Trainer's CRDs",
        run: runner!(chart::run),
    },
    Scenario {
        name: "admission",
        about: "TrainJobs of four shapes admitted, every pod bound where its record says, rack and block kept, a finished gang Complete",
        run: runner!(admission::run),
    },
    Scenario {
        name: "quota",
        about: "a queue admits what its quota allows, holds the rest with QuotaExceeded, admits them when the holder ends",
        run: runner!(quota::run),
    },
    Scenario {
        name: "bad-input",
        about: "bad TrainJobs and a looping quota tree get conditions naming the field; no JobSet, no panic",
        run: runner!(bad_input::run),
    },
    Scenario {
        name: "unusable-nodes",
        about: "foreign pods, a taint, a cordon, NotReady and a deleted node take capacity away; recovery brings it back",
        run: runner!(unusable_nodes::run),
    },
    Scenario {
        name: "node-loss-wait",
        about: "policy wait: a lost node is reported on the TrainJob; the gang stays until it is back",
        run: runner!(node_loss::wait),
    },
    Scenario {
        name: "node-loss-requeue",
        about: "policy requeue: the gang of a cordoned node is stopped and admitted again on healthy nodes",
        run: runner!(node_loss::requeue),
    },
    Scenario {
        name: "node-loss-replace",
        about: "policy replace: a deleted node's pod moves to a free node, the other pod stays",
        run: runner!(node_loss::replace),
    },
    Scenario {
        name: "slices",
        about: "a gang of one block cut into rack slices; a short rack pushes it to the other block",
        run: runner!(slices::run),
    },
    Scenario {
        name: "mpi",
        about: "MPI launcher and workers: SSH key Secret (usable, owned, before the JobSet), hostfile, every volume there",
        run: runner!(mpi::run),
    },
    Scenario {
        name: "lws",
        about: "a LeaderWorkerSet runtime: leader and workers bound by worker index where recorded",
        run: runner!(lws::run),
    },
    Scenario {
        name: "dra-delegate",
        about: "DRA claims allocated by kube-scheduler on the pinned nodes; GPU and NIC on one PCIe root",
        run: runner!(dra::delegate),
    },
    Scenario {
        name: "dra-allocate",
        about: "DRA claims allocated by trainyard; kube-scheduler reserves and binds; devices handed over",
        run: runner!(dra::allocate),
    },
    Scenario {
        name: "binders",
        about: "coscheduling, Volcano and KAI PodGroups made with the gang, its pods marked, removed when it ends or is suspended; an unserved binder named",
        run: runner!(binders::run),
    },
    Scenario {
        name: "search",
        about: "an OptimizationJob of 6 trials, 2 at a time, on a queue of room for 2: never more admitted, every trial Complete, the best reported, trials deleted with it; a bad parameter named",
        run: runner!(search::run),
    },
    Scenario {
        name: "fleet",
        about: "a manager and two worker control planes: gangs placed where they fit and run there, status mirrored within 1 s, fleet quota held; a worker lost past the grace has its gangs requeued on the other, its stale copies removed when it returns; bad Secrets named",
        run: runner!(fleet::run),
    },
    Scenario {
        name: "api",
        about: "the researcher API over TLS with the real TokenReview and SubjectAccessReview",
        run: runner!(api::run),
    },
    Scenario {
        name: "leader-handover",
        about: "a graceful leader hands the Lease to its standby, which admits at once",
        run: runner!(leader::run),
    },
    Scenario {
        name: "kill-storm",
        about: "the controller killed 24 times during a burst: nothing lost or doubled",
        run: runner!(kill_storm::run),
    },
    Scenario {
        name: "scale",
        about: "a burst of TrainJobs on 1,000 nodes (--scale full: 2,000 on 10,000) admitted as fast as they come; latencies, requests, CPU, memory",
        run: runner!(scale::run),
    },
    Scenario {
        name: "scale-kill",
        about: "the same burst with a SIGKILL of the controller in its middle: nothing lost, nothing doubled",
        run: runner!(scale::with_kill),
    },
    Scenario {
        name: "apiserver-restart",
        about: "kube-apiserver killed in a burst and back 15 s later: settled within 10 s, new TrainJobs within 1 s",
        run: runner!(apiserver_restart::run),
    },
    Scenario {
        name: "watches-expired",
        about: "every watch answered 410 Expired at once after changes it missed: converges to a fresh start's view",
        run: runner!(watches_expired::run),
    },
];

/// What a failed scenario leaves for its reader: every object of the kinds scenarios use, in the
/// scenarios' namespaces and cluster-wide, one JSON document per line in `<logs>/<name>.objects.json`.
pub async fn dump(suite: &Suite, name: &str) -> Result<std::path::PathBuf> {
    use std::io::Write;
    let path = suite.plane.logs.join(format!("{name}.objects.json"));
    let mut out = std::fs::File::create(&path)?;
    for (av, kind) in KINDS {
        for object in suite.kube.list(av, kind, None, None).await.unwrap_or_default() {
            let ns = object.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
            if ns.is_empty() || ns.starts_with("e2e-") {
                writeln!(out, "{object}")?;
            }
        }
    }
    Ok(path)
}

/// Kinds a scenario makes or causes.
const KINDS: &[(&str, &str)] = &[
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"),
    ("jobset.x-k8s.io/v1alpha2", "JobSet"),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
    ("batch/v1", "Job"),
    ("apps/v1", "StatefulSet"),
    ("v1", "Pod"),
    ("v1", "Node"),
    ("v1", "ConfigMap"),
    ("v1", "Event"),
    ("trainyard.io/v1alpha1", "Queue"),
    ("trainyard.io/v1alpha1", "Topology"),
    ("resource.k8s.io/v1", "ResourceClaim"),
    ("resource.k8s.io/v1", "ResourceSlice"),
    ("scheduling.k8s.io/v1alpha2", "PodGroup"),
    ("scheduling.k8s.io/v1alpha2", "Workload"),
    ("scheduling.x-k8s.io/v1alpha1", "PodGroup"),
    ("scheduling.volcano.sh/v1beta1", "PodGroup"),
];

/// Leaves the cluster as a scenario found it even when it failed half-way: every scenario
/// namespace (TrainJobs' finalizers first), node, Queue, Topology, DeviceClass and ResourceSlice.
pub async fn sweep(suite: &Suite) -> Result<()> {
    let kube = &suite.kube;
    for ns in kube.list("v1", "Namespace", None, None).await? {
        let ns = crate::kube_util::name_of(&ns);
        if !ns.starts_with("e2e-") {
            continue;
        }
        for tj in kube.list("trainer.kubeflow.org/v1alpha1", "TrainJob", Some(&ns), None).await? {
            let name = crate::kube_util::name_of(&tj);
            kube.strip_finalizers("trainer.kubeflow.org/v1alpha1", "TrainJob", Some(&ns), &name).await?;
        }
        kube.delete("v1", "Namespace", None, &ns).await?;
    }
    for (av, kind) in [
        ("v1", "Node"),
        ("trainyard.io/v1alpha1", "Queue"),
        ("trainyard.io/v1alpha1", "Topology"),
        ("resource.k8s.io/v1", "DeviceClass"),
        ("resource.k8s.io/v1", "ResourceSlice"),
    ] {
        for object in kube.list(av, kind, None, None).await? {
            kube.delete(av, kind, None, &crate::kube_util::name_of(&object)).await?;
        }
    }
    Ok(())
}

/// Installs a CRD as its own project's installation does (server-side apply) and waits until it
/// is served.
pub async fn install_crd(kube: &Kube, manager: &str, crd: &Value) -> Result<()> {
    let mut crd = crd.clone();
    if let Some(meta) = crd.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("creationTimestamp");
    }
    crd.as_object_mut().map(|o| o.remove("status"));
    kube.apply_as(manager, &crd).await?;
    let name = crd["metadata"]["name"].as_str().unwrap_or_default().to_string();
    wait_for(&format!("CRD {name} Established"), Duration::from_secs(60), || async {
        let now = kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, &name).await?;
        let established = now
            .as_ref()
            .and_then(|c| c.pointer("/status/conditions"))
            .and_then(Value::as_array)
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Established" && c["status"] == "True"));
        if established { Ok(Some(())) } else { Err(anyhow!("not established yet")) }
    })
    .await
}

/// The upstream JobSet and LeaderWorkerSet CRDs (their controllers are stood in for).
pub async fn install_workload_crds(suite: &Suite) -> Result<()> {
    install_workload_crds_on(suite, &suite.kube).await
}

/// [`install_workload_crds`] on another cluster's API server.
pub async fn install_workload_crds_on(suite: &Suite, kube: &Kube) -> Result<()> {
    install_crd(kube, "jobset", &suite.crds.jobset).await?;
    install_crd(kube, "lws", &suite.crds.lws).await
}

/// The upstream Trainer CRDs, as Trainer's own installation applies them (server-side, its own
/// field manager), and trainyard's own CRDs.
pub async fn install_trainer_crds(suite: &Suite) -> Result<()> {
    install_trainer_crds_on(suite, &suite.kube).await
}

/// [`install_trainer_crds`] on another cluster's API server.
pub async fn install_trainer_crds_on(suite: &Suite, kube: &Kube) -> Result<()> {
    for crd in &suite.crds.trainer {
        install_crd(kube, "kubectl", crd).await?;
    }
    let dir = suite.repo.join("charts/trainyard/crds");
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if path.file_name().is_some_and(|n| n.to_string_lossy().starts_with("trainyard.io_")) {
            for crd in crate::kube_util::yaml_documents(&std::fs::read_to_string(&path)?, &path)? {
                install_crd(kube, "e2e", &crd).await?;
            }
        }
    }
    Ok(())
}
