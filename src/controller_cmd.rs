//! `trainyard controller`: runs the Kubernetes controller against the cluster of the kubeconfig or pod.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};
use trainyard::controller::deciding::plan::Mode;
use trainyard::controller::process::run::{ApiServing, Settings, run};
use trainyard::controller::serving::lease::LeaseLock;
use trainyard::controller::slurm::poller::{STEP_RETRY, SlurmLink};
use trainyard::grpc::rate::Limit;
use trainyard_slurm::bridge::Bridge;
use trainyard_slurm::rest::{RestClient, RestConfig};

/// Who launches the workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// trainyard renders and applies JobSets / LeaderWorkerSets itself.
    Standalone,
    /// Kubeflow Trainer's controller launches them; trainyard admits by unsuspending TrainJobs.
    Companion,
}

/// How the controller runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ControllerModeArg {
    /// trainyard renders and applies JobSets / LeaderWorkerSets itself.
    Standalone,
    /// Kubeflow Trainer's controller launches them; trainyard admits by unsuspending TrainJobs.
    Companion,
    /// A fleet's manager: TrainJobs with `spec.managedBy: kueue.x-k8s.io/multikueue` are placed
    /// in one of the WorkerCluster objects' clusters and copied there, where that cluster's
    /// trainyard (standalone) launches them.
    Manager,
}

/// Who allocates the devices of gangs' DRA claims.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DraCommitArg {
    /// kube-scheduler allocates each claim on the host trainyard picked.
    Delegate,
    /// trainyard writes each claim's allocation before ungating its pod; it must then be the
    /// only allocator of those devices' pools.
    Allocate,
}

/// The scheduler that binds gang pods, when it is not kube-scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BinderArg {
    /// scheduler-plugins' coscheduling: a `scheduling.x-k8s.io` PodGroup per gang.
    Coscheduling,
    /// Volcano: a `scheduling.volcano.sh` PodGroup per gang.
    Volcano,
    /// NVIDIA's KAI scheduler: a `scheduling.run.ai` PodGroup per gang.
    Kai,
}

impl BinderArg {
    /// The binder it names.
    pub fn kind(self) -> trainyard::controller::acting::binders::BinderKind {
        use trainyard::controller::acting::binders::BinderKind;
        match self {
            BinderArg::Coscheduling => BinderKind::Coscheduling,
            BinderArg::Volcano => BinderKind::Volcano,
            BinderArg::Kai => BinderKind::Kai,
        }
    }
}

/// Log line format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line.
    Json,
    /// Human-readable text.
    Text,
}

/// Flags of `trainyard controller`.
#[derive(Debug, Args)]
pub struct ControllerArgs {
    /// Policy file (queues, quotas, priority classes, backfill, preemption); Queue objects are added
    /// to its queues. Without it, the built-in defaults apply.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// standalone (trainyard launches JobSets), companion (Kubeflow Trainer does) or manager
    /// (trainyard places gangs in worker clusters, whose trainyard launches them).
    #[arg(long, value_enum, default_value = "standalone")]
    pub mode: ControllerModeArg,
    /// Name of the Topology object describing the cluster's levels.
    #[arg(long, default_value = "default", value_name = "NAME")]
    pub topology: String,
    /// Seconds between safety-net scheduling cycles (a change starts a cycle at once).
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    pub cycle: f64,
    /// TrainJob reconciles (admission records, launches) carried out at once.
    #[arg(long, default_value_t = 32, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub workers: u16,
    /// Who allocates the devices of gangs' DRA claims: delegate (kube-scheduler, on the hosts
    /// trainyard picked) or allocate (trainyard writes the devices it chose).
    #[arg(long, value_enum, default_value = "delegate")]
    pub dra_commit: DraCommitArg,
    /// The scheduler that binds gang pods when it is not kube-scheduler (standalone mode): each
    /// gang also gets that binder's PodGroup, and its pods its marker and scheduler name. A
    /// runtime's `podGroupPolicy` (coscheduling or volcano) wins over it.
    #[arg(long, value_enum, value_name = "BINDER")]
    pub binder: Option<BinderArg>,
    /// Seconds an admitted gang may take for every pod to be bound to its node before it is
    /// stopped and queued again (0: no limit).
    #[arg(long, default_value_t = 600, value_name = "SECONDS")]
    pub start_timeout: u64,
    /// Address of the Prometheus endpoint (/metrics).
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_bind: SocketAddr,
    /// Address of the health endpoints (/healthz, /readyz).
    #[arg(long, default_value = "0.0.0.0:8081")]
    pub health_bind: SocketAddr,
    /// Serve the researcher API (gRPC `trainyard.v1`, TLS only) on this address, e.g.
    /// 0.0.0.0:8443; not served without it.
    #[arg(long, value_name = "ADDR", requires_all = ["api_tls_cert", "api_tls_key"])]
    pub api_bind: Option<SocketAddr>,
    /// The API's TLS certificate chain, PEM (tls.crt of a kubernetes.io/tls Secret).
    #[arg(long, value_name = "FILE", requires = "api_bind")]
    pub api_tls_cert: Option<PathBuf>,
    /// The API certificate's private key, PEM (tls.key).
    #[arg(long, value_name = "FILE", requires = "api_bind")]
    pub api_tls_key: Option<PathBuf>,
    /// Calls per second each API caller may make, sustained (bursts of four seconds' worth).
    #[arg(long, default_value_t = 10.0, value_name = "N", value_parser = positive_rate)]
    pub api_rate: f64,
    /// Take part in leader election; only the lease holder acts.
    #[arg(long)]
    pub leader_elect: bool,
    /// Namespace the controller runs in: its Lease's, and in manager mode the WorkerClusters'
    /// Secrets'.
    #[arg(long, env = "POD_NAMESPACE", hide_env_values = true, default_value = "default")]
    pub lease_namespace: String,
    /// Name of the Lease.
    #[arg(long, default_value = "trainyard")]
    pub lease_name: String,
    /// Seconds a lease stays valid without renewal.
    #[arg(long, default_value_t = 15)]
    pub lease_duration: i32,
    /// This replica's identity (the pod name).
    #[arg(long, env = "POD_NAME", hide_env_values = true, default_value = "trainyard")]
    pub identity: String,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Least severe level logged: error, warn, info, debug or trace.
    #[arg(long, default_value = "info")]
    pub log_level: tracing::Level,
    /// Run the gangs of Queues with `spec.slurm` on a Slurm cluster: through slurmrestd when
    /// SLURMRESTD_URL (and SLURMRESTD_TOKEN or SLURMRESTD_TOKEN_FILE) are set, else with the
    /// sbatch/squeue/scancel commands. Standalone mode only.
    #[arg(long)]
    pub slurm: bool,
    /// Seconds between looks at Slurm's jobs, 1 to 60 (nodes are read every sixth look).
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS", requires = "slurm")]
    pub slurm_poll: f64,
    /// Name of the Slurm cluster in the topology model (its root domain).
    #[arg(long, default_value = "slurm", value_name = "NAME", requires = "slurm")]
    pub slurm_cluster: String,
}

/// The Slurm link, once slurmrestd (when configured) answers: the controller keeps trying,
/// because its Slurm queues cannot run without it.
async fn slurm_link(args: &ControllerArgs) -> anyhow::Result<Arc<SlurmLink>> {
    let config = RestConfig::from_env().map_err(anyhow::Error::msg)?;
    let rest = match config {
        None => None,
        Some(config) => loop {
            match RestClient::connect(config.clone()).await {
                Ok(client) => break Some(client),
                Err(e) if e.is_transient() => {
                    tracing::warn!(error = %e, "slurmrestd does not answer; trying again in 5 s");
                    tokio::time::sleep(Duration::from_secs(5)).await;
                }
                Err(e) => return Err(anyhow::anyhow!("slurmrestd at {}: {e}", config.url)),
            }
        },
    };
    let poll = Duration::from_secs_f64(args.slurm_poll);
    Ok(Arc::new(SlurmLink::new(Bridge::new(rest, STEP_RETRY), args.slurm_cluster.clone(), poll)))
}

/// Runs the controller until SIGTERM.
pub fn run_controller(args: &ControllerArgs) -> anyhow::Result<()> {
    if !(args.cycle.is_finite() && args.cycle > 0.0) {
        anyhow::bail!("--cycle: {} is not a positive number of seconds", args.cycle);
    }
    // Slurm forgets an ended job after MinJobAge (300 s by default); a look every minute sees each end.
    if !(args.slurm_poll.is_finite() && (1.0..=60.0).contains(&args.slurm_poll)) {
        anyhow::bail!("--slurm-poll: {} is not a number of seconds from 1 to 60", args.slurm_poll);
    }
    if args.slurm && args.mode != ControllerModeArg::Standalone {
        anyhow::bail!("--slurm needs --mode standalone: in other modes trainyard does not launch TrainJobs itself");
    }
    if args.lease_duration < 3 {
        anyhow::bail!("--lease-duration: {} is too short; use at least 3 seconds", args.lease_duration);
    }
    let (policy_text, policy_name) = match &args.policy {
        Some(path) => (
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
            path.display().to_string(),
        ),
        None => (String::new(), "built-in defaults".to_string()),
    };
    // Check the file before touching the cluster, so a bad policy fails at once with its line.
    let policy = trainyard_policies::PolicyConfig::from_yaml(&policy_text, &policy_name)?;
    if args.mode == ControllerModeArg::Manager && policy.node_loss.action == trainyard_policies::NodeLossAction::Replace
    {
        anyhow::bail!(
            "{policy_name}: node_loss.action: replace cannot be used with --mode manager: a worker cannot move a running \
             copy's pods; use wait or requeue (a lost worker's gangs are then placed anew)"
        );
    }
    let builder = tracing_subscriber::fmt().with_max_level(args.log_level).with_target(false);
    match args.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let settings = Settings {
        mode: match args.mode {
            ControllerModeArg::Standalone => Mode::Standalone,
            ControllerModeArg::Companion => Mode::Companion,
            ControllerModeArg::Manager => Mode::Manager,
        },
        namespace: args.lease_namespace.clone(),
        policy_text,
        policy_name,
        topology: args.topology.clone(),
        cycle: Duration::from_secs_f64(args.cycle),
        workers: args.workers,
        binder: args.binder.map(BinderArg::kind),
        metrics_bind: args.metrics_bind,
        health_bind: args.health_bind,
        lease: args.leader_elect.then(|| LeaseLock {
            namespace: args.lease_namespace.clone(),
            name: args.lease_name.clone(),
            identity: args.identity.clone(),
            duration_s: args.lease_duration,
        }),
        identity: args.identity.clone(),
        slurm: None,
        devices: match args.dra_commit {
            DraCommitArg::Delegate => trainyard::controller::deciding::plan::DeviceCommit::Delegate,
            DraCommitArg::Allocate => trainyard::controller::deciding::plan::DeviceCommit::Allocate,
        },
        start_timeout: (args.start_timeout > 0).then_some(args.start_timeout),
        api: match (args.api_bind, &args.api_tls_cert, &args.api_tls_key) {
            (Some(bind), Some(cert), Some(key)) => Some(ApiServing {
                bind,
                tls_cert: cert.clone(),
                tls_key: key.clone(),
                per_caller: Limit { per_second: args.api_rate, burst: (args.api_rate * 4.0).ceil().max(1.0) as u32 },
            }),
            _ => None,
        },
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let metrics = Arc::new(trainyard::controller::serving::metrics::Metrics::default());
        let config = kube::Config::infer().await.context("connecting to the Kubernetes API")?;
        let counted = trainyard::controller::serving::api_requests::CountLayer(metrics.api_requests.clone());
        let client = kube::client::ClientBuilder::try_from(config)
            .context("connecting to the Kubernetes API")?
            .with_layer(&counted)
            .build();
        let settings = match args.slurm {
            true => Settings { slurm: Some(slurm_link(args).await?), ..settings },
            false => settings,
        };
        run(client, settings, metrics).await
    })
}

/// A rate of calls per second: positive and finite.
fn positive_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 && r <= 1e6 => Ok(r),
        _ => Err(format!("{text:?} is not a rate between 0 and 1000000 calls per second")),
    }
}
