//! The inside of one host: which GPUs share a PCIe switch, a NUMA node and a NIC.
//!
//! ```text
//!  host ─┬─ NUMA node (CPU socket or die) ─┬─ PCIe switch ─┬─ GPUs
//!        │                                 │               └─ NICs
//!        │                                 └─ PCIe switch ─ ...
//!        └─ NUMA node ─ ...
//! ```
//! [`parse_nccl_xml`] reads the layout from an NCCL topology file (`NCCL_TOPO_FILE`, or the
//! dump NCCL writes with `NCCL_TOPO_DUMP_FILE`); [`builtin`] returns the layouts of three
//! cloud SKUs shipped with trainyard and [`flat`] one for hosts without a known layout.
//! [`HostDevices`] hands out GPUs of one host so that a pod's GPUs share as small a group as
//! possible; [`GpuGroups`] does the same over any free set, which is how a cluster whose hosts
//! carry a layout gives every pod of a gang its GPU indices.
//!
//! GPU numbering: GPUs are numbered `0..n` in ascending PCI bus id order, compared
//! numerically as (domain, bus, device, function). This is the order CUDA uses with
//! `CUDA_DEVICE_ORDER=PCI_BUS_ID` and the order `nvidia-smi` lists, so an index here can be put
//! into `CUDA_VISIBLE_DEVICES` as is. It is not file order: on Azure NDv4 GPU 0 is on NUMA 1.
//!
//! NVLink is not modelled: on the shipped SKUs all GPUs of a host share one NVSwitch domain,
//! so NVLink does not separate them; PCIe switch and NUMA node still decide which NIC and
//! which CPU memory a GPU reaches fastest.

mod devices;
mod xml;

pub use devices::{DeviceAssignment, GpuGroups, HostDevices, Locality, ReleaseError};
pub use xml::{NcclXmlError, parse_nccl_xml};

/// Most GPUs one host may have: the allocator keeps its free set in a `u64`.
pub const MAX_GPUS: u8 = 64;

/// Names accepted by [`builtin`].
pub const BUILTIN_NAMES: [&str; 3] = ["azure-ndv4", "azure-ndv5", "aws-p4d"];

const AZURE_NDV4: &str = include_str!("../../../data/topologies/intra-node/azure-ndv4-a100-topo.xml");
const AZURE_NDV5: &str = include_str!("../../../data/topologies/intra-node/azure-ndv5-h100-topo.xml");
const AWS_P4D: &str = include_str!("../../../data/topologies/intra-node/aws-p4d-24xl-a100-topo.xml");

/// One GPU of a host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpu {
    /// Its number, `0..gpu_count`, in ascending bus id order (see the module docs).
    pub index: u8,
    /// PCI bus id as written in the source, e.g. `0000:10:1c.0`.
    pub busid: String,
    /// `numaid` of the NUMA node it hangs off.
    pub numa_id: i32,
    /// Bus id of the innermost PCIe switch above it; for a GPU attached straight to the CPU,
    /// its own bus id (see [`Switch::direct`]).
    pub switch: String,
    /// Position of its NUMA node in [`HostLayout::numa`] and of its switch in that node.
    pub(crate) at: (usize, usize),
}

/// A PCIe switch and the devices directly below it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Switch {
    /// The switch's PCI bus id (virtual ids such as `ffff:ff:01.0` are common in cloud files).
    pub busid: String,
    /// Bus id of the switch this one hangs below, if it is nested.
    pub parent: Option<String>,
    /// GPUs directly below it, ascending.
    pub gpus: Vec<u8>,
    /// NICs directly below it, named by bus id (or by network device name when the source
    /// gives no bus id), in source order.
    pub nics: Vec<String>,
    /// True when this is no switch but a GPU attached straight to the CPU: such a GPU shares
    /// no switch with anything, so it forms a group of its own, named by its own bus id.
    pub direct: bool,
}

/// A NUMA node (CPU socket, or die on chips with several NUMA nodes per socket).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Numa {
    /// The `numaid` attribute of its `<cpu>` element.
    pub id: i32,
    /// Its PCIe switches, in source order.
    pub switches: Vec<Switch>,
    /// NICs attached to the CPU without a switch in between.
    pub nics: Vec<String>,
}

/// The PCIe/NUMA layout of one host.
///
/// Built only by [`parse_nccl_xml`], [`builtin`] and [`flat`], so every GPU index is in
/// `0..gpu_count` and appears in exactly one switch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostLayout {
    numa: Vec<Numa>,
    gpus: Vec<Gpu>,
}

impl HostLayout {
    /// Builds the layout; the parser has checked that `gpus` is indexed `0..n` and matches
    /// the switches.
    pub(crate) fn new(numa: Vec<Numa>, gpus: Vec<Gpu>) -> HostLayout {
        HostLayout { numa, gpus }
    }

    /// NUMA nodes, in source order.
    pub fn numa(&self) -> &[Numa] {
        &self.numa
    }

    /// GPUs, indexed by their number.
    pub fn gpus(&self) -> &[Gpu] {
        &self.gpus
    }

    /// How many GPUs the host has (at most [`MAX_GPUS`]).
    pub fn gpu_count(&self) -> u8 {
        // The parser and `flat` cap the count at MAX_GPUS, so this never saturates.
        u8::try_from(self.gpus.len()).unwrap_or(u8::MAX)
    }

    /// GPU number `gpu`, if the host has it.
    pub fn gpu(&self, gpu: u8) -> Option<&Gpu> {
        self.gpus.get(usize::from(gpu))
    }

    /// The NUMA node GPU `gpu` hangs off.
    pub fn numa_of(&self, gpu: u8) -> Option<&Numa> {
        self.gpu(gpu).map(|g| &self.numa[g.at.0])
    }

    /// The innermost PCIe switch above GPU `gpu`.
    pub fn switch_of(&self, gpu: u8) -> Option<&Switch> {
        self.gpu(gpu).map(|g| &self.numa[g.at.0].switches[g.at.1])
    }

    /// The NICs closest to GPU `gpu`: those on its switch; if there are none, those on the
    /// nearest enclosing switch that has some; else those attached straight to its NUMA
    /// node. Empty when the GPU is unknown or its NUMA node has no NIC that way.
    pub fn nics_near(&self, gpu: u8) -> &[String] {
        let Some(g) = self.gpu(gpu) else { return &[] };
        let numa = &self.numa[g.at.0];
        let mut switch = Some(&numa.switches[g.at.1]);
        // Bounded by the switch count so that a parent cycle (impossible from a tree) cannot loop.
        for _ in 0..=numa.switches.len() {
            let Some(s) = switch else { break };
            if !s.nics.is_empty() {
                return &s.nics;
            }
            switch = s.parent.as_ref().and_then(|p| numa.switches.iter().find(|o| &o.busid == p));
        }
        &numa.nics
    }

    /// Every NIC of the host: per NUMA node, switch NICs in switch order, then direct ones.
    pub fn nics(&self) -> Vec<&str> {
        let mut out = Vec::new();
        for numa in &self.numa {
            out.extend(numa.switches.iter().flat_map(|s| s.nics.iter().map(String::as_str)));
            out.extend(numa.nics.iter().map(String::as_str));
        }
        out
    }
}

/// The layout of a shipped SKU: `"azure-ndv4"` (Azure ND A100 v4), `"azure-ndv5"` (Azure ND
/// H100 v5) or `"aws-p4d"` (AWS p4d.24xlarge). `None` for any other name.
pub fn builtin(name: &str) -> Option<HostLayout> {
    let (text, file) = match name {
        "azure-ndv4" => (AZURE_NDV4, "azure-ndv4-a100-topo.xml"),
        "azure-ndv5" => (AZURE_NDV5, "azure-ndv5-h100-topo.xml"),
        "aws-p4d" => (AWS_P4D, "aws-p4d-24xl-a100-topo.xml"),
        _ => return None,
    };
    // The shipped files parse (tested), so an error here cannot happen at run time.
    parse_nccl_xml(text, file).ok()
}

/// A host without a known layout: one NUMA node (id 0) with one switch (bus id `flat`) that
/// holds every GPU, and no NICs. GPU `i` gets the made-up bus id `0000:00:00.0` + `i` in the
/// bus field. Counts above [`MAX_GPUS`] are capped at [`MAX_GPUS`].
pub fn flat(gpus: u8) -> HostLayout {
    let n = gpus.min(MAX_GPUS);
    let list = (0..n)
        .map(|i| Gpu {
            index: i,
            busid: format!("0000:{i:02x}:00.0"),
            numa_id: 0,
            switch: "flat".to_string(),
            at: (0, 0),
        })
        .collect();
    let switch =
        Switch { busid: "flat".to_string(), parent: None, gpus: (0..n).collect(), nics: Vec::new(), direct: false };
    HostLayout::new(vec![Numa { id: 0, switches: vec![switch], nics: Vec::new() }], list)
}

#[cfg(test)]
mod tests;
