//! Helm releases on the suite's API server through the real Helm v4 SDK (the PyPI package
//! `helm-python-sdk`, driven by scripts/e2e/helm_release.py).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::Value;
use tokio::process::Command;

/// The Helm SDK, acting as `kubeconfig`'s user.
pub struct Helm {
    python: PathBuf,
    script: PathBuf,
    kubeconfig: PathBuf,
    scratch: PathBuf,
}

impl Helm {
    /// A driver; fails plainly when no Python with the SDK was given.
    pub fn new(python: Option<&Path>, repo: &Path, kubeconfig: &Path, scratch: &Path) -> Result<Helm> {
        let python = python
            .context("no Python with helm-python-sdk (set TRAINYARD_E2E_PYTHON; scripts/python-env.sh makes one)")?;
        Ok(Helm {
            python: python.to_path_buf(),
            script: repo.join("scripts/e2e/helm_release.py"),
            kubeconfig: kubeconfig.to_path_buf(),
            scratch: scratch.to_path_buf(),
        })
    }

    async fn run(&self, args: &[String]) -> Result<Value> {
        let out = Command::new(&self.python)
            .arg(&self.script)
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", &self.scratch)
            .output()
            .await
            .with_context(|| format!("cannot run {}", self.python.display()))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            let line = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("(no output)");
            bail!("{line}");
        }
        serde_json::from_slice(&out.stdout)
            .with_context(|| format!("helm_release.py printed {:?}", String::from_utf8_lossy(&out.stdout)))
    }

    fn values_file(&self, values: &Value) -> Result<String> {
        let path = self.scratch.join(format!("values-{}.json", std::process::id()));
        std::fs::create_dir_all(&self.scratch)?;
        std::fs::write(&path, values.to_string())?;
        Ok(path.display().to_string())
    }

    /// `helm install --create-namespace`.
    pub async fn install(&self, chart: &Path, release: &str, namespace: &str, values: &Value) -> Result<Value> {
        let v = self.values_file(values)?;
        self.run(&["install".into(), chart.display().to_string(), release.into(), namespace.into(), v]).await
    }

    /// `helm upgrade`.
    pub async fn upgrade(&self, chart: &Path, release: &str, namespace: &str, values: &Value) -> Result<Value> {
        let v = self.values_file(values)?;
        self.run(&["upgrade".into(), chart.display().to_string(), release.into(), namespace.into(), v]).await
    }

    /// `helm uninstall`.
    pub async fn uninstall(&self, release: &str, namespace: &str) -> Result<Value> {
        self.run(&["uninstall".into(), release.into(), namespace.into()]).await
    }
}
