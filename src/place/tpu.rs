//! `trainyard place` for TPU slices: on the cluster's own tori, or on a pool of tori of its own.

use anyhow::{Context, Result, anyhow, bail};

use trainyard_topology::torus::{SliceShape, Torus, TorusSpec, TpuPool};
use trainyard_topology::{GangShape, PodSetShape, Resources};

use super::answer::{Answer, ClusterOut, Load, PlacementOut, PodOut, SliceOut, span_counts};
use super::{PlaceArgs, describe_failure, fill};

/// TPU slices on the cluster's tori, as the engine places a TPU gang: each pod a whole host,
/// each slice a box of free hosts on one torus, printed with each host's chip coordinates.
pub(super) fn place_tpu_gang(args: &PlaceArgs, shape_text: &str) -> Result<Answer> {
    let shape: SliceShape = shape_text.parse().with_context(|| format!("--tpu `{shape_text}`"))?;
    if args.slices == 0 {
        bail!("--slices must be at least 1");
    }
    let mut cluster = args.cluster.load()?;
    let used = fill(&mut cluster, args.load, args.seed)?;
    let cluster_out = ClusterOut::of(&cluster, (used > 0).then_some(Load { share: args.load, seed: args.seed }));
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
    let pods =
        per_slice.checked_mul(args.slices).ok_or_else(|| anyhow!("--slices {}: too many pods in all", args.slices))?;
    let shape_gang = GangShape {
        sets: vec![PodSetShape { tpu: Some(shape.clone()), ..PodSetShape::new("node", pods, pod) }],
        topology: args.topology.clone(),
    };
    let demand = topo.demand(&shape_gang, flavor, trainyard_topology::HostClass::DEFAULT)?;
    let gang =
        format!("{} slice(s) of {shape}, {per_slice} hosts each ({pods} pods x {pod}), {}", args.slices, args.topology);
    text.push_str(&format!("gang: {gang}\n"));
    let placement =
        cluster.place_demand(&demand).map_err(|f| anyhow!("the slices do not fit now: {}", describe_failure(&f)))?;
    let topo = cluster.topology();
    let mut pod_outs = Vec::new();
    for (i, slice) in placement.hosts.chunks(per_slice as usize).enumerate() {
        // A slice lies on one torus: its layout names every host's chip.
        let Some((torus, _)) = slice.first().and_then(|&h| topo.torus_position(h)) else { continue };
        let layout = topo.torus_layout(torus);
        text.push_str(&format!("  slice {i} on {}:\n", topo.path(torus)));
        for &h in slice {
            let at =
                layout.iter().find(|(x, _)| *x == h).map(|(_, c)| c.iter().map(u32::to_string).collect::<Vec<_>>());
            let chip = at.unwrap_or_default().join(",");
            text.push_str(&format!("    {} at chip {chip}\n", topo.host_name(h)));
            pod_outs.push(PodOut { slice: Some(i), chip: Some(chip), ..PodOut::on(&cluster, pod_outs.len(), h) });
        }
    }
    let placed = PlacementOut {
        policy: "tpu".into(),
        fits: true,
        cost: Some(placement.cost),
        spans: span_counts(&cluster, placement.hosts.iter().copied()),
        pods: pod_outs,
        ..PlacementOut::default()
    };
    Ok(Answer { text, cluster: cluster_out, request: gang, placements: vec![placed], explanation: None })
}

/// Slices cut from `--tpu-pods` tori of `spec`, a pool with no cluster around it.
pub(super) fn place_tpu(args: &PlaceArgs, spec: &str) -> Result<Answer> {
    let spec: TorusSpec = spec.parse().with_context(|| format!("--torus `{spec}`"))?;
    let shape_text = args.shape.as_deref().ok_or_else(|| anyhow!("--torus needs --shape, e.g. --shape 4x4x8"))?;
    let shape: SliceShape = shape_text.parse().with_context(|| format!("--shape `{shape_text}`"))?;
    if args.tpu_pods == 0 || args.slices == 0 {
        bail!("--tpu-pods and --slices must be at least 1");
    }
    let pods = (0..args.tpu_pods).map(|_| Torus::new(spec.clone())).collect::<Result<Vec<_>, _>>()?;
    let mut pool = TpuPool::new(pods);
    let chips = spec.chips() * u64::from(args.tpu_pods);
    let cluster = ClusterOut {
        name: "tpu-pool".into(),
        gpus: chips,
        free_gpus: chips,
        tori: (0..args.tpu_pods).map(|i| format!("pod {i} ({spec})")).collect(),
        ..ClusterOut::default()
    };
    let request = format!("{} slice(s) of {shape} ({} chips each)", args.slices, shape.chips());
    let mut text = format!(
        "TPU pool: {} pod(s) of torus {spec} ({} chips each)\nrequest: {request}\n",
        args.tpu_pods,
        spec.chips()
    );
    let placed = match pool.place_slices(&shape, args.slices)? {
        Ok(placed) => placed,
        Err(failure) => bail!("the slices do not fit: {failure}"),
    };
    let mut slices = Vec::new();
    for (i, (pod, mesh)) in placed.iter().enumerate() {
        let chips = mesh.chips_count();
        text.push_str(&format!("  slice {i}: pod {pod}, {mesh} ({chips} chips)\n"));
        slices.push(SliceOut { index: i, pod: *pod, mesh: mesh.to_string(), chips });
    }
    text.push_str(&format!("{} chips left free\n", pool.free_chips()));
    let placement = PlacementOut {
        policy: "tpu-pool".into(),
        fits: true,
        slices,
        free_chips_left: Some(pool.free_chips()),
        ..PlacementOut::default()
    };
    Ok(Answer { text, cluster, request, placements: vec![placement], explanation: None })
}
