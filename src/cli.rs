//! Command-line arguments (clap) and dispatch to the subcommands.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use trainyard_simulator::{EstimateSource, Slowdown};
use trainyard_topology::PlacementPolicy;

use crate::api_cmd::ApiCommand;
use crate::cluster_source::ClusterArgs;
use crate::place::PlaceArgs;

/// trainyard: a topology-aware gang scheduler for distributed training.
///
/// `trainyard simulate` replays a cluster trace through the same scheduling engine the
/// controller runs, on a virtual clock, and reports queueing delay, completion time and
/// utilisation. Run it with no flags for a built-in cluster and trace.
#[derive(Debug, Parser)]
#[command(name = "trainyard", version, about, long_about, after_help = SIMULATE_FLAGS)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Shown under the top-level help, so `trainyard --help` covers every flag of the main job.
const SIMULATE_FLAGS: &str = "\
Flags of `trainyard simulate` (see `trainyard simulate --help`):
  --cluster FILE      cluster YAML, Kubernetes Node list, Slurm topology.conf or
                      Lingjun topo.csv; default: built-in 512-GPU cluster
  --cluster-format F  yaml | k8s-nodes | slurm | lingjun; detected when omitted
  --levels KEYS       node label keys of the levels (Kubernetes Node lists)
  --kueue-topology F  a Kueue Topology object giving the level keys
  --host-gpus N       GPUs per host where the source has none (default 8)
  --trace FILE        trace to replay; default: built-in synthetic trace (seed 42)
  --format FORMAT     philly | dirlab | csv | jsonl; detected when omitted
  --policy NAME|FILE  fifo | easy-backfill (default) | a policy YAML file
  --placement POLICY  trainyard (default) | greedy | first-fit | kueue-best-fit | slurm-tree
  --estimates SOURCE  trace (default) | actual: where runtime estimates come from
  --slowdown SPEC     runtime factor by span, e.g. rack=1.05,cluster=1.25; default: none
  --out FILE          write the report as JSON
  --explain JOBS      why these jobs waited and what would have let them start
  --skip-bad-rows     count unparsable trace rows as warnings instead of stopping
  --quiet             no progress bar, no table
Flags of `trainyard place` (see `trainyard place --help`): the cluster flags above and
  --pods --gpus --cpus --memory-gib --topology --slice --pod-set --policy --load --seed
  --intra-node --explain --time-limit-ms --tpu --torus --shape --slices --tpu-pods
Flags of `trainyard compare`: the cluster flags above and --trace --format --policy
  --estimates --slowdown --out
Flags of `trainyard trace synth`: --seed --jobs --tenants --mean-interarrival
  --gpus-per-host --rack-level --format csv|jsonl --out FILE
Flags of `trainyard sweep FILE`: --out-dir DIR --jobs N --fresh --quiet; one point per process:
  --point N | --point-from-env VAR | --gather | --slurm | --k8s-indexed-job IMAGE";

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay a trace on a cluster under a policy and report the metrics.
    Simulate(SimulateArgs),
    /// Place one gang (or TPU slices) on a cluster and print where it goes and why.
    Place(PlaceArgs),
    /// Work with trace files.
    #[command(subcommand)]
    Trace(TraceCommand),
    /// Compare placement policies on one trace: per gang on the same free capacity, and in
    /// a full replay each.
    Compare(crate::compare::CompareArgs),
    /// Replay every variation a sweep file lists (clusters, policies, load, estimate error,
    /// seeds) in parallel, resumably, and compare them with confidence intervals across seeds.
    Sweep(crate::sweep_cmd::SweepArgs),
    /// Print the CustomResourceDefinitions trainyard uses (its Queue and Topology, and Kubeflow
    /// Trainer's kinds for clusters without Trainer), or write one file per CRD into a folder.
    Crds(CrdsArgs),
    /// Run the Kubernetes controller: admit TrainJobs as gangs and launch them.
    Controller(crate::controller_cmd::ControllerArgs),
    /// Print what the controller would create for a TrainJob, without a cluster: the JobSet or
    /// LeaderWorkerSet with trainyard's placement, and where each pod goes.
    Render(crate::render_cmd::RenderArgs),
    /// Run gangs on a Slurm cluster (slurmrestd or sbatch) and read its nodes and switches.
    #[command(subcommand)]
    Slurm(crate::slurm_cmd::SlurmCommand),
    /// Carry another scheduler's definitions over to trainyard's objects.
    #[command(subcommand)]
    Import(crate::import_cmd::ImportCommand),
    /// Show a TrainJob as the scheduler sees it (trainyard API).
    Get(crate::api_cmd::NamedArgs),
    /// List TrainJobs, by queue, state and search (trainyard API).
    List(crate::api_cmd::ListArgs),
    /// Why a TrainJob waits, and what would let it start (trainyard API).
    Explain(crate::api_cmd::NamedArgs),
    /// When a waiting TrainJob, or each remaining trial of a search, is expected to start (trainyard API).
    Eta(crate::api_cmd::EtaArgs),
    /// Delete a TrainJob: its pods stop and its quota is freed (trainyard API).
    Cancel(crate::api_cmd::CancelArgs),
    /// Every queue: quota, usage, borrowing and waiting TrainJobs by reason (trainyard API).
    Queues(crate::api_cmd::QueuesArgs),
    /// Submit a TrainJob manifest, or a plain gang described by flags (trainyard API).
    Submit(crate::api_cmd::SubmitArgs),
    /// Follow admissions, preemptions, starts and ends as they happen, reconnecting across
    /// leader changes (trainyard API).
    Watch(crate::api_cmd::WatchArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell), e.g.
    /// `trainyard completions bash > /etc/bash_completion.d/trainyard`.
    Completions(crate::cli_docs::CompletionsArgs),
    /// Print the Markdown reference of every command (docs/cli.md).
    #[command(hide = true)]
    CliReference,
}

/// Flags of `trainyard crds`.
#[derive(Debug, Args)]
pub struct CrdsArgs {
    /// Write `<group>_<plural>.yaml` files into this folder instead of printing one stream.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<std::path::PathBuf>,
}

#[derive(Debug, Subcommand)]
enum TraceCommand {
    /// Write a synthetic trace in trainyard's own format (deterministic for a seed).
    Synth(SynthArgs),
}

/// Flags of `trainyard simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub replay: ReplayArgs,
    /// Placement policy, overriding the policy's `placement`: trainyard (default), greedy,
    /// first-fit, kueue-best-fit or slurm-tree.
    #[arg(long, value_name = "POLICY")]
    pub placement: Option<PlacementPolicy>,
    /// Gangs spread over wider domains run slower: `LEVEL=FACTOR,...` with the cluster's level
    /// names or `cluster`, each factor at least 1 (e.g. `rack=1.05,block=1.15,cluster=1.25`).
    /// A gang runs ceil(runtime x factor), the factor of the level of the smallest domain that
    /// holds all its pods; an unlisted level takes the factor of the nearest listed level
    /// inside it, hosts default to 1. Runtime estimates are not changed. Default: no slowdown.
    #[arg(long, value_name = "LEVEL=FACTOR,...")]
    pub slowdown: Option<Slowdown>,
    #[command(flatten)]
    pub failures: FailureArgs,
    /// The replay stops with an error if work remains this long (simulated) after the last
    /// submission: a model whose queue never drains ends instead of running on.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "3650d")]
    pub horizon: u64,
    /// Write the full report as JSON to this file (byte-identical for identical inputs).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Write a self-contained HTML report (SVG charts, no network) to this file: utilisation and
    /// the queue over time, queueing-delay CDFs per size class and tenant, fragmentation,
    /// pending reasons, queues against their quotas.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Print, for these jobs (trace ids, comma separated), why they waited and what would have
    /// let them start, each time that changed during the replay.
    #[arg(long, value_delimiter = ',', value_name = "JOB,...")]
    pub explain: Vec<String>,
    /// Skip trace rows that do not parse, counting them as warnings, instead of stopping.
    #[arg(long)]
    pub skip_bad_rows: bool,
    /// Print no progress bar and no summary (errors still go to stderr).
    #[arg(long, short)]
    pub quiet: bool,
    /// Format of the summary: table, wide (every unschedulable job listed), json or yaml (the
    /// report that --out writes, with the --explain explanations).
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: crate::output::Output,
}

/// The optional host-failure model of `trainyard simulate`.
#[derive(Debug, Args)]
pub struct FailureArgs {
    /// Hosts fail: the mean time between failures of one host (e.g. `2000h`, `90d`); failure
    /// and repair times are drawn from exponential distributions. A gang on a failed host
    /// crashes, keeps the work of its last checkpoint, and waits, is requeued or has the host
    /// replaced as the policy's `node_loss` says. Default: no failures.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub mtbf: Option<u64>,
    /// Mean time to repair a failed host.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "8h", requires = "mtbf")]
    pub repair: u64,
    /// Gangs checkpoint this often while they run.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "1h", requires = "mtbf")]
    pub checkpoint_interval: u64,
    /// Time a crashed gang spends restoring its checkpoint before it computes again.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "10m", requires = "mtbf")]
    pub restart_cost: u64,
    /// Seed of the failure times.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "mtbf")]
    pub failure_seed: u64,
}

impl FailureArgs {
    /// The model, when `--mtbf` asks for one.
    pub fn model(&self) -> Option<trainyard_simulator::failures::FailureModel> {
        self.mtbf.map(|mtbf_s| trainyard_simulator::failures::FailureModel {
            mtbf_s,
            repair_s: self.repair,
            checkpoint_interval_s: self.checkpoint_interval,
            restart_s: self.restart_cost,
            seed: self.failure_seed,
        })
    }
}

/// A duration flag: `90`, `90s`, `30m`, `4h`, `2d` or a sum such as `1h30m`, above zero.
fn duration(text: &str) -> Result<u64, String> {
    match trainyard_policies::parse_duration(text) {
        Some(0) => Err("must be longer than zero".into()),
        Some(s) => Ok(s),
        None => Err(format!("`{text}` is not a duration (e.g. 90s, 30m, 4h, 2d, 1h30m)")),
    }
}

/// The trace, scheduling policy and estimates of a replay; shared by `simulate` and `compare`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Trace to replay. Without it, a built-in synthetic trace (seed 42, 2,000 jobs).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Trace format; detected from the first line when omitted.
    /// philly: Philly job table (timestamp,duration,num_gpus,gpu_time,cluster);
    /// dirlab: DIR-LAB Philly/Helios excerpts (u_id,user,gpu_num,cpu_num,node_num,interval,...);
    /// csv / jsonl: trainyard's own format (see README).
    #[arg(long, value_name = "FORMAT")]
    pub format: Option<String>,
    /// Scheduling policy: `fifo` (strict FIFO), `easy-backfill`, or a policy YAML file
    /// (backfill mode, default runtime estimate, tenant queues with GPU quotas).
    #[arg(long, value_name = "NAME|FILE", default_value = "easy-backfill")]
    pub policy: String,
    /// Where runtime estimates come from: `trace` (the trace's estimate, else the policy's
    /// default) or `actual` (each job's real runtime, as if users knew it exactly).
    #[arg(long, value_enum, default_value_t = Estimates::Trace)]
    pub estimates: Estimates,
}

/// Where runtime estimates come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Estimates {
    /// The trace's own estimate, else the policy's default.
    Trace,
    /// Each job's actual runtime.
    Actual,
}

impl From<Estimates> for EstimateSource {
    fn from(e: Estimates) -> EstimateSource {
        match e {
            Estimates::Trace => EstimateSource::Trace,
            Estimates::Actual => EstimateSource::Actual,
        }
    }
}

/// Flags of `trainyard trace synth`.
#[derive(Debug, Args)]
pub struct SynthArgs {
    /// Random seed; the same seed always gives the same trace.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Number of jobs (1 to 10,000,000).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub jobs: u32,
    /// Number of tenants, team-a, team-b, ... (1 to 10,000).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub tenants: u32,
    /// Mean seconds between submissions.
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    pub mean_interarrival: f64,
    /// GPUs per host, for shaping multi-host gangs (1 to 1,024).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub gpus_per_host: u32,
    /// Level named in the gangs' topology requests.
    #[arg(long, default_value = "rack", value_name = "LEVEL")]
    pub rack_level: String,
    /// Percent of jobs (0-100) made rich: even multi-host gangs cut into slices of 2 hosts inside
    /// one rack, the others given a 1-GPU leader pod set (written in the `slice` and `pod_sets`
    /// columns).
    #[arg(long, default_value_t = 0, value_name = "PERCENT", value_parser = clap::value_parser!(u32).range(0..=100))]
    pub rich: u32,
    /// Percent of one-set jobs of 1-, 2- or 4-GPU pods (0-100) that ask for a GPU layout inside
    /// the host: one PCIe switch per pod of 1 or 2 GPUs, one NUMA node per pod of 4 (written in
    /// the `gpu_layout` column; replay them on a cluster whose nodes name an `intra_node` layout).
    #[arg(long, default_value_t = 0, value_name = "PERCENT", value_parser = clap::value_parser!(u32).range(0..=100))]
    pub gpu_layout: u32,
    /// Output format.
    #[arg(long, value_enum, default_value_t = SynthFormat::Csv)]
    pub format: SynthFormat,
    /// Output file; standard output when omitted.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// Output formats of `trace synth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SynthFormat {
    /// trainyard CSV.
    Csv,
    /// trainyard JSON Lines.
    Jsonl,
}

impl Cli {
    /// Runs the chosen subcommand.
    pub fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Simulate(args) => crate::simulate::run(&args),
            Command::Place(args) => crate::place::run(&args),
            Command::Trace(TraceCommand::Synth(args)) => crate::synth::run(&args),
            Command::Compare(args) => crate::compare::run(&args),
            Command::Sweep(args) => crate::sweep_cmd::run(&args),
            Command::Crds(args) => run_crds(&args),
            Command::Controller(args) => crate::controller_cmd::run_controller(&args),
            Command::Render(args) => crate::render_cmd::run(&args),
            Command::Slurm(command) => crate::slurm_cmd::run(&command),
            Command::Import(command) => crate::import_cmd::run(&command),
            Command::Get(a) => crate::api_cmd::run(ApiCommand::Get(a)),
            Command::List(a) => crate::api_cmd::run(ApiCommand::List(a)),
            Command::Explain(a) => crate::api_cmd::run(ApiCommand::Explain(a)),
            Command::Eta(a) => crate::api_cmd::run(ApiCommand::Eta(a)),
            Command::Cancel(a) => crate::api_cmd::run(ApiCommand::Cancel(a)),
            Command::Queues(a) => crate::api_cmd::run(ApiCommand::Queues(a)),
            Command::Submit(a) => crate::api_cmd::run(ApiCommand::Submit(a)),
            Command::Watch(a) => crate::api_cmd::run(ApiCommand::Watch(a)),
            Command::Completions(args) => crate::cli_docs::completions(&args),
            Command::CliReference => crate::cli_docs::reference(),
        }
    }
}

fn run_crds(args: &CrdsArgs) -> anyhow::Result<()> {
    use anyhow::Context;
    use std::io::Write;
    match &args.out_dir {
        None => {
            let text = trainyard::crds::render_all()?;
            std::io::stdout().lock().write_all(text.as_bytes())?;
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            for (file, crd) in trainyard::crds::all() {
                let path = dir.join(file);
                std::fs::write(&path, trainyard::crds::to_yaml(&crd)?)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
    }
    Ok(())
}
