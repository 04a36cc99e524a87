//! `trainyard place`: where one gang (or a set of TPU slices) would go, its cost, and why.

mod answer;
mod gpus;
mod tpu;

use std::io::Write;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;

use trainyard_topology::intra_node;
use trainyard_topology::rng::SplitMix64;
use trainyard_topology::{Cluster, HostId, PlacedSet, PodSet, Resources, SliceConstraint, TopologyRequest};

use crate::cluster_source::ClusterArgs;
use crate::output::{Output, structured};

/// Flags of `trainyard place`.
#[derive(Debug, Args)]
pub struct PlaceArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Pods in the gang (1 to 1,000,000).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub pods: u32,
    /// GPUs per pod (0 to 1,024).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(0..=1024))]
    pub gpus: u64,
    /// CPU cores per pod (0 to 1,000,000).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub cpus: u64,
    /// Memory per pod, GiB (0 to 1,000,000,000).
    #[arg(long, default_value_t = 0, value_name = "GIB", value_parser = clap::value_parser!(u64).range(0..=1_000_000_000))]
    pub memory_gib: u64,
    /// How close the pods must be: `unconstrained`, `preferred:LEVEL` or `required:LEVEL`.
    #[arg(long, default_value = "unconstrained", value_name = "REQUEST")]
    pub topology: TopologyRequest,
    /// Only nodes of this GPU flavor (model), e.g. `h100` (see `flavor` in the cluster YAML,
    /// or `nvidia.com/gpu.product` on Kubernetes nodes).
    #[arg(long, value_name = "NAME")]
    pub flavor: Option<String>,
    /// Cut the gang into slices: every SIZE pods inside one domain of LEVEL (`rack:4`).
    #[arg(long, value_name = "LEVEL:SIZE")]
    pub slice: Option<String>,
    /// One pod set of a multi-set gang, `NAME:PODSxGPUS` or `NAME:PODSxGPUS@LEVEL` (the set
    /// alone within one domain of LEVEL); repeat for each set. Replaces --pods/--gpus.
    #[arg(long = "pod-set", value_name = "NAME:PODSxGPUS[@LEVEL]")]
    pub pod_sets: Vec<String>,
    /// Placement policy: trainyard, greedy, first-fit, kueue-best-fit, slurm-tree, or `all`
    /// to compare every policy on the same free capacity.
    #[arg(long, default_value = "trainyard", value_name = "POLICY")]
    pub policy: String,
    /// Fill this share of the GPUs first, host by host at random (deterministic for --seed),
    /// to see placement on a busy, fragmented cluster.
    #[arg(long, default_value_t = 0.0, value_name = "SHARE")]
    pub load: f64,
    /// Seed of --load.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Layout inside every host (replacing any `intra_node` of the cluster YAML), so that each
    /// pod gets GPU indices: azure-ndv4, azure-ndv5, aws-p4d or an NCCL topology XML file.
    #[arg(long, value_name = "NAME|FILE")]
    pub intra_node: Option<String>,
    /// Each pod's GPUs under one PCIe switch (`switch`) or on one NUMA node (`numa`) of its
    /// host; only hosts with a known layout qualify (--intra-node, or `intra_node` in the YAML).
    #[arg(long, value_name = "switch|numa")]
    pub gpu_layout: Option<trainyard_topology::GpuLayout>,
    /// DRA claims of every pod: ResourceClaimTemplates of the --devices files, joined by `+`.
    /// Pods then go only where devices meet their claims, and each pod's devices are printed;
    /// GPUs per pod default to what the claims get.
    #[arg(long, value_name = "TEMPLATE[+TEMPLATE]", requires = "devices")]
    pub claims: Option<String>,
    /// Explain the answer: its cost term by term, and why other levels and domains lost.
    #[arg(long)]
    pub explain: bool,
    /// Time budget of the exact search for multi-set gangs, milliseconds (1 to 3,600,000).
    #[arg(long, default_value_t = 2000, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub time_limit_ms: u64,
    /// Place TPU slices instead: the torus of one pod (`v4`, `v5p`, `v5e`, or `16x16x16` with
    /// options `:nowrap`, `:wrap=xy`, `:host=2x2x1`).
    #[arg(long, value_name = "SPEC")]
    pub torus: Option<String>,
    /// Shape of each TPU slice, e.g. `4x4x8`.
    #[arg(long, value_name = "AxBxC", requires = "torus")]
    pub shape: Option<String>,
    /// Number of TPU slices (a multi-slice job), with --tpu or --torus (1 to 100,000).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub slices: u32,
    /// Number of TPU pods of that torus (1 to 10,000).
    #[arg(long, default_value_t = 1, requires = "torus", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub tpu_pods: u32,
    /// Place TPU slices of this chip shape (`2x2x4`) on the cluster's own tori (`tori` in the
    /// cluster YAML, or GKE node pools), through the gang model the engine schedules: --slices
    /// slices of whole hosts, --topology for all of them.
    #[arg(long, value_name = "AxBxC", conflicts_with_all = ["torus", "pod_sets", "slice"])]
    pub tpu: Option<String>,
    /// table: the answer in words; wide: also a row per pod (host, GPUs, devices, chip) or per
    /// slice; json or yaml: the same as a document.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Output,
}

/// Runs `trainyard place`.
pub fn run(args: &PlaceArgs) -> Result<()> {
    if !(0.0..1.0).contains(&args.load) {
        bail!("--load {} must be at least 0 and below 1", args.load);
    }
    if args.claims.is_some() && (args.torus.is_some() || args.tpu.is_some() || !args.pod_sets.is_empty()) {
        bail!("--claims places one pod shape on GPU hosts; it does not go with --torus, --tpu or --pod-set");
    }
    if args.slices != 1 && args.torus.is_none() && args.tpu.is_none() {
        bail!("--slices {} needs --tpu (the cluster's tori) or --torus (a pool of its own)", args.slices);
    }
    let answer = match (&args.torus, &args.tpu) {
        (Some(spec), _) => tpu::place_tpu(args, spec)?,
        (None, Some(shape)) => tpu::place_tpu_gang(args, shape)?,
        (None, None) => gpus::place_gpus(args)?,
    };
    let text = match args.output {
        Output::Table => answer.text,
        Output::Wide => format!("{}\n{}", answer.text, answer::wide_rows(&answer)),
        Output::Json | Output::Yaml => structured(&answer, args.output)?,
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|()| out.flush()).context("cannot write to standard output")
}

/// Fills `load` of the GPUs, hosts in a seeded random order, each a random amount.
fn fill(cluster: &mut Cluster, load: f64, seed: u64) -> Result<u64> {
    let target = (load * cluster.total_capacity().gpus as f64).round() as u64;
    let mut rng = SplitMix64::new(seed);
    let mut hosts: Vec<HostId> = cluster.topology().hosts().collect();
    for i in (1..hosts.len()).rev() {
        hosts.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut used = 0;
    for h in hosts {
        let cap = cluster.topology().host_capacity(h);
        if used >= target || cap.gpus == 0 {
            continue;
        }
        // Half the hosts busy in full, half in part: whole free hosts remain, as in a real cluster.
        let k = if rng.below(2) == 0 { cap.gpus } else { 1 + rng.below(cap.gpus) }.min(target - used);
        let share = |x: u64| x * k / cap.gpus;
        let busy = Resources { gpus: k, cpu_milli: share(cap.cpu_milli), memory_mib: share(cap.memory_mib) };
        // As one pod, so that a host with a known layout records which GPUs it holds.
        let mut pod = cluster
            .recorded_placement(&[PlacedSet { pods: 1, pod: busy }], vec![h])
            .ok_or_else(|| anyhow!("cannot fill host {}", cluster.topology().host_name(h)))?;
        cluster.allocate_placement(&mut pod)?;
        used += k;
    }
    Ok(used)
}

fn parse_slice(topo: &trainyard_topology::Topology, text: &str) -> Result<SliceConstraint> {
    let (level, size) =
        text.split_once(':').ok_or_else(|| anyhow!("--slice `{text}`: expected LEVEL:SIZE, e.g. rack:4"))?;
    let size: u32 = size.trim().parse().map_err(|_| anyhow!("--slice `{text}`: `{size}` is not a pod count"))?;
    if size == 0 {
        bail!("--slice `{text}`: the slice size must be at least 1");
    }
    let depth = topo.level_depth(level.trim()).map_err(|e| anyhow!("--slice `{text}`: {e}"))?;
    Ok(SliceConstraint { depth, size })
}

fn describe_failure(f: &trainyard_topology::PlacementFailure) -> String {
    use trainyard_topology::PlacementFailure as F;
    match f {
        F::Capacity { requested, free } => {
            format!("it needs {requested}; {free} is free, but too little of it where whole pods (and slices) fit")
        }
        F::Topology { level, pods, best_domain_fit } => {
            format!("no {level} holds {pods} pods; the best takes {best_domain_fit}")
        }
        F::BadSlice { pods, size } => format!("{pods} pods cannot be cut into slices of {size}"),
        F::Slices { shape, slices, placed, free_chips } => {
            format!("{placed} of {slices} TPU slices of {shape} fit now ({free_chips} chips free)")
        }
    }
}

/// The layout `--intra-node` names: a built-in SKU or an NCCL topology file.
fn read_layout(name: &str) -> Result<intra_node::HostLayout> {
    if let Some(layout) = intra_node::builtin(name) {
        return Ok(layout);
    }
    let path = std::path::Path::new(name);
    if !path.exists() {
        bail!(
            "--intra-node `{name}` is neither a built-in layout ({}) nor an existing file",
            intra_node::BUILTIN_NAMES.join(", ")
        );
    }
    crate::cluster_source::read_nccl(path).map_err(|e| anyhow!("--intra-node: {e}"))
}

/// `NAME:PODSxGPUS[@LEVEL]`.
fn parse_pod_set(topo: &trainyard_topology::Topology, text: &str, args: &PlaceArgs) -> Result<PodSet> {
    let bad = || anyhow!("--pod-set `{text}`: expected NAME:PODSxGPUS or NAME:PODSxGPUS@LEVEL, e.g. workers:16x8@rack");
    let (name, rest) = text.split_once(':').ok_or_else(bad)?;
    let (shape, level) = match rest.split_once('@') {
        Some((shape, level)) => (shape, Some(level)),
        None => (rest, None),
    };
    let (pods, gpus) = shape.split_once('x').ok_or_else(bad)?;
    let pods: u32 = pods.trim().parse().map_err(|_| bad())?;
    let gpus: u64 = gpus.trim().parse().map_err(|_| bad())?;
    if name.trim().is_empty() || pods == 0 {
        return Err(bad());
    }
    let within =
        level.map(|l| topo.level_depth(l.trim())).transpose().map_err(|e| anyhow!("--pod-set `{text}`: {e}"))?;
    let pod = Resources { gpus, cpu_milli: args.cpus * 1000, memory_mib: args.memory_gib * 1024 };
    Ok(PodSet { name: name.trim().to_string(), pods, pod, within, slice: None })
}
