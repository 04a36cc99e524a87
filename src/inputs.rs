//! Loads what a simulation needs (cluster, policy, trace) from files or the built-in defaults.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use trainyard_policies::{BUILTIN_POLICIES, PolicyConfig};
use trainyard_simulator::TraceJob;
use trainyard_simulator::trace::{self, ReadOptions, RowWarning, SynthConfig, TraceFormat};
use trainyard_topology::Topology;

/// The built-in cluster: 2 blocks x 4 racks x 8 hosts x 8 GPUs.
pub const BUILTIN_CLUSTER: &str = include_str!("../examples/clusters/demo.yaml");

/// How to read traces for this cluster: multi-host gangs are shaped by its largest host.
pub fn read_options(topo: &Topology, skip_bad_rows: bool) -> ReadOptions {
    let gpus_per_host = topo.hosts().map(|h| topo.host_capacity(h).gpus).max().unwrap_or(0);
    ReadOptions { gpus_per_host: u32::try_from(gpus_per_host.max(1)).unwrap_or(u32::MAX), skip_bad_rows }
}

/// A built-in policy by name, or a policy file.
pub fn load_policy(spec: &str) -> Result<PolicyConfig> {
    if let Some(policy) = PolicyConfig::builtin(spec) {
        return Ok(policy);
    }
    let path = Path::new(spec);
    if !path.exists() {
        bail!("--policy `{spec}` is neither a built-in policy ({}) nor an existing file", BUILTIN_POLICIES.join(", "));
    }
    let text = read_text(path)?;
    Ok(PolicyConfig::from_yaml(&text, &path.display().to_string())?)
}

/// A loaded trace and how to describe it.
pub struct LoadedTrace {
    /// Jobs sorted by submit time.
    pub jobs: Vec<TraceJob>,
    /// Rows skipped under `--skip-bad-rows`.
    pub skipped: Vec<RowWarning>,
    /// Name for the report.
    pub name: String,
    /// Format name for the report.
    pub format: String,
}

/// The trace file (format given or detected), or the built-in synthetic trace.
pub fn load_trace(path: Option<&Path>, format: Option<&str>, options: &ReadOptions) -> Result<LoadedTrace> {
    let Some(path) = path else {
        if format.is_some() {
            bail!("--format needs --trace: the built-in trace has a fixed format");
        }
        let config = SynthConfig { gpus_per_host: options.gpus_per_host, ..SynthConfig::default() };
        let name = format!("built-in synthetic trace (seed {}, {} jobs)", config.seed, config.jobs);
        return Ok(LoadedTrace { jobs: trace::synthesize(&config), skipped: Vec::new(), name, format: "synth".into() });
    };
    let shown = path.display().to_string();
    let format = match format {
        Some(name) => name.parse::<TraceFormat>()?,
        None => detect_format(path)?,
    };
    let file = fs::File::open(path).with_context(|| format!("cannot open trace {shown}"))?;
    let read = trace::read_trace(format, BufReader::new(file), &shown, options)?;
    Ok(LoadedTrace { jobs: read.jobs, skipped: read.skipped, name: shown, format: format.to_string() })
}

fn detect_format(path: &Path) -> Result<TraceFormat> {
    let file = fs::File::open(path).with_context(|| format!("cannot open trace {}", path.display()))?;
    let mut first = String::new();
    BufReader::new(file).read_line(&mut first).with_context(|| format!("cannot read trace {}", path.display()))?;
    TraceFormat::detect(&first).ok_or_else(|| {
        anyhow!(
            "{}: line 1: cannot tell the trace format from `{}`; pass --format ({})",
            path.display(),
            first.trim_end(),
            TraceFormat::NAMES.join(", ")
        )
    })
}

/// A whole text file, with its name in the error, decoded and normalised as every reader takes
/// text (`input_text::decode`: no byte-order mark, LF line ends, UTF-8 or refused).
pub fn read_text(path: &Path) -> Result<String> {
    let bytes = fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(trainyard_topology::input_text::decode(bytes, &path.display().to_string())?)
}

/// The non-empty documents of a YAML file, each with the line it starts at.
pub fn documents(path: &Path) -> Result<Vec<(usize, String)>> {
    Ok(trainyard_topology::input_text::yaml_documents(&read_text(path)?))
}

/// The objects of a YAML file, each with the line its document starts at: its documents, with
/// a `List` standing for its items.
pub fn read_objects(path: &Path) -> Result<Vec<(usize, serde_json::Value)>> {
    Ok(trainyard_topology::input_text::yaml_objects(&read_text(path)?, &path.display().to_string())?)
}
