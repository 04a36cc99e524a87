//! The trainyard controller under test: the real binary, started as a process with a kubeconfig
//! (the chart's ServiceAccount, so its RBAC is what is tested), its own metrics and health
//! ports, killed, stopped gracefully, paused and started again.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::http;
use crate::plane::process::{Process, free_port, last_line};

/// How one replica is started.
#[derive(Clone, Debug)]
pub struct Launch {
    /// Its name (the log file's and the lease identity).
    pub name: String,
    /// The kubeconfig it runs with.
    pub kubeconfig: PathBuf,
    /// Arguments after `controller` besides the ports and the identity.
    pub args: Vec<String>,
}

/// A running replica.
pub struct Replica {
    /// The process.
    pub process: Process,
    /// Its metrics port.
    pub metrics_port: u16,
    /// Its health port.
    pub health_port: u16,
}

impl Replica {
    /// Starts a replica and waits until `/readyz` answers 200 (leader scheduling, or standby).
    pub async fn start(binary: &Path, launch: &Launch, logs: &Path) -> Result<Replica> {
        let replica = Replica::spawn(binary, launch, logs)?;
        let mut replica = replica;
        replica.wait_ready(Duration::from_secs(60)).await?;
        Ok(replica)
    }

    /// Starts a replica without waiting.
    pub fn spawn(binary: &Path, launch: &Launch, logs: &Path) -> Result<Replica> {
        let (metrics_port, health_port) = (free_port()?, free_port()?);
        let mut args = vec![
            "controller".to_string(),
            format!("--metrics-bind=127.0.0.1:{metrics_port}"),
            format!("--health-bind=127.0.0.1:{health_port}"),
            format!("--identity={}", launch.name),
            "--log-format=text".to_string(),
        ];
        // More of the controller's log when a run is being looked into.
        if let Ok(level) = std::env::var("TRAINYARD_E2E_CONTROLLER_LOG") {
            args.push(format!("--log-level={level}"));
        }
        args.extend(launch.args.iter().cloned());
        let env = vec![
            ("KUBECONFIG".to_string(), launch.kubeconfig.display().to_string()),
            ("RUST_BACKTRACE".to_string(), "1".to_string()),
        ];
        let process = Process::start(&launch.name, binary, args, env, logs)?;
        Ok(Replica { process, metrics_port, health_port })
    }

    /// The body of `/readyz` when it answers 200.
    pub async fn readyz(&self) -> Option<String> {
        http::get(self.health_port, "/readyz").await.ok().filter(|r| r.status == 200).map(|r| r.body)
    }

    /// Whether this replica leads and schedules.
    pub async fn leading(&self) -> bool {
        self.readyz().await.is_some_and(|b| b.starts_with("leader"))
    }

    /// Waits until `/readyz` answers 200; fails with the last log line if the process exits.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<Duration> {
        let started = Instant::now();
        loop {
            self.process.check_alive()?;
            if self.readyz().await.is_some() {
                return Ok(started.elapsed());
            }
            if started.elapsed() > timeout {
                bail!(
                    "trainyard replica {} not ready after {} s; its last log line: {}",
                    self.process.name,
                    timeout.as_secs(),
                    last_line(&self.process.log)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `/metrics` as text (empty when it does not answer).
    pub async fn metrics(&self) -> String {
        http::get(self.metrics_port, "/metrics").await.map(|r| r.body).unwrap_or_default()
    }

    /// Lines of its log that mention a panic.
    pub fn panics(&self) -> Vec<String> {
        std::fs::read_to_string(&self.process.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("panicked at"))
            .map(str::to_string)
            .collect()
    }
}
