//! `trainyard sweep`: run every point of a sweep file in parallel on this machine, keep each
//! point's result in the output folder (a run that stops is resumed where it stopped), and
//! print and write the comparison. The same sweep also runs one point per process elsewhere:
//! `--point` runs one, `--gather` compares what was kept, `--slurm` runs the missing points as
//! one Slurm job array and gathers, `--k8s-indexed-job` prints a Kubernetes Indexed Job.
//! Every way writes the same result files, so the comparison is the same byte for byte.

mod indexed_job;
mod points;
mod slurm;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, Result, anyhow, bail};
use clap::{ArgGroup, Args};
use trainyard_simulator::sweep::{PointResult, SweepSpec, compare};

use crate::inputs;
use points::{Task, Traces, digest_file};

/// Flags of `trainyard sweep`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("mode").args(["point", "point_from_env", "gather", "slurm", "k8s_indexed_job"])))]
#[command(group(ArgGroup::new("elsewhere").args(["slurm", "k8s_indexed_job"])))]
pub struct SweepArgs {
    /// The sweep file (YAML): the trace, and the variations to compare (see README).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Folder for each point's result (`points/`), `sweep.csv` and `sweep.json`; points whose
    /// result is already there are not run again. Default: `<FILE without .yaml>-results`.
    #[arg(long, value_name = "DIR", conflicts_with = "k8s_indexed_job")]
    pub out_dir: Option<PathBuf>,
    /// Points run at once. Default: one per core.
    #[arg(long, short = 'j', value_name = "N", value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "mode")]
    pub jobs: Option<u32>,
    /// Run every point again, ignoring results kept from an earlier run (with --slurm, those
    /// results are deleted before the array is submitted).
    #[arg(long, conflicts_with_all = ["gather", "k8s_indexed_job"])]
    pub fresh: bool,
    /// Print no progress bar and no table (errors still go to stderr).
    #[arg(long, short)]
    pub quiet: bool,
    /// Also write the comparison as a self-contained HTML page (SVG charts, no network): each
    /// metric across the groups with its 95% interval, every point and every failure.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["point", "point_from_env", "k8s_indexed_job"])]
    pub html: Option<PathBuf>,
    /// Run only this point (0-based, in the sweep's order: the grid's combinations, then
    /// `points`) and keep its result; no comparison. A kept result is not run again.
    #[arg(long, value_name = "N", help_heading = "One point per process")]
    pub point: Option<usize>,
    /// As --point, with the index read from this environment variable: SLURM_ARRAY_TASK_ID in
    /// a Slurm job array, JOB_COMPLETION_INDEX in a Kubernetes Indexed Job.
    #[arg(long, value_name = "VAR", help_heading = "One point per process")]
    pub point_from_env: Option<String>,
    /// Run nothing: compare the results kept in the output folder. Points without one are
    /// listed with their line, and the command fails after writing the comparison it has.
    #[arg(long, help_heading = "One point per process")]
    pub gather: bool,
    /// Run the points not kept yet as one Slurm job array (one point per task, through
    /// slurmrestd when SLURMRESTD_URL is set, else sbatch), wait for it, then gather. The
    /// output folder must be on a filesystem every Slurm node sees.
    #[arg(long, help_heading = "On Slurm")]
    pub slurm: bool,
    #[command(flatten)]
    pub slurm_flags: slurm::SlurmFlags,
    /// Print a Kubernetes Indexed Job (and a ConfigMap of the inputs) running one point per
    /// completion index in this container image, which has `trainyard` on its PATH.
    #[arg(long, value_name = "IMAGE", requires = "results_pvc", help_heading = "On Kubernetes")]
    pub k8s_indexed_job: Option<String>,
    #[command(flatten)]
    pub k8s: indexed_job::IndexedJobFlags,
    #[command(flatten)]
    pub task: TaskFlags,
}

/// What each task of a distributed run asks for.
#[derive(Debug, Args)]
pub struct TaskFlags {
    /// CPUs of each task (Slurm --cpus-per-task, Kubernetes CPU request). A point runs on one.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..),
          requires = "elsewhere", help_heading = "On Slurm or Kubernetes")]
    pub task_cpus: u32,
    /// Memory of each task in MiB (Slurm --mem, Kubernetes memory request and limit).
    /// Default: Slurm's default; no request on Kubernetes.
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..),
          requires = "elsewhere", help_heading = "On Slurm or Kubernetes")]
    pub task_memory_mib: Option<u64>,
}

/// Runs the sweep as the flags ask.
pub fn run(args: &SweepArgs) -> Result<()> {
    if let Some(image) = &args.k8s_indexed_job {
        return indexed_job::run(args, image);
    }
    let mut sweep = Sweep::load(&args.file, args.out_dir.clone())?;
    sweep.html = args.html.clone();
    if let Some(index) = point_index(args)? {
        return sweep.run_one(index, args.fresh, args.quiet);
    }
    if args.gather {
        return sweep.gather(args.quiet);
    }
    if args.slurm {
        return slurm::run(&sweep, args);
    }
    sweep.run_here(args)
}

/// The point `--point` or `--point-from-env` names, if any.
fn point_index(args: &SweepArgs) -> Result<Option<usize>> {
    let Some(var) = &args.point_from_env else { return Ok(args.point) };
    let value = std::env::var(var).map_err(|_| {
        anyhow!(
            "--point-from-env {var}: {var} is not set (a Slurm array task has SLURM_ARRAY_TASK_ID, a pod of \
             a Kubernetes Indexed Job JOB_COMPLETION_INDEX)"
        )
    })?;
    let index = value.trim().parse().map_err(|_| anyhow!("--point-from-env {var}: `{value}` is not a point index"))?;
    Ok(Some(index))
}

/// A parsed sweep file and where its results go.
pub(super) struct Sweep {
    /// The sweep file as given, and as errors name it.
    file: PathBuf,
    name: String,
    spec: SweepSpec,
    /// The sweep file's folder: paths in it are relative to it.
    dir: PathBuf,
    out: PathBuf,
    trace: Option<PathBuf>,
    /// What every point's key holds of the trace and how it is read.
    shared: String,
    /// Where the HTML page of the comparison goes, if anywhere.
    html: Option<PathBuf>,
}

impl Sweep {
    /// Reads and checks the sweep file and digests its trace; writes nothing.
    fn load(file: &Path, out: Option<PathBuf>) -> Result<Sweep> {
        let name = file.display().to_string();
        let spec = SweepSpec::parse(&inputs::read_text(file)?, &name)?;
        let dir = file.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        let out = out.unwrap_or_else(|| default_out_dir(file));
        let trace = spec.trace.as_ref().map(|t| dir.join(t));
        let digest = digest_file(trace.as_deref())
            .map_err(|e| anyhow::anyhow!("{name}: line {}: field `trace`: {e:#}", spec.trace_line))?;
        let shared = format!("trace={} format={:?} actual={}", digest, spec.format, spec.actual_estimates);
        Ok(Sweep { file: file.to_path_buf(), name, spec, dir, out, trace, shared, html: None })
    }

    fn points_dir(&self) -> PathBuf {
        self.out.join("points")
    }

    fn create_points_dir(&self) -> Result<PathBuf> {
        let dir = self.points_dir();
        fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(dir)
    }

    fn task(&self, index: usize) -> Task {
        let point = &self.spec.points[index];
        // Points with failures also hang on how hosts are repaired and gangs restart.
        match point.mtbf {
            Some(_) => Task::new(point, &self.dir, &format!("{} failures={:?}", self.shared, self.spec.failures)),
            None => Task::new(point, &self.dir, &self.shared),
        }
    }

    fn tasks(&self) -> Vec<Task> {
        (0..self.spec.points.len()).map(|i| self.task(i)).collect()
    }

    /// Every point's kept result; a point without one gets the error `missing` gives it (a point
    /// whose inputs cannot be read gets that error, as in a run here).
    fn kept_results(
        &self,
        tasks: &[Task],
        missing: impl Fn(usize, &Task) -> String,
    ) -> Vec<Result<PointResult, String>> {
        let dir = self.points_dir();
        tasks
            .iter()
            .enumerate()
            .map(|(i, task)| match (&task.key, task.kept(&dir)) {
                (Err(e), _) => Err(e.clone()),
                (Ok(_), Some(result)) => Ok(result),
                (Ok(_), None) => Err(missing(i, task)),
            })
            .collect()
    }

    /// `--point N`: runs that point alone and keeps its result.
    fn run_one(&self, index: usize, fresh: bool, quiet: bool) -> Result<()> {
        let count = self.spec.points.len();
        if index >= count {
            bail!("--point {index}: {} has {count} points, numbered 0 to {}", self.name, count - 1);
        }
        let points_dir = self.create_points_dir()?;
        let task = self.task(index);
        let label = task.point.label();
        if !fresh && task.kept(&points_dir).is_some() {
            if !quiet {
                println!("point {index} ({label}): kept from an earlier run");
            }
            return Ok(());
        }
        task.run(&self.spec, &Traces::new(self.trace.clone()), &points_dir)
            .map_err(|e| anyhow!("{}: line {}: point `{label}`: {e}", self.name, task.point.line))?;
        if !quiet {
            let path = task.result_path(&points_dir).unwrap_or_default();
            println!("point {index} ({label}): result in {}", path.display());
        }
        Ok(())
    }

    /// `--gather`: the comparison of what is kept.
    fn gather(&self, quiet: bool) -> Result<()> {
        let points_dir = self.points_dir();
        if !points_dir.is_dir() {
            bail!("--gather: no results in {}: {} does not exist", self.out.display(), points_dir.display());
        }
        let tasks = self.tasks();
        let results = self.kept_results(&tasks, |i, task| no_result(&task.key, i));
        let kept = results.iter().filter(|r| r.is_ok()).count();
        let missing = results.len() - kept;
        let closing = format!("{} points: {kept} kept, {missing} without a result", results.len());
        self.finish(&results, &closing, quiet)
    }

    /// Runs every point not kept yet on this machine, in parallel.
    fn run_here(&self, args: &SweepArgs) -> Result<()> {
        let points_dir = self.create_points_dir()?;
        let tasks = self.tasks();
        let results: Vec<Mutex<Option<Result<PointResult, String>>>> = tasks
            .iter()
            .map(|task| Mutex::new(if args.fresh { None } else { task.kept(&points_dir).map(Ok) }))
            .collect();
        let to_run: Vec<usize> =
            (0..tasks.len()).filter(|&i| results[i].lock().expect("no worker yet").is_none()).collect();
        let kept = tasks.len() - to_run.len();
        let workers =
            args.jobs.map_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()), |n| n as usize);
        if !args.quiet {
            // Said before anything runs, so a grid larger than meant can be stopped at once.
            eprintln!(
                "{}: {} points: {} to run on {} workers, {kept} kept from an earlier run",
                self.name,
                tasks.len(),
                to_run.len(),
                workers.min(to_run.len()).max(1)
            );
        }
        let template = "sweeping [{bar:40}] {pos}/{len} points ({elapsed}, about {eta} left)";
        let bar = crate::simulate::progress_bar(args.quiet, to_run.len() as u64, template);
        let next = AtomicUsize::new(0);
        let traces = Traces::new(self.trace.clone());
        std::thread::scope(|scope| {
            for _ in 0..workers.min(to_run.len()) {
                scope.spawn(|| {
                    while let Some(&i) = to_run.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let result = tasks[i].run(&self.spec, &traces, &points_dir);
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
        let failed = results.iter().filter(|r| r.is_err()).count();
        let closing =
            format!("{} points: {} run, {kept} kept from an earlier run, {failed} failed", tasks.len(), to_run.len());
        self.finish(&results, &closing, args.quiet)
    }

    /// Writes `sweep.csv` and `sweep.json`, prints the table and `closing` (unless quiet), and
    /// fails listing every point without a result, with its line in the sweep file.
    fn finish(&self, results: &[Result<PointResult, String>], closing: &str, quiet: bool) -> Result<()> {
        let comparison = compare(&self.spec.points, results);
        write(&self.out.join("sweep.csv"), &comparison.to_csv())?;
        write(&self.out.join("sweep.json"), &comparison.to_json())?;
        if let Some(path) = &self.html {
            write(path, &trainyard_simulator::html::sweep_page(&self.name, &comparison))?;
        }
        if !quiet {
            let mut text = comparison.render_table();
            text.push_str(&format!("\n{closing}; results in {}\n", self.out.display()));
            let mut stdout = std::io::stdout().lock();
            stdout
                .write_all(text.as_bytes())
                .and_then(|()| stdout.flush())
                .context("cannot write to standard output")?;
        }
        let failed = comparison.failed.len();
        if failed > 0 {
            for (label, line, error) in &comparison.failed {
                eprintln!("error: {}: line {line}: point `{label}`: {error}", self.name);
            }
            return Err(anyhow!("{failed} of {} points failed or have no result", results.len()));
        }
        Ok(())
    }
}

/// Why a point has no result, as `--gather` says it.
fn no_result(key: &Result<String, String>, index: usize) -> String {
    match key {
        Ok(key) => format!("no result (points/{key}.json): run it with --point {index}"),
        Err(e) => e.clone(),
    }
}

/// `sweeps/helios.yaml` -> `sweeps/helios-results`.
fn default_out_dir(file: &Path) -> PathBuf {
    let stem = file.file_stem().map_or_else(|| "sweep".into(), |s| s.to_string_lossy().into_owned());
    file.with_file_name(format!("{stem}-results"))
}

fn write(path: &Path, text: &str) -> Result<()> {
    fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}
