//! The block form of `topology.conf`: `BlockName=` lines and an optional `BlockSizes=` line.

use std::collections::HashMap;

use super::{Line, Source};
use crate::sources::{HostDefaults, LoadedTopology, node};
use crate::{ResolvedSpec, Result};

/// Slurm's limit: a block size is at most 2^15 base blocks.
const MAX_EXPONENT: u32 = 15;

/// Aggregate sizes, in base blocks as powers of two, used when the file has no `BlockSizes=`.
const DEFAULT_EXPONENTS: [u32; 5] = [0, 1, 2, 3, 4];

struct Block<'a> {
    line: &'a Line,
    nodes: Vec<String>,
}

/// `BlockSizes=`: the base size in nodes and each size as a power of two of base blocks.
struct Sizes<'a> {
    line: Option<&'a Line>,
    base: u64,
    exponents: Vec<u32>,
}

pub(super) fn build(lines: &[Line], src: &Source<'_>, defaults: HostDefaults) -> Result<LoadedTopology> {
    let mut sizes_line: Option<&Line> = None;
    let mut blocks: Vec<Block<'_>> = Vec::new();
    // Both maps are looked up only, never iterated.
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    let mut owner: HashMap<String, usize> = HashMap::new();
    for line in lines {
        let key = &line.pairs[0].0;
        if key.eq_ignore_ascii_case("BlockSizes") {
            if let Some(first) = sizes_line {
                let message = format!("BlockSizes is already given on line {}", first.number);
                return Err(src.invalid(Some(line.number), key, message));
            }
            sizes_line = Some(line);
            continue;
        }
        let name = line.name();
        if name.is_empty() || name.contains("..") {
            let message = format!("`{name}` cannot name a block: names must be non-empty and without `..`");
            return Err(src.invalid(Some(line.number), key, message));
        }
        if let Some(&prior) = by_name.get(name) {
            let message = format!("block `{name}` is already defined on line {}", blocks[prior].line.number);
            return Err(src.invalid(Some(line.number), key, message));
        }
        let owner_label = format!("block `{name}`");
        let nodes = src.expand(line, "Nodes", &owner_label, line.get("Nodes").unwrap_or(""))?;
        if nodes.is_empty() {
            return Err(src.invalid(Some(line.number), "Nodes", format!("{owner_label} has no nodes")));
        }
        let index = blocks.len();
        for host in &nodes {
            if let Some(&prior) = owner.get(host) {
                let message = if prior == index {
                    format!("node `{host}` is listed twice in {owner_label}")
                } else {
                    let other = &blocks[prior];
                    format!(
                        "node `{host}` is in {owner_label} and in block `{}` (line {}); a node belongs to one block",
                        other.line.name(),
                        other.line.number
                    )
                };
                return Err(src.invalid(Some(line.number), "Nodes", message));
            }
            owner.insert(host.clone(), index);
        }
        by_name.insert(name, index);
        blocks.push(Block { line, nodes });
    }
    let Some(first) = blocks.first() else {
        let line = sizes_line.map(|l| l.number);
        return Err(src.invalid(line, "BlockName", "BlockSizes is given but no BlockName line".to_string()));
    };
    let sizes = match sizes_line {
        Some(line) => parse_sizes(line, src)?,
        None => Sizes { line: None, base: first.nodes.len() as u64, exponents: DEFAULT_EXPONENTS.to_vec() },
    };
    for block in &blocks {
        if (block.nodes.len() as u64) < sizes.base {
            let message = format!(
                "block `{}` has {} nodes, fewer than the base block size {}",
                block.line.name(),
                block.nodes.len(),
                sizes.base
            );
            return Err(src.invalid(Some(block.line.number), "Nodes", message));
        }
    }

    // Like Slurm, keep sizes up to the first one that spans every block.
    let count = blocks.len() as u64;
    let kept = sizes.exponents.iter().position(|&e| 1u64 << e >= count).map_or(sizes.exponents.len(), |i| i + 1);
    let mut warnings = Vec::new();
    if let Some(line) = sizes.line {
        for &e in &sizes.exponents[kept..] {
            let message = format!(
                "size {} ({} base blocks) is larger than needed for {count} blocks; left out, as Slurm does",
                sizes.base << e,
                1u64 << e
            );
            warnings.push(src.warning(Some(line.number), "BlockSizes".to_string(), message));
        }
    }
    let exponents = &sizes.exponents[..kept];

    // names[j][i]: the domain of block i at size exponents[j]; j = 0 is the block itself.
    let mut names: Vec<Vec<String>> = vec![blocks.iter().map(|b| b.line.name().to_string()).collect()];
    for j in 1..exponents.len() {
        let (span, smaller) = (1usize << exponents[j], 1usize << exponents[j - 1]);
        let mut level = names[j - 1].clone();
        for start in (0..blocks.len()).step_by(span) {
            let remaining = blocks.len() - start;
            // Slurm drops an incomplete trailing aggregate no bigger than one of the smaller size.
            if span > remaining && smaller >= remaining {
                continue;
            }
            let end = (start + span).min(blocks.len());
            let name = format!("{}..{}", blocks[start].line.name(), blocks[end - 1].line.name());
            level[start..end].fill(name);
        }
        names.push(level);
    }

    let mut nodes = Vec::new();
    for (i, block) in blocks.iter().enumerate() {
        let upper: Vec<String> = names.iter().rev().map(|level| level[i].clone()).collect();
        for host in &block.nodes {
            let mut path = upper.clone();
            path.push(host.clone());
            nodes.push(node(path, defaults.capacity));
        }
    }
    let mut levels: Vec<String> = exponents[1..].iter().rev().map(|&e| format!("block{}", sizes.base << e)).collect();
    levels.push("block".to_string());
    levels.push("host".to_string());
    Ok(LoadedTopology { spec: ResolvedSpec { name: src.name.to_string(), levels, nodes, tori: Vec::new() }, warnings })
}

/// Checks Slurm's rules: positive sizes, increasing, each the base times a power of two.
fn parse_sizes<'a>(line: &'a Line, src: &Source<'_>) -> Result<Sizes<'a>> {
    let key = &line.pairs[0].0;
    let invalid = |message: String| src.invalid(Some(line.number), key, message);
    let mut sizes: Vec<u64> = Vec::new();
    for text in line.name().split(',').map(str::trim) {
        let size: u64 = match text.parse() {
            Ok(size) if size > 0 => size,
            _ => return Err(invalid(format!("`{text}` is not a positive whole number"))),
        };
        if let Some(&prior) = sizes.last()
            && size <= prior
        {
            return Err(invalid(format!("`{size}` does not exceed the size before it, {prior}; sizes must increase")));
        }
        sizes.push(size);
    }
    let base = sizes[0];
    let mut exponents = Vec::with_capacity(sizes.len());
    for &size in &sizes {
        let ratio = size / base;
        if size % base != 0 || !ratio.is_power_of_two() {
            return Err(invalid(format!("`{size}` is not the base size {base} times a power of two")));
        }
        let exponent = ratio.trailing_zeros();
        if exponent > MAX_EXPONENT {
            return Err(invalid(format!("`{size}` is more than 2^{MAX_EXPONENT} base blocks of {base}")));
        }
        exponents.push(exponent);
    }
    Ok(Sizes { line: Some(line), base, exponents })
}
