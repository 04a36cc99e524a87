//! Loads a cluster from any topology source: trainyard YAML, a Kubernetes Node list, a Slurm
//! topology.conf or the Lingjun fabric CSV; reports what the reader left out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use trainyard_topology::devices::{DraObjects, parse_objects};
use trainyard_topology::fleet::{FleetSpec, Member, resolve_fleet};
use trainyard_topology::sources::k8s_nodes::{self, NodeListOptions};
use trainyard_topology::sources::{HostDefaults, LoadedTopology, lingjun, slurm};
use trainyard_topology::{Cluster, ClusterSpec, Resources, Topology, intra_node};

use crate::inputs::{BUILTIN_CLUSTER, read_text};

/// Where the cluster comes from; shared by `simulate` and `place`.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// Cluster topology: a trainyard cluster YAML (or a fleet of them, no gang spanning two), a
    /// Kubernetes Node list (`kubectl get nodes -o json|yaml`), a Slurm topology.conf (tree or
    /// block form) or the Lingjun `topo.csv`.
    /// Without it, a built-in 512-GPU cluster (2 blocks x 4 racks x 8 hosts x 8 GPUs).
    #[arg(long, value_name = "FILE")]
    pub cluster: Option<PathBuf>,
    /// How to read --cluster; detected from the file name and contents when omitted.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub cluster_format: Option<ClusterFormat>,
    /// Node label keys of the levels, outermost first, for Kubernetes Node lists (as a Kueue
    /// Topology names them), e.g. `cloud.google.com/gce-topology-block,kubernetes.io/hostname`.
    /// Default: `kubernetes.io/hostname`, plus `nvidia.com/gpu.clique` when nodes carry it.
    #[arg(long, value_delimiter = ',', value_name = "KEY,...")]
    pub levels: Vec<String>,
    /// A Kueue `Topology` object (YAML or JSON) whose `spec.levels` give the label keys.
    #[arg(long, value_name = "FILE", conflicts_with = "levels")]
    pub kueue_topology: Option<PathBuf>,
    /// GPUs per host where the source records none (Slurm topology.conf, Lingjun topo.csv).
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub host_gpus: u64,
    /// DRA objects of the cluster, YAML or JSON (`kubectl get resourceslices,deviceclasses,
    /// resourceclaimtemplates -A -o yaml`, or files of them): nodes get the devices their
    /// ResourceSlices publish, and pods carrying claims (the trace's `claims` column) are placed
    /// where devices meet them. May be given several times.
    #[arg(long, value_name = "FILE")]
    pub devices: Vec<PathBuf>,
}

/// The topology sources trainyard reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ClusterFormat {
    /// trainyard cluster YAML (levels plus listed or generated nodes).
    Yaml,
    /// `kubectl get nodes -o json` or `-o yaml`.
    K8sNodes,
    /// Slurm topology.conf.
    Slurm,
    /// The Alibaba Lingjun fabric (`ip,DSW,PSW,ASW`).
    Lingjun,
}

impl ClusterArgs {
    /// Reads and builds the cluster, printing every item the reader left out to stderr.
    pub fn load(&self) -> Result<Cluster> {
        let mut cluster = self.load_topology()?;
        if !self.devices.is_empty() {
            let mut objects = DraObjects::default();
            // Which file each pool came from, so that a pool left out is named with its file.
            let mut file_of_pool: BTreeMap<String, String> = BTreeMap::new();
            for path in &self.devices {
                let read = parse_objects(&read_text(path)?, &path.display().to_string())?;
                for slice in &read.slices {
                    file_of_pool
                        .entry(format!("{}/{}", slice.driver, slice.pool.name))
                        .or_insert(path.display().to_string());
                }
                objects.extend(read);
            }
            let left_out = cluster.set_devices(objects)?;
            let files = self.devices.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
            let warnings: Vec<String> = left_out
                .iter()
                .map(|r| {
                    let pool = r.subject.splitn(3, '/').take(2).collect::<Vec<_>>().join("/");
                    let file = file_of_pool.get(&pool).unwrap_or(&files);
                    format!("{file}: devices: {}: {}", r.subject, r.reason)
                })
                .collect();
            report_left_out(&warnings);
        }
        Ok(cluster)
    }

    fn load_topology(&self) -> Result<Cluster> {
        let Some(path) = &self.cluster else {
            return Ok(Cluster::from_yaml(BUILTIN_CLUSTER, "built-in cluster")?);
        };
        let text = read_text(path)?;
        let name = path.display().to_string();
        let format = self.cluster_format.unwrap_or_else(|| detect(path, &text));
        let defaults =
            HostDefaults { capacity: Resources { gpus: self.host_gpus, ..HostDefaults::default().capacity } };
        let loaded: LoadedTopology = match format {
            ClusterFormat::Yaml if FleetSpec::is_fleet(&text) => return load_fleet(path, &text),
            ClusterFormat::Yaml => return Ok(Cluster::from_yaml_with(&text, &name, |layout| nccl_file(path, layout))?),
            ClusterFormat::Slurm => slurm::parse(&text, &name, defaults)?,
            ClusterFormat::Lingjun => lingjun::parse(&text, &name, defaults)?,
            ClusterFormat::K8sNodes => {
                let mut options = NodeListOptions::default();
                if let Some(kueue) = &self.kueue_topology {
                    let kueue_text = read_text(kueue)?;
                    options.level_keys =
                        k8s_nodes::level_keys_from_kueue_topology(&kueue_text, &kueue.display().to_string())?;
                } else if !self.levels.is_empty() {
                    options.level_keys = self.levels.clone();
                }
                k8s_nodes::parse(&text, &name, &options)?
            }
        };
        report_left_out(&loaded.warnings);
        let topo = Topology::build(&loaded.spec).with_context(|| format!("cannot build the topology of {name}"))?;
        Ok(Cluster::new(topo))
    }
}

/// The files a cluster file reads: itself, and a fleet's member files.
pub fn files_read(path: &Path) -> Result<Vec<std::path::PathBuf>> {
    let text = read_text(path)?;
    let mut files = vec![path.to_path_buf()];
    if FleetSpec::is_fleet(&text) {
        let written = FleetSpec::from_yaml(&text, &path.display().to_string())?;
        let dir = path.parent().unwrap_or(Path::new("."));
        files.extend(written.clusters.iter().filter_map(|m| m.value.file.as_ref()).map(|f| dir.join(f)));
    }
    Ok(files)
}

/// A fleet file: its members read (a member's `file` relative to the fleet file) and built as one
/// cluster whose top level is `cluster`.
fn load_fleet(path: &Path, text: &str) -> Result<Cluster> {
    let name = path.display().to_string();
    let written = FleetSpec::from_yaml(text, &name)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut members = Vec::with_capacity(written.clusters.len());
    for (i, member) in written.clusters.iter().enumerate() {
        let m = &member.value;
        let line = member.referenced.line();
        let (spec, source) = match (&m.file, &m.cluster) {
            (Some(file), None) => {
                let file = dir.join(file);
                let source = file.display().to_string();
                let text = read_text(&file).with_context(|| format!("{name}:{line}: clusters[{i}].file"))?;
                let mut spec = ClusterSpec::from_yaml(&text, &source)?;
                rebase_layouts(&mut spec, file.parent().unwrap_or(Path::new(".")));
                (spec, source)
            }
            (None, Some(spec)) => (spec.clone(), format!("{name} (clusters[{i}].cluster)")),
            _ => anyhow::bail!("{name}:{line}: clusters[{i}]: give either `file` or `cluster`, not both or neither"),
        };
        members.push(Member { name: m.name.clone(), spec, source });
    }
    let fleet = resolve_fleet(&written.name, &members, &name)?;
    Ok(Cluster::from_fleet(&fleet, |layout| nccl_file(path, layout))?)
}

/// Points a member file's NCCL topology files (relative to that file) at where they are, as
/// layouts are looked up from the fleet file.
fn rebase_layouts(spec: &mut ClusterSpec, dir: &Path) {
    let rebase = |name: &mut Option<String>| {
        if let Some(n) = name.as_mut()
            && intra_node::builtin(n).is_none()
            && dir.join(&*n).is_file()
        {
            *n = dir.join(&*n).display().to_string();
        }
    };
    if let Some(g) = spec.generate.as_mut() {
        rebase(&mut g.value.intra_node);
    }
    for node in &mut spec.nodes {
        rebase(&mut node.value.intra_node);
    }
}

/// The first warnings in full, then a count: a 10,000-node list may leave out hundreds.
fn report_left_out(warnings: &[impl std::fmt::Display]) {
    const SHOWN: usize = 10;
    for w in warnings.iter().take(SHOWN) {
        eprintln!("warning: {w}");
    }
    if warnings.len() > SHOWN {
        eprintln!("warning: ... and {} more items left out", warnings.len() - SHOWN);
    }
}

/// Guesses the format from the extension, then from the contents.
fn detect(path: &Path, text: &str) -> ClusterFormat {
    let head = text.trim_start();
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or_default();
    let looks_k8s = head.starts_with('{')
        || text.lines().any(|l| matches!(l.trim(), "kind: List" | "kind: NodeList" | "kind: Node" | "items:"));
    match ext {
        "csv" => ClusterFormat::Lingjun,
        "conf" => ClusterFormat::Slurm,
        "json" => ClusterFormat::K8sNodes,
        _ if head.starts_with("ip,") => ClusterFormat::Lingjun,
        _ if text.contains("SwitchName=") || text.contains("BlockName=") => ClusterFormat::Slurm,
        _ if looks_k8s => ClusterFormat::K8sNodes,
        _ => ClusterFormat::Yaml,
    }
}

/// The layout of an `intra_node` name that is no built-in one: an NCCL topology file, relative to
/// the cluster file's folder; `None` when no such file exists.
fn nccl_file(cluster: &Path, name: &str) -> Option<std::result::Result<intra_node::HostLayout, String>> {
    let file = cluster.parent().unwrap_or(Path::new(".")).join(name);
    file.is_file().then(|| read_nccl(&file))
}

/// An NCCL topology file's GPU layout; the error names the file.
pub fn read_nccl(file: &Path) -> std::result::Result<intra_node::HostLayout, String> {
    let shown = file.display().to_string();
    match std::fs::read(file) {
        Ok(bytes) => {
            let text = trainyard_topology::input_text::decode(bytes, &shown).map_err(|e| e.to_string())?;
            intra_node::parse_nccl_xml(&text, &shown).map_err(|e| e.to_string())
        }
        Err(e) => Err(format!("cannot read {shown}: {e}")),
    }
}
