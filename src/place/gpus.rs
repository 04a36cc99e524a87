//! `trainyard place` on GPU hosts: one pod shape (or several pod sets) on the cluster's topology.

use std::sync::Arc;

use anyhow::{Result, anyhow, bail};

use trainyard_topology::eligibility::HostFilter;
use trainyard_topology::intra_node::{self, GpuGroups};
use trainyard_topology::{
    Cluster, HostId, JointOptions, JointRequest, LayoutNeed, LevelConstraint, Placement, PlacementPolicy,
    PlacementRequest, Resources, Spans, TopologyRequest,
};

use super::answer::{Answer, ClusterOut, Load, PlacementOut, PodOut, path_name, span_counts, within, within_words};
use super::{PlaceArgs, describe_failure, fill, parse_pod_set, parse_slice, read_layout};

/// The gang of `--pods` x `--gpus` (or `--pod-set`s) on the cluster.
pub(super) fn place_gpus(args: &PlaceArgs) -> Result<Answer> {
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
    let load = (used > 0).then_some(Load { share: args.load, seed: args.seed });
    let cluster_out = ClusterOut::of(&cluster, load);
    let constraint = topo.resolve(&args.topology)?;
    if !args.pod_sets.is_empty() {
        return place_joint(args, &mut cluster, constraint, text, cluster_out);
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
    let mut gang = format!("{} pods x {}, {}", args.pods, pod, args.topology);
    if let Some(need) = need {
        gang.push_str(&format!(", each pod's GPUs within one {}", need.within));
    }
    if let Some(claims) = &args.claims {
        gang.push_str(&format!(", each pod claiming {claims}"));
    }
    if let Some(s) = slice {
        gang.push_str(&format!(", slices of {} per {}", s.size, topo.levels()[usize::from(s.depth) - 1]));
    }
    text.push_str(&format!("gang: {gang}\n"));
    if args.policy == "all" {
        let (rows, placements) = compare_policies(&mut cluster, &request);
        text.push_str(&rows);
        return Ok(Answer { text, cluster: cluster_out, request: gang, placements, explanation: None });
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
    let explanation = explanation.map(|e| e.to_string());
    if let Some(e) = &explanation {
        text.push('\n');
        text.push_str(e);
    }
    let placements = vec![placement_out(&cluster, policy.name(), &placement)];
    Ok(Answer { text, cluster: cluster_out, request: gang, placements, explanation })
}

/// A placement as data, each pod with its host, GPU indices and devices where known.
fn placement_out(cluster: &Cluster, policy: &str, p: &Placement) -> PlacementOut {
    let pods = p
        .hosts
        .iter()
        .enumerate()
        .map(|(i, &host)| {
            let mut pod = PodOut::on(cluster, i, host);
            let mask = p.gpus.get(i).copied().unwrap_or(0);
            if let Some(groups) = cluster.host_layout(host).filter(|_| mask != 0) {
                let a = groups.describe(mask);
                (pod.gpus, pod.nics) = (a.gpus, a.nics);
            }
            if let Some(Some(devices)) = p.devices.get(i) {
                pod.devices = devices
                    .claims
                    .iter()
                    .flat_map(|c| &c.results)
                    .map(|r| format!("{}: {}", r.request, r.device))
                    .collect();
            }
            pod
        })
        .collect();
    PlacementOut {
        policy: policy.to_string(),
        fits: true,
        path: Some(path_name(p.path)),
        gap: p.gap(),
        within: within(cluster, p.depth, p.domain),
        cost: Some(p.cost),
        spans: span_counts(cluster, p.hosts.iter().copied()),
        pods,
        ..PlacementOut::default()
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
    let within = within_words(cluster, p.depth, p.domain);
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

/// Every policy on the same free capacity: a row each, and each one's placement as data.
fn compare_policies(cluster: &mut Cluster, request: &PlacementRequest) -> (String, Vec<PlacementOut>) {
    let mut placements = Vec::new();
    let levels = cluster.topology().levels().to_vec();
    let mut text = format!("{:<16} {:<9} {:>9}  {:<28} {}\n", "policy", "path", "cost", "within", levels.join(" / "));
    for policy in PlacementPolicy::ALL {
        match cluster.place_with(policy, request) {
            Ok(p) => {
                let topo = cluster.topology();
                let spans = Spans::of(topo, p.hosts.iter().copied());
                let within = within(cluster, p.depth, p.domain).unwrap_or_else(|| "cluster".to_string());
                let counts: Vec<String> = spans.per_level.iter().map(u32::to_string).collect();
                text.push_str(&format!(
                    "{:<16} {:<9} {:>9}  {:<28} {}\n",
                    policy.name(),
                    format!("{:?}", p.path).to_lowercase(),
                    p.cost,
                    within,
                    counts.join(" / ")
                ));
                // Allocated on a copy, so that every policy sees the same free capacity and each
                // one's pods get their GPU indices and devices.
                let (mut trial, mut p) = (cluster.clone(), p);
                match trial.allocate_placement(&mut p) {
                    Ok(()) => placements.push(placement_out(&trial, policy.name(), &p)),
                    Err(_) => placements.push(placement_out(cluster, policy.name(), &p)),
                }
            }
            Err(f) => {
                let reason = describe_failure(&f);
                text.push_str(&format!("{:<16} does not fit: {reason}\n", policy.name()));
                let policy = policy.name().to_string();
                placements.push(PlacementOut { policy, reason: Some(reason), ..PlacementOut::default() });
            }
        }
    }
    (text, placements)
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

/// Several pod sets placed together by the exact search.
fn place_joint(
    args: &PlaceArgs,
    cluster: &mut Cluster,
    constraint: LevelConstraint,
    mut text: String,
    cluster_out: ClusterOut,
) -> Result<Answer> {
    let topo = cluster.topology().clone();
    let sets = args.pod_sets.iter().map(|s| parse_pod_set(&topo, s, args)).collect::<Result<Vec<_>>>()?;
    let request = JointRequest::new(sets, LevelConstraint { slice: None, ..constraint });
    let names: Vec<String> = request.sets.iter().map(|s| format!("{} {} x {}", s.name, s.pods, s.pod)).collect();
    let gang = format!("{}; {}", names.join(" + "), args.topology);
    text.push_str(&format!("gang: {gang}\n"));
    let options = JointOptions { time_limit_ms: args.time_limit_ms, ..JointOptions::default() };
    let p = cluster
        .place_joint(&request, &options)
        .map_err(|f| anyhow!("the gang does not fit now: {}", describe_failure(&f)))?;
    let optimal = match p.gap() {
        Some(0) => "optimal".to_string(),
        Some(gap) => format!("gap {gap}"),
        None => "not proven optimal".to_string(),
    };
    let within_text = within_words(cluster, p.depth, p.domain);
    text.push_str(&format!("placement ({:?} path, {optimal}) {within_text}\n", p.path));
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
    let sets: Vec<&str> =
        request.sets.iter().zip(&p.sets).flat_map(|(set, hosts)| vec![set.name.as_str(); hosts.len()]).collect();
    let mut placed = p.into_placement(&request);
    cluster.allocate_placement(&mut placed)?;
    let mut placement = placement_out(cluster, "joint", &placed);
    for (pod, set) in placement.pods.iter_mut().zip(sets) {
        pod.set = Some(set.to_string());
    }
    Ok(Answer { text, cluster: cluster_out, request: gang, placements: vec![placement], explanation: None })
}
