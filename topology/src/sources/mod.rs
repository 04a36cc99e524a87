//! Readers that turn real topology descriptions into a [`crate::ResolvedSpec`].
//!
//! Each reader is a pure function over text: it never opens files. Besides the spec it
//! returns [`SourceWarning`]s for items it had to leave out (a node without a level label, a
//! host listed under no switch); nothing is dropped silently.

pub mod hostlist;
pub mod k8s_nodes;
pub mod lingjun;
pub mod slurm;

use crate::{NodeEntry, Resources};

/// YAML options for object dumps of a whole cluster (`kubectl get nodes -o yaml`, a
/// ResourceSlice List): the default budget suits configuration files, while a dump of a few
/// thousand nodes or slices has millions of YAML nodes and may have thousands of documents.
/// Alias limits stay those of [`crate::input_text::yaml_options`].
pub(crate) fn cluster_dump_yaml() -> serde_saphyr::Options {
    let mut options = crate::input_text::yaml_options();
    if let Some(budget) = options.budget.as_mut() {
        budget.max_events = budget.max_events.max(50_000_000);
        budget.max_nodes = budget.max_nodes.max(50_000_000);
        budget.max_total_scalar_bytes = budget.max_total_scalar_bytes.max(1 << 30);
        budget.max_documents = budget.max_documents.max(1_000_000);
    }
    options
}

/// Capacity given to every host when the source does not record one (Slurm, Lingjun).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostDefaults {
    /// What each host has.
    pub capacity: Resources,
}

impl Default for HostDefaults {
    /// 8 GPUs, 96 cores and 1 TiB, a common 8-GPU training server.
    fn default() -> HostDefaults {
        HostDefaults { capacity: Resources { gpus: 8, cpu_milli: 96_000, memory_mib: 1024 * 1024 } }
    }
}

/// An item a reader left out, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceWarning {
    /// File (or other source) the item came from.
    pub source_name: String,
    /// Line of the item, when the format has lines.
    pub line: Option<u64>,
    /// The item left out, e.g. `node gpu-17`.
    pub item: String,
    /// Why.
    pub message: String,
}

impl std::fmt::Display for SourceWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ", self.source_name)?;
        if let Some(line) = self.line {
            write!(f, "line {line}: ")?;
        }
        write!(f, "{}: {}", self.item, self.message)
    }
}

/// What a reader produced: the spec to build and what it left out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadedTopology {
    /// The cluster, ready for [`crate::Topology::build`].
    pub spec: crate::ResolvedSpec,
    /// Items left out, in source order.
    pub warnings: Vec<SourceWarning>,
}

/// A node entry from a path of domain names and a capacity.
pub(crate) fn node(path: Vec<String>, capacity: Resources) -> NodeEntry {
    NodeEntry { path, capacity, flavor: None }
}
