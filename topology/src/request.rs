//! What a gang asks of the topology: how many pods of which shape, and how close together.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::Resources;
use crate::torus::SliceShape;

/// How tightly the pods of one gang must be packed, in terms of the
/// cluster's named levels (for example `block`, `rack`, `host`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TopologyRequest {
    /// Anywhere in the cluster; placement still prefers the lowest level that fits.
    #[default]
    Unconstrained,
    /// Prefer one domain of this level; spill to higher levels when none fits.
    Preferred(String),
    /// All pods inside one domain of this level, or the gang waits.
    Required(String),
}

impl TopologyRequest {
    /// The level named by the request, if any.
    pub fn level(&self) -> Option<&str> {
        match self {
            TopologyRequest::Unconstrained => None,
            TopologyRequest::Preferred(l) | TopologyRequest::Required(l) => Some(l),
        }
    }
}

impl fmt::Display for TopologyRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopologyRequest::Unconstrained => f.write_str("unconstrained"),
            TopologyRequest::Preferred(l) => write!(f, "preferred:{l}"),
            TopologyRequest::Required(l) => write!(f, "required:{l}"),
        }
    }
}

/// The text form did not parse; the message says what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a topology request; use `unconstrained`, `preferred:<level>` or `required:<level>`")]
pub struct ParseTopologyRequestError(pub String);

impl FromStr for TopologyRequest {
    type Err = ParseTopologyRequestError;

    /// Parses `unconstrained` (or an empty string), `preferred:<level>` and
    /// `required:<level>`, the form used in trace files and on the command line.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.is_empty() || s == "unconstrained" {
            return Ok(TopologyRequest::Unconstrained);
        }
        let bad = || ParseTopologyRequestError(s.to_string());
        let (kind, level) = s.split_once(':').ok_or_else(bad)?;
        let level = level.trim();
        if level.is_empty() {
            return Err(bad());
        }
        match kind.trim() {
            "preferred" => Ok(TopologyRequest::Preferred(level.to_string())),
            "required" => Ok(TopologyRequest::Required(level.to_string())),
            _ => Err(bad()),
        }
    }
}

/// Slices of a pod set: every `size` consecutive pods inside one domain of `level` (Kueue's
/// `podset-slice-required-topology` and `podset-slice-size`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SliceRequest {
    /// The level each slice stays within.
    pub level: String,
    /// Pods per slice; the set's pod count must be a multiple of it.
    pub size: u32,
}

/// Where each pod's GPUs must sit inside its host: all under one PCIe switch, or all on one
/// NUMA node (CPU socket). Hosts whose GPU layout the cluster does not know never qualify.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuLayout {
    /// Every GPU of the pod below one PCIe switch (and so near that switch's NICs).
    Switch,
    /// Every GPU of the pod on one NUMA node.
    Numa,
}

impl fmt::Display for GpuLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GpuLayout::Switch => "switch",
            GpuLayout::Numa => "numa",
        })
    }
}

/// The text form of a GPU layout did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a GPU layout; use `switch` (one PCIe switch per pod) or `numa` (one NUMA node per pod)")]
pub struct ParseGpuLayoutError(pub String);

impl FromStr for GpuLayout {
    type Err = ParseGpuLayoutError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "switch" => Ok(GpuLayout::Switch),
            "numa" => Ok(GpuLayout::Numa),
            other => Err(ParseGpuLayoutError(other.to_string())),
        }
    }
}

/// What a gang's layout asks of each host: room for pods of `gpus` GPUs each inside one group
/// of `within`. One per gang: every set that asks for a layout asks for the same one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LayoutNeed {
    /// GPUs of each such pod (1 to 64).
    pub gpus: u8,
    /// The group they must share.
    pub within: GpuLayout,
}

/// One pod set of a gang: `pods` identical pods, and how close together they must be besides
/// the gang's own constraint.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PodSetShape {
    /// Unique within the gang (`node`, `launcher`, `leader`, `workers`).
    pub name: String,
    /// Number of pods.
    pub pods: u32,
    /// What each pod needs.
    pub pod: Resources,
    /// This set alone inside one domain of a level (within the gang's domain). Only `Required`
    /// narrows a set of a gang of several sets; a one-set gang's constraint is the gang's.
    #[serde(default)]
    pub topology: TopologyRequest,
    /// Slices of this set, each inside one domain of a level.
    #[serde(default)]
    pub slice: Option<SliceRequest>,
    /// TPU slices of this shape (e.g. `2x2x4` chips): the set's pods are whole TPU hosts, each
    /// slice a contiguous box of them on one of the cluster's tori (several: multi-slice).
    #[serde(default)]
    pub tpu: Option<SliceShape>,
    /// Each pod's GPUs inside one group of the host's GPU layout (see [`GpuLayout`]).
    #[serde(default)]
    pub gpu_layout: Option<GpuLayout>,
    /// DRA devices: the ResourceClaimTemplates each pod carries a claim of, by name, resolved
    /// against the cluster's devices. The pod's `gpus` counts the GPUs those claims get.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<String>,
}

impl PodSetShape {
    /// `pods` pods of `pod` named `name`, with no constraint of their own.
    pub fn new(name: &str, pods: u32, pod: Resources) -> PodSetShape {
        PodSetShape {
            name: name.into(),
            pods,
            pod,
            topology: TopologyRequest::Unconstrained,
            slice: None,
            tpu: None,
            gpu_layout: None,
            claims: Vec::new(),
        }
    }
}

/// A gang's demand on the cluster: one or more pod sets, all or none of whose pods run, and
/// how close together the whole gang must be.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GangShape {
    /// The pod sets, in the order the workload names them.
    pub sets: Vec<PodSetShape>,
    /// How close together all pods of all sets must be.
    pub topology: TopologyRequest,
}

impl GangShape {
    /// A gang of `pods` identical pods (one set, named `main`).
    pub fn single(pods: u32, pod: Resources, topology: TopologyRequest) -> GangShape {
        GangShape { sets: vec![PodSetShape::new("main", pods, pod)], topology }
    }

    /// Pods of all sets.
    pub fn pods(&self) -> u32 {
        self.sets.iter().fold(0u32, |acc, s| acc.saturating_add(s.pods))
    }

    /// Total resources of the whole gang (saturating: a gang this large can never fit anyway).
    pub fn total(&self) -> Resources {
        let max = Resources { gpus: u64::MAX, cpu_milli: u64::MAX, memory_mib: u64::MAX };
        self.sets
            .iter()
            .fold(Resources::ZERO, |acc, s| acc.saturating_add(&s.pod.checked_mul(u64::from(s.pods)).unwrap_or(max)))
    }

    /// The largest pod of any set (component by component): what one host must hold at least.
    pub fn largest_pod(&self) -> Resources {
        self.sets.iter().fold(Resources::ZERO, |acc, s| acc.component_max(&s.pod))
    }

    /// The pod of a one-set gang; `None` when the sets' pods differ.
    pub fn uniform_pod(&self) -> Option<Resources> {
        let first = self.sets.first()?.pod;
        self.sets.iter().all(|s| s.pod == first).then_some(first)
    }

    /// Whether the gang is one set without slices of any kind: the shape every trace and
    /// controller produced before pod sets.
    pub fn is_simple(&self) -> bool {
        matches!(self.sets.as_slice(), [s] if s.slice.is_none() && s.tpu.is_none())
    }

    /// The TPU slice shape of the gang, when its pods are TPU hosts.
    pub fn tpu(&self) -> Option<&SliceShape> {
        self.sets.iter().find_map(|s| s.tpu.as_ref())
    }

    /// What the gang's GPU layout asks of a host, when some set asks for one (the gang passed
    /// [`GangShape::validate`], so every such set asks the same).
    pub fn layout_need(&self) -> Option<LayoutNeed> {
        self.sets.iter().find_map(|s| {
            let within = s.gpu_layout?;
            Some(LayoutNeed { gpus: u8::try_from(s.pod.gpus).ok()?, within })
        })
    }

    /// The claim templates of the gang's pods that carry claims, and their pod shape (the gang
    /// passed [`GangShape::validate`], so every such set carries the same).
    pub fn claims(&self) -> Option<(&[String], Resources)> {
        self.sets.iter().find(|s| !s.claims.is_empty()).map(|s| (s.claims.as_slice(), s.pod))
    }

    /// Checks what can be checked without a cluster: at least one set, names unique, slice
    /// sizes that divide their sets, a TPU set alone in its gang, one GPU layout per gang. The
    /// message names the set.
    pub fn validate(&self) -> Result<(), GangShapeError> {
        if self.sets.is_empty() {
            return Err(GangShapeError { set: None, message: "a gang needs at least one pod set".into() });
        }
        for (i, s) in self.sets.iter().enumerate() {
            let named = |message: String| GangShapeError { set: Some(s.name.clone()), message };
            if s.name.trim().is_empty() {
                return Err(GangShapeError { set: None, message: format!("pod set {i} has no name") });
            }
            if self.sets[..i].iter().any(|o| o.name == s.name) {
                return Err(named("two pod sets have this name".into()));
            }
            if let Some(slice) = &s.slice {
                if slice.size == 0 {
                    return Err(named("slice size 0; it must be at least 1".into()));
                }
                if s.pods % slice.size != 0 {
                    return Err(named(format!("{} pods do not divide into slices of {}", s.pods, slice.size)));
                }
            }
            if let Some(shape) = &s.tpu {
                if s.slice.is_some() {
                    return Err(named(format!("TPU slices of {shape} come from the torus; drop the slice size")));
                }
                if self.sets.len() > 1 {
                    return Err(named("a TPU pod set must be its gang's only pod set".into()));
                }
                if s.gpu_layout.is_some() {
                    return Err(named(format!("TPU slices of {shape} have no GPU layout; drop it")));
                }
            }
            if !s.claims.is_empty() {
                if s.tpu.is_some() {
                    return Err(named("TPU slices take whole hosts; device claims are not supported on them".into()));
                }
                if let Some(o) = self.sets[..i].iter().find(|o| !o.claims.is_empty())
                    && (o.claims != s.claims || o.pod != s.pod)
                {
                    let message = format!(
                        "carries claims {:?} on pods of {}, but pod set {:?} carries {:?} on pods of {}; the pod \
                         sets of one gang that carry device claims must carry the same ones on the same pods",
                        s.claims, s.pod, o.name, o.claims, o.pod
                    );
                    return Err(named(message));
                }
            }
            // Pods get devices by their shape (placements know shapes, not sets): a set without
            // claims must not look like one with them.
            if let Some(o) = self.sets.iter().find(|o| o.claims.is_empty() != s.claims.is_empty() && o.pod == s.pod)
                && !s.claims.is_empty()
            {
                let message = format!(
                    "carries device claims and pod set {:?} does not, on the same pods ({}); give them \
                     different resources or the same claims",
                    o.name, s.pod
                );
                return Err(named(message));
            }
            if let Some(within) = s.gpu_layout {
                if s.pod.gpus == 0 || s.pod.gpus > u64::from(crate::intra_node::MAX_GPUS) {
                    let message = format!("a GPU layout needs 1 to 64 GPUs per pod, not {}", s.pod.gpus);
                    return Err(named(message));
                }
                let first = self.sets[..i].iter().find(|o| o.gpu_layout.is_some());
                if let Some(o) = first.filter(|o| o.gpu_layout != Some(within) || o.pod.gpus != s.pod.gpus) {
                    let message = format!(
                        "asks for {} GPUs per pod within one {within}, but pod set {:?} asks for {} within one {}; \
                         the pod sets of one gang that ask for a GPU layout must ask for the same one",
                        s.pod.gpus,
                        o.name,
                        o.pod.gpus,
                        o.gpu_layout.map_or_else(String::new, |l| l.to_string())
                    );
                    return Err(named(message));
                }
            }
        }
        Ok(())
    }
}

/// A gang shape that cannot be scheduled as written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", set.as_ref().map(|s| format!("pod set {s:?}: ")).unwrap_or_default())]
pub struct GangShapeError {
    /// The pod set at fault, when one is.
    pub set: Option<String>,
    /// What is wrong.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topology_request_round_trips_through_text() {
        for text in ["unconstrained", "preferred:rack", "required:host"] {
            let parsed: TopologyRequest = text.parse().unwrap();
            assert_eq!(parsed.to_string(), text);
        }
        assert_eq!("".parse::<TopologyRequest>().unwrap(), TopologyRequest::Unconstrained);
    }

    #[test]
    fn topology_request_rejects_unknown_kinds() {
        let err = "strict:rack".parse::<TopologyRequest>().unwrap_err();
        assert!(err.to_string().contains("strict:rack"));
        assert!("required:".parse::<TopologyRequest>().is_err());
    }
}
