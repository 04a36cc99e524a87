//! What `trainyard place` answers, as data: the text people read, the document `-o json|yaml`
//! prints and the pod table `-o wide` adds.

use serde::Serialize;

use trainyard_topology::{Cluster, DomainId, HostId, SearchPath, Spans};

use crate::output::table;

/// The whole answer of one `trainyard place`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    /// The text of `-o table`.
    #[serde(skip)]
    pub text: String,
    /// The cluster (or TPU pool) it was placed on.
    pub cluster: ClusterOut,
    /// What was asked for, in words.
    pub request: String,
    /// One placement, or one per policy for `--policy all`.
    pub placements: Vec<PlacementOut>,
    /// The cost term by term and why other levels and domains lost (`--explain`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explanation: Option<String>,
}

/// The cluster as placement found it.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterOut {
    pub name: String,
    pub hosts: usize,
    /// Accelerators (GPUs, or TPU chips).
    pub gpus: u64,
    /// Accelerators free before this placement (after `--load`).
    pub free_gpus: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub levels: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tori: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load: Option<Load>,
}

/// The `--load` that filled the cluster first.
#[derive(Debug, Serialize)]
pub struct Load {
    pub share: f64,
    pub seed: u64,
}

/// Where one policy puts the gang, or why it cannot.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacementOut {
    pub policy: String,
    pub fits: bool,
    /// Why it does not fit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The search that found it: `exact`, `greedy`, ...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The distance to the proven lower bound of the cost: 0 when optimal, absent when not checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gap: Option<u64>,
    /// The smallest domain holding every pod, as `LEVEL PATH`; absent across the whole cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub within: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<u64>,
    /// How many domains of each level the pods touch.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub spans: Vec<SpanOut>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<PodOut>,
    /// TPU slices of a torus pool (`--torus`), which has no hosts.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub slices: Vec<SliceOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub free_chips_left: Option<u64>,
}

/// Domains of one level that a placement touches.
#[derive(Debug, Serialize)]
pub struct SpanOut {
    pub level: String,
    pub domains: u32,
}

/// One pod of the gang and where it goes.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodOut {
    pub index: usize,
    /// Its pod set (`--pod-set`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set: Option<String>,
    /// Its TPU slice (`--tpu`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slice: Option<usize>,
    pub host: String,
    /// The host's path through the topology.
    pub domain: String,
    /// GPU indices on the host, where its layout is known.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<u8>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nics: Vec<String>,
    /// The host's chip coordinates on its torus.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chip: Option<String>,
    /// DRA devices, `request: driver/pool/device`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
}

/// One TPU slice of a torus pool.
#[derive(Debug, Serialize)]
pub struct SliceOut {
    pub index: usize,
    /// The TPU pod (torus) it is cut from.
    pub pod: usize,
    /// Its box of chips.
    pub mesh: String,
    pub chips: u64,
}

impl ClusterOut {
    /// The cluster's size and what `--load` left free.
    pub fn of(cluster: &Cluster, load: Option<Load>) -> ClusterOut {
        let topo = cluster.topology();
        ClusterOut {
            name: topo.name().to_string(),
            hosts: topo.host_count(),
            gpus: cluster.total_capacity().gpus,
            free_gpus: cluster.total_free().gpus,
            levels: topo.levels().to_vec(),
            tori: topo.tori().map(|(d, t)| format!("{} ({t})", topo.path(d))).collect(),
            load,
        }
    }
}

impl PodOut {
    /// Pod `index` on `host`, named by the cluster.
    pub fn on(cluster: &Cluster, index: usize, host: HostId) -> PodOut {
        let topo = cluster.topology();
        PodOut {
            index,
            host: topo.host_name(host).to_string(),
            domain: topo.path(topo.host_domain(host)).to_string(),
            ..PodOut::default()
        }
    }
}

/// Each level's span of `hosts`.
pub fn span_counts(cluster: &Cluster, hosts: impl IntoIterator<Item = HostId>) -> Vec<SpanOut> {
    let topo = cluster.topology();
    let spans = Spans::of(topo, hosts);
    topo.levels()
        .iter()
        .zip(&spans.per_level)
        .map(|(level, &domains)| SpanOut { level: level.clone(), domains })
        .collect()
}

/// The smallest domain holding a placement, as `LEVEL PATH`; none across the whole cluster.
pub fn within(cluster: &Cluster, depth: u8, domain: DomainId) -> Option<String> {
    let topo = cluster.topology();
    (depth > 0).then(|| format!("{} {}", topo.level_name(domain), topo.path(domain)))
}

/// [`within`] in words: `within LEVEL PATH`, or `across the whole cluster`.
pub fn within_words(cluster: &Cluster, depth: u8, domain: DomainId) -> String {
    within(cluster, depth, domain).map_or_else(|| "across the whole cluster".to_string(), |d| format!("within {d}"))
}

/// The search that found a placement, in lower case.
pub fn path_name(path: SearchPath) -> String {
    format!("{path:?}").to_lowercase()
}

/// The rows `-o wide` adds: one per pod (with its policy when several were compared), or one
/// per slice of a torus pool.
pub fn wide_rows(answer: &Answer) -> String {
    let many = answer.placements.len() > 1;
    let slices: Vec<Vec<String>> = answer
        .placements
        .iter()
        .flat_map(|p| &p.slices)
        .map(|s| vec![s.index.to_string(), s.pod.to_string(), s.mesh.clone(), s.chips.to_string()])
        .collect();
    if !slices.is_empty() {
        return table(&["SLICE", "TPU POD", "MESH", "CHIPS"], &slices);
    }
    let dash = |v: String| if v.is_empty() { "-".to_string() } else { v };
    let mut rows = Vec::new();
    for p in &answer.placements {
        for pod in &p.pods {
            let group = match (&pod.set, pod.slice) {
                (Some(set), _) => set.clone(),
                (None, Some(slice)) => format!("slice {slice}"),
                (None, None) => "-".to_string(),
            };
            let gpus: Vec<String> = pod.gpus.iter().map(u8::to_string).collect();
            let mut row = vec![
                pod.index.to_string(),
                group,
                pod.host.clone(),
                pod.domain.clone(),
                dash(gpus.join(",")),
                dash(pod.nics.join(",")),
                pod.chip.clone().unwrap_or_else(|| "-".into()),
                dash(pod.devices.join(", ")),
            ];
            if many {
                row.insert(0, p.policy.clone());
            }
            rows.push(row);
        }
    }
    let mut header = vec!["POD", "GROUP", "HOST", "DOMAIN", "GPUS", "NICS", "CHIP", "DEVICES"];
    if many {
        header.insert(0, "POLICY");
    }
    // Columns no pod has a value in (GPU indices without a known layout, say) say nothing.
    let always = ["POLICY", "POD", "HOST", "DOMAIN"];
    let keep: Vec<bool> =
        (0..header.len()).map(|c| always.contains(&header[c]) || rows.iter().any(|r| r[c] != "-")).collect();
    let pick = |cells: Vec<String>| cells.into_iter().zip(&keep).filter(|(_, k)| **k).map(|(c, _)| c).collect();
    let header: Vec<&str> = header.into_iter().zip(&keep).filter(|(_, k)| **k).map(|(h, _)| h).collect();
    let rows: Vec<Vec<String>> = rows.into_iter().map(pick).collect();
    table(&header, &rows)
}
