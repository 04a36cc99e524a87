//! The tree form of `topology.conf`: `SwitchName=` lines with `Nodes=` or `Switches=`.

use std::collections::HashMap;

use super::{Line, Source};
use crate::sources::{HostDefaults, LoadedTopology, SourceWarning, node};
use crate::{ResolvedSpec, Result};

/// Most switch levels accepted; real fabrics have three or four.
pub(super) const MAX_SWITCH_LEVELS: usize = 64;

struct Switch<'a> {
    line: &'a Line,
    /// Hosts of a leaf switch, in the order written.
    nodes: Vec<String>,
    /// Whether the line has `Nodes=`: such a switch is a leaf even when the list is empty.
    leaf: bool,
    /// Child switches, in the order written.
    children: Vec<usize>,
}

impl Switch<'_> {
    fn name(&self) -> &str {
        self.line.name()
    }
}

pub(super) fn build(lines: &[Line], src: &Source<'_>, defaults: HostDefaults) -> Result<LoadedTopology> {
    let switches = read_switches(lines, src)?;
    let post_order = check_acyclic(&switches, src)?;
    let mut warnings = Vec::new();

    // A switch keeps the first parent that lists it, in file order.
    let n = switches.len();
    let mut parent: Vec<Option<usize>> = vec![None; n];
    let mut kept_children: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (s, sw) in switches.iter().enumerate() {
        let mut dropped = Vec::new();
        for &c in &sw.children {
            match parent[c] {
                None => {
                    parent[c] = Some(s);
                    kept_children[s].push(c);
                }
                Some(p) if p != s => {
                    dropped.push(format!("`{}` (kept under `{}`)", switches[c].name(), switches[p].name()))
                }
                Some(_) => {}
            }
        }
        if !dropped.is_empty() {
            let message = format!(
                "lists {} already under another switch; a switch keeps its first parent, so {} left out",
                short_list(&dropped),
                if dropped.len() == 1 { "that link is" } else { "those links are" }
            );
            warnings.push(src.warning(Some(sw.line.number), format!("switch `{}`", sw.name()), message));
        }
    }

    // Heights over the kept tree; children come before parents in `post_order`.
    let mut height = vec![0usize; n];
    for &s in &post_order {
        height[s] = if switches[s].leaf {
            usize::from(!switches[s].nodes.is_empty())
        } else {
            kept_children[s].iter().map(|&c| height[c]).max().map_or(0, |h| if h == 0 { 0 } else { h + 1 })
        };
    }
    for (s, sw) in switches.iter().enumerate() {
        if height[s] == 0 {
            let message = "has no nodes below it; left out".to_string();
            warnings.push(src.warning(Some(sw.line.number), format!("switch `{}`", sw.name()), message));
        }
    }
    warnings.sort_by_key(|w: &SourceWarning| w.line);

    let top = (0..n).filter(|&s| parent[s].is_none()).map(|s| height[s]).max().unwrap_or(0);
    if top == 0 {
        return Err(src.invalid(None, "Nodes", "no switch has any nodes".to_string()));
    }
    if top > MAX_SWITCH_LEVELS {
        let message = format!("the switches form {top} levels; at most {MAX_SWITCH_LEVELS} are supported");
        return Err(src.invalid(None, "Switches", message));
    }

    let mut nodes = Vec::new();
    for (leaf, sw) in switches.iter().enumerate().filter(|(s, sw)| sw.leaf && height[*s] > 0) {
        let upper = padded_path(leaf, top, &switches, &parent, &height);
        for host in &sw.nodes {
            let mut path = upper.clone();
            path.push(host.clone());
            nodes.push(node(path, defaults.capacity));
        }
    }
    let mut levels: Vec<String> = (1..=top).rev().map(|h| format!("switch{h}")).collect();
    levels.push("host".to_string());
    Ok(LoadedTopology { spec: ResolvedSpec { name: src.name.to_string(), levels, nodes, tori: Vec::new() }, warnings })
}

/// Reads every `SwitchName` line, expanding lists and checking names and node ownership.
fn read_switches<'a>(lines: &'a [Line], src: &Source<'_>) -> Result<Vec<Switch<'a>>> {
    // Both maps are looked up only, never iterated.
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    let mut owner: HashMap<String, usize> = HashMap::new();
    let mut switches: Vec<Switch<'a>> = Vec::with_capacity(lines.len());
    for line in lines {
        let key = &line.pairs[0].0;
        let name = line.name();
        if name.is_empty() {
            return Err(src.invalid(Some(line.number), key, "the switch has no name".to_string()));
        }
        if let Some(&prior) = by_name.get(name) {
            let message = format!("switch `{name}` is already defined on line {}", switches[prior].line.number);
            return Err(src.invalid(Some(line.number), key, message));
        }
        let owner_label = format!("switch `{name}`");
        let (nodes_list, switches_list) = (line.get("Nodes"), line.get("Switches"));
        if nodes_list.is_some() && switches_list.is_some() {
            let message = format!("{owner_label} has both Nodes= and Switches=; Slurm takes one or the other");
            return Err(src.invalid(Some(line.number), "Switches", message));
        }
        let nodes = match nodes_list {
            Some(list) => src.expand(line, "Nodes", &owner_label, list)?,
            None => Vec::new(),
        };
        let index = switches.len();
        for host in &nodes {
            if let Some(&prior) = owner.get(host) {
                let message = if prior == index {
                    format!("node `{host}` is listed twice in {owner_label}")
                } else {
                    let other = &switches[prior];
                    format!(
                        "node `{host}` is under {owner_label} and under switch `{}` (line {}); a node hangs under one leaf switch",
                        other.name(),
                        other.line.number
                    )
                };
                return Err(src.invalid(Some(line.number), "Nodes", message));
            }
            owner.insert(host.clone(), index);
        }
        by_name.insert(name, index);
        switches.push(Switch { line, nodes, leaf: nodes_list.is_some(), children: Vec::new() });
    }
    for sw in &mut switches {
        let line = sw.line;
        let Some(list) = line.get("Switches") else { continue };
        let owner_label = format!("switch `{}`", line.name());
        for child in src.expand(line, "Switches", &owner_label, list)? {
            let Some(&c) = by_name.get(child.as_str()) else {
                let message = format!("{owner_label} lists `{child}`, which no SwitchName line defines");
                return Err(src.invalid(Some(line.number), "Switches", message));
            };
            sw.children.push(c);
        }
    }
    Ok(switches)
}

/// Rejects cycles over every listed link and returns the switches children-first.
fn check_acyclic(switches: &[Switch<'_>], src: &Source<'_>) -> Result<Vec<usize>> {
    const NEW: u8 = 0;
    const OPEN: u8 = 1;
    const DONE: u8 = 2;
    let mut state = vec![NEW; switches.len()];
    let mut order = Vec::with_capacity(switches.len());
    for root in 0..switches.len() {
        if state[root] != NEW {
            continue;
        }
        // Iterative depth-first search: (switch, index of its next child to visit).
        let mut stack = vec![(root, 0usize)];
        state[root] = OPEN;
        while let Some(&(s, next)) = stack.last() {
            let Some(&c) = switches[s].children.get(next) else {
                state[s] = DONE;
                order.push(s);
                stack.pop();
                continue;
            };
            if let Some(top) = stack.last_mut() {
                top.1 += 1;
            }
            match state[c] {
                NEW => {
                    state[c] = OPEN;
                    stack.push((c, 0));
                }
                OPEN => {
                    let from = stack.iter().position(|&(t, _)| t == c).unwrap_or(0);
                    let mut cycle: Vec<&str> = stack[from..].iter().map(|&(t, _)| switches[t].name()).collect();
                    cycle.push(switches[c].name());
                    let message = format!(
                        "switch `{}` lists `{}`, which is above it: the cycle {} (each switch lists the next)",
                        switches[s].name(),
                        switches[c].name(),
                        cycle.join(" -> ")
                    );
                    return Err(src.invalid(Some(switches[s].line.number), "Switches", message));
                }
                _ => {}
            }
        }
    }
    Ok(order)
}

/// Names from level `switch{top}` down to `switch1` above a leaf, repeating a switch's name
/// at the levels between it and its parent (or, for a root, up to `top`).
fn padded_path(
    leaf: usize,
    top: usize,
    switches: &[Switch<'_>],
    parent: &[Option<usize>],
    height: &[usize],
) -> Vec<String> {
    let mut bottom_up = Vec::with_capacity(top + 1);
    let mut cur = leaf;
    loop {
        let ceiling = parent[cur].map_or(top, |p| height[p] - 1);
        for _ in height[cur]..=ceiling {
            bottom_up.push(switches[cur].name().to_string());
        }
        match parent[cur] {
            Some(p) => cur = p,
            None => break,
        }
    }
    bottom_up.reverse();
    bottom_up
}

/// At most eight entries, then a count of the rest.
fn short_list(items: &[String]) -> String {
    let shown = items.iter().take(8).cloned().collect::<Vec<_>>().join(", ");
    match items.len().saturating_sub(8) {
        0 => shown,
        more => format!("{shown} and {more} more"),
    }
}
