//! Slurm's `topology.conf`, in its tree form (`SwitchName=`) or its block form (`BlockName=`).
//!
//! The text is read the way Slurm reads it: keys are case-insensitive, `#` starts a comment,
//! a line ending in `\` continues on the next one (errors name the first line of such a
//! logical line), and `Key=Value` pairs are separated by whitespace (a value may be
//! double-quoted). A file describes one plugin: mixing `SwitchName` and `BlockName` lines is
//! an error. Node and switch lists use Slurm's host-list syntax (see [`super::hostlist`]).
//! The file has no capacities; every host gets [`HostDefaults`].
//!
//! **Tree form** (`topology/tree`). Levels are named by height above the hosts: a switch with
//! `Nodes=` is a leaf switch at level `switch1`, a switch whose highest child is at `switchN`
//! is at `switch{N+1}`, and the host level is `host`. Where a switch's children have unequal
//! heights, each shorter child is padded with pass-through domains that repeat its name up to
//! the level just under its parent, so that every host path has the same length; switches
//! with no parent (Slurm allows several) sit under the cluster root and are padded the same
//! way up to the highest one. Slurm allows a switch under several parents (redundant spines
//! in a fat tree); trainyard models a tree, so a switch keeps the first parent that lists it
//! in file order and the other links are reported as warnings. A switch with no nodes below
//! it is reported and left out. A switch with both `Nodes=` and `Switches=` is an error, as
//! in Slurm; so are a node under two leaf switches, an undefined child and a cycle.
//!
//! **Block form** (`topology/block`). `BlockSizes=` lists the base block size (in nodes)
//! followed by larger sizes, each the base times a power of two (Slurm's rule); without it
//! the base is the first block's node count and the sizes are base × 1, 2, 4, 8, 16. Every
//! block needs at least the base size of nodes. A size of `k` base blocks aggregates `k`
//! consecutive `BlockName` lines in file order, starting at multiples of `k`. As in Slurm,
//! sizes beyond the first one that covers every block are dropped (with a warning when the
//! file named them), and an incomplete trailing aggregate is kept only if it holds more
//! blocks than an aggregate of the next smaller size; the blocks it would have held then have
//! no aggregate at that level and get a pass-through domain named like the domain below.
//! Levels are `block{size}` outermost first, then `block` for the base blocks, then `host`.
//! An aggregate is named `first..last` after its first and last block, so block names may
//! not contain `..`.

mod block;
mod tree;

use super::{HostDefaults, LoadedTopology, SourceWarning, hostlist};
use crate::{Error, InputError, Result};

/// Parses a `topology.conf` in tree or block form; errors name `source_name`, the line and
/// the item at fault.
pub fn parse(text: &str, source_name: &str, defaults: HostDefaults) -> Result<LoadedTopology> {
    let src = Source { name: source_name };
    let lines = logical_lines(text, &src)?;
    let mut form: Option<(Form, &Line)> = None;
    for line in &lines {
        let (key, _) = &line.pairs[0];
        let this = match key.to_ascii_lowercase().as_str() {
            "switchname" => Form::Tree,
            "blockname" | "blocksizes" => Form::Block,
            _ => {
                let message = format!("a line starts with SwitchName=, BlockName= or BlockSizes=, not `{key}=`");
                return Err(src.invalid(Some(line.number), key, message));
            }
        };
        match form {
            None => form = Some((this, line)),
            Some((first, first_line)) if first != this => {
                let message = format!(
                    "`{key}=` cannot follow `{}=` (line {}): a file is either a switch tree or a set of blocks",
                    first_line.pairs[0].0, first_line.number
                );
                return Err(src.invalid(Some(line.number), key, message));
            }
            Some(_) => {}
        }
    }
    match form {
        None => Err(src.invalid(None, "SwitchName", "no SwitchName or BlockName lines".to_string())),
        Some((Form::Tree, _)) => tree::build(&lines, &src, defaults),
        Some((Form::Block, _)) => block::build(&lines, &src, defaults),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    Tree,
    Block,
}

/// The file being read, for error and warning messages.
struct Source<'a> {
    name: &'a str,
}

impl Source<'_> {
    fn invalid(&self, line: Option<u64>, field: &str, message: String) -> Error {
        InputError::invalid(self.name, line, field, message).into()
    }

    fn warning(&self, line: Option<u64>, item: String, message: String) -> SourceWarning {
        SourceWarning { source_name: self.name.to_string(), line, item, message }
    }

    /// Expands a host list, naming the line, the key and the owner on failure.
    fn expand(&self, line: &Line, key: &str, owner: &str, list: &str) -> Result<Vec<String>> {
        hostlist::expand(list).map_err(|e| self.invalid(Some(line.number), key, format!("{owner}: {e}")))
    }
}

/// One logical line: its first physical line number and its `Key=Value` pairs (never empty).
#[derive(Debug)]
struct Line {
    number: u64,
    pairs: Vec<(String, String)>,
}

impl Line {
    /// The value of `key` (any case), if the line has it.
    fn get(&self, key: &str) -> Option<&str> {
        self.pairs.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)).map(|(_, v)| v.as_str())
    }

    /// The value of the line's first key, which names the switch or block.
    fn name(&self) -> &str {
        &self.pairs[0].1
    }
}

/// Strips comments, joins `\` continuations and splits each non-empty line into pairs.
fn logical_lines(text: &str, src: &Source<'_>) -> Result<Vec<Line>> {
    let mut lines = Vec::new();
    let mut pending: Option<(u64, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let number = i as u64 + 1;
        let content = raw.split('#').next().unwrap_or("").trim_end();
        let (content, continues) = match content.strip_suffix('\\') {
            Some(head) => (head, true),
            None => (content, false),
        };
        let (start, mut joined) = pending.take().unwrap_or((number, String::new()));
        joined.push(' ');
        joined.push_str(content);
        if continues {
            pending = Some((start, joined));
        } else if !joined.trim().is_empty() {
            lines.push(Line { number: start, pairs: pairs(&joined, start, src)? });
        }
    }
    if let Some((start, joined)) = pending.filter(|(_, j)| !j.trim().is_empty()) {
        lines.push(Line { number: start, pairs: pairs(&joined, start, src)? });
    }
    Ok(lines)
}

/// Splits `Key=Value Key="quoted value"` into pairs; a key given twice is an error.
fn pairs(text: &str, number: u64, src: &Source<'_>) -> Result<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let token_end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let Some(eq) = rest[..token_end].find('=').filter(|&eq| eq > 0) else {
            let token = &rest[..token_end];
            return Err(src.invalid(Some(number), token, format!("expected `Key=Value`, found `{token}`")));
        };
        let key = &rest[..eq];
        let after = &rest[eq + 1..];
        let (value, tail) = match after.strip_prefix('"') {
            Some(quoted) => match quoted.find('"') {
                Some(close) => (&quoted[..close], &quoted[close + 1..]),
                None => return Err(src.invalid(Some(number), key, "the quoted value has no closing `\"`".to_string())),
            },
            None => {
                let end = after.find(char::is_whitespace).unwrap_or(after.len());
                (&after[..end], &after[end..])
            }
        };
        if out.iter().any(|(k, _)| k.eq_ignore_ascii_case(key)) {
            return Err(src.invalid(Some(number), key, format!("`{key}` is given twice on one line")));
        }
        out.push((key.to_string(), value.to_string()));
        rest = tail.trim_start();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<(u64, Vec<(String, String)>)> {
        let src = Source { name: "t.conf" };
        logical_lines(text, &src).unwrap().into_iter().map(|l| (l.number, l.pairs)).collect()
    }

    fn pair(k: &str, v: &str) -> (String, String) {
        (k.to_string(), v.to_string())
    }

    #[test]
    fn comments_blank_lines_and_continuations() {
        let text = "# header\n\nSwitchName=s0 Nodes=n[1-2] # leaf\r\nSwitchName=s1 \\\n  Switches=s0 \\\n\n";
        assert_eq!(
            lines(text),
            [
                (3, vec![pair("SwitchName", "s0"), pair("Nodes", "n[1-2]")]),
                (4, vec![pair("SwitchName", "s1"), pair("Switches", "s0")]),
            ]
        );
    }

    #[test]
    fn quoted_values_and_bad_tokens() {
        assert_eq!(lines("BlockName=\"b 1\"  Nodes=n1\n"), [(1, vec![pair("BlockName", "b 1"), pair("Nodes", "n1")])]);
        let src = Source { name: "t.conf" };
        let err = logical_lines("\nSwitchName=s0 Nodes\n", &src).unwrap_err().to_string();
        assert!(err.contains("t.conf: line 2: field `Nodes`: expected `Key=Value`"), "{err}");
        let err = logical_lines("SwitchName=s0 nodes=a NODES=b\n", &src).unwrap_err().to_string();
        assert!(err.contains("line 1: field `NODES`: `NODES` is given twice"), "{err}");
        let err = logical_lines("BlockName=\"b1 Nodes=a\n", &src).unwrap_err().to_string();
        assert!(err.contains("line 1: field `BlockName`: the quoted value has no closing"), "{err}");
    }
}
