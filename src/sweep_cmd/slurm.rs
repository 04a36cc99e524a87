//! `trainyard sweep --slurm`: the points not kept yet as one Slurm job array through trainyard's
//! Slurm bridge, each task running `trainyard sweep FILE --point-from-env SLURM_ARRAY_TASK_ID`
//! into the same output folder; then a wait for the array and the comparison, as `--gather`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use trainyard_bridges::slurm::{
    DEFAULT_RENDEZVOUS_PORT, DEFAULT_TASKS_PER_NODE, SlurmGang, SlurmSpecError, format_array_indices,
};
use trainyard_slurm::JobInfo;
use trainyard_slurm::bridge::Via as Client;

use super::points::Task;
use super::{Sweep, SweepArgs};
use crate::slurm_cmd::{Connection, Via};
use trainyard_topology::rng::fnv1a;

/// Flags of `trainyard sweep --slurm`.
#[derive(Debug, Args)]
pub struct SlurmFlags {
    /// Partition of the array's tasks. Default: the cluster's default partition.
    #[arg(long, value_name = "NAME", requires = "slurm", help_heading = "On Slurm")]
    pub partition: Option<String>,
    /// Account charged for the tasks.
    #[arg(long, value_name = "NAME", requires = "slurm", help_heading = "On Slurm")]
    pub account: Option<String>,
    /// Quality of service of the tasks.
    #[arg(long, value_name = "NAME", requires = "slurm", help_heading = "On Slurm")]
    pub qos: Option<String>,
    /// Wall-clock limit of each task, in minutes. Default: the partition's.
    #[arg(long, value_name = "MINUTES", value_parser = clap::value_parser!(u32).range(1..), requires = "slurm",
          help_heading = "On Slurm")]
    pub time_limit: Option<u32>,
    /// Which client submits the array.
    #[arg(long, value_enum, default_value = "auto", requires = "slurm", help_heading = "On Slurm")]
    pub via: Via,
    /// Seconds between two looks at the array while waiting for it.
    #[arg(long, value_name = "SECONDS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..),
          requires = "slurm", help_heading = "On Slurm")]
    pub poll_seconds: u64,
}

/// How the array went: its job id, and each task's end as Slurm last reported it.
struct Run {
    array_id: u64,
    ends: BTreeMap<u32, JobInfo>,
}

/// Submits the missing points as one array (or follows the array of an earlier run that is
/// still going), waits for it to end, then writes and prints the comparison.
pub(super) fn run(sweep: &Sweep, args: &SweepArgs) -> Result<()> {
    let points_dir = sweep.create_points_dir()?;
    // Tasks start on other nodes, in another folder: every path they get is absolute.
    let out = fs::canonicalize(&sweep.out).with_context(|| format!("cannot resolve {}", sweep.out.display()))?;
    let file = fs::canonicalize(&sweep.file).with_context(|| format!("cannot resolve {}", sweep.file.display()))?;
    let exe = std::env::current_exe().context("cannot find the trainyard binary the tasks are to run")?;
    let logs = out.join("slurm");
    fs::create_dir_all(&logs).with_context(|| format!("cannot create {}", logs.display()))?;
    let tasks = sweep.tasks();
    if args.fresh {
        // A task that fails must show as failed, not as the result an earlier run left.
        for path in tasks.iter().filter_map(|t| t.result_path(&points_dir)) {
            match fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(anyhow!("cannot remove {}: {e}", path.display()));
                }
                _ => {}
            }
        }
    }
    // Points whose inputs cannot be read are not submitted: they fail here as they would locally.
    let to_run: Vec<u32> = tasks
        .iter()
        .enumerate()
        .filter(|(_, t)| t.key.is_ok() && t.kept(&points_dir).is_none())
        .map(|(i, _)| u32::try_from(i).expect("a sweep has at most 100,000 points"))
        .collect();
    let kept = tasks.iter().filter(|t| t.kept(&points_dir).is_some()).count();
    let run = if to_run.is_empty() {
        None
    } else {
        let gang = array_gang(args, &exe, &file, &out, &logs, &to_run)?;
        Some(submit_and_wait(&gang, args, &to_run)?)
    };
    let results = sweep.kept_results(&tasks, |i, task| match &run {
        Some(run) => task_failure(run, i, task, &logs),
        None => super::no_result(&task.key, i),
    });
    let failed = results.iter().filter(|r| r.is_err()).count();
    let on = run.as_ref().map_or_else(String::new, |r| format!(" (job array {})", r.array_id));
    let closing = format!(
        "{} points: {} run on Slurm{on}, {kept} kept from an earlier run, {failed} failed",
        tasks.len(),
        to_run.len()
    );
    sweep.finish(&results, &closing, args.quiet)
}

/// The job array: one single-node task per index, running this very binary on one point.
fn array_gang(args: &SweepArgs, exe: &Path, file: &Path, out: &Path, logs: &Path, to_run: &[u32]) -> Result<SlurmGang> {
    let flags = &args.slurm_flags;
    let text = |p: &Path| p.display().to_string();
    let stem = file.file_stem().map_or_else(|| "sweep".into(), |s| s.to_string_lossy().into_owned());
    let name: String = format!("sweep-{stem}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' })
        .collect();
    // One gang per output folder and sweep file: a second run while the array is still going
    // follows it (the bridge finds it by this id) instead of running its points twice.
    let gang_id = format!("sweep-{:016x}", fnv1a(format!("{}\n{}", out.display(), file.display()).as_bytes()));
    let gang = SlurmGang {
        name,
        gang: gang_id,
        partition: flags.partition.clone(),
        account: flags.account.clone(),
        qos: flags.qos.clone(),
        nodes: 1,
        tasks_per_node: DEFAULT_TASKS_PER_NODE,
        gpus_per_node: 0,
        cpus_per_task: Some(args.task.task_cpus),
        memory_mib: args.task.task_memory_mib,
        time_limit_minutes: flags.time_limit,
        array: Some(to_run.to_vec()),
        placement: None,
        command: vec![
            text(exe),
            "sweep".into(),
            text(file),
            "--out-dir".into(),
            text(out),
            "--point-from-env".into(),
            "SLURM_ARRAY_TASK_ID".into(),
            "--quiet".into(),
        ],
        env: BTreeMap::new(),
        rank_env: Vec::new(),
        master_env: BTreeMap::new(),
        workdir: text(out),
        output: Some(format!("{}/%A_%a.out", text(logs))),
        rendezvous_port: DEFAULT_RENDEZVOUS_PORT,
    };
    gang.validate("the sweep's Slurm job array").map_err(|e| match &e {
        SlurmSpecError::Invalid { field, message, .. } => {
            let flag = match field.as_str() {
                "workdir" | "output" => "--out-dir (the tasks' working folder)",
                "partition" => "--partition",
                "account" => "--account",
                "qos" => "--qos",
                _ => "the sweep file's or the trainyard binary's path",
            };
            anyhow!("cannot run the sweep on Slurm: {flag}: {message}")
        }
        _ => anyhow!("cannot run the sweep on Slurm: {e}"),
    })?;
    Ok(gang)
}

/// Submits the array through the bridge and polls it until every task has ended.
fn submit_and_wait(gang: &SlurmGang, args: &SweepArgs, to_run: &[u32]) -> Result<Run> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let bridge = crate::slurm_cmd::bridge(&Connection { via: args.slurm_flags.via }).await?;
        let submission = bridge.submit_array(gang).await.context("submitting the sweep's Slurm job array")?;
        let logs = gang.output.as_deref().and_then(|o| o.strip_suffix("/%A_%a.out")).unwrap_or_default();
        if !args.quiet {
            match submission.via {
                None => eprintln!(
                    "following Slurm job array {}, submitted by an earlier run and still going",
                    submission.job_id
                ),
                Some(via) => eprintln!(
                    "submitted Slurm job array {} ({} points: {}) via {}; task output in {logs}",
                    submission.job_id,
                    to_run.len(),
                    format_array_indices(to_run),
                    if via == Client::Rest { "slurmrestd" } else { "sbatch" }
                ),
            }
        }
        let template = "on Slurm [{bar:40}] {pos}/{len} points ended ({elapsed})";
        let bar = crate::simulate::progress_bar(args.quiet, to_run.len() as u64, template);
        let poll = Duration::from_secs(args.slurm_flags.poll_seconds);
        let mut array_id = submission.job_id;
        let mut known: BTreeSet<u32> = to_run.iter().copied().collect();
        let mut ends: BTreeMap<u32, JobInfo> = BTreeMap::new();
        loop {
            // Slurm forgets ended jobs after MinJobAge (minutes): an array it no longer reports has
            // ended, and tasks it no longer lists ended before this look.
            let Some(view) = bridge.array(&gang.gang).await? else { break };
            array_id = view.job_id;
            let mut going = 0;
            for (index, job) in view.tasks() {
                known.insert(index);
                if job.state.is_terminal() {
                    ends.insert(index, job.clone());
                } else {
                    going += 1;
                }
            }
            // Waiting for something that never comes (a limit over the partition's, an unknown
            // account) would wait forever: cancel and say why.
            if let Some(stuck) = view.records.iter().find(|j| j.never_starts(None)) {
                bar.finish_and_clear();
                let _ = bridge.cancel_array(&gang.gang).await;
                bail!("Slurm will never start job array {}: {} (the array is cancelled)", view.job_id, stuck.reason);
            }
            bar.set_length(known.len() as u64);
            bar.set_position((known.len() - going) as u64);
            if going == 0 {
                break;
            }
            tokio::time::sleep(poll).await;
        }
        bar.finish_and_clear();
        Ok(Run { array_id, ends })
    })
}

/// Why point `index` has no result after the array: its task's end, exit code and output file
/// (with the error the task printed, when it printed one).
fn task_failure(run: &Run, index: usize, task: &Task, logs: &Path) -> String {
    let key = task.key.as_deref().unwrap_or_default();
    let Some(job) = u32::try_from(index).ok().and_then(|i| run.ends.get(&i)) else {
        return format!(
            "no result (points/{key}.json) after Slurm job array {}; its task {index} was not seen ending",
            run.array_id
        );
    };
    let output: PathBuf = logs.join(format!("{}_{index}.out", run.array_id));
    // Slurm reports the task's wait status: the exit code in the high byte, a signal in the low bits.
    let how = match job.exit_code {
        Some(code) if code & 0x7f != 0 => format!(", signal {}", code & 0x7f),
        Some(code) if code >> 8 != 0 => format!(", exit code {}", code >> 8),
        _ => String::new(),
    };
    // The task's own `error: FILE: line L: point `LABEL`: CAUSE`; the point is named already.
    let named = format!("point `{}`: ", task.point.label());
    let said = fs::read_to_string(&output)
        .ok()
        .and_then(|text| {
            let line = text.lines().find_map(|l| l.strip_prefix("error: "))?.to_string();
            Some(format!(": {}", line.split_once(&named).map_or(line.as_str(), |(_, cause)| cause)))
        })
        .unwrap_or_default();
    format!(
        "no result (points/{key}.json): Slurm task {}_{index} ended {}{how}; output in {}{said}",
        run.array_id,
        job.slurm_state,
        output.display()
    )
}
