//! Property: any well-formed switch tree, written out as `topology.conf` with random range
//! compression, line order, key case, comments and continuations, reads back to its host paths.

use std::collections::BTreeSet;

use proptest::prelude::*;
use trainyard_topology::Topology;
use trainyard_topology::rng::SplitMix64;
use trainyard_topology::sources::{HostDefaults, slurm};

/// The whole tree and its rendering follow from one proptest-drawn seed.
struct Rng(SplitMix64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// A name as prefix + zero-padded number, so that runs can be written as ranges.
#[derive(Clone)]
struct Name {
    prefix: &'static str,
    number: u64,
    width: usize,
}

impl Name {
    fn text(&self) -> String {
        format!("{}{:0w$}", self.prefix, self.number, w = self.width)
    }
}

struct Switch {
    name: Name,
    children: Vec<usize>,
    hosts: Vec<Name>,
    height: usize,
}

struct Tree {
    switches: Vec<Switch>,
    roots: Vec<usize>,
}

fn random_tree(rng: &mut Rng) -> Tree {
    let mut tree = Tree { switches: Vec::new(), roots: Vec::new() };
    let mut next_host = 0u64;
    for _ in 0..1 + rng.below(3) {
        let max_depth = 1 + rng.below(4) as usize;
        let root = grow(rng, &mut tree, max_depth, &mut next_host);
        tree.roots.push(root);
    }
    tree
}

fn grow(rng: &mut Rng, tree: &mut Tree, depth_left: usize, next_host: &mut u64) -> usize {
    let id = tree.switches.len();
    tree.switches.push(Switch {
        name: Name { prefix: "sw", number: id as u64, width: 0 },
        children: Vec::new(),
        hosts: Vec::new(),
        height: 1,
    });
    if depth_left <= 1 || rng.chance(25) {
        let (prefix, width) = [("n", 0), ("gpu", 4), ("r1-node", 3)][rng.below(3) as usize];
        for _ in 0..1 + rng.below(6) {
            *next_host += 1 + u64::from(rng.chance(20)) * rng.below(5);
            tree.switches[id].hosts.push(Name { prefix, number: *next_host, width });
        }
    } else {
        for _ in 0..1 + rng.below(4) {
            let child = grow(rng, tree, depth_left - 1, next_host);
            tree.switches[id].children.push(child);
        }
        tree.switches[id].height =
            1 + tree.switches[id].children.iter().map(|&c| tree.switches[c].height).max().unwrap_or(0);
    }
    id
}

/// Writes names as a host list: runs of consecutive numbers become ranges at random, and
/// neighbouring runs with the same prefix may share one bracket group.
fn compress(rng: &mut Rng, names: &[Name]) -> String {
    let mut runs: Vec<(Name, u64)> = Vec::new();
    for name in names {
        match runs.last_mut() {
            Some((first, last))
                if first.prefix == name.prefix
                    && first.width == name.width
                    && *last + 1 == name.number
                    && rng.chance(80) =>
            {
                *last = name.number;
            }
            _ => runs.push((name.clone(), name.number)),
        }
    }
    let mut items: Vec<String> = Vec::new();
    let mut open_group: Option<(&'static str, usize, Vec<String>)> = None;
    let flush = |group: &mut Option<(&'static str, usize, Vec<String>)>, items: &mut Vec<String>| {
        if let Some((prefix, _, parts)) = group.take() {
            items.push(format!("{prefix}[{}]", parts.join(",")));
        }
    };
    for (first, last) in runs {
        let w = first.width;
        let part = if first.number == last {
            format!("{:0w$}", first.number)
        } else {
            format!("{:0w$}-{:0w$}", first.number, last)
        };
        let joins = matches!(&open_group, Some((p, pw, _)) if *p == first.prefix && *pw == w) && rng.chance(50);
        if joins {
            if let Some((_, _, parts)) = open_group.as_mut() {
                parts.push(part);
            }
            continue;
        }
        flush(&mut open_group, &mut items);
        if first.number == last && rng.chance(50) {
            items.push(first.text());
        } else {
            open_group = Some((first.prefix, w, vec![part]));
        }
    }
    flush(&mut open_group, &mut items);
    items.join(",")
}

fn key(rng: &mut Rng, key: &str) -> String {
    match rng.below(3) {
        0 => key.to_string(),
        1 => key.to_ascii_lowercase(),
        _ => key.to_ascii_uppercase(),
    }
}

/// The file text and the switches whose lines hold hosts, in the order written.
fn render(rng: &mut Rng, tree: &Tree) -> (String, Vec<usize>) {
    let mut order: Vec<usize> = (0..tree.switches.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut text = String::from("# generated\n");
    for &s in &order {
        let sw = &tree.switches[s];
        let (list_key, list) = if sw.children.is_empty() {
            ("Nodes", compress(rng, &sw.hosts))
        } else {
            let names: Vec<Name> = sw.children.iter().map(|&c| tree.switches[c].name.clone()).collect();
            ("Switches", compress(rng, &names))
        };
        let gap = if rng.chance(20) { " \\\n    " } else { " " };
        text.push_str(&format!("{}={}{gap}{}={list}", key(rng, "SwitchName"), sw.name.text(), key(rng, list_key)));
        if rng.chance(30) {
            text.push_str(&format!(" {}={}", key(rng, "LinkSpeed"), rng.below(1000)));
        }
        text.push_str(if rng.chance(20) { "  # a comment\n" } else { "\n" });
        if rng.chance(10) {
            text.push('\n');
        }
    }
    let leaves = order.into_iter().filter(|&s| tree.switches[s].children.is_empty()).collect();
    (text, leaves)
}

/// Root-to-leaf chains of switch names for every host, plus each switch's height.
fn expected(tree: &Tree) -> (BTreeSet<Vec<String>>, Vec<(String, usize)>) {
    let mut chains = BTreeSet::new();
    let mut stack: Vec<(usize, Vec<String>)> = tree.roots.iter().map(|&r| (r, Vec::new())).collect();
    while let Some((s, mut chain)) = stack.pop() {
        let sw = &tree.switches[s];
        chain.push(sw.name.text());
        for host in &sw.hosts {
            let mut full = chain.clone();
            full.push(host.text());
            chains.insert(full);
        }
        stack.extend(sw.children.iter().map(|&c| (c, chain.clone())));
    }
    (chains, tree.switches.iter().map(|s| (s.name.text(), s.height)).collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn rendered_trees_read_back_to_their_host_paths(seed in any::<u64>()) {
        let mut rng = Rng(SplitMix64::new(seed));
        let tree = random_tree(&mut rng);
        let (text, leaf_order) = render(&mut rng, &tree);
        let loaded = slurm::parse(&text, "gen.conf", HostDefaults::default()).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);

        let (chains, heights) = expected(&tree);
        let top = tree.roots.iter().map(|&r| tree.switches[r].height).max().unwrap_or(0);
        prop_assert_eq!(loaded.spec.levels.len(), top + 1);
        let mut read = BTreeSet::new();
        for entry in &loaded.spec.nodes {
            prop_assert_eq!(entry.path.len(), top + 1, "{:?}", entry.path);
            // A switch of height h sits at level switch{h}; copies above it are padding.
            for (name, h) in &heights {
                if let Some(last) = entry.path.iter().rposition(|p| p == name) {
                    prop_assert_eq!(last, top - h, "{:?}", entry.path);
                }
            }
            let mut chain = entry.path.clone();
            chain.dedup();
            read.insert(chain);
        }
        prop_assert_eq!(&read, &chains, "{}", text);

        let hosts: Vec<&str> = loaded.spec.nodes.iter().map(|n| n.path[top].as_str()).collect();
        let written: Vec<String> = leaf_order.iter().flat_map(|&s| tree.switches[s].hosts.iter().map(Name::text)).collect();
        prop_assert_eq!(hosts, written);
        prop_assert_eq!(Topology::build(&loaded.spec).map_err(|e| TestCaseError::fail(e.to_string()))?.host_count(), chains.len());
    }
}
