//! trainyard's own trace schema, shared by the `csv` and `jsonl` formats: field names, checks, conversion.

use trainyard_topology::torus::SliceShape;
use trainyard_topology::{GangShape, GpuLayout, PodSetShape, Resources, SliceRequest, TopologyRequest};

use super::error::RowError;
use crate::job::TraceJob;
use crate::trial::{Objective, Search, Trial};

/// The fields of the schema, in CSV column order (also the JSONL keys).
pub(crate) const COLUMNS: [&str; 11] = [
    "id",
    "submit_s",
    "runtime_s",
    "runtime_estimate_s",
    "tenant",
    "priority",
    "pods",
    "gpus_per_pod",
    "cpu_milli_per_pod",
    "memory_mib_per_pod",
    "topology",
];

/// Columns a row may have besides those: the main set's slices, the gang's other pod sets, the
/// TPU slice shape of the main set, the GPU layout of the main set's pods, the DRA claim
/// templates its pods carry, and the search the row is a trial of with the objective it reports.
/// Files without them read as before; writers add them only when some job needs them.
pub(crate) const OPTIONAL_COLUMNS: [&str; 7] =
    ["slice", "pod_sets", "tpu", "gpu_layout", "claims", "search", "objective"];

/// One row of the schema, each field parsed but not yet checked as a whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NativeRow {
    pub id: String,
    pub submit_s: u64,
    pub runtime_s: u64,
    pub runtime_estimate_s: Option<u64>,
    pub tenant: String,
    pub priority: i32,
    pub pods: u32,
    pub gpus_per_pod: u64,
    pub cpu_milli_per_pod: u64,
    pub memory_mib_per_pod: u64,
    pub topology: TopologyRequest,
    /// Slices of the row's own pods (`pods` x the per-pod columns, the set named `main`).
    pub slice: Option<SliceRequest>,
    /// The gang's other pod sets.
    pub pod_sets: Vec<PodSetShape>,
    /// TPU slices of the row's own pods (each pod a whole TPU host), e.g. `2x2x4`.
    pub tpu: Option<SliceShape>,
    /// Each of the row's own pods' GPUs under one PCIe switch (`switch`) or NUMA node (`numa`).
    pub gpu_layout: Option<GpuLayout>,
    /// ResourceClaimTemplates each of the row's own pods carries a claim of.
    pub claims: Vec<String>,
    /// The search the row is a trial of.
    pub search: Option<Search>,
    /// What the trial reports when it finishes; only a trial has one.
    pub objective: Option<Objective>,
}

/// Name of the pod set a row's own columns describe.
pub(crate) const MAIN_SET: &str = "main";

impl NativeRow {
    /// The row a writer emits for `job`.
    pub fn from_job(job: &TraceJob) -> Self {
        let main = &job.gang.sets[0];
        NativeRow {
            id: job.id.clone(),
            submit_s: job.submit,
            runtime_s: job.runtime,
            runtime_estimate_s: job.runtime_estimate,
            tenant: job.tenant.clone(),
            priority: job.priority,
            pods: main.pods,
            gpus_per_pod: main.pod.gpus,
            cpu_milli_per_pod: main.pod.cpu_milli,
            memory_mib_per_pod: main.pod.memory_mib,
            topology: job.gang.topology.clone(),
            slice: main.slice.clone(),
            pod_sets: job.gang.sets[1..].to_vec(),
            tpu: main.tpu.clone(),
            gpu_layout: main.gpu_layout,
            claims: main.claims.clone(),
            search: job.trial.as_ref().map(|t| t.search.clone()),
            objective: job.trial.as_ref().and_then(|t| t.objective),
        }
    }

    /// Whether the row needs the `slice` and `pod_sets` columns.
    pub fn is_rich(&self) -> bool {
        self.slice.is_some() || !self.pod_sets.is_empty()
    }

    /// Whether the row needs the `tpu` column.
    pub fn has_tpu(&self) -> bool {
        self.tpu.is_some()
    }

    /// Whether the row needs the `gpu_layout` column.
    pub fn has_gpu_layout(&self) -> bool {
        self.gpu_layout.is_some()
    }

    /// Whether the row needs the `claims` column.
    pub fn has_claims(&self) -> bool {
        !self.claims.is_empty()
    }

    /// Whether the row needs the `search` and `objective` columns.
    pub fn is_trial(&self) -> bool {
        self.search.is_some()
    }

    /// Checks the row (non-empty id and tenant, runtimes of at least 1 s,
    /// at least one pod, pods that ask for something) and makes the job.
    pub fn into_job(self, line: u64) -> Result<TraceJob, RowError> {
        let bad = |field: &str, message: &str| Err(RowError::field(line, field, message));
        if self.id.is_empty() {
            return bad("id", "must not be empty");
        }
        if self.runtime_s == 0 {
            return bad("runtime_s", "must be at least 1");
        }
        if self.runtime_estimate_s == Some(0) {
            return bad("runtime_estimate_s", "must be at least 1 (or left empty)");
        }
        if self.tenant.is_empty() {
            return bad("tenant", "must not be empty");
        }
        if self.pods == 0 {
            return bad("pods", "must be at least 1");
        }
        let pod = Resources {
            gpus: self.gpus_per_pod,
            cpu_milli: self.cpu_milli_per_pod,
            memory_mib: self.memory_mib_per_pod,
        };
        if pod.is_zero() {
            return bad("gpus_per_pod", "a pod must ask for GPUs, CPU or memory, but all three are 0");
        }
        if self.objective.is_some() && self.search.is_none() {
            return bad("objective", "only a trial reports an objective; name its search in `search`");
        }
        let gang = self.gang(pod, line)?;
        Ok(TraceJob {
            id: self.id,
            submit: self.submit_s,
            runtime: self.runtime_s,
            runtime_estimate: self.runtime_estimate_s,
            tenant: self.tenant,
            priority: self.priority,
            gang,
            line,
            trial: self.search.map(|search| Trial { search, objective: self.objective }),
        })
    }

    /// The gang: the row's own set, then its other pod sets, checked as a whole.
    fn gang(&self, pod: Resources, line: u64) -> Result<GangShape, RowError> {
        let main = PodSetShape {
            slice: self.slice.clone(),
            tpu: self.tpu.clone(),
            gpu_layout: self.gpu_layout,
            claims: self.claims.clone(),
            ..PodSetShape::new(MAIN_SET, self.pods, pod)
        };
        let sets: Vec<PodSetShape> = std::iter::once(main).chain(self.pod_sets.iter().cloned()).collect();
        let shape = GangShape { sets, topology: self.topology.clone() };
        shape.validate().map_err(|e| {
            let main = e.set.as_deref() == Some(MAIN_SET) && self.pod_sets.iter().all(|s| s.name != MAIN_SET);
            let field = match (main, &self.tpu) {
                (true, _) if self.gpu_layout.is_some() && e.message.contains("GPU layout") => "gpu_layout",
                (true, _) if !self.claims.is_empty() && e.message.contains("claims") => "claims",
                (true, Some(_)) => "tpu",
                (true, None) => "slice",
                (false, _) => "pod_sets",
            };
            RowError::field(line, field, e.to_string())
        })?;
        Ok(shape)
    }
}

/// The text form of a search, `<name>:<parallel>[:max|min]`; empty means none.
pub(crate) fn search(text: &str) -> Result<Option<Search>, String> {
    Search::parse(text)
}

/// The text of a search.
pub(crate) fn search_text(search: Option<&Search>) -> String {
    search.map(ToString::to_string).unwrap_or_default()
}

/// The text form of an objective, a finite number; empty means none.
pub(crate) fn objective(text: &str) -> Result<Option<Objective>, String> {
    Objective::parse(text)
}

/// The text of an objective.
pub(crate) fn objective_text(objective: Option<Objective>) -> String {
    objective.map(|o| o.to_string()).unwrap_or_default()
}

/// The text form of a slice request, `<level>:<size>`; empty means none.
pub(crate) fn slice(text: &str) -> Result<Option<SliceRequest>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let bad = || format!("{text:?} is not a slice; write <level>:<pods per slice>, e.g. rack:4");
    let (level, size) = text.rsplit_once(':').ok_or_else(bad)?;
    let size: u32 = size.trim().parse().map_err(|_| bad())?;
    if level.trim().is_empty() || size == 0 {
        return Err(bad());
    }
    Ok(Some(SliceRequest { level: level.trim().to_string(), size }))
}

/// The text of a slice request.
pub(crate) fn slice_text(slice: Option<&SliceRequest>) -> String {
    slice.map(|s| format!("{}:{}", s.level, s.size)).unwrap_or_default()
}

/// The text form of a TPU slice shape, e.g. `2x2x4`; empty means none.
pub(crate) fn tpu(text: &str) -> Result<Option<SliceShape>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|e: trainyard_topology::torus::TorusError| e.to_string())
}

/// The text form of a GPU layout, `switch` or `numa`; empty means none.
pub(crate) fn gpu_layout(text: &str) -> Result<Option<GpuLayout>, String> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|e: trainyard_topology::ParseGpuLayoutError| e.to_string())
}

/// The text of a GPU layout.
pub(crate) fn gpu_layout_text(layout: Option<GpuLayout>) -> String {
    layout.map(|l| l.to_string()).unwrap_or_default()
}

/// The text form of claim templates: names joined by `+`; empty means none.
pub(crate) fn claims(text: &str) -> Result<Vec<String>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<String> = text.split('+').map(|n| n.trim().to_string()).collect();
    if let Some(bad) = names.iter().find(|n| !is_object_name(n)) {
        return Err(format!(
            "{bad:?} is not a ResourceClaimTemplate name (lower-case letters, digits, '-' and '.'); \
             join several with '+'"
        ));
    }
    Ok(names)
}

/// A Kubernetes object name (DNS subdomain).
fn is_object_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// The text of claim templates.
pub(crate) fn claims_text(names: &[String]) -> String {
    names.join("+")
}

/// The text of a TPU slice shape.
pub(crate) fn tpu_text(shape: Option<&SliceShape>) -> String {
    shape.map(ToString::to_string).unwrap_or_default()
}

/// The text form of pod sets: `;`-separated sets, each `<name>=<pods>x<gpus per pod>` followed by
/// optional space-separated `cpu_milli=<n>`, `memory_mib=<n>`, `required=<level>` (the set alone
/// inside one domain of that level), `slice=<level>:<size>`, `tpu=<shape>`, `layout=switch|numa`
/// (each pod's GPUs under one PCIe switch or on one NUMA node) and `claims=<template>+...` (DRA
/// claims of each pod); no commas, so a CSV field needs no quotes. Empty means no other sets.
pub(crate) fn pod_sets(text: &str) -> Result<Vec<PodSetShape>, String> {
    let mut sets = Vec::new();
    for (i, part) in text.split(';').map(str::trim).enumerate().filter(|(_, p)| !p.is_empty()) {
        let at = |message: String| format!("pod set {} ({part:?}): {message}", i + 1);
        let mut attrs = part.split_whitespace();
        let head = attrs.next().unwrap_or_default();
        let (name, size) = head.split_once('=').ok_or_else(|| at("write <name>=<pods>x<gpus per pod>".into()))?;
        let (pods, gpus) = size.split_once('x').ok_or_else(|| at("write <name>=<pods>x<gpus per pod>".into()))?;
        let number = |what: &str, t: &str| {
            t.trim().parse::<u64>().map_err(|_| at(format!("{what} {t:?} is not a whole number")))
        };
        let pods = u32::try_from(number("pods", pods)?).map_err(|_| at("too many pods".into()))?;
        if pods == 0 {
            return Err(at("a pod set needs at least 1 pod".into()));
        }
        let mut set = PodSetShape::new(name.trim(), pods, Resources::gpus(number("gpus", gpus)?));
        for attr in attrs {
            let (key, value) = attr.split_once('=').ok_or_else(|| at(format!("{attr:?} is not <key>=<value>")))?;
            match key.trim() {
                "cpu_milli" => set.pod.cpu_milli = number("cpu_milli", value)?,
                "memory_mib" => set.pod.memory_mib = number("memory_mib", value)?,
                "required" if !value.trim().is_empty() => set.topology = TopologyRequest::Required(value.trim().into()),
                "slice" => set.slice = slice(value).map_err(at)?,
                "tpu" => set.tpu = tpu(value).map_err(at)?,
                "layout" => set.gpu_layout = gpu_layout(value).map_err(at)?,
                "claims" => set.claims = claims(value).map_err(at)?,
                other => {
                    return Err(at(format!(
                        "unknown key {other:?}; use cpu_milli, memory_mib, required, slice, tpu, layout or claims"
                    )));
                }
            }
        }
        if set.pod.is_zero() {
            return Err(at("a pod must ask for GPUs, CPU or memory".into()));
        }
        sets.push(set);
    }
    Ok(sets)
}

/// The text of pod sets, as [`pod_sets`] reads it.
pub(crate) fn pod_sets_text(sets: &[PodSetShape]) -> String {
    let one = |s: &PodSetShape| {
        let mut text = format!("{}={}x{}", s.name, s.pods, s.pod.gpus);
        if s.pod.cpu_milli > 0 {
            text.push_str(&format!(" cpu_milli={}", s.pod.cpu_milli));
        }
        if s.pod.memory_mib > 0 {
            text.push_str(&format!(" memory_mib={}", s.pod.memory_mib));
        }
        if let TopologyRequest::Required(level) = &s.topology {
            text.push_str(&format!(" required={level}"));
        }
        if let Some(slice) = &s.slice {
            text.push_str(&format!(" slice={}:{}", slice.level, slice.size));
        }
        if let Some(shape) = &s.tpu {
            text.push_str(&format!(" tpu={shape}"));
        }
        if let Some(layout) = s.gpu_layout {
            text.push_str(&format!(" layout={layout}"));
        }
        if !s.claims.is_empty() {
            text.push_str(&format!(" claims={}", claims_text(&s.claims)));
        }
        text
    };
    sets.iter().map(one).collect::<Vec<_>>().join(";")
}

/// The text form of a topology request; empty means unconstrained.
pub(crate) fn topology(text: &str) -> Result<TopologyRequest, String> {
    text.parse().map_err(|e: trainyard_topology::ParseTopologyRequestError| e.to_string())
}
