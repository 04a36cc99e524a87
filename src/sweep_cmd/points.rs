//! One point of a sweep: its files resolved, the key its result is kept under, its replay, and
//! the result file every way of running a sweep writes and reads back.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use trainyard_topology::rng::fnv1a;

use anyhow::{Context, Result, anyhow};
use trainyard_simulator::report::{Report, ReportContext};
use trainyard_simulator::sweep::{Point, PointResult, SweepSpec, vary_trace};
use trainyard_simulator::trace::ReadOptions;
use trainyard_simulator::{EstimateSource, ReplayOptions, replay};

use crate::cluster_source::ClusterArgs;
use crate::inputs;

/// A point ready to run: its files resolved and the key its result is kept under.
pub(super) struct Task {
    pub point: Point,
    /// The cluster file, or `None` for the built-in cluster.
    pub cluster: Option<PathBuf>,
    /// The policy file, or `None` for a built-in policy.
    pub policy_file: Option<PathBuf>,
    /// Digest of the point and of every input it reads; the error when one cannot be read.
    pub key: Result<String, String>,
}

impl Task {
    /// Resolves a point's files and the key of its result: a digest of the point, the trace
    /// (`shared`) and the files it reads, so that a changed input runs the point again. Paths
    /// do not enter the key: a point run elsewhere, from another folder, keeps the same key.
    pub fn new(point: &Point, dir: &Path, shared: &str) -> Task {
        let cluster = (point.cluster != "demo").then(|| dir.join(&point.cluster));
        let builtin = trainyard_policies::BUILTIN_POLICIES.contains(&point.policy.as_str());
        let policy_file = (!builtin).then(|| dir.join(&point.policy));
        let key = (|| -> Result<String> {
            let text = format!(
                "{shared}\n{}\ncluster={}\npolicy={}",
                point.label(),
                digest_cluster(cluster.as_deref())?,
                digest_file(policy_file.as_deref())?
            );
            Ok(format!("{:016x}", fnv1a(text.as_bytes())))
        })()
        .map_err(|e| format!("{e:#}"));
        Task { point: point.clone(), cluster, policy_file, key }
    }

    /// Where its result is kept (`None` when its key cannot be made).
    pub fn result_path(&self, points_dir: &Path) -> Option<PathBuf> {
        self.key.as_ref().ok().map(|k| points_dir.join(format!("{k}.json")))
    }

    /// The result kept from an earlier run, if it is there, reads back and is this point's.
    pub fn kept(&self, points_dir: &Path) -> Option<PointResult> {
        let text = fs::read_to_string(self.result_path(points_dir)?).ok()?;
        let result: PointResult = serde_json::from_str(&text).ok()?;
        (result.point == self.point.label()).then_some(result)
    }

    /// Replays the point and keeps its result. The result returned is the one read back from
    /// the file's text, as `--gather` and a resumed run read it: a comparison is built from the
    /// same bytes however the point ran (a float does not always survive a JSON round trip).
    pub fn run(&self, spec: &SweepSpec, traces: &Traces, points_dir: &Path) -> Result<PointResult, String> {
        let key = self.key.clone()?;
        let result = self.replay(spec, traces).map_err(|e| format!("{e:#}"))?;
        let json = serde_json::to_string_pretty(&result).map_err(|e| e.to_string())? + "\n";
        // Written whole, then renamed: a run stopped half-way leaves no half-written result, and
        // a task elsewhere that writes the same point at the same time leaves one whole file.
        let path = points_dir.join(format!("{key}.json"));
        let partial = points_dir.join(format!("{key}.json.{}.partial", std::process::id()));
        fs::write(&partial, &json)
            .and_then(|()| fs::rename(&partial, &path))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        serde_json::from_str(&json).map_err(|e| format!("cannot read back {}: {e}", path.display()))
    }

    fn replay(&self, spec: &SweepSpec, traces: &Traces) -> Result<PointResult> {
        let point = &self.point;
        let cluster_args = ClusterArgs {
            cluster: self.cluster.clone(),
            cluster_format: None,
            levels: Vec::new(),
            kueue_topology: None,
            host_gpus: 8,
            devices: Vec::new(),
        };
        let cluster = cluster_args.load()?;
        let policy = self.policy_file.as_ref().map_or_else(|| point.policy.clone(), |f| f.display().to_string());
        let mut policy = inputs::load_policy(&policy)?;
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
        let options = ReplayOptions { estimates, failures: spec.failure_model(point), ..ReplayOptions::default() };
        let result = replay(cluster, policy, &jobs, options, &mut |_| {}).context("replay failed")?;
        let report = Report::new(context, &result.outcomes, gpus);
        Ok(PointResult::of(point, &report.summary))
    }
}

/// The sweep's trace, read once per way of reading it (multi-host gangs are shaped by the
/// cluster's largest host), however many points share it.
pub(super) struct Traces {
    path: Option<PathBuf>,
    read: Mutex<BTreeMap<u32, Arc<inputs::LoadedTrace>>>,
}

impl Traces {
    pub fn new(path: Option<PathBuf>) -> Traces {
        Traces { path, read: Mutex::new(BTreeMap::new()) }
    }

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

/// A digest of a cluster file and, for a fleet, of every member file it names.
fn digest_cluster(path: Option<&Path>) -> Result<String> {
    let Some(path) = path else { return Ok("builtin".into()) };
    let digests: Vec<String> =
        crate::cluster_source::files_read(path)?.iter().map(|f| digest_file(Some(f))).collect::<Result<_>>()?;
    Ok(digests.join("+"))
}

/// A digest of a file's bytes (`builtin` for none).
pub(super) fn digest_file(path: Option<&Path>) -> Result<String> {
    let Some(path) = path else { return Ok("builtin".into()) };
    let bytes = fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(format!("{:016x}", fnv1a(&bytes)))
}
