//! trainyard-e2e: the controller's end-to-end suite on a real Kubernetes control plane.
//!
//! It starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler from a folder of
//! binaries (`KUBEBUILDER_ASSETS`), installs the upstream CRDs, runs stand-ins for what the
//! control plane lacks (nodes, the kubelet's deletions, the JobSet and LeaderWorkerSet
//! controllers), installs trainyard's chart with the real Helm SDK, and runs the trainyard
//! binary through each scenario, printing PASS or FAIL per scenario and a summary.

mod assets;
mod helm;
mod http;
mod kube_util;
mod plane;
mod scenarios;
mod standins;
mod suite;
mod trainyard;
mod world;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Parser;
use tracing_subscriber::filter::{LevelFilter, filter_fn};
use tracing_subscriber::prelude::*;

use crate::kube_util::Kube;
use crate::suite::Suite;

/// Command line.
#[derive(Parser, Debug)]
#[command(name = "trainyard-e2e", about = "trainyard's end-to-end suite on a real Kubernetes control plane")]
struct Args {
    /// Folder with etcd, kube-apiserver, kube-controller-manager and kube-scheduler (one version).
    #[arg(long, env = "KUBEBUILDER_ASSETS")]
    assets: Option<PathBuf>,
    /// The trainyard binary under test.
    #[arg(long, default_value = "target/release/trainyard")]
    trainyard: PathBuf,
    /// Folder with the upstream CRDs of Trainer, JobSet and LeaderWorkerSet (YAML files).
    #[arg(long, env = "TRAINYARD_E2E_CRDS")]
    crds: Option<PathBuf>,
    /// A Python that has `helm-python-sdk` (scripts/python-env.sh makes one).
    #[arg(long, env = "TRAINYARD_E2E_PYTHON")]
    python: Option<PathBuf>,
    /// Run only these scenarios (comma separated names; see --list).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// List the scenarios and exit.
    #[arg(long)]
    list: bool,
    /// Folder for this run's logs and files (default: target/e2e/<time>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Times the API-server restart is measured.
    #[arg(long, default_value_t = 5)]
    restarts: u32,
    /// Size of the scale scenarios: a tenth (1,000 nodes, 200 TrainJobs) or full (10,000 nodes,
    /// 2,000 TrainJobs).
    #[arg(long, value_enum, default_value = "tenth")]
    scale: ScaleSize,
    /// Hold the scale scenario to its targets (admissions keep pace with creation, creation to
    /// JobSet p99 within 2 s, retries within 5% of reconciles, peak memory within 300 MiB); without
    /// it they are reported only.
    #[arg(long)]
    scale_targets: bool,
    /// Another trainyard binary to run the scale scenario with first, on the same control
    /// plane, for figures before and after a change.
    #[arg(long)]
    scale_baseline: Option<PathBuf>,
    /// The `--workers` of the controllers the scale scenarios start (their default without it).
    #[arg(long, value_name = "N")]
    scale_workers: Option<u16>,
}

/// How big the scale scenarios are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ScaleSize {
    /// 1,000 nodes and 200 TrainJobs.
    Tenth,
    /// 10,000 nodes and 2,000 TrainJobs.
    Full,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.list {
        for s in scenarios::ALL {
            println!("{:<22} {}", s.name, s.about);
        }
        return ExitCode::SUCCESS;
    }
    if let Some(unknown) = args.only.iter().find(|n| !scenarios::ALL.iter().any(|s| s.name == n.as_str())) {
        eprintln!("error: no scenario named {unknown} (see --list)");
        return ExitCode::from(2);
    }
    // The harness's own warnings (and stand-in details with TRAINYARD_E2E_DEBUG) on standard
    // error; the client library's complaints while a server is away are expected and left out.
    let level = if std::env::var_os("TRAINYARD_E2E_DEBUG").is_some() { LevelFilter::DEBUG } else { LevelFilter::WARN };
    let own = filter_fn(|m| m.target().starts_with("trainyard_e2e"));
    tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_filter(level).with_filter(own))
        .init();
    rustls::crypto::ring::default_provider().install_default().ok();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    match runtime.block_on(run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn run(args: Args) -> Result<bool> {
    let repo = std::env::current_dir()?;
    let Some(assets_dir) = args.assets.clone() else {
        anyhow::bail!(
            "no control-plane binaries: set KUBEBUILDER_ASSETS (or --assets) to a folder with etcd, kube-apiserver, \
             kube-controller-manager and kube-scheduler; nothing was tested"
        );
    };
    let assets = assets::Assets::in_dir(&assets_dir)?;
    let binary = assets::trainyard(&args.trainyard)?;
    let crds_dir = args.crds.clone().context(
        "no upstream CRDs: set TRAINYARD_E2E_CRDS (or --crds) to a folder with the CRD YAML of Trainer, JobSet and \
         LeaderWorkerSet; nothing was tested",
    )?;
    let crds = assets::upstream_crds(&crds_dir)?;
    let run_dir = match &args.out {
        Some(d) => d.clone(),
        None => repo.join("target/e2e").join(k8s_openapi::jiff::Timestamp::now().strftime("%Y%m%d-%H%M%S").to_string()),
    };
    std::fs::create_dir_all(&run_dir)?;
    let selected: Vec<&scenarios::Scenario> =
        scenarios::ALL.iter().filter(|s| args.only.is_empty() || args.only.iter().any(|n| n == s.name)).collect();

    let started = Instant::now();
    println!("trainyard end-to-end suite: {} scenario(s); logs in {}", selected.len(), run_dir.display());
    let plane = plane::Plane::start(&assets, &run_dir.join("plane")).await?;
    println!(
        "control plane {} (binaries from {}) up on {} in {:.1} s",
        plane.version,
        assets.dir.display(),
        plane.server,
        started.elapsed().as_secs_f64()
    );
    let kube = Kube::new(plane.admin.clone());
    standins::kubelet::start(plane.admin.clone());
    standins::jobset::start(plane.admin.clone());
    standins::lws::start(plane.admin.clone());
    let nodes = standins::nodes::Nodes::start(kube.clone());
    let mut suite = Suite {
        controller_kubeconfig: plane.admin_kubeconfig.clone(),
        chart_rbac: false,
        lease_namespace: "default".to_string(),
        plane,
        assets: assets.clone(),
        kube,
        nodes,
        binary,
        repo: repo.clone(),
        run_dir: run_dir.clone(),
        crds,
        python: args.python.clone(),
    };
    scenarios::install_workload_crds(&suite).await?;
    if !selected.iter().any(|s| s.name == "chart") {
        scenarios::install_trainer_crds(&suite).await?;
    }

    let mut results = Vec::new();
    for scenario in &selected {
        let t = Instant::now();
        let outcome = (scenario.run)(&mut suite, &args_view(&args)).await;
        let took = t.elapsed();
        let line = match &outcome {
            Ok(c) => format!(
                "PASS  {:<22} {:>6.1} s  {} checks  {}",
                scenario.name,
                took.as_secs_f64(),
                c.passed(),
                c.figures().join("; ")
            ),
            Err(e) => format!("FAIL  {:<22} {:>6.1} s  {e:#}", scenario.name, took.as_secs_f64()),
        };
        println!("{line}");
        if outcome.is_err() {
            match scenarios::dump(&suite, scenario.name).await {
                Ok(path) => println!("      its objects: {}", path.display()),
                Err(e) => println!("      its objects could not be saved: {e:#}"),
            }
            if let Err(e) = scenarios::sweep(&suite).await {
                println!("      the cluster could not be cleaned after it: {e:#}");
            }
        }
        results.push((scenario.name, outcome.map(|c| c.passed())));
        if let Err(e) = suite.plane.check_alive() {
            println!("the control plane died: {e:#}; the remaining scenarios are not run");
            break;
        }
    }
    let passed = results.iter().filter(|(_, r)| r.is_ok()).count();
    let checks: usize = results.iter().filter_map(|(_, r)| r.as_ref().ok()).sum();
    let failed: Vec<&str> = results.iter().filter(|(_, r)| r.is_err()).map(|(n, _)| *n).collect();
    let not_run = selected.len() - results.len();
    println!(
        "\nsummary: {passed} passed, {} failed{} ({checks} checks) in {:.0} s; controller RBAC: {}",
        failed.len(),
        if not_run > 0 { format!(", {not_run} not run") } else { String::new() },
        started.elapsed().as_secs_f64(),
        if suite.chart_rbac {
            "the chart's ServiceAccount"
        } else {
            "system:masters (the chart scenario did not run or failed)"
        },
    );
    if !failed.is_empty() {
        println!("failed: {}; logs in {}", failed.join(", "), suite.plane.logs.display());
    }
    suite.plane.stop().await;
    Ok(failed.is_empty() && not_run == 0)
}

/// What scenarios may read of the command line.
pub struct Options {
    /// Times the API-server restart is measured.
    pub restarts: u32,
    /// Size of the scale scenarios.
    pub scale: ScaleSize,
    /// Whether the scale scenario checks its targets.
    pub scale_targets: bool,
    /// The binary the scale scenario runs first, as a baseline.
    pub scale_baseline: Option<PathBuf>,
    /// The controllers' `--workers` in the scale scenarios, when given.
    pub scale_workers: Option<u16>,
}

fn args_view(args: &Args) -> Options {
    Options {
        restarts: args.restarts,
        scale: args.scale,
        scale_targets: args.scale_targets,
        scale_baseline: args.scale_baseline.clone(),
        scale_workers: args.scale_workers,
    }
}
