//! `trainyard slurm ...`: run gangs on a Slurm cluster directly (for Slurm-only sites), and read its shape.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use trainyard_bridges::slurm::{GangState, parse_gang};
use trainyard_slurm::bridge::{Bridge, Retry};
use trainyard_slurm::import::import;
use trainyard_slurm::rest::{RestClient, RestConfig};

use crate::inputs::read_text;

/// Which Slurm client submits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Via {
    /// slurmrestd when SLURMRESTD_URL is set, else the commands.
    Auto,
    /// slurmrestd only (SLURMRESTD_URL and SLURMRESTD_TOKEN or SLURMRESTD_TOKEN_FILE).
    Rest,
    /// sbatch, squeue, scancel.
    Sbatch,
}

/// `trainyard slurm` subcommands.
#[derive(Debug, Subcommand)]
pub enum SlurmCommand {
    /// Submit a gang spec (YAML) unless Slurm already has a job of the gang; print the job id.
    Submit(SubmitArgs),
    /// Show the state of a gang's job.
    Status(GangArgs),
    /// Cancel a gang's job.
    Cancel(GangArgs),
    /// Read the cluster's nodes (and switch tree) as trainyard sees it; optionally write it as a
    /// cluster YAML for `trainyard simulate` and `place`.
    Nodes(NodesArgs),
}

/// Flags shared by every subcommand.
#[derive(Debug, Args)]
pub struct Connection {
    /// Which client talks to Slurm.
    #[arg(long, value_enum, default_value = "auto")]
    pub via: Via,
}

/// Flags of `trainyard slurm submit`.
#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The gang spec (see README: name, gang, nodes, gpusPerNode, command, workdir, ...).
    pub spec: PathBuf,
    #[command(flatten)]
    pub connection: Connection,
    /// Wait up to this many seconds for the job to end, print its end state, and fail unless it completed.
    #[arg(long, value_name = "SECONDS")]
    pub wait: Option<u64>,
}

/// A gang named on the command line.
#[derive(Debug, Args)]
pub struct GangArgs {
    /// The gang id (the spec's `gang`).
    pub gang: String,
    #[command(flatten)]
    pub connection: Connection,
}

/// Flags of `trainyard slurm nodes`.
#[derive(Debug, Args)]
pub struct NodesArgs {
    /// The switch tree from this topology.conf instead of `scontrol show topology`.
    #[arg(long, value_name = "FILE")]
    pub topology_conf: Option<PathBuf>,
    /// Ignore switches: hosts only.
    #[arg(long)]
    pub flat: bool,
    /// Write the cluster as trainyard cluster YAML here.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub connection: Connection,
}

/// The bridge as `connection` asks: slurmrestd (JWT from the environment) or the commands.
pub(crate) async fn bridge(connection: &Connection) -> Result<Bridge> {
    let rest = match connection.via {
        Via::Sbatch => None,
        Via::Auto | Via::Rest => match RestConfig::from_env().map_err(anyhow::Error::msg)? {
            Some(config) => Some(RestClient::connect(config).await.context("connecting to slurmrestd")?),
            None if connection.via == Via::Rest => bail!("--via rest needs SLURMRESTD_URL"),
            None => None,
        },
    };
    Ok(Bridge::new(rest, Retry::default()))
}

/// Runs one `trainyard slurm` subcommand.
pub fn run(command: &SlurmCommand) -> Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        match command {
            SlurmCommand::Submit(args) => submit(args).await,
            SlurmCommand::Status(args) => {
                let b = bridge(&args.connection).await?;
                match b.status(&args.gang).await? {
                    Some(job) => println!(
                        "{} job {} {} ({:?}) nodes {}",
                        args.gang, job.id, job.slurm_state, job.state, job.nodes
                    ),
                    None => bail!("Slurm has no job of gang {}", args.gang),
                }
                Ok(())
            }
            SlurmCommand::Cancel(args) => {
                let b = bridge(&args.connection).await?;
                if b.cancel(&args.gang).await? {
                    println!("cancelled {}", args.gang);
                } else {
                    println!("{}: nothing running to cancel", args.gang);
                }
                Ok(())
            }
            SlurmCommand::Nodes(args) => nodes(args).await,
        }
    })
}

async fn submit(args: &SubmitArgs) -> Result<()> {
    let text = read_text(&args.spec)?;
    let gang = parse_gang(&text, &args.spec.display().to_string())?;
    let b = bridge(&args.connection).await?;
    let submission = b.submit(&gang).await.with_context(|| format!("submitting gang {}", gang.gang))?;
    match (submission.existing, submission.via) {
        (true, _) => println!("{}: Slurm already has job {}; nothing submitted", gang.gang, submission.job_id),
        (false, via) => println!(
            "{}: submitted job {} via {:?}",
            gang.gang,
            submission.job_id,
            via.unwrap_or(trainyard_slurm::bridge::Via::Sbatch)
        ),
    }
    let Some(seconds) = args.wait else { return Ok(()) };
    let job = b.wait(&gang.gang, Duration::from_millis(500), Duration::from_secs(seconds)).await?;
    let Some(job) = job else { bail!("{}: Slurm no longer reports the job", gang.gang) };
    println!(
        "{}: job {} ended {} ({:?}), exit code {:?}",
        gang.gang, job.id, job.slurm_state, job.state, job.exit_code
    );
    match job.state {
        GangState::Completed => Ok(()),
        s if !s.is_terminal() => bail!("{}: still {:?} after {seconds} s", gang.gang, s),
        s => bail!("{}: ended {:?}", gang.gang, s),
    }
}

async fn nodes(args: &NodesArgs) -> Result<()> {
    let b = bridge(&args.connection).await?;
    let nodes = b.nodes().await?;
    let conf = match (&args.topology_conf, args.flat) {
        (_, true) => None,
        (Some(path), false) => Some((read_text(path)?, path.display().to_string())),
        (None, false) => {
            let lines = b.topology().await.unwrap_or_default();
            (!lines.trim().is_empty()).then(|| (lines, "scontrol show topology".to_string()))
        }
    };
    let loaded = import("slurm", &nodes, conf.as_ref().map(|(t, s)| (t.as_str(), s.as_str())))?;
    for w in &loaded.warnings {
        eprintln!("left out {}: {}", w.item, w.message);
    }
    let spec = &loaded.spec;
    println!("levels: {}", spec.levels.join(" > "));
    for n in &spec.nodes {
        let c = n.capacity;
        println!(
            "{:<40} gpus {:>2}  cpus {:>4}  memory {:>7} MiB",
            n.path.join("/"),
            c.gpus,
            c.cpu_milli / 1000,
            c.memory_mib
        );
    }
    if let Some(out) = &args.out {
        let mut yaml = format!(
            "# Imported from Slurm by `trainyard slurm nodes`.\nname: slurm\nlevels: [{}]\nnodes:\n",
            spec.levels.join(", ")
        );
        for n in &spec.nodes {
            let at: Vec<String> = spec
                .levels
                .iter()
                .zip(&n.path)
                .take(n.path.len().saturating_sub(1))
                .map(|(l, v)| format!("{l}: {v}"))
                .collect();
            let c = n.capacity;
            write!(
                yaml,
                "  - {{name: {}, at: {{{}}}, gpus: {}, cpus: {}, memory_gib: {}",
                n.path.last().cloned().unwrap_or_default(),
                at.join(", "),
                c.gpus,
                c.cpu_milli / 1000,
                c.memory_mib / 1024
            )?;
            if let Some(f) = &n.flavor {
                write!(yaml, ", flavor: {f}")?;
            }
            yaml.push_str("}\n");
        }
        std::fs::write(out, yaml).with_context(|| format!("writing {}", out.display()))?;
    }
    Ok(())
}
