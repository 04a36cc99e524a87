//! The `tori` section of a cluster description: which domains are TPU tori, and their shape.
//!
//! ```yaml
//! tori:
//!   - level: pool                 # every domain of this level is a torus ...
//!     torus: 2x2x4:host=2x2x1     # ... of this shape (see `TorusSpec`'s text form)
//!     domains: [pool-0, pool-1]   # optional: only these domains of the level
//! ```
//! Each torus domain must hold exactly one host per host block, each with as many chips
//! (`gpus`) as a block has.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::{Invalid, NodeEntry};
use crate::Result;
use crate::torus::TorusSpec;

/// One entry of `tori`, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToriSpec {
    /// The level whose domains are tori; not the host level.
    pub level: String,
    /// The torus of each such domain, e.g. `4x4x4:host=2x2x1`.
    pub torus: String,
    /// Names of the domains of `level` that are tori; all of them when empty.
    #[serde(default)]
    pub domains: Vec<String>,
}

/// A torus domain, resolved: its path of names and its torus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TorusEntry {
    /// Domain names from the outermost level down to the torus domain.
    pub path: Vec<String>,
    /// Its torus.
    pub spec: TorusSpec,
}

/// Checks every `tori` entry against the levels and nodes; the error names the entry.
pub(super) fn resolve_tori(
    levels: &[String],
    nodes: &[NodeEntry],
    tori: &[Spanned<ToriSpec>],
    invalid: &Invalid<'_>,
) -> Result<Vec<TorusEntry>> {
    let mut out: Vec<TorusEntry> = Vec::new();
    for (i, entry) in tori.iter().enumerate() {
        let line = Some(entry.referenced.line());
        let t = &entry.value;
        let field = |f: &str| format!("tori[{i}].{f}");
        let depth = match levels.iter().position(|l| *l == t.level) {
            Some(d) if d + 1 < levels.len() => d + 1,
            Some(_) => {
                return Err(invalid(line, field("level"), "hosts cannot be tori; name a level above them".into()));
            }
            None => {
                return Err(invalid(
                    line,
                    field("level"),
                    format!("unknown level; the levels are {}", levels.join(", ")),
                ));
            }
        };
        let spec: TorusSpec = t.torus.parse().map_err(|e| invalid(line, field("torus"), format!("{e}")))?;
        let block_chips: u64 = spec.host_block.iter().map(|&b| u64::from(b)).product();
        let blocks = spec.chips() / block_chips.max(1);
        // Hosts of each domain of the level, in node order.
        let mut domains: BTreeMap<&[String], Vec<&NodeEntry>> = BTreeMap::new();
        for node in nodes {
            domains.entry(&node.path[..depth]).or_default().push(node);
        }
        if let Some(missing) = t.domains.iter().find(|name| !domains.keys().any(|p| p[depth - 1] == **name)) {
            return Err(invalid(
                line,
                field("domains"),
                format!("no domain of level `{}` is named `{missing}`", t.level),
            ));
        }
        for (path, hosts) in domains {
            if !t.domains.is_empty() && !t.domains.contains(&path[depth - 1]) {
                continue;
            }
            let name = path.join("/");
            if out.iter().any(|e| e.path == path) {
                return Err(invalid(line, field("domains"), format!("`{name}` is already a torus")));
            }
            if hosts.len() as u64 != blocks {
                let message = format!(
                    "`{name}` has {} hosts, but torus {} has {blocks} host blocks of {block_chips} chips",
                    hosts.len(),
                    t.torus.trim()
                );
                return Err(invalid(line, field("torus"), message));
            }
            if let Some(h) = hosts.iter().find(|h| h.capacity.gpus != block_chips) {
                let message = format!(
                    "host `{}` of `{name}` has {} chips (gpus); a block of torus {} has {block_chips}",
                    h.path.join("/"),
                    h.capacity.gpus,
                    t.torus.trim()
                );
                return Err(invalid(line, field("torus"), message));
            }
            out.push(TorusEntry { path: path.to_vec(), spec: spec.clone() });
        }
    }
    Ok(out)
}
