//! `trainyard sweep`: run every point of a sweep file in parallel on this machine, keep each
//! point's result in the output folder (a run that stops is resumed where it stopped), and
//! print and write the comparison.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, anyhow};
use clap::Args;
use trainyard_simulator::report::{Report, ReportContext};
use trainyard_simulator::sweep::{Point, PointResult, SweepSpec, compare, vary_trace};
use trainyard_simulator::trace::ReadOptions;
use trainyard_simulator::{EstimateSource, ReplayOptions, replay};

use crate::cluster_source::ClusterArgs;
use crate::inputs;

/// Flags of `trainyard sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// The sweep file (YAML): the trace, and the variations to compare (see README).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Folder for each point's result (`points/`), `sweep.csv` and `sweep.json`; points whose
    /// result is already there are not run again. Default: `<FILE without .yaml>-results`.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
    /// Points run at once. Default: one per core.
    #[arg(long, short = 'j', value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: Option<u32>,
    /// Run every point again, ignoring results kept from an earlier run.
    #[arg(long)]
    pub fresh: bool,
    /// Print no progress bar and no table (errors still go to stderr).
    #[arg(long, short)]
    pub quiet: bool,
}

/// A point ready to run: its files resolved and the key its result is kept under.
struct Task {
    point: Point,
    cluster: Option<PathBuf>,
    policy: String,
    /// Digest of the point and of every input it reads; `None` when one cannot be read.
    key: Result<String, String>,
}

/// Runs the sweep. Every point runs even when others fail; failures are listed with their
/// line in the sweep file, and make the command fail after the comparison is written.
pub fn run(args: &SweepArgs) -> Result<()> {
    let name = args.file.display().to_string();
    let spec = SweepSpec::parse(&inputs::read_text(&args.file)?, &name)?;
    let dir = args.file.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let out = args.out_dir.clone().unwrap_or_else(|| default_out_dir(&args.file));
    let points_dir = out.join("points");
    fs::create_dir_all(&points_dir).with_context(|| format!("cannot create {}", points_dir.display()))?;
    let trace = spec.trace.as_ref().map(|t| dir.join(t));
    let shared =
        format!("trace={} format={:?} actual={}", digest_file(trace.as_deref())?, spec.format, spec.actual_estimates);
    let tasks: Vec<Task> = spec.points.iter().map(|p| task(p, &dir, &shared)).collect();
    let results: Vec<Mutex<Option<Result<PointResult, String>>>> = tasks.iter().map(|_| Mutex::new(None)).collect();
    let mut kept = 0;
    if !args.fresh {
        for (task, slot) in tasks.iter().zip(&results) {
            if let Some(r) =
                task.key.as_ref().ok().and_then(|k| read_kept(&points_dir.join(format!("{k}.json")), &task.point))
            {
                *slot.lock().expect("no worker has run") = Some(Ok(r));
                kept += 1;
            }
        }
    }
    let to_run: Vec<usize> =
        (0..tasks.len()).filter(|&i| results[i].lock().expect("no worker yet").is_none()).collect();
    let workers = args.jobs.map_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()), |n| n as usize);
    let template = "sweeping [{bar:40}] {pos}/{len} points ({elapsed}, about {eta} left)";
    let bar = crate::simulate::progress_bar(args.quiet, to_run.len() as u64, template);
    let next = AtomicUsize::new(0);
    let traces = Traces { path: trace.clone(), read: Mutex::new(BTreeMap::new()) };
    std::thread::scope(|scope| {
        for _ in 0..workers.min(to_run.len()) {
            scope.spawn(|| {
                while let Some(&i) = to_run.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let result = run_point(&tasks[i], &spec, &traces, &points_dir);
                    *results[i].lock().expect("a worker panicked") = Some(result);
                    bar.inc(1);
                }
            });
        }
    });
    bar.finish_and_clear();
    let results: Vec<Result<PointResult, String>> = results
        .into_iter()
        .map(|r| r.into_inner().expect("a worker panicked").unwrap_or_else(|| Err("not run".into())))
        .collect();
    let comparison = compare(&spec.points, &results);
    write(&out.join("sweep.csv"), &comparison.to_csv())?;
    write(&out.join("sweep.json"), &comparison.to_json())?;
    let failed = comparison.failed.len();
    if !args.quiet {
        let mut text = comparison.render_table();
        text.push_str(&format!(
            "\n{} points: {} run, {kept} kept from an earlier run, {failed} failed; results in {}\n",
            tasks.len(),
            to_run.len(),
            out.display()
        ));
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()).context("cannot write to standard output")?;
    }
    if failed > 0 {
        for (label, line, error) in &comparison.failed {
            eprintln!("error: {name}: line {line}: point `{label}`: {error}");
        }
        return Err(anyhow!("{failed} of {} points failed", tasks.len()));
    }
    Ok(())
}

/// `sweeps/helios.yaml` -> `sweeps/helios-results`.
fn default_out_dir(file: &Path) -> PathBuf {
    let stem = file.file_stem().map_or_else(|| "sweep".into(), |s| s.to_string_lossy().into_owned());
    file.with_file_name(format!("{stem}-results"))
}

/// Resolves a point's files and the key of its result: a digest of the point, the trace and
/// the files it reads, so that a changed input runs the point again.
fn task(point: &Point, dir: &Path, shared: &str) -> Task {
    let cluster = (point.cluster != "demo").then(|| dir.join(&point.cluster));
    let builtin = trainyard_policies::BUILTIN_POLICIES.contains(&point.policy.as_str());
    let policy_file = (!builtin).then(|| dir.join(&point.policy));
    let policy = policy_file.as_ref().map_or_else(|| point.policy.clone(), |f| f.display().to_string());
    let key = (|| -> Result<String> {
        let text = format!(
            "{shared}\n{}\ncluster={}\npolicy={}",
            point.label(),
            digest_file(cluster.as_deref())?,
            digest_file(policy_file.as_deref())?
        );
        Ok(format!("{:016x}", fnv1a(text.as_bytes())))
    })()
    .map_err(|e| format!("{e:#}"));
    Task { point: point.clone(), cluster, policy, key }
}

/// One point's replay; its result is kept under its key.
/// The sweep's trace, read once per way of reading it (multi-host gangs are shaped by the
/// cluster's largest host), however many points share it.
struct Traces {
    path: Option<PathBuf>,
    read: Mutex<BTreeMap<u32, Arc<inputs::LoadedTrace>>>,
}

impl Traces {
    fn get(&self, format: Option<&str>, options: &ReadOptions) -> Result<Arc<inputs::LoadedTrace>> {
        // Held while reading: points that need the same reading wait for it instead of repeating it.
        let mut read = self.read.lock().map_err(|_| anyhow!("a worker panicked"))?;
        if let Some(loaded) = read.get(&options.gpus_per_host) {
            return Ok(Arc::clone(loaded));
        }
        let loaded = Arc::new(inputs::load_trace(self.path.as_deref(), format, options)?);
        read.insert(options.gpus_per_host, Arc::clone(&loaded));
        Ok(loaded)
    }
}

fn run_point(task: &Task, spec: &SweepSpec, traces: &Traces, points_dir: &Path) -> Result<PointResult, String> {
    let key = task.key.clone()?;
    let go = || -> Result<PointResult> {
        let point = &task.point;
        let cluster_args = ClusterArgs {
            cluster: task.cluster.clone(),
            cluster_format: None,
            levels: Vec::new(),
            kueue_topology: None,
            host_gpus: 8,
            devices: Vec::new(),
        };
        let cluster = cluster_args.load()?;
        let mut policy = inputs::load_policy(&task.policy)?;
        if let Some(placement) = point.placement {
            policy.placement = placement;
        }
        let topo = cluster.topology();
        let loaded = traces.get(spec.format.as_deref(), &inputs::read_options(topo, false))?;
        let jobs = vary_trace(&loaded.jobs, point.load, point.estimate_error, point.seed);
        let estimates = if spec.actual_estimates && point.estimate_error == 0.0 {
            EstimateSource::Actual
        } else {
            EstimateSource::Trace
        };
        let context = ReportContext {
            cluster: topo.name().to_string(),
            cluster_gpus: cluster.total_capacity().gpus,
            cluster_hosts: topo.host_count() as u64,
            trace: loaded.name.clone(),
            trace_format: loaded.format.clone(),
            policy: policy.name.clone(),
            skipped_rows: 0,
        };
        let gpus = context.cluster_gpus;
        let options = ReplayOptions { estimates, ..ReplayOptions::default() };
        let result = replay(cluster, policy, &jobs, options, &mut |_| {}).context("replay failed")?;
        let report = Report::new(context, &result.outcomes, gpus);
        Ok(PointResult::of(point, &report.summary))
    };
    let result = go().map_err(|e| format!("{e:#}"))?;
    let json = serde_json::to_string_pretty(&result).map_err(|e| e.to_string())? + "\n";
    // Written whole, then renamed: a run stopped half-way leaves no half-written result.
    let path = points_dir.join(format!("{key}.json"));
    let partial = points_dir.join(format!("{key}.json.partial"));
    fs::write(&partial, json)
        .and_then(|()| fs::rename(&partial, &path))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(result)
}

/// A result kept from an earlier run, if it is there, reads back and is this point's.
fn read_kept(path: &Path, point: &Point) -> Option<PointResult> {
    let text = fs::read_to_string(path).ok()?;
    let result: PointResult = serde_json::from_str(&text).ok()?;
    (result.point == point.label()).then_some(result)
}

/// A digest of a file's bytes (`builtin` for none).
fn digest_file(path: Option<&Path>) -> Result<String> {
    let Some(path) = path else { return Ok("builtin".into()) };
    let bytes = fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(format!("{:016x}", fnv1a(&bytes)))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

fn write(path: &Path, text: &str) -> Result<()> {
    fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}
