//! `trainyard place`: where one gang (or a set of TPU slices) would go, its cost, and why.

use std::io::Write;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use std::sync::Arc;

use trainyard_topology::eligibility::HostFilter;
use trainyard_topology::intra_node::{self, GpuGroups};
use trainyard_topology::rng::SplitMix64;
use trainyard_topology::torus::{SliceShape, Torus, TorusSpec, TpuPool};
use trainyard_topology::{
    Cluster, GangShape, HostId, JointOptions, JointRequest, LayoutNeed, LevelConstraint, PlacedSet, Placement,
    PlacementPolicy, PlacementRequest, PodSet, PodSetShape, Resources, SliceConstraint, Spans, TopologyRequest,
};

use crate::cluster_source::ClusterArgs;

/// Flags of `trainyard place`.
#[derive(Debug, Args)]
pub struct PlaceArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Pods in the gang.
    #[arg(long, default_value_t = 8)]
    pub pods: u32,
    /// GPUs per pod.
    #[arg(long, default_value_t = 8)]
    pub gpus: u64,
    /// CPU cores per pod.
    #[arg(long, default_value_t = 0)]
    pub cpus: u64,
    /// Memory per pod, GiB.
    #[arg(long, default_value_t = 0, value_name = "GIB")]
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
    /// Time budget of the exact search for multi-set gangs, milliseconds.
    #[arg(long, default_value_t = 2000, value_name = "MS")]
    pub time_limit_ms: u64,
    /// Place TPU slices instead: the torus of one pod (`v4`, `v5p`, `v5e`, or `16x16x16` with
    /// options `:nowrap`, `:wrap=xy`, `:host=2x2x1`).
    #[arg(long, value_name = "SPEC")]
    pub torus: Option<String>,
    /// Shape of each TPU slice, e.g. `4x4x8`.
    #[arg(long, value_name = "AxBxC", requires = "torus")]
    pub shape: Option<String>,
    /// Number of TPU slices (a multi-slice job), with --tpu or --torus.
    #[arg(long, default_value_t = 1)]
    pub slices: u32,
    /// Number of TPU pods of that torus.
    #[arg(long, default_value_t = 1, requires = "torus")]
    pub tpu_pods: u32,
    /// Place TPU slices of this chip shape (`2x2x4`) on the cluster's own tori (`tori` in the
    /// cluster YAML, or GKE node pools), through the gang model the engine schedules: --slices
    /// slices of whole hosts, --topology for all of them.
    #[arg(long, value_name = "AxBxC", conflicts_with_all = ["torus", "pod_sets", "slice"])]
    pub tpu: Option<String>,
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
    let text = match (&args.torus, &args.tpu) {
        (Some(spec), _) => place_tpu(args, spec)?,
        (None, Some(shape)) => place_tpu_gang(args, shape)?,
        (None, None) => place_gpus(args)?,
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|()| out.flush()).context("cannot write to standard output")
}

fn place_gpus(args: &PlaceArgs) -> Result<String> {
    let mut cluster = args.cluster.load()?;
    if let Some(name) = &args.intra_node {
        let groups = Arc::new(GpuGroups::new(Arc::new(read_layout(name)?)));
        let hosts: Vec<HostId> = cluster.topology().hosts().collect();
        for h in hosts {
            cluster.set_host_layout(h, Some(groups.clone())).map_err(|e| anyhow!("--intra-node `{name}`: {e}"))?;
        }
    }
    let used = fill(&mut cluster, args.load, args.seed)?;
    let topo = cluster.topology().clone();
    let mut text = format!(
        "cluster {}: {} hosts, {} GPUs, levels {}; {} GPUs free",
        topo.name(),
        topo.host_count(),
        cluster.total_capacity().gpus,
        topo.levels().join(" > "),
        cluster.total_free().gpus
    );
    if used > 0 {
        text.push_str(&format!(" after --load {} (seed {})", args.load, args.seed));
    }
    text.push('\n');
    let constraint = topo.resolve(&args.topology)?;
    if !args.pod_sets.is_empty() {
        return place_joint(args, &mut cluster, constraint, text);
    }
    let slice = args.slice.as_deref().map(|s| parse_slice(&topo, s)).transpose()?;
    let constraint = LevelConstraint { slice, ..constraint };
    let pod = Resources { gpus: args.gpus, cpu_milli: args.cpus * 1000, memory_mib: args.memory_gib * 1024 };
    let flavor = match &args.flavor {
        Some(name) => Some(topo.flavor_id(name).ok_or_else(|| {
            let known = if topo.flavors().is_empty() { "none".to_string() } else { topo.flavors().join(", ") };
            anyhow!("--flavor `{name}`: no node has it (flavors: {known})")
        })?),
        None => None,
    };
    let need = args.gpu_layout.map(|within| -> Result<LayoutNeed> {
        let gpus = u8::try_from(args.gpus).ok().filter(|&g| g > 0 && g <= intra_node::MAX_GPUS);
        let gpus = gpus.ok_or_else(|| anyhow!("--gpu-layout needs 1 to 64 --gpus per pod, not {}", args.gpus))?;
        if !topo.hosts().any(|h| cluster.host_layout(h).is_some()) {
            bail!("--gpu-layout {within}: no host has a known GPU layout; pass --intra-node or give the nodes `intra_node`");
        }
        Ok(LayoutNeed { gpus, within })
    });
    let need = need.transpose()?;
    let (pod, devices) = match &args.claims {
        Some(claims) => {
            let mut set = trainyard_topology::PodSetShape::new("pods", args.pods, pod);
            set.claims = claims.split('+').map(|t| t.trim().to_string()).collect();
            let mut shape = trainyard_topology::GangShape { sets: vec![set], topology: TopologyRequest::Unconstrained };
            let fit = cluster.device_fit(&mut shape).map_err(|e| anyhow!("--claims: {e}"))?;
            (shape.sets[0].pod, fit)
        }
        None => (pod, None),
    };
    let hosts =
        cluster.class_for(&HostFilter::default(), need, devices).ok_or_else(|| anyhow!("too many host classes"))?;
    let request = PlacementRequest { pods: args.pods, pod, constraint, flavor, hosts };
    text.push_str(&format!("gang: {} pods x {}, {}", args.pods, pod, args.topology));
    if let Some(need) = need {
        text.push_str(&format!(", each pod's GPUs within one {}", need.within));
    }
    if let Some(claims) = &args.claims {
        text.push_str(&format!(", each pod claiming {claims}"));
    }
    if let Some(s) = slice {
        text.push_str(&format!(", slices of {} per {}", s.size, topo.levels()[usize::from(s.depth) - 1]));
    }
    text.push('\n');
    if args.policy == "all" {
        text.push_str(&compare_policies(&mut cluster, &request));
        return Ok(text);
    }
    let policy: PlacementPolicy = args.policy.parse()?;
    let placed = if args.explain {
        cluster.explain(policy, &request).map(|e| (e.placement.clone(), Some(e)))
    } else {
        cluster.place_with(policy, &request).map(|p| (p, None))
    };
    let (mut placement, explanation) =
        placed.map_err(|f| anyhow!("the gang does not fit now: {}", describe_failure(&f)))?;
    text.push_str(&describe_placement(&cluster, policy, &placement));
    cluster.allocate_placement(&mut placement)?;
    text.push_str(&describe_gpus(&cluster, &placement));
    text.push_str(&describe_devices(&cluster, &placement));
    if let Some(e) = explanation {
        text.push('\n');
        text.push_str(&e.to_string());
    }
    Ok(text)
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
    Ok(SliceConstraint { depth: topo.level_depth(level.trim())?, size })
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

fn describe_placement(cluster: &Cluster, policy: PlacementPolicy, p: &Placement) -> String {
    let topo = cluster.topology();
    let per_host = p.per_host();
    let optimal = match p.gap() {
        Some(0) => "optimal".to_string(),
        Some(gap) => format!("gap {gap}"),
        None => "optimality not checked".to_string(),
    };
    let within = match p.depth {
        0 => "across the whole cluster".to_string(),
        _ => format!("within {} {}", topo.level_name(p.domain), topo.path(p.domain)),
    };
    let mut text = format!(
        "placement ({policy}, {:?} path, {optimal}): {} pod(s) on {} host(s) {within}\n",
        p.path,
        p.hosts.len(),
        per_host.len(),
    );
    for (host, k) in &per_host {
        text.push_str(&format!("  {:<40} {k} pod(s)\n", topo.path(topo.host_domain(*host))));
    }
    let spans = Spans::of(topo, p.hosts.iter().copied());
    let counts: Vec<String> =
        topo.levels().iter().zip(&spans.per_level).map(|(level, n)| format!("{n} {level}")).collect();
    text.push_str(&format!("spans {}; cost {}\n", counts.join(", "), p.cost));
    text
}

fn compare_policies(cluster: &mut Cluster, request: &PlacementRequest) -> String {
    let levels = cluster.topology().levels().to_vec();
    let mut text = format!("{:<16} {:<9} {:>9}  {:<28} {}\n", "policy", "path", "cost", "within", levels.join(" / "));
    for policy in PlacementPolicy::ALL {
        match cluster.place_with(policy, request) {
            Ok(p) => {
                let topo = cluster.topology();
                let spans = Spans::of(topo, p.hosts.iter().copied());
                let within = if p.depth == 0 {
                    "cluster".to_string()
                } else {
                    format!("{} {}", topo.level_name(p.domain), topo.path(p.domain))
                };
                let counts: Vec<String> = spans.per_level.iter().map(u32::to_string).collect();
                text.push_str(&format!(
                    "{:<16} {:<9} {:>9}  {:<28} {}\n",
                    policy.name(),
                    format!("{:?}", p.path).to_lowercase(),
                    p.cost,
                    within,
                    counts.join(" / ")
                ));
            }
            Err(f) => text.push_str(&format!("{:<16} does not fit: {}\n", policy.name(), describe_failure(&f))),
        }
    }
    text
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

/// Each pod's GPU indices (and the NICs near them), for pods on hosts with a known layout.
fn describe_gpus(cluster: &Cluster, p: &Placement) -> String {
    let topo = cluster.topology();
    let mut text = String::new();
    for (i, (&host, &mask)) in p.hosts.iter().zip(&p.gpus).enumerate() {
        let Some(groups) = cluster.host_layout(host).filter(|_| mask != 0) else { continue };
        if text.is_empty() {
            text.push_str(
                "GPUs per pod (the host's layout; CUDA_VISIBLE_DEVICES with CUDA_DEVICE_ORDER=PCI_BUS_ID):\n",
            );
        }
        let a = groups.describe(mask);
        let gpus: Vec<String> = a.gpus.iter().map(u8::to_string).collect();
        text.push_str(&format!(
            "  pod {i} on {}: GPUs {} within one {:?}, NICs {}\n",
            topo.host_name(host),
            gpus.join(","),
            a.locality,
            a.nics.join(",")
        ));
    }
    text
}

/// Each pod's DRA devices, request by request, with their PCIe roots.
fn describe_devices(cluster: &Cluster, p: &Placement) -> String {
    let mut text = String::new();
    for (i, pod) in p.devices.iter().enumerate() {
        let Some(pod) = pod else { continue };
        if text.is_empty() {
            text.push_str("Devices per pod (request: driver/pool/device @ PCIe root):\n");
        }
        let results: Vec<String> = pod
            .claims
            .iter()
            .flat_map(|c| &c.results)
            .map(|r| {
                let root = cluster.device(&r.device).and_then(|d| d.pcie_root()).unwrap_or("-");
                format!("{}: {} @ {root}", r.request, r.device)
            })
            .collect();
        text.push_str(&format!("  pod {i} on {}: {}\n", pod.node, results.join(", ")));
    }
    text
}

fn place_joint(
    args: &PlaceArgs,
    cluster: &mut Cluster,
    constraint: LevelConstraint,
    mut text: String,
) -> Result<String> {
    let topo = cluster.topology().clone();
    let sets = args.pod_sets.iter().map(|s| parse_pod_set(&topo, s, args)).collect::<Result<Vec<_>>>()?;
    let request = JointRequest::new(sets, LevelConstraint { slice: None, ..constraint });
    let names: Vec<String> = request.sets.iter().map(|s| format!("{} {} x {}", s.name, s.pods, s.pod)).collect();
    text.push_str(&format!("gang: {}; {}\n", names.join(" + "), args.topology));
    let options = JointOptions { time_limit_ms: args.time_limit_ms, ..JointOptions::default() };
    let p = cluster
        .place_joint(&request, &options)
        .map_err(|f| anyhow!("the gang does not fit now: {}", describe_failure(&f)))?;
    let optimal = match p.gap() {
        Some(0) => "optimal".to_string(),
        Some(gap) => format!("gap {gap}"),
        None => "not proven optimal".to_string(),
    };
    let within = match p.depth {
        0 => "across the whole cluster".to_string(),
        _ => format!("within {} {}", topo.level_name(p.domain), topo.path(p.domain)),
    };
    text.push_str(&format!("placement ({:?} path, {optimal}) {within}\n", p.path));
    for (set, hosts) in request.sets.iter().zip(&p.sets) {
        let mut per_host: Vec<(HostId, u32)> = Vec::new();
        for &h in hosts {
            match per_host.iter_mut().find(|(x, _)| *x == h) {
                Some((_, n)) => *n += 1,
                None => per_host.push((h, 1)),
            }
        }
        per_host.sort();
        let list: Vec<String> =
            per_host.iter().map(|(h, n)| format!("{} x{n}", topo.path(topo.host_domain(*h)))).collect();
        text.push_str(&format!("  {:<10} {}\n", set.name, list.join(", ")));
    }
    let spans = p.spans(&topo);
    let counts: Vec<String> =
        topo.levels().iter().zip(&spans.per_level).map(|(level, n)| format!("{n} {level}")).collect();
    text.push_str(&format!("spans {}; cost {}\n", counts.join(", "), p.cost));
    Ok(text)
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
    let within = level.map(|l| topo.level_depth(l.trim())).transpose()?;
    let pod = Resources { gpus, cpu_milli: args.cpus * 1000, memory_mib: args.memory_gib * 1024 };
    Ok(PodSet { name: name.trim().to_string(), pods, pod, within, slice: None })
}

/// TPU slices on the cluster's tori, as the engine places a TPU gang: each pod a whole host,
/// each slice a box of free hosts on one torus, printed with each host's chip coordinates.
fn place_tpu_gang(args: &PlaceArgs, shape_text: &str) -> Result<String> {
    let shape: SliceShape = shape_text.parse().with_context(|| format!("--tpu `{shape_text}`"))?;
    if args.slices == 0 {
        bail!("--slices must be at least 1");
    }
    let mut cluster = args.cluster.load()?;
    let used = fill(&mut cluster, args.load, args.seed)?;
    let topo = cluster.topology();
    let tori: Vec<String> = topo.tori().map(|(d, t)| format!("{} ({t})", topo.path(d))).collect();
    let mut text = format!("cluster {}: {} tori: {}", topo.name(), tori.len(), tori.join(", "));
    if used > 0 {
        text.push_str(&format!("; --load {} (seed {}) busy", args.load, args.seed));
    }
    text.push('\n');
    let flavor =
        args.flavor.as_deref().map(|f| topo.flavor_id(f).ok_or_else(|| anyhow!("--flavor `{f}`: no node has it")));
    let flavor = flavor.transpose()?;
    let per_slice = topo.tpu_hosts_per_slice(&shape).map_err(|e| anyhow!("--tpu {shape}: {e}"))?;
    // A slice is whole hosts, so each pod takes a host's chips.
    let chips = shape.chips() / u64::from(per_slice.max(1));
    let pod = Resources { gpus: chips, cpu_milli: args.cpus * 1000, memory_mib: args.memory_gib * 1024 };
    let pods = per_slice * args.slices;
    let shape_gang = GangShape {
        sets: vec![PodSetShape { tpu: Some(shape.clone()), ..PodSetShape::new("node", pods, pod) }],
        topology: args.topology.clone(),
    };
    let demand = topo.demand(&shape_gang, flavor, trainyard_topology::HostClass::DEFAULT)?;
    text.push_str(&format!(
        "gang: {} slice(s) of {shape}, {per_slice} hosts each ({pods} pods x {pod}), {}\n",
        args.slices, args.topology
    ));
    let placement =
        cluster.place_demand(&demand).map_err(|f| anyhow!("the slices do not fit now: {}", describe_failure(&f)))?;
    let topo = cluster.topology();
    for (i, slice) in placement.hosts.chunks(per_slice as usize).enumerate() {
        // A slice lies on one torus: its layout names every host's chip.
        let Some((torus, _)) = slice.first().and_then(|&h| topo.torus_position(h)) else { continue };
        let layout = topo.torus_layout(torus);
        text.push_str(&format!("  slice {i} on {}:\n", topo.path(torus)));
        for &h in slice {
            let at =
                layout.iter().find(|(x, _)| *x == h).map(|(_, c)| c.iter().map(u32::to_string).collect::<Vec<_>>());
            text.push_str(&format!("    {} at chip {}\n", topo.host_name(h), at.unwrap_or_default().join(",")));
        }
    }
    Ok(text)
}

fn place_tpu(args: &PlaceArgs, spec: &str) -> Result<String> {
    let spec: TorusSpec = spec.parse().with_context(|| format!("--torus `{spec}`"))?;
    let shape_text = args.shape.as_deref().ok_or_else(|| anyhow!("--torus needs --shape, e.g. --shape 4x4x8"))?;
    let shape: SliceShape = shape_text.parse().with_context(|| format!("--shape `{shape_text}`"))?;
    if args.tpu_pods == 0 || args.slices == 0 {
        bail!("--tpu-pods and --slices must be at least 1");
    }
    let pods = (0..args.tpu_pods).map(|_| Torus::new(spec.clone())).collect::<Result<Vec<_>, _>>()?;
    let mut pool = TpuPool::new(pods);
    let mut text = format!(
        "TPU pool: {} pod(s) of torus {spec} ({} chips each)\nrequest: {} slice(s) of {shape} ({} chips each)\n",
        args.tpu_pods,
        spec.chips(),
        args.slices,
        shape.chips()
    );
    match pool.place_slices(&shape, args.slices)? {
        Ok(placed) => {
            for (i, (pod, mesh)) in placed.iter().enumerate() {
                text.push_str(&format!("  slice {i}: pod {pod}, {mesh} ({} chips)\n", mesh.chips_count()));
            }
            text.push_str(&format!("{} chips left free\n", pool.free_chips()));
        }
        Err(failure) => bail!("the slices do not fit: {failure}"),
    }
    Ok(text)
}
