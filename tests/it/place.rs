//! `trainyard place`: every topology source, --explain, policy comparison, pod sets, GPU
//! indices inside hosts, TPU slices, and the errors of each.

use crate::{TempDir, trainyard};

#[test]
fn places_a_gang_on_the_built_in_cluster_within_one_rack() {
    let run = trainyard(&["place", "--pods", "8", "--gpus", "8", "--topology", "required:rack"]);
    run.assert_success().assert_stdout_has(&[
        "cluster demo: 64 hosts, 512 GPUs",
        "8 pod(s) on 8 host(s) within rack block-0/rack-0",
        "spans 1 block, 1 rack, 8 host",
    ]);
}

#[test]
fn explain_names_the_cost_terms_and_the_losing_domains() {
    let run = trainyard(&["place", "--pods", "12", "--gpus", "4", "--load", "0.4", "--seed", "3", "--explain"]);
    run.assert_success().assert_stdout_has(&[
        "why this placement (trainyard): greedy answer, proven optimal",
        "cost 26624 = 1 block x 16384 + 1 rack x 4096 + 6 host x 1024 + 0 stranded GPUs x 64",
        "optimality gap 0",
        "no host holds 12 pods: the roomiest",
        "8 domains at level rack:",
        "chosen, cost 26624",
        "too small for 12 pods",
    ]);
}

#[test]
fn all_policies_are_compared_on_the_lingjun_fabric() {
    let run = trainyard(&[
        "place",
        "--cluster",
        "data/topologies/lingjun-topo.csv",
        "--pods",
        "16",
        "--gpus",
        "4",
        "--load",
        "0.6",
        "--policy",
        "all",
    ]);
    run.assert_success().assert_stdout_has(&[
        "847 hosts, 6776 GPUs, levels dsw > psw > tor > host",
        "trainyard",
        "greedy",
        "first-fit",
        "kueue-best-fit",
        "slurm-tree",
    ]);
    let cost = |name: &str| -> u64 {
        let line = run.stdout.lines().find(|l| l.starts_with(name)).unwrap();
        line.split_whitespace().nth(2).unwrap().parse().unwrap()
    };
    for baseline in ["greedy", "first-fit", "kueue-best-fit", "slurm-tree"] {
        assert!(cost("trainyard") <= cost(baseline), "{baseline} beat trainyard:\n{}", run.stdout);
    }
}

#[test]
fn slurm_block_topology_with_slices() {
    let run = trainyard(&[
        "place",
        "--cluster",
        "data/topologies/slurm-block.conf",
        "--pods",
        "36",
        "--gpus",
        "8",
        "--topology",
        "required:block72",
        "--slice",
        "block:18",
    ]);
    run.assert_success()
        .assert_stdout_has(&["slices of 18 per block", "spans 1 block288, 1 block72, 2 block, 36 host"]);
}

#[test]
fn kubernetes_node_list_with_nvlink_cliques() {
    let run = trainyard(&[
        "place",
        "--cluster",
        "topology/tests/fixtures/k8s/gb200-nvl72.yaml",
        "--pods",
        "18",
        "--gpus",
        "4",
        "--topology",
        "required:nvidia.com/gpu.clique",
    ]);
    run.assert_success().assert_stdout_has(&["18 pod(s) on 18 host(s) within nvidia.com/gpu.clique"]);
}

#[test]
fn pod_sets_are_placed_together() {
    let run = trainyard(&["place", "--pod-set", "leader:1x1", "--pod-set", "workers:8x8@rack"]);
    run.assert_success().assert_stdout_has(&[
        "gang: leader 1 x 1 GPU + workers 8 x 8 GPU",
        "leader ",
        "workers ",
        "optimal",
    ]);
}

#[test]
fn intra_node_layout_gives_each_pod_gpus_under_one_switch() {
    let run =
        trainyard(&["place", "--pods", "4", "--gpus", "2", "--topology", "required:host", "--intra-node", "aws-p4d"]);
    run.assert_success();
    let lines: Vec<&str> = run.stdout.lines().filter(|l| l.contains(": GPUs ")).collect();
    assert_eq!(lines.len(), 4, "{}", run.stdout);
    assert!(lines.iter().all(|l| l.contains("within one Switch")), "{}", run.stdout);
}

#[test]
fn tpu_slices_are_placed_as_sub_meshes() {
    let run = trainyard(&["place", "--torus", "v5p", "--shape", "4x4x8", "--slices", "2"]);
    run.assert_success().assert_stdout_has(&["torus 16x20x28", "slice 0: pod 0,", "slice 1: pod 0,", "(128 chips)"]);
}

#[test]
fn errors_name_what_is_wrong() {
    trainyard(&["place", "--torus", "v5p", "--shape", "32x4x4"])
        .assert_error(&["slice 32x4x4 does not fit torus 16x20x28 in any orientation"]);
    trainyard(&["place", "--topology", "required:row"]).assert_error(&["unknown topology level `row`"]);
    trainyard(&["place", "--policy", "best"]).assert_error(&["`best` is not a placement policy"]);
    trainyard(&["place", "--pods", "100", "--gpus", "8"]).assert_error(&["does not fit now", "800 GPU"]);
    trainyard(&["place", "--pods", "6", "--slice", "rack:4"]).assert_error(&["6 pods cannot be cut into slices of 4"]);
    trainyard(&["place", "--pod-set", "workers:8"]).assert_error(&["--pod-set `workers:8`", "NAME:PODSxGPUS"]);
    trainyard(&["place", "--load", "1.5"]).assert_error(&["--load 1.5"]);
    trainyard(&["place", "--intra-node", "dgx"]).assert_error(&["--intra-node `dgx`", "azure-ndv4"]);
    trainyard(&["place", "--gpus", "4", "--gpu-layout", "numa"]).assert_error(&["no host has a known GPU layout"]);
    trainyard(&["place", "--intra-node", "aws-p4d", "--gpus", "0", "--cpus", "1", "--gpu-layout", "switch"])
        .assert_error(&["--gpu-layout needs 1 to 64 --gpus per pod, not 0"]);
}

/// The cluster's own layouts (`intra_node` in the YAML) on a half-busy cluster: each 4-GPU pod
/// takes a whole NUMA node that --load left free, never GPUs the load holds.
#[test]
fn a_gpu_layout_places_pods_on_whole_numa_nodes_of_a_busy_cluster() {
    let run = trainyard(&[
        "place",
        "--cluster",
        "examples/clusters/p4d-layout.yaml",
        "--pods",
        "6",
        "--gpus",
        "4",
        "--gpu-layout",
        "numa",
        "--load",
        "0.6",
    ]);
    run.assert_success().assert_stdout_has(&["each pod's GPUs within one numa"]);
    let lines: Vec<&str> = run.stdout.lines().filter(|l| l.contains(": GPUs ")).collect();
    assert_eq!(lines.len(), 6, "{}", run.stdout);
    assert!(
        lines.iter().all(|l| l.contains("GPUs 0,1,2,3 within one Numa") || l.contains("GPUs 4,5,6,7 within one Numa")),
        "{}",
        run.stdout
    );
}

#[test]
fn slurm_topology_cycles_and_bad_ranges_name_the_line() {
    let dir = TempDir::create();
    let path = dir.write("topology.conf", "SwitchName=s0 Switches=s1\nSwitchName=s1 Switches=s0\n");
    trainyard(&["place", "--cluster", &path]).assert_error(&[&path, "line 2", "the cycle s0 -> s1 -> s0"]);
    let path = dir.write("ranges.conf", "SwitchName=s0 Nodes=n[1-4\n");
    trainyard(&["place", "--cluster", &path]).assert_error(&[&path, "line 1", "unbalanced brackets in `n[1-4`"]);
}

#[test]
fn nodes_missing_a_level_label_are_reported_and_left_out() {
    let dir = TempDir::create();
    let nodes = r#"{"apiVersion":"v1","kind":"List","items":[
      {"metadata":{"name":"a","labels":{"kubernetes.io/hostname":"a","example.com/rack":"r1"}},"status":{"allocatable":{"nvidia.com/gpu":"8","cpu":"96","memory":"1Ti"},"conditions":[{"type":"Ready","status":"True"}]}},
      {"metadata":{"name":"b","labels":{"kubernetes.io/hostname":"b"}},"status":{"allocatable":{"nvidia.com/gpu":"8","cpu":"96","memory":"1Ti"},"conditions":[{"type":"Ready","status":"True"}]}}]}"#;
    let path = dir.write("nodes.json", nodes);
    let run =
        trainyard(&["place", "--cluster", &path, "--levels", "example.com/rack,kubernetes.io/hostname", "--pods", "1"]);
    run.assert_success().assert_stdout_has(&["1 hosts, 8 GPUs"]);
    assert!(run.stderr.contains("warning:") && run.stderr.contains("node b"), "{}", run.stderr);
}

#[test]
fn flavor_keeps_the_gang_on_that_gpu_model() {
    let dir = TempDir::create();
    let path = dir.write(
        "flavors.yaml",
        "name: f\nlevels: [rack, host]\nnodes:\n  - {name: a0, at: {rack: r0}, gpus: 8, flavor: a100}\n  - {name: h0, at: {rack: r1}, gpus: 8, flavor: h100}\n",
    );
    trainyard(&["place", "--cluster", &path, "--pods", "1", "--gpus", "8", "--flavor", "h100"])
        .assert_success()
        .assert_stdout_has(&["r1/h0"]);
    trainyard(&["place", "--cluster", &path, "--flavor", "b200"])
        .assert_error(&["--flavor `b200`: no node has it (flavors: a100, h100)"]);
}

#[test]
fn tpu_slices_go_on_the_clusters_own_tori_with_chip_coordinates() {
    let run = trainyard(&[
        "place",
        "--cluster",
        "examples/clusters/gpu-tpu.yaml",
        "--tpu",
        "4x4x2",
        "--slices",
        "2",
        "--topology",
        "required:pool",
    ]);
    // Two 8-host slices fit only in the 4x4x4 cube; the static 2x2x4 pools are too small.
    run.assert_success().assert_stdout_has(&[
        "gang: 2 slice(s) of 4x4x2, 8 hosts each (16 pods x 4 GPU), required:pool",
        "slice 0 on block-1/v5p-cube:",
        "v5p-cube-h0 at chip 0,0,0",
        "slice 1 on block-1/v5p-cube:",
        "v5p-cube-h15 at chip 2,2,3",
    ]);
    let static_pools =
        trainyard(&["place", "--cluster", "examples/clusters/gpu-tpu.yaml", "--tpu", "2x2x4", "--slices", "4"]);
    static_pools.assert_success().assert_stdout_has(&["slice 3 on block-1/v5p-pool-3:"]);
    let gpu_only = trainyard(&["place", "--tpu", "2x2x4"]);
    gpu_only.assert_error(&["--tpu 2x2x4: TPU slice 2x2x4 asked of a cluster without TPU tori"]);
    let too_big = trainyard(&["place", "--cluster", "examples/clusters/gpu-tpu.yaml", "--tpu", "8x8x8"]);
    too_big.assert_error(&["fits no torus of this cluster"]);
}
