//! The control plane under the suite: etcd, kube-apiserver, kube-controller-manager and
//! kube-scheduler from a folder of binaries, all on 127.0.0.1 ports chosen at start, with the
//! API server killed, restarted and its etcd compacted on demand. No kubelet runs: nodes are
//! objects (see `standins::nodes`).

pub mod pki;
pub mod process;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::assets::Assets;
use crate::http;
use pki::Pki;
use process::{Process, free_port, last_line, port_free};

/// Feature gates of all three components: the gang API (Workload, PodGroup) and the DRA extras
/// of 1.36. DynamicResourceAllocation itself is GA and always on.
const FEATURE_GATES: &str = "GenericWorkload=true,GangScheduling=true,TopologyAwareWorkloadScheduling=true,\
WorkloadAwarePreemption=true,DRAWorkloadResourceClaims=true";
/// API groups served besides the defaults.
const RUNTIME_CONFIG: &str = "scheduling.k8s.io/v1alpha2=true";
/// How long a component may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(90);
/// kube-controller-manager's and kube-scheduler's default leader-election renew deadline. A
/// production control plane runs both with leader election: an API server away longer than
/// this makes them give up leadership and exit, and their supervisor starts them afresh.
const RENEW_DEADLINE: Duration = Duration::from_secs(10);

/// The ports of one control plane.
#[derive(Clone, Copy, Debug)]
pub struct Ports {
    /// etcd clients.
    pub etcd: u16,
    /// etcd peers.
    pub etcd_peer: u16,
    /// kube-apiserver (HTTPS).
    pub apiserver: u16,
    /// kube-controller-manager's health port.
    pub kcm: u16,
    /// kube-scheduler's health port.
    pub scheduler: u16,
}

/// A running control plane.
pub struct Plane {
    /// Its state folder: certificates, kubeconfigs, etcd data, logs.
    pub dir: PathBuf,
    /// Logs of every process.
    pub logs: PathBuf,
    /// Its ports.
    pub ports: Ports,
    /// Certificates and tokens.
    pub pki: Pki,
    /// `https://127.0.0.1:<port>`.
    pub server: String,
    /// Kubeconfig of the harness (system:masters).
    pub admin_kubeconfig: PathBuf,
    /// A client as the harness.
    pub admin: Client,
    /// The version the API server reports.
    pub version: String,
    etcd: Process,
    apiserver: Process,
    kcm: Process,
    scheduler: Process,
    /// Since when the API server has been stopped or killed.
    apiserver_down: Option<Instant>,
}

impl Plane {
    /// Starts every component and waits until each is ready. Every fault (a binary missing, a
    /// port taken, a component that exits or never becomes ready) is one error line.
    pub async fn start(assets: &Assets, dir: &Path) -> Result<Plane> {
        let logs = process::log_dir(&dir.join("logs"))?;
        let pki = pki::make(&dir.join("pki"))?;
        let ports = Ports {
            etcd: free_port()?,
            etcd_peer: free_port()?,
            apiserver: free_port()?,
            kcm: free_port()?,
            scheduler: free_port()?,
        };
        let server = format!("https://127.0.0.1:{}", ports.apiserver);
        let write_kubeconfig = |name: &str, user: &str, token: &str| -> Result<PathBuf> {
            let path = dir.join(format!("{name}.kubeconfig"));
            std::fs::write(&path, pki::kubeconfig(&server, &pki.ca_cert, user, token))?;
            Ok(path)
        };
        let admin_kubeconfig = write_kubeconfig("admin", "e2e-admin", &pki.admin_token)?;
        let kcm_kubeconfig = write_kubeconfig("controller-manager", "system:kube-controller-manager", &pki.kcm_token)?;
        let sched_kubeconfig = write_kubeconfig("scheduler", "system:kube-scheduler", &pki.scheduler_token)?;

        let etcd_data = dir.join("etcd-data");
        std::fs::create_dir_all(&etcd_data)?;
        let etcd_url = format!("http://127.0.0.1:{}", ports.etcd);
        let mut etcd = Process::start(
            "etcd",
            &assets.etcd,
            vec![
                format!("--data-dir={}", etcd_data.display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls=http://127.0.0.1:{}", ports.etcd_peer),
                "--unsafe-no-fsync=true".into(),
                "--log-level=warn".into(),
            ],
            vec![],
            &logs,
        )?;
        wait_until(&mut etcd, READY_TIMEOUT, || async {
            http::get(ports.etcd, "/health").await.map(|r| r.status == 200).unwrap_or(false)
        })
        .await?;

        let mut apiserver =
            Process::start("kube-apiserver", &assets.apiserver, apiserver_args(&pki, &ports), vec![], &logs)?;
        let admin = client_of(&admin_kubeconfig).await?;
        wait_ready(&mut apiserver, &admin).await?;
        // Only once the API server serves its bootstrap RBAC can the others authorise themselves.
        let kcm = Process::start(
            "kube-controller-manager",
            &assets.controller_manager,
            kcm_args(&kcm_kubeconfig, &ports, &dir.join("pki")),
            vec![],
            &logs,
        )?;
        let scheduler = Process::start(
            "kube-scheduler",
            &assets.scheduler,
            vec![
                format!("--kubeconfig={}", sched_kubeconfig.display()),
                format!("--authentication-kubeconfig={}", sched_kubeconfig.display()),
                format!("--authorization-kubeconfig={}", sched_kubeconfig.display()),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={}", ports.scheduler),
                format!("--feature-gates={FEATURE_GATES}"),
                "--leader-elect=false".into(),
                // As for the controller-manager: room for thousands of bindings a minute.
                "--kube-api-qps=500".into(),
                "--kube-api-burst=1000".into(),
                "--v=2".into(),
            ],
            vec![],
            &logs,
        )?;
        let mut plane = Plane {
            dir: dir.to_path_buf(),
            logs: logs.clone(),
            ports,
            pki,
            server,
            admin_kubeconfig,
            admin,
            version: String::new(),
            etcd,
            apiserver,
            kcm,
            scheduler,
            apiserver_down: None,
        };
        plane.wait_controllers_healthy().await?;
        plane.version = plane.admin.apiserver_version().await.map(|v| v.git_version).unwrap_or_default();
        Ok(plane)
    }

    /// Waits for `/readyz` of the API server.
    pub async fn wait_apiserver_ready(&mut self) -> Result<Duration> {
        wait_ready(&mut self.apiserver, &self.admin).await
    }

    /// Waits until kube-controller-manager and kube-scheduler answer `/healthz` with `ok`.
    async fn wait_controllers_healthy(&mut self) -> Result<()> {
        for port in [self.ports.kcm, self.ports.scheduler] {
            let which = if port == self.ports.kcm { &mut self.kcm } else { &mut self.scheduler };
            let health = insecure_client(port)?;
            wait_until(which, READY_TIMEOUT, || {
                let health = health.clone();
                async move {
                    let req = ::http::Request::get("/healthz").body(Vec::new()).expect("request");
                    health.request_text(req).await.map(|t| t.trim() == "ok").unwrap_or(false)
                }
            })
            .await?;
        }
        Ok(())
    }

    /// Kills the API server with SIGKILL.
    pub async fn kill_apiserver(&mut self) {
        self.apiserver.kill().await;
        self.apiserver_down = Some(Instant::now());
    }

    /// Stops the API server gracefully (SIGTERM).
    pub async fn stop_apiserver(&mut self) {
        self.apiserver.terminate(Duration::from_secs(30)).await;
        self.apiserver_down = Some(Instant::now());
    }

    /// Starts the API server again and waits until it is ready; returns how long that took.
    /// After an outage past the renew deadline, kube-controller-manager and kube-scheduler are
    /// started afresh too, as their leader election and supervisor would (they run here without
    /// leader election, and a kube-controller-manager 1.36 kept across several restarts was
    /// seen with its pod informer stuck hundreds of revisions behind, creating no pods).
    pub async fn start_apiserver(&mut self) -> Result<Duration> {
        if !port_free(self.ports.apiserver) {
            // The old socket may linger for a moment after a kill.
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        self.apiserver.restart()?;
        let ready = self.wait_apiserver_ready().await?;
        if self.apiserver_down.take().is_some_and(|since| since.elapsed() > RENEW_DEADLINE) {
            self.kcm.terminate(Duration::from_secs(5)).await;
            self.scheduler.terminate(Duration::from_secs(5)).await;
            self.kcm.restart()?;
            self.scheduler.restart()?;
            self.wait_controllers_healthy().await?;
        }
        Ok(ready)
    }

    /// Compacts etcd's history up to its current revision: every watch that resumes from an
    /// older resourceVersion is answered 410 Expired. Returns the revision.
    pub async fn compact_etcd(&self) -> Result<u64> {
        let range = http::post_json(self.ports.etcd, "/v3/kv/range", &serde_json::json!({"key": "AA=="})).await?;
        let revision: u64 = range
            .json()?
            .pointer("/header/revision")
            .and_then(|r| r.as_str().and_then(|s| s.parse().ok()).or_else(|| r.as_u64()))
            .ok_or_else(|| anyhow!("etcd's range answer has no header.revision: {}", range.body))?;
        let body = serde_json::json!({"revision": revision.to_string(), "physical": true});
        let compacted = http::post_json(self.ports.etcd, "/v3/kv/compaction", &body).await?;
        if compacted.status != 200 {
            bail!("etcd refused the compaction: {}", compacted.body);
        }
        Ok(revision)
    }

    /// Fails naming the component if one of them has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        self.etcd.check_alive()?;
        self.apiserver.check_alive()?;
        self.kcm.check_alive()?;
        self.scheduler.check_alive()
    }

    /// A kubeconfig file for `user` authenticating with `token`.
    pub fn kubeconfig_for(&self, name: &str, user: &str, token: &str) -> Result<PathBuf> {
        let path = self.dir.join(format!("{name}.kubeconfig"));
        std::fs::write(&path, pki::kubeconfig(&self.server, &self.pki.ca_cert, user, token))?;
        Ok(path)
    }

    /// Stops everything, API server first.
    pub async fn stop(mut self) {
        self.scheduler.terminate(Duration::from_secs(5)).await;
        self.kcm.terminate(Duration::from_secs(5)).await;
        self.apiserver.terminate(Duration::from_secs(10)).await;
        self.etcd.terminate(Duration::from_secs(5)).await;
    }
}

/// Waits until the API server answers `/readyz` with `ok`; returns how long that took.
async fn wait_ready(apiserver: &mut Process, admin: &Client) -> Result<Duration> {
    let started = Instant::now();
    wait_until(apiserver, READY_TIMEOUT, || {
        let admin = admin.clone();
        async move {
            let req = ::http::Request::get("/readyz").body(Vec::new()).expect("request");
            admin.request_text(req).await.map(|t| t.trim() == "ok").unwrap_or(false)
        }
    })
    .await?;
    Ok(started.elapsed())
}

/// A client from a kubeconfig file.
pub async fn client_of(kubeconfig: &Path) -> Result<Client> {
    let file = Kubeconfig::read_from(kubeconfig).with_context(|| format!("reading {}", kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// A client of a component's own HTTPS port (self-signed certificate, anonymous: `/healthz` is
/// always allowed).
fn insecure_client(port: u16) -> Result<Client> {
    let mut config = kube::Config::new(format!("https://127.0.0.1:{port}").parse()?);
    config.accept_invalid_certs = true;
    Ok(Client::try_from(config)?)
}

/// Polls `ready` every 100 ms until it holds; fails with the process's last log line if it exits
/// or the time runs out.
async fn wait_until<F, Fut>(process: &mut Process, timeout: Duration, ready: F) -> Result<()>
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        process.check_alive()?;
        if ready().await {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{} not ready after {} s; its last log line: {}",
                process.name,
                timeout.as_secs(),
                last_line(&process.log)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn apiserver_args(pki: &Pki, ports: &Ports) -> Vec<String> {
    let issuer = "https://kubernetes.default.svc.cluster.local";
    vec![
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        format!("--secure-port={}", ports.apiserver),
        format!("--etcd-servers=http://127.0.0.1:{}", ports.etcd),
        format!("--tls-cert-file={}", pki.serving_cert.display()),
        format!("--tls-private-key-file={}", pki.serving_key.display()),
        format!("--client-ca-file={}", pki.ca_cert.display()),
        format!("--service-account-issuer={issuer}"),
        format!("--service-account-key-file={}", pki.sa_pub.display()),
        format!("--service-account-signing-key-file={}", pki.sa_key.display()),
        format!("--api-audiences={issuer}"),
        format!("--token-auth-file={}", pki.tokens_file.display()),
        "--authorization-mode=Node,RBAC".into(),
        "--service-cluster-ip-range=10.96.0.0/16".into(),
        format!("--runtime-config={RUNTIME_CONFIG}"),
        format!("--feature-gates={FEATURE_GATES}"),
        "--allow-privileged=true".into(),
        // No node-lifecycle controller runs (it would mark hand-made nodes Unknown), so nothing
        // would lift the not-ready taint this plugin puts on every new Node.
        "--disable-admission-plugins=TaintNodesByCondition".into(),
        "--endpoint-reconciler-type=none".into(),
        "--profiling=false".into(),
        "--v=1".into(),
    ]
}

fn kcm_args(kubeconfig: &Path, ports: &Ports, pki_dir: &Path) -> Vec<String> {
    let kc = kubeconfig.display();
    vec![
        format!("--kubeconfig={kc}"),
        format!("--authentication-kubeconfig={kc}"),
        format!("--authorization-kubeconfig={kc}"),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={}", ports.kcm),
        // No kubelet heartbeats: the node-lifecycle controller would mark every node Unknown.
        "--controllers=*,-node-lifecycle-controller".into(),
        // The defaults (20 requests a second, 5 Jobs synced at once) suit a kubelet-sized
        // cluster, not thousands of gang pods in a minute: the scale scenario would measure
        // the Job controller's own rate limit.
        "--kube-api-qps=500".into(),
        "--kube-api-burst=1000".into(),
        "--concurrent-job-syncs=20".into(),
        "--use-service-account-credentials=true".into(),
        format!("--service-account-private-key-file={}", pki_dir.join("sa.key").display()),
        format!("--root-ca-file={}", pki_dir.join("ca.crt").display()),
        "--service-cluster-ip-range=10.96.0.0/16".into(),
        format!("--feature-gates={FEATURE_GATES}"),
        "--leader-elect=false".into(),
        "--v=1".into(),
    ]
}
