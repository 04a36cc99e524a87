//! What the suite runs on: the control-plane binaries (a folder named by `KUBEBUILDER_ASSETS`,
//! envtest's convention, plus kube-controller-manager and kube-scheduler of the same version),
//! the trainyard binary under test, and the upstream CRDs of Trainer, JobSet and LeaderWorkerSet.
//! Anything missing is one plain sentence saying what and where it was looked for.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use serde_json::Value;

/// The control-plane binaries.
#[derive(Clone, Debug)]
pub struct Assets {
    /// The folder they are in.
    pub dir: PathBuf,
    /// etcd.
    pub etcd: PathBuf,
    /// kube-apiserver.
    pub apiserver: PathBuf,
    /// kube-controller-manager.
    pub controller_manager: PathBuf,
    /// kube-scheduler.
    pub scheduler: PathBuf,
}

impl Assets {
    /// The binaries in `dir`; fails naming every one that is missing or not executable.
    pub fn in_dir(dir: &Path) -> Result<Assets> {
        let names = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"];
        let missing: Vec<&str> = names.iter().copied().filter(|n| !executable(&dir.join(n))).collect();
        if !missing.is_empty() {
            bail!(
                "{} has no executable {}: the suite needs etcd and kube-apiserver (envtest's binaries) plus \
                 kube-controller-manager and kube-scheduler of the same Kubernetes version",
                dir.display(),
                missing.join(", ")
            );
        }
        Ok(Assets {
            dir: dir.to_path_buf(),
            etcd: dir.join("etcd"),
            apiserver: dir.join("kube-apiserver"),
            controller_manager: dir.join("kube-controller-manager"),
            scheduler: dir.join("kube-scheduler"),
        })
    }
}

fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The trainyard binary; fails when it is not there.
pub fn trainyard(path: &Path) -> Result<PathBuf> {
    if !executable(path) {
        bail!("no trainyard binary at {} (build it with `cargo build --release`, or pass --trainyard)", path.display());
    }
    Ok(path.to_path_buf())
}

/// The upstream CRDs, by the group and plural they serve.
#[derive(Clone, Debug)]
pub struct UpstreamCrds {
    /// Trainer's TrainJob, TrainingRuntime and ClusterTrainingRuntime.
    pub trainer: Vec<Value>,
    /// JobSet.
    pub jobset: Value,
    /// LeaderWorkerSet.
    pub lws: Value,
}

/// Reads every CustomResourceDefinition in the YAML files of `dir` and picks the five the suite
/// installs.
pub fn upstream_crds(dir: &Path) -> Result<UpstreamCrds> {
    let mut crds = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file)?;
        for doc in crate::kube_util::yaml_documents(&text, &file)? {
            if doc.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition") {
                crds.push(doc);
            }
        }
    }
    let named = |name: &str| crds.iter().find(|c| c.pointer("/metadata/name").and_then(Value::as_str) == Some(name));
    let want = |name: &str| -> Result<Value> {
        named(name).cloned().ok_or_else(|| {
            anyhow::anyhow!(
                "{} has no CRD {name}; put the upstream CRDs of Trainer v2.3, JobSet v0.12 and LeaderWorkerSet v0.10 \
                 there (README: \"End-to-end suite\")",
                dir.display()
            )
        })
    };
    Ok(UpstreamCrds {
        trainer: vec![
            want("trainjobs.trainer.kubeflow.org")?,
            want("trainingruntimes.trainer.kubeflow.org")?,
            want("clustertrainingruntimes.trainer.kubeflow.org")?,
        ],
        jobset: want("jobsets.jobset.x-k8s.io")?,
        lws: want("leaderworkersets.leaderworkerset.x-k8s.io")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binaries_are_named() {
        let dir = std::env::temp_dir().join(format!("trainyard-e2e-assets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("etcd"), "").unwrap();
        let err = Assets::in_dir(&dir).unwrap_err().to_string();
        assert!(err.contains("etcd, kube-apiserver, kube-controller-manager, kube-scheduler"), "{err}");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn a_folder_without_crds_says_what_it_lacks() {
        let dir = std::env::temp_dir().join(format!("trainyard-e2e-crds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("x.yaml"), "kind: ConfigMap\nmetadata: {name: x}\n").unwrap();
        let err = upstream_crds(&dir).unwrap_err().to_string();
        assert!(err.contains("no CRD trainjobs.trainer.kubeflow.org"), "{err}");
        std::fs::remove_dir_all(dir).ok();
    }
}
