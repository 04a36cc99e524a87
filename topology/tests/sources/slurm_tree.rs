//! The Slurm `topology.conf` reader, tree form: levels, padding, warnings and every error.

use trainyard_topology::{DomainId, Topology};

use crate::slurm_common::{error, level_paths, load, paths};

#[test]
fn three_leaves_under_one_switch() {
    let text = "# network of the dev cluster\nSwitchName=s0 Nodes=dev[0-5]\nSwitchName=s1 Nodes=dev[6-11]\n\
                SwitchName=s2 Nodes=dev[12-17]\nSwitchName=s3 Switches=s[0-2]\n";
    let loaded = load(text);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    assert_eq!(loaded.spec.levels, ["switch2", "switch1", "host"]);
    assert_eq!(paths(&loaded)[..2], ["s3/s0/dev0", "s3/s0/dev1"]);
    assert_eq!(paths(&loaded)[17], "s3/s2/dev17");
    let topo = Topology::build(&loaded.spec).unwrap();
    assert_eq!(topo.host_count(), 18);
    assert_eq!(level_paths(&topo, "switch2"), ["s3"]);
    assert_eq!(level_paths(&topo, "switch1"), ["s3/s0", "s3/s1", "s3/s2"]);
    let s1 = topo.ancestor_at(topo.host_domain(trainyard_topology::HostId(6)), 2);
    assert_eq!((topo.level_name(s1), topo.path(s1).as_str()), ("switch1", "s3/s1"));
    assert_eq!(topo.capacity(s1).gpus, 6 * 8);
}

#[test]
fn binary_tree_of_three_levels() {
    let text = "SwitchName=s0 Nodes=tux[0-1]\nSwitchName=s1 Nodes=tux[2-3]\nSwitchName=s2 Nodes=tux[4-5]\n\
                SwitchName=s3 Nodes=tux[6-7]\nSwitchName=s4 Switches=s[0-1]\nSwitchName=s5 Switches=s[2-3]\n\
                SwitchName=s6 Switches=s[4-5]\n";
    let loaded = load(text);
    assert_eq!(loaded.spec.levels, ["switch3", "switch2", "switch1", "host"]);
    assert_eq!(paths(&loaded)[5], "s6/s5/s2/tux5");
    let topo = Topology::build(&loaded.spec).unwrap();
    assert_eq!(level_paths(&topo, "switch2"), ["s6/s4", "s6/s5"]);
    assert_eq!(topo.host_count(), 8);
}

#[test]
fn redundant_spines_keep_the_first_parent_and_are_reported() {
    // Every spine lists every leaf, as in a fat tree; trainyard keeps a tree under s4.
    let text = "SwitchName=s0 Nodes=tux[0-3] LinkSpeed=900\nSwitchName=s1 Nodes=tux[4-7] LinkSpeed=900\n\
                SwitchName=s2 Nodes=tux[8-11]\nSwitchName=s3 Nodes=tux[12-15]\n\
                SwitchName=s4 Switches=s[0-3] LinkSpeed=1800\nSwitchName=s5 Switches=s[0-3]\n\
                SwitchName=s6 Switches=s[0-3]\nSwitchName=s7 Switches=s[0-3]\n";
    let loaded = load(text);
    assert_eq!(loaded.spec.levels, ["switch2", "switch1", "host"]);
    assert!(paths(&loaded).iter().all(|p| p.starts_with("s4/")), "{:?}", paths(&loaded));
    let lines: Vec<Option<u64>> = loaded.warnings.iter().map(|w| w.line).collect();
    assert_eq!(lines, [Some(6), Some(6), Some(7), Some(7), Some(8), Some(8)]);
    let first = loaded.warnings[0].to_string();
    assert!(first.contains("topology.conf: line 6: switch `s5`: lists `s0` (kept under `s4`)"), "{first}");
    assert!(loaded.warnings[1].to_string().contains("switch `s5`: has no nodes below it; left out"));
    assert_eq!(Topology::build(&loaded.spec).unwrap().host_count(), 16);
}

#[test]
fn uneven_children_are_padded_with_pass_through_domains() {
    // s9 has a two-level child (s5) and a leaf child (s2): s2 is repeated at level switch2.
    let text = "SwitchName=s9 Switches=s5,s2\nSwitchName=s5 Switches=s[0-1]\nSwitchName=s0 Nodes=a[1-2]\n\
                SwitchName=s1 Nodes=b1\nSwitchName=s2 Nodes=c1\n";
    let loaded = load(text);
    assert_eq!(loaded.spec.levels, ["switch3", "switch2", "switch1", "host"]);
    assert_eq!(paths(&loaded), ["s9/s5/s0/a1", "s9/s5/s0/a2", "s9/s5/s1/b1", "s9/s2/s2/c1"]);
    let topo = Topology::build(&loaded.spec).unwrap();
    assert_eq!(level_paths(&topo, "switch2"), ["s9/s5", "s9/s2"]);
    assert_eq!(level_paths(&topo, "switch1"), ["s9/s5/s0", "s9/s5/s1", "s9/s2/s2"]);
    assert!(loaded.spec.nodes.iter().all(|n| n.path.len() == 4));
}

#[test]
fn top_level_switches_without_a_common_parent_share_the_cluster_root() {
    let text = "SwitchName=lone Nodes=x[1-2]\nSwitchName=top Switches=leaf[1-2]\n\
                SwitchName=leaf1 Nodes=y1\nSwitchName=leaf2 Nodes=y2\n";
    let loaded = load(text);
    assert_eq!(loaded.spec.levels, ["switch2", "switch1", "host"]);
    assert_eq!(paths(&loaded), ["lone/lone/x1", "lone/lone/x2", "top/leaf1/y1", "top/leaf2/y2"]);
    let topo = Topology::build(&loaded.spec).unwrap();
    assert_eq!(level_paths(&topo, "switch2"), ["lone", "top"]);
    assert_eq!(topo.children(DomainId::ROOT).len(), 2);
}

#[test]
fn leaf_switches_alone_give_one_switch_level() {
    let loaded = load("SwitchName=a Nodes=n[1-2]\nSwitchName=b Nodes=n[3-4]\n");
    assert_eq!(loaded.spec.levels, ["switch1", "host"]);
    assert_eq!(paths(&loaded), ["a/n1", "a/n2", "b/n3", "b/n4"]);
}

#[test]
fn hosts_come_in_the_order_their_leaf_lines_appear() {
    let loaded = load("SwitchName=top Switches=l[1-2]\nSwitchName=l2 Nodes=n[5-6]\nSwitchName=l1 Nodes=n[1-2]\n");
    assert_eq!(paths(&loaded), ["top/l2/n5", "top/l2/n6", "top/l1/n1", "top/l1/n2"]);
}

#[test]
fn switches_without_nodes_are_reported_and_left_out() {
    let text = "SwitchName=e0\nSwitchName=e1 Nodes=\nSwitchName=e2 Switches=e[0-1]\n\
                SwitchName=top Switches=e2,leaf\nSwitchName=leaf Nodes=n1\n";
    let loaded = load(text);
    // The dead branch adds no height: top sits right above its leaf.
    assert_eq!(loaded.spec.levels, ["switch2", "switch1", "host"]);
    assert_eq!(paths(&loaded), ["top/leaf/n1"]);
    let items: Vec<(Option<u64>, &str)> = loaded.warnings.iter().map(|w| (w.line, w.item.as_str())).collect();
    assert_eq!(items, [(Some(1), "switch `e0`"), (Some(2), "switch `e1`"), (Some(3), "switch `e2`")]);
    assert!(loaded.warnings.iter().all(|w| w.message == "has no nodes below it; left out"));
}

#[test]
fn keys_are_case_insensitive_and_lines_continue() {
    let text = "switchname=s0 NODES=n[01-03] linkspeed=100 # leaf\nSWITCHNAME=s1 \\\n   switches=s0 \\\n   Foo=bar\n";
    let loaded = load(text);
    assert!(loaded.warnings.is_empty());
    assert_eq!(paths(&loaded), ["s1/s0/n01", "s1/s0/n02", "s1/s0/n03"]);
}

#[test]
fn errors_name_the_line_and_the_item() {
    let cases = [
        (
            "SwitchName=s0 Nodes=a\nSwitchName=s0 Nodes=b\n",
            "line 2: field `SwitchName`: switch `s0` is already defined on line 1",
        ),
        (
            "SwitchName=s0 Nodes=a\nSwitchName=s1 Switches=s[0,9]\n",
            "line 2: field `Switches`: switch `s1` lists `s9`, which no SwitchName line defines",
        ),
        (
            "SwitchName=s1 Switches=s2\nSwitchName=s2 Switches=s1\nSwitchName=s3 Nodes=a\n",
            "line 2: field `Switches`: switch `s2` lists `s1`, which is above it: the cycle s1 -> s2 -> s1",
        ),
        (
            "SwitchName=s1 Switches=s1\n",
            "line 1: field `Switches`: switch `s1` lists `s1`, which is above it: the cycle s1 -> s1",
        ),
        (
            "SwitchName=s0 Nodes=a\nSwitchName=s1 Nodes=b Switches=s0\n",
            "line 2: field `Switches`: switch `s1` has both Nodes= and Switches=",
        ),
        (
            "SwitchName=s0 Nodes=n[1-4]\n\nSwitchName=s1 Nodes=n[4-6]\n",
            "line 3: field `Nodes`: node `n4` is under switch `s1` and under switch `s0` (line 1)",
        ),
        ("SwitchName=s0 Nodes=n[1-4],n2\n", "line 1: field `Nodes`: node `n2` is listed twice in switch `s0`"),
        ("\nSwitchName=s0 Nodes=n[1-4\n", "line 2: field `Nodes`: switch `s0`: unbalanced brackets in `n[1-4`"),
        ("SwitchName=s0 Nodes=n[5-2]\n", "line 1: field `Nodes`: switch `s0`: range `5-2` in `n[5-2]` goes backwards"),
        (
            "SwitchName=s0 Nodes=a\nSwitchName=s1 Switches=s[a-b]\n",
            "line 2: field `Switches`: switch `s1`: `a` in `s[a-b]` is not a number",
        ),
        (
            "SwitchName=s0 Nodes=a\nNodeName=a CPUs=4\n",
            "line 2: field `NodeName`: a line starts with SwitchName=, BlockName= or BlockSizes=",
        ),
        (
            "SwitchName=s0 Nodes=a\nBlockName=b0 Nodes=c\n",
            "line 2: field `BlockName`: `BlockName=` cannot follow `SwitchName=` (line 1)",
        ),
        ("SwitchName= Nodes=a\n", "line 1: field `SwitchName`: the switch has no name"),
        ("# nothing here\n", "topology.conf: field `SwitchName`: no SwitchName or BlockName lines"),
        ("SwitchName=s0\nSwitchName=s1 Switches=s0\n", "topology.conf: field `Nodes`: no switch has any nodes"),
    ];
    for (text, want) in cases {
        let err = error(text);
        assert!(err.starts_with("topology.conf: "), "{err}");
        assert!(err.contains(want), "{text:?}\n got: {err}\nwant: {want}");
    }
}

#[test]
fn very_tall_switch_chains_are_refused() {
    let mut text = String::from("SwitchName=s0 Nodes=n1\n");
    for i in 1..=70 {
        text.push_str(&format!("SwitchName=s{i} Switches=s{}\n", i - 1));
    }
    assert!(error(&text).contains("the switches form 71 levels; at most 64"), "{}", error(&text));
}
