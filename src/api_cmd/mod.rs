//! The researcher commands (`trainyard get|list|explain|eta|cancel|queues|submit|watch`, also
//! `kubectl trainyard ...`): each one call to the trainyard API as the kubeconfig's user, printed
//! as a table or as JSON / YAML.

pub mod connection;
mod exec_credential;
pub mod output;

use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow};
use clap::{Args, ValueEnum};

use crate::output::Output;
use connection::Connection;
use trainyard::grpc::client::connect;
use trainyard::grpc::v1;

/// One TrainJob by name.
#[derive(Debug, Args)]
pub struct NamedArgs {
    /// The TrainJob's name.
    pub name: String,
    #[command(flatten)]
    pub connection: Connection,
}

/// A TrainJob's state, as `list --state` takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StateArg {
    /// Waiting for admission.
    Pending,
    /// Admitted and placed.
    Admitted,
    /// Can never run as asked.
    Unschedulable,
    /// Being stopped for another gang.
    Preempted,
    /// Nodes under it were lost.
    Degraded,
    /// Finished, suspended or invalid.
    Inactive,
}

impl StateArg {
    fn proto(self) -> v1::JobState {
        match self {
            StateArg::Pending => v1::JobState::Pending,
            StateArg::Admitted => v1::JobState::Admitted,
            StateArg::Unschedulable => v1::JobState::Unschedulable,
            StateArg::Preempted => v1::JobState::Preempted,
            StateArg::Degraded => v1::JobState::Degraded,
            StateArg::Inactive => v1::JobState::Inactive,
        }
    }
}

/// Flags of `trainyard list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Every namespace the caller may list.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Only this queue's TrainJobs.
    #[arg(long, value_name = "NAME")]
    pub queue: Option<String>,
    /// Only TrainJobs in this state.
    #[arg(long, value_enum)]
    pub state: Option<StateArg>,
    /// Only the trials of this hyperparameter search (OptimizationJob).
    #[arg(long, value_name = "NAME")]
    pub search: Option<String>,
    #[command(flatten)]
    pub connection: Connection,
}

/// Flags of `trainyard eta`: one TrainJob, or every remaining trial of a search.
#[derive(Debug, Args)]
pub struct EtaArgs {
    /// The TrainJob's name.
    #[arg(required_unless_present = "search", conflicts_with = "search")]
    pub name: Option<String>,
    /// A hyperparameter search (OptimizationJob): when its remaining trials start.
    #[arg(long, value_name = "NAME")]
    pub search: Option<String>,
    #[command(flatten)]
    pub connection: Connection,
}

/// Flags of `trainyard cancel`.
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// The TrainJob's name.
    pub name: String,
    /// Check the call (authentication, permission) without deleting anything.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub connection: Connection,
}

/// Flags of `trainyard queues`.
#[derive(Debug, Args)]
pub struct QueuesArgs {
    #[command(flatten)]
    pub connection: Connection,
}

/// Flags of `trainyard submit`: a manifest, or a plain gang described by flags.
#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// A TrainJob manifest (YAML or JSON); `-` reads standard input.
    #[arg(short = 'f', long = "filename", value_name = "FILE", conflicts_with_all = ["name", "nodes"])]
    pub file: Option<PathBuf>,
    /// The gang's TrainJob name.
    #[arg(long, value_name = "NAME", requires_all = ["queue", "runtime", "nodes"])]
    pub name: Option<String>,
    /// Its trainyard queue.
    #[arg(long, value_name = "NAME")]
    pub queue: Option<String>,
    /// The ClusterTrainingRuntime it runs on.
    #[arg(long, value_name = "NAME")]
    pub runtime: Option<String>,
    /// Pods (nodes) in the gang.
    #[arg(long, value_name = "N")]
    pub nodes: Option<u32>,
    /// GPUs of each pod.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub gpus_per_node: u32,
    /// Trainer image; default: the runtime's.
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// trainyard priority class.
    #[arg(long, value_name = "NAME")]
    pub priority_class: Option<String>,
    /// How long it will run (`90m`, `4h`, `1h30m`), for backfill and start-time estimates.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub runtime_estimate: Option<u64>,
    /// Validate and authorise only; nothing is created.
    #[arg(long)]
    pub dry_run: bool,
    /// The trainer's command, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
    #[command(flatten)]
    pub connection: Connection,
}

/// Flags of `trainyard watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Every namespace the caller may watch.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Only this queue's TrainJobs.
    #[arg(long, value_name = "NAME")]
    pub queue: Option<String>,
    /// Stop after this many events (the opening state counts); default: until interrupted.
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    #[command(flatten)]
    pub connection: Connection,
}

fn duration(text: &str) -> Result<u64, String> {
    trainyard_policies::parse_duration(text)
        .filter(|&s| s > 0)
        .ok_or_else(|| format!("{text:?} is not a duration such as 90m, 4h or 1h30m"))
}

/// A researcher command.
#[derive(Debug)]
pub enum ApiCommand {
    /// `get NAME`.
    Get(NamedArgs),
    /// `list`.
    List(ListArgs),
    /// `explain NAME`.
    Explain(NamedArgs),
    /// `eta NAME` or `eta --search NAME`.
    Eta(EtaArgs),
    /// `cancel NAME`.
    Cancel(CancelArgs),
    /// `queues`.
    Queues(QueuesArgs),
    /// `submit`.
    Submit(SubmitArgs),
    /// `watch`.
    Watch(WatchArgs),
}

/// A server refusal in one line: its gRPC code and message.
fn refused(status: tonic::Status) -> anyhow::Error {
    anyhow!("{:?}: {}", status.code(), status.message())
}

/// Runs `command` on a runtime of its own, printing to standard output.
pub fn run(command: ApiCommand) -> Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let stdout = std::io::stdout();
    runtime.block_on(execute(command, &mut stdout.lock()))
}

/// Carries `command` out, writing what it prints to `out`.
pub async fn execute(command: ApiCommand, out: &mut impl Write) -> Result<()> {
    let job_ref = |ns: &str, name: &str| Some(v1::JobRef { namespace: ns.into(), name: name.into() });
    match command {
        ApiCommand::Get(a) => {
            let (endpoint, ns) = a.connection.resolve()?;
            let job =
                connect(&endpoint).await?.get(v1::GetRequest { job: job_ref(&ns, &a.name) }).await.map_err(refused)?;
            write!(out, "{}", output::job(job.get_ref(), a.connection.output)?)?;
        }
        ApiCommand::List(a) => {
            let (endpoint, ns) = a.connection.resolve()?;
            let request = v1::ListRequest {
                namespace: if a.all_namespaces { String::new() } else { ns },
                queue: a.queue.unwrap_or_default(),
                state: a.state.map(|s| s.proto() as i32).unwrap_or(0),
                search: a.search.unwrap_or_default(),
            };
            let list = connect(&endpoint).await?.list(request).await.map_err(refused)?;
            write!(out, "{}", output::jobs(&list.get_ref().jobs, a.connection.output, a.all_namespaces)?)?;
        }
        ApiCommand::Explain(a) => {
            let (endpoint, ns) = a.connection.resolve()?;
            let why = connect(&endpoint)
                .await?
                .explain(v1::ExplainRequest { job: job_ref(&ns, &a.name) })
                .await
                .map_err(refused)?;
            write!(out, "{}", output::explanation(why.get_ref(), a.connection.output)?)?;
        }
        ApiCommand::Eta(a) => {
            let (endpoint, ns) = a.connection.resolve()?;
            let mut client = connect(&endpoint).await?;
            match (&a.search, &a.name) {
                (Some(search), _) => {
                    let request =
                        v1::ListRequest { namespace: ns.clone(), search: search.clone(), ..Default::default() };
                    let trials = client.list(request).await.map_err(refused)?.into_inner().jobs;
                    if trials.is_empty() {
                        anyhow::bail!("no trials of search {search} in namespace {ns}");
                    }
                    let mut answers = Vec::new();
                    for trial in trials.iter().filter(|t| t.state() != v1::JobState::Inactive) {
                        let request = v1::EtaRequest { job: job_ref(&trial.namespace, &trial.name) };
                        match client.eta(request).await {
                            Ok(answer) => answers.push(answer.into_inner()),
                            // Ended and deleted since the list: nothing remains to start.
                            Err(status) if status.code() == tonic::Code::NotFound => {}
                            Err(status) => return Err(refused(status)),
                        }
                    }
                    write!(out, "{}", output::search_eta(search, &trials, &answers, a.connection.output)?)?;
                }
                (None, name) => {
                    let name = name.as_deref().unwrap_or_default();
                    let eta = client.eta(v1::EtaRequest { job: job_ref(&ns, name) }).await.map_err(refused)?;
                    write!(out, "{}", output::eta(eta.get_ref(), a.connection.output)?)?;
                }
            }
        }
        ApiCommand::Cancel(a) => {
            let (endpoint, ns) = a.connection.resolve()?;
            let request = v1::CancelRequest { job: job_ref(&ns, &a.name), dry_run: a.dry_run };
            let gone = connect(&endpoint).await?.cancel(request).await.map_err(refused)?;
            let uid = &gone.get_ref().uid;
            let value = serde_json::json!({ "namespace": ns, "name": a.name, "uid": uid, "dryRun": a.dry_run });
            match a.connection.output {
                Output::Json | Output::Yaml => {
                    write!(out, "{}", crate::output::structured(&value, a.connection.output)?)?
                }
                _ => writeln!(out, "trainjob {ns}/{} cancelled{}", a.name, if a.dry_run { " (dry run)" } else { "" })?,
            }
        }
        ApiCommand::Queues(a) => {
            let (endpoint, _) = a.connection.resolve()?;
            let queues = connect(&endpoint).await?.list_queues(v1::ListQueuesRequest {}).await.map_err(refused)?;
            write!(out, "{}", output::queues(&queues.get_ref().queues, a.connection.output)?)?;
        }
        ApiCommand::Submit(a) => submit(a, out).await?,
        ApiCommand::Watch(a) => {
            let (endpoint, ns) = a.connection.resolve()?;
            let request = v1::WatchRequest {
                namespace: if a.all_namespaces { String::new() } else { ns },
                queue: a.queue.unwrap_or_default(),
            };
            let format = a.connection.output;
            if let Some(header) = output::event_header(format) {
                write!(out, "{header}")?;
            }
            let mut seen = 0u64;
            let mut failed = None;
            trainyard::grpc::client::watch(&endpoint, request, |event| {
                let written =
                    output::event(&event, format).and_then(|text| Ok(write!(out, "{text}").and_then(|_| out.flush())?));
                if let Err(e) = written {
                    failed = Some(e);
                    return ControlFlow::Break(());
                }
                seen += 1;
                if a.count.is_some_and(|n| seen >= n) { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
            })
            .await?;
            if let Some(e) = failed {
                return Err(e);
            }
        }
    }
    Ok(())
}

async fn submit(a: SubmitArgs, out: &mut impl Write) -> Result<()> {
    let job = match (&a.file, &a.name) {
        (Some(path), _) => {
            let text = if path.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin()).context("reading the manifest from standard input")?
            } else {
                crate::inputs::read_text(path)?
            };
            v1::submit_request::Job::Manifest(text)
        }
        (None, Some(name)) => v1::submit_request::Job::Gang(v1::GangSpec {
            name: name.clone(),
            queue: a.queue.clone().unwrap_or_default(),
            runtime: a.runtime.clone().unwrap_or_default(),
            nodes: a.nodes.unwrap_or_default(),
            gpus_per_node: a.gpus_per_node,
            image: a.image.clone().unwrap_or_default(),
            command: a.command.clone(),
            priority_class: a.priority_class.clone().unwrap_or_default(),
            runtime_estimate_seconds: a.runtime_estimate.unwrap_or_default(),
        }),
        (None, None) => {
            anyhow::bail!("submit needs -f FILE (a TrainJob manifest) or a gang: --name --queue --runtime --nodes")
        }
    };
    let (endpoint, ns) = a.connection.resolve()?;
    let request = v1::SubmitRequest { namespace: ns, job: Some(job), dry_run: a.dry_run };
    let answer = connect(&endpoint).await?.submit(request).await.map_err(refused)?.into_inner();
    let job = answer.job.unwrap_or_default();
    match a.connection.output {
        Output::Json | Output::Yaml => {
            let manifest: serde_json::Value = serde_json::from_str(&answer.manifest).unwrap_or_default();
            write!(out, "{}", crate::output::structured(&manifest, a.connection.output)?)?;
        }
        _ => writeln!(
            out,
            "trainjob {}/{} submitted{}",
            job.namespace,
            job.name,
            if a.dry_run { " (dry run)".to_string() } else { format!(" (uid {})", job.uid) }
        )?,
    }
    Ok(())
}
