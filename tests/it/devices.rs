//! Device-level clusters in the CLI: the shipped DRA example is what the generator makes, a trace
//! whose pods carry claims replays on it, and the same trace without devices says why it cannot.

use std::path::Path;

use trainyard_topology::devices::synth::{CLASSES_AND_TEMPLATES, SynthNode, slices_yaml};

use crate::json::{number_after, validate};
use crate::{TempDir, arg, trainyard};

const CLUSTER: &str = "examples/clusters/dra-h100.yaml";
const DEVICES: &str = "examples/clusters/dra-h100.devices.yaml";
const TRACE: &str = "examples/traces/dra-sample.csv";

/// The example's devices: 16 nodes of 8 GPUs and 8 NICs, the last one with H200s.
fn example_devices() -> String {
    let mut nodes = Vec::new();
    for rack in 1..=2 {
        for host in 1..=8 {
            let name = format!("dra-r{rack}-h{host:02}");
            let product = if rack == 2 && host == 8 { "NVIDIA H200 141GB HBM3e" } else { "NVIDIA H100 80GB HBM3" };
            nodes.push(SynthNode { name, gpus: 8, nics: 8, product: product.into(), clique: None });
        }
    }
    let head = "# ResourceSlices, DeviceClasses and ResourceClaimTemplates of examples/clusters/dra-h100.yaml,\n\
                # made by trainyard_topology::devices::synth (rerun the tests with TRAINYARD_BLESS=1).\n";
    format!("{head}{CLASSES_AND_TEMPLATES}{}", slices_yaml(&nodes))
}

#[test]
fn the_shipped_device_example_is_what_the_generator_makes() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(DEVICES);
    let want = example_devices();
    if std::env::var_os("TRAINYARD_BLESS").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(have == want, "{DEVICES} is stale; rerun with TRAINYARD_BLESS=1");
}

#[test]
fn a_trace_whose_pods_carry_claims_replays_on_the_device_cluster() {
    let run = trainyard(&["simulate", "--cluster", CLUSTER, "--devices", DEVICES, "--trace", TRACE]);
    run.assert_success().assert_stdout_has(&[
        "cluster          dra-h100 (128 GPUs, 16 hosts)\n",
        "jobs             80 (80 finished, 0 unschedulable)\n",
    ]);
    assert_eq!(run.stderr, "");
    // Pair and two-GPU pods have their devices under one PCIe root; whole-node pods span four.
    let (mut aligned, mut whole) = (0u64, 0u64);
    for row in std::fs::read_to_string(TRACE).unwrap().lines().skip(1) {
        let fields: Vec<&str> = row.split(',').collect();
        let pods: u64 = fields[6].parse().unwrap();
        match fields[11] {
            "node-8gpu-8nic" => whole += pods,
            _ => aligned += pods,
        }
    }
    let pods = aligned + whole;
    let line = |n: u64| format!("{n} ({:.1}%)", 100.0 * n as f64 / pods as f64);
    run.assert_stdout_has(&[
        &format!("\nDRA devices ({pods} pods given "),
        &format!("  one PCIe root {}, several roots {}, no root published 0 (0.0%)\n", line(aligned), line(whole)),
        "  CEL selector results from the cache: ",
    ]);
    // Deterministic: the same inputs give the same report, and the JSON says the same.
    let dir = TempDir::create();
    let out = dir.path("dra.json");
    let again =
        trainyard(&["simulate", "--cluster", CLUSTER, "--devices", DEVICES, "--trace", TRACE, "--out", &arg(&out)]);
    again.assert_success();
    assert!(again.stdout.starts_with(&run.stdout), "{}", again.stdout);
    let json = std::fs::read_to_string(&out).unwrap();
    validate(&json).unwrap();
    assert_eq!(number_after(&json, "\"device_locality\"", "pods") as u64, pods);
    assert_eq!(number_after(&json, "\"device_locality\"", "one_root") as u64, aligned);
    assert_eq!(number_after(&json, "\"device_locality\"", "several_roots") as u64, whole);
}

#[test]
fn without_devices_every_job_with_claims_is_unschedulable_and_says_why() {
    let run = trainyard(&["simulate", "--cluster", CLUSTER, "--trace", TRACE]);
    run.assert_success().assert_stdout_has(&[
        "jobs             80 (0 finished, 80 unschedulable)\n",
        "the cluster publishes no devices",
    ]);
}

#[test]
fn a_devices_file_that_is_not_dra_objects_is_named() {
    let run = trainyard(&["simulate", "--cluster", CLUSTER, "--devices", "Cargo.toml", "--trace", TRACE]);
    assert!(!run.status.success());
    assert!(run.stderr.contains("Cargo.toml"), "{}", run.stderr);
}

#[test]
fn place_prints_every_pods_devices_with_gpu_and_nic_on_one_pcie_root() {
    let args = ["place", "--cluster", CLUSTER, "--devices", DEVICES, "--pods", "8", "--gpus", "0"];
    let run = trainyard(&[&args[..], &["--claims", "gpu-nic-pair", "--topology", "required:host"]].concat());
    run.assert_success().assert_stdout_has(&["gang: 8 pods x 1 GPU, required:host, each pod claiming gpu-nic-pair\n"]);
    let pods: Vec<&str> = run.stdout.lines().filter(|l| l.starts_with("  pod ")).collect();
    assert_eq!(pods.len(), 8, "{}", run.stdout);
    for line in pods {
        let roots: Vec<&str> = line.split(" @ ").skip(1).map(|r| r.split(',').next().unwrap().trim()).collect();
        assert_eq!(roots.len(), 2, "{line}");
        assert_eq!(roots[0], roots[1], "GPU and NIC under one root: {line}");
    }
    // --explain places the same way, devices included.
    let explained =
        trainyard(&[&args[..], &["--claims", "gpu-nic-pair", "--topology", "required:host", "--explain"]].concat());
    let pods = |out: &str| out.lines().filter(|l| l.starts_with("  pod ")).map(str::to_string).collect::<Vec<_>>();
    assert_eq!(pods(&explained.assert_success().stdout), pods(&run.stdout));
    // As data: each pod's devices, one per request of the claim.
    let json =
        trainyard(&[&args[..], &["--claims", "gpu-nic-pair", "--topology", "required:host", "-o", "json"]].concat());
    let answer: serde_json::Value = serde_json::from_str(&json.assert_success().stdout).unwrap();
    let pods = answer["placements"][0]["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 8);
    for pod in pods {
        assert_eq!(pod["devices"].as_array().map(Vec::len), Some(2), "a GPU and a NIC: {pod}");
    }
    let run = trainyard(&[&args[..], &["--claims", "gpu-nic-pair+nvme"]].concat());
    assert!(!run.status.success());
    assert!(
        run.stderr.contains("--claims: ResourceClaimTemplate nvme: no such ResourceClaimTemplate"),
        "{}",
        run.stderr
    );
}

#[test]
fn devices_of_nodes_the_cluster_does_not_have_are_named_and_left_out() {
    let run = trainyard(&["simulate", "--devices", DEVICES, "--trace", TRACE, "--quiet"]);
    run.assert_success();
    assert!(
        run.stderr.starts_with(
            "warning: examples/clusters/dra-h100.devices.yaml: devices: gpu.nvidia.com/dra-r1-h01, nic.example.com/dra-r1-h01: node dra-r1-h01 is not in the cluster; its devices are not used\n"
        ),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("warning: ... and 6 more items left out\n"), "{}", run.stderr);
}
