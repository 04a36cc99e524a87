//! Device-level clusters made up for tests, examples and benchmarks: per node, the ResourceSlices
//! NVIDIA's DRA GPU driver and an RDMA NIC driver publish (GPUs and NICs paired under PCIe roots,
//! as on HGX boards), plus the DeviceClasses and ResourceClaimTemplates training pods use.

use std::fmt::Write;

/// What each made-up node has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SynthNode {
    /// Node name.
    pub name: String,
    /// GPUs (two per PCIe root).
    pub gpus: u32,
    /// RDMA NICs (two per PCIe root, under the roots of the GPUs first).
    pub nics: u32,
    /// The GPUs' product name, e.g. `NVIDIA H100 80GB HBM3`.
    pub product: String,
    /// The NVLink domain (clique) of the node's GPUs, when they are in a multi-node one.
    pub clique: Option<String>,
}

impl SynthNode {
    /// An HGX H100 node: 8 GPUs and 8 RDMA NICs, in no multi-node NVLink domain.
    pub fn hgx_h100(name: impl Into<String>) -> SynthNode {
        SynthNode { name: name.into(), gpus: 8, nics: 8, product: "NVIDIA H100 80GB HBM3".into(), clique: None }
    }
}

/// The classes, templates and slices of HGX H100 nodes named `names`, read.
pub fn hgx_h100_objects(names: impl IntoIterator<Item = String>) -> super::DraObjects {
    let nodes: Vec<SynthNode> = names.into_iter().map(SynthNode::hgx_h100).collect();
    let text = format!("{CLASSES_AND_TEMPLATES}{}", slices_yaml(&nodes));
    super::parse_objects(&text, "synthetic HGX H100 devices").expect("made-up objects read")
}

/// DeviceClasses as the drivers install them, and the claim templates of [`TEMPLATES`].
pub const CLASSES_AND_TEMPLATES: &str = r#"# DeviceClasses of NVIDIA's DRA GPU driver and an RDMA NIC driver.
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.nvidia.com}
spec:
  selectors:
  - cel:
      expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: rdma.nic.example.com}
spec:
  selectors:
  - cel:
      expression: "device.driver == 'nic.example.com' && device.attributes['nic.example.com'].type == 'rdma'"
---
# One GPU and one NIC under the same PCIe root (GPUDirect RDMA).
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: gpu-nic-pair, namespace: ml}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.nvidia.com}
      - name: nic
        exactly: {deviceClassName: rdma.nic.example.com}
      constraints:
      - requests: [gpu, nic]
        matchAttribute: resource.kubernetes.io/pcieRoot
---
# Two GPUs of one PCIe root and a NIC of that root.
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: two-gpus-one-root, namespace: ml}
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly: {deviceClassName: gpu.nvidia.com, count: 2}
      - name: nic
        exactly: {deviceClassName: rdma.nic.example.com}
      constraints:
      - matchAttribute: resource.kubernetes.io/pcieRoot
---
# A whole HGX node: eight GPUs of one product and eight NICs.
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: node-8gpu-8nic, namespace: ml}
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly:
          deviceClassName: gpu.nvidia.com
          count: 8
          selectors:
          - cel: {expression: "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"}
      - name: nics
        exactly: {deviceClassName: rdma.nic.example.com, count: 8}
      constraints:
      - requests: [gpus]
        matchAttribute: gpu.nvidia.com/productName
"#;

/// The claim templates of [`CLASSES_AND_TEMPLATES`], with the GPUs each pod gets.
pub const TEMPLATES: [(&str, u64); 3] = [("gpu-nic-pair", 1), ("two-gpus-one-root", 2), ("node-8gpu-8nic", 8)];

/// ResourceSlices of every node: one GPU slice and one NIC slice each, in one pool per driver and
/// node, as YAML documents.
pub fn slices_yaml(nodes: &[SynthNode]) -> String {
    let mut out = String::new();
    for node in nodes {
        gpu_slice(&mut out, node);
        nic_slice(&mut out, node);
    }
    out
}

fn header(out: &mut String, driver: &str, node: &str) {
    let _ = write!(
        out,
        "---\napiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: {node}-{driver}}}\nspec:\n  \
         driver: {driver}\n  nodeName: {node}\n  pool: {{name: {node}, generation: 1, resourceSliceCount: 1}}\n  \
         devices:\n"
    );
}

/// PCIe root `r` of a node, as `pci0000:xx`.
fn root(r: u32) -> String {
    format!("pci0000:{:02x}", 0x15 + 0x22 * r)
}

fn gpu_slice(out: &mut String, node: &SynthNode) {
    header(out, "gpu.nvidia.com", &node.name);
    for i in 0..node.gpus {
        let uuid = uuid(&node.name, i);
        let bus = 0x19 + 0x22 * (i / 2) + i % 2;
        let _ = write!(
            out,
            "  - name: gpu-{i}\n    attributes:\n      type: {{string: gpu}}\n      uuid: {{string: {uuid}}}\n      \
             productName: {{string: {product}}}\n      architecture: {{string: Hopper}}\n      \
             cudaComputeCapability: {{version: 9.0.0}}\n      driverVersion: {{version: 570.133.20}}\n      \
             resource.kubernetes.io/pciBusID: {{string: \"0000:{bus:02x}:00.0\"}}\n      \
             resource.kubernetes.io/pcieRoot: {{string: \"{root}\"}}\n",
            product = node.product,
            root = root(i / 2),
        );
        if let Some(clique) = &node.clique {
            let _ = writeln!(out, "      clique: {{string: \"{clique}\"}}");
        }
        out.push_str("    capacity:\n      memory: {value: 81559Mi}\n");
    }
}

fn nic_slice(out: &mut String, node: &SynthNode) {
    header(out, "nic.example.com", &node.name);
    for j in 0..node.nics {
        let bus = 0x17 + 0x22 * (j / 2) + j % 2;
        let _ = write!(
            out,
            "  - name: nic-{j}\n    attributes:\n      type: {{string: rdma}}\n      ifName: {{string: ib{j}}}\n      \
             linkSpeedGbps: {{int: 400}}\n      resource.kubernetes.io/pciBusID: {{string: \"0000:{bus:02x}:00.0\"}}\n      \
             resource.kubernetes.io/pcieRoot: {{string: \"{root}\"}}\n",
            root = root(j / 2),
        );
    }
}

/// A GPU UUID that is the same for the same node and index.
fn uuid(node: &str, i: u32) -> String {
    let bytes: Vec<u8> = node.bytes().chain(i.to_le_bytes()).collect();
    let h = format!("{:016x}", crate::rng::fnv1a(&bytes));
    format!("GPU-{}-{}-{}-{}-{}{}", &h[..8], &h[8..12], &h[12..16], &h[..4], &h[4..16], &h[..4])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::{PoolView, parse_objects};

    #[test]
    fn made_up_nodes_read_back_as_complete_pools_with_paired_roots() {
        let node = |name: &str| SynthNode {
            name: name.into(),
            gpus: 8,
            nics: 8,
            product: "NVIDIA H100 80GB HBM3".into(),
            clique: Some("cluster-a.0".into()),
        };
        let text = format!("{CLASSES_AND_TEMPLATES}{}", slices_yaml(&[node("n1"), node("n2")]));
        let objects = parse_objects(&text, "synth").expect("parses");
        assert_eq!((objects.classes.len(), objects.claims.len(), objects.slices.len()), (2, 3, 4));
        let view = PoolView::build(&objects.slices);
        assert!(view.reports.is_empty(), "{:?}", view.reports);
        let host = view.host("n1");
        assert_eq!(host.devices.len(), 16);
        let roots = |driver: &str| {
            let mut r: Vec<&str> =
                host.devices.iter().filter(|d| d.id.driver == driver).filter_map(|d| d.pcie_root()).collect();
            r.dedup();
            r
        };
        assert_eq!(roots("gpu.nvidia.com"), roots("nic.example.com"));
        assert_eq!(roots("gpu.nvidia.com").len(), 4);
        assert_ne!(uuid("n1", 0), uuid("n2", 0));
    }
}
