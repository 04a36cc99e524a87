//! The Slurm `topology.conf` reader, block form, and the two shipped Slurm fixtures.

use trainyard_topology::sources::{HostDefaults, slurm};
use trainyard_topology::{DomainId, Topology};

use crate::slurm_common::{error, level_paths, load, paths};

/// `count` blocks `b1..` of `size` nodes each, then `extra` lines.
fn blocks(count: usize, size: usize, extra: &str) -> String {
    let mut text = String::new();
    for b in 0..count {
        text.push_str(&format!("BlockName=b{} Nodes=n[{}-{}]\n", b + 1, b * size, b * size + size - 1));
    }
    text + extra
}

#[test]
fn base_size_below_the_block_node_count_and_one_aggregate() {
    // Blocks of 32 nodes planned as base blocks of 30; 120 nodes = 4 base blocks.
    let loaded = load(&blocks(4, 32, "BlockSizes=30,120\n"));
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    assert_eq!(loaded.spec.levels, ["block120", "block", "host"]);
    assert_eq!(paths(&loaded)[0], "b1..b4/b1/n0");
    assert_eq!(paths(&loaded)[127], "b1..b4/b4/n127");
    let topo = Topology::build(&loaded.spec).unwrap();
    assert_eq!(level_paths(&topo, "block120"), ["b1..b4"]);
    assert_eq!(level_paths(&topo, "block").len(), 4);
    assert_eq!(topo.host_count(), 128);
}

#[test]
fn without_block_sizes_the_first_block_sets_the_base_and_short_tails_pass_through() {
    // Five blocks of two nodes: sizes 2, 4, 8 and 16 nodes; 16 nodes (8 blocks) covers all five.
    let loaded = load(&blocks(5, 2, ""));
    assert!(loaded.warnings.is_empty(), "implied sizes are not reported: {:?}", loaded.warnings);
    assert_eq!(loaded.spec.levels, ["block16", "block8", "block4", "block", "host"]);
    let p = paths(&loaded);
    assert_eq!(p[0], "b1..b5/b1..b4/b1..b2/b1/n0");
    assert_eq!(p[5], "b1..b5/b1..b4/b3..b4/b3/n5");
    // b5 is alone at the tail: no 2-block or 4-block aggregate, but the 8-block one holds it.
    assert_eq!(p[8], "b1..b5/b5/b5/b5/n8");
    let topo = Topology::build(&loaded.spec).unwrap();
    assert_eq!(level_paths(&topo, "block4"), ["b1..b5/b1..b4/b1..b2", "b1..b5/b1..b4/b3..b4", "b1..b5/b5/b5"]);
    assert_eq!(level_paths(&topo, "block8"), ["b1..b5/b1..b4", "b1..b5/b5"]);
}

#[test]
fn an_incomplete_tail_bigger_than_the_next_smaller_size_is_kept() {
    // Seven blocks, aggregates of four: the tail of three is more than one block, so it stays.
    let loaded = load(&blocks(7, 1, "BlockSizes=1,4\n"));
    assert_eq!(loaded.spec.levels, ["block4", "block", "host"]);
    let tops: Vec<&str> = loaded.spec.nodes.iter().map(|n| n.path[0].as_str()).collect();
    assert_eq!(tops, ["b1..b4", "b1..b4", "b1..b4", "b1..b4", "b5..b7", "b5..b7", "b5..b7"]);
    // With aggregates of two below four, a tail of two is not bigger than one of two: dropped.
    let loaded = load(&blocks(6, 1, "BlockSizes=1,2,4\n"));
    let block4: Vec<&str> = loaded.spec.nodes.iter().map(|n| n.path[0].as_str()).collect();
    assert_eq!(block4, ["b1..b4", "b1..b4", "b1..b4", "b1..b4", "b5..b6", "b5..b6"]);
    assert_eq!(paths(&loaded)[4], "b5..b6/b5..b6/b5/n4");
}

#[test]
fn sizes_beyond_the_whole_cluster_are_reported_and_left_out() {
    let loaded = load(&blocks(2, 4, "BlockSizes=4,8,16,32\n"));
    assert_eq!(loaded.spec.levels, ["block8", "block", "host"]);
    let warnings: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(warnings.len(), 2);
    assert!(
        warnings[0].contains("line 3: BlockSizes: size 16 (4 base blocks) is larger than needed for 2 blocks"),
        "{warnings:?}"
    );
    assert!(warnings[1].contains("size 32 (8 base blocks)"), "{warnings:?}");
}

#[test]
fn a_single_block_has_no_aggregate_level() {
    let loaded = load("blocksizes=4,8\nblockname=only nodes=n[1-4]\n");
    assert_eq!(loaded.spec.levels, ["block", "host"]);
    assert_eq!(paths(&loaded), ["only/n1", "only/n2", "only/n3", "only/n4"]);
    assert_eq!(loaded.warnings.len(), 1, "size 8 is reported: {:?}", loaded.warnings);
}

#[test]
fn block_errors_name_the_line_and_the_item() {
    let cases = [
        (blocks(2, 4, "BlockSizes=8,4\n"), "line 3: field `BlockSizes`: `4` does not exceed the size before it, 8"),
        (blocks(2, 4, "BlockSizes=4,4\n"), "line 3: field `BlockSizes`: `4` does not exceed the size before it, 4"),
        (
            blocks(2, 4, "BlockSizes=4,6\n"),
            "line 3: field `BlockSizes`: `6` is not the base size 4 times a power of two",
        ),
        (
            blocks(2, 4, "BlockSizes=4,12\n"),
            "line 3: field `BlockSizes`: `12` is not the base size 4 times a power of two",
        ),
        (blocks(2, 4, "BlockSizes=4,x\n"), "line 3: field `BlockSizes`: `x` is not a positive whole number"),
        (blocks(2, 4, "BlockSizes=0\n"), "line 3: field `BlockSizes`: `0` is not a positive whole number"),
        (
            blocks(2, 1, "BlockSizes=1,65536\n"),
            "line 3: field `BlockSizes`: `65536` is more than 2^15 base blocks of 1",
        ),
        (
            blocks(2, 4, "BlockSizes=4\nBlockSizes=8\n"),
            "line 4: field `BlockSizes`: BlockSizes is already given on line 3",
        ),
        (
            blocks(2, 4, "BlockSizes=5\n"),
            "line 1: field `Nodes`: block `b1` has 4 nodes, fewer than the base block size 5",
        ),
        (
            "BlockName=a Nodes=n1\nBlockName=a Nodes=n2\n".into(),
            "line 2: field `BlockName`: block `a` is already defined on line 1",
        ),
        (
            "BlockName=a Nodes=n[1-2]\nBlockName=b Nodes=n[2-3]\n".into(),
            "line 2: field `Nodes`: node `n2` is in block `b` and in block `a` (line 1)",
        ),
        ("BlockName=a Nodes=n[1-2],n1\n".into(), "line 1: field `Nodes`: node `n1` is listed twice in block `a`"),
        ("BlockName=a\n".into(), "line 1: field `Nodes`: block `a` has no nodes"),
        (
            "BlockName=a Nodes=n[2-1]\n".into(),
            "line 1: field `Nodes`: block `a`: range `2-1` in `n[2-1]` goes backwards",
        ),
        ("BlockName=a..b Nodes=n1\n".into(), "line 1: field `BlockName`: `a..b` cannot name a block"),
        ("# sizes only\nBlockSizes=4\n".into(), "line 2: field `BlockName`: BlockSizes is given but no BlockName line"),
        (
            "BlockName=a Nodes=n1\nSwitchName=s Nodes=n2\n".into(),
            "line 2: field `SwitchName`: `SwitchName=` cannot follow `BlockName=` (line 1)",
        ),
        (
            "BlockSizes=4\nSwitchName=s Nodes=n2\n".into(),
            "line 2: field `SwitchName`: `SwitchName=` cannot follow `BlockSizes=` (line 1)",
        ),
    ];
    for (text, want) in cases {
        let err = error(&text);
        assert!(err.starts_with("topology.conf: "), "{err}");
        assert!(err.contains(want), "{text:?}\n got: {err}\nwant: {want}");
    }
}

#[test]
fn the_shipped_tree_fixture_is_one_core_four_spines_and_thirty_two_leaves() {
    let text = include_str!("../../../data/topologies/slurm-tree.conf");
    let loaded = slurm::parse(text, "slurm-tree.conf", HostDefaults::default()).unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    assert_eq!(loaded.spec.levels, ["switch3", "switch2", "switch1", "host"]);
    let topo = Topology::build(&loaded.spec).unwrap();
    assert_eq!(topo.host_count(), 512);
    assert_eq!(level_paths(&topo, "switch3"), ["core"]);
    assert_eq!(level_paths(&topo, "switch2"), ["core/spine0", "core/spine1", "core/spine2", "core/spine3"]);
    let leaves = level_paths(&topo, "switch1");
    assert_eq!((leaves.len(), leaves[8].as_str()), (32, "core/spine1/leaf08"));
    assert!(leaves.iter().all(|l| topo.capacity(leaf_id(&topo, l)).gpus == 16 * 8));
    assert_eq!(topo.path(topo.host_domain(trainyard_topology::HostId(511))), "core/spine3/leaf31/gpu512");
}

fn leaf_id(topo: &Topology, path: &str) -> DomainId {
    (0..topo.domain_count() as u32).map(DomainId).find(|&d| topo.path(d) == path).unwrap()
}

#[test]
fn the_shipped_block_fixture_is_sixteen_racks_of_eighteen() {
    let text = include_str!("../../../data/topologies/slurm-block.conf");
    let loaded = slurm::parse(text, "slurm-block.conf", HostDefaults::default()).unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    assert_eq!(loaded.spec.levels, ["block288", "block72", "block", "host"]);
    let topo = Topology::build(&loaded.spec).unwrap();
    assert_eq!(topo.host_count(), 288);
    assert_eq!(level_paths(&topo, "block288"), ["rack01..rack16"]);
    assert_eq!(
        level_paths(&topo, "block72"),
        [
            "rack01..rack16/rack01..rack04",
            "rack01..rack16/rack05..rack08",
            "rack01..rack16/rack09..rack12",
            "rack01..rack16/rack13..rack16"
        ]
    );
    assert_eq!(level_paths(&topo, "block").len(), 16);
    assert_eq!(
        topo.path(topo.host_domain(trainyard_topology::HostId(18))),
        "rack01..rack16/rack01..rack04/rack02/gb200-r02-n01"
    );
}
