//! Queue declarations of the policy file: the tree of cohorts and leaf queues, and their limits.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;
use trainyard_topology::Resources;

use super::Reporter;
use crate::Result;

/// Resource names as the policy file spells them, in the order of [`QuotaAmounts::as_array`].
const YAML_NAMES: [&str; 3] = ["gpus", "cpus", "memory_gib"];
/// Engine units per YAML unit: GPUs, millicores per core, MiB per GiB.
const YAML_SCALE: [u64; 3] = [1, 1000, 1024];

/// Amounts per resource in the engine's units (GPUs, millicores, MiB). `None` where the
/// queue does not name the resource, which is not the same as 0: a nominal of 0 CPUs means
/// "may only borrow CPUs", an unnamed one means "CPUs are not accounted for this queue".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct QuotaAmounts {
    /// Whole GPUs.
    pub gpus: Option<u64>,
    /// CPU in millicores.
    pub cpu_milli: Option<u64>,
    /// Memory in MiB.
    pub memory_mib: Option<u64>,
}

impl QuotaAmounts {
    /// Names no resource.
    pub const UNNAMED: QuotaAmounts = QuotaAmounts { gpus: None, cpu_milli: None, memory_mib: None };

    /// Names only GPUs.
    pub const fn gpus(gpus: u64) -> QuotaAmounts {
        QuotaAmounts { gpus: Some(gpus), cpu_milli: None, memory_mib: None }
    }

    /// Names all three resources with the given amounts.
    pub const fn all(r: Resources) -> QuotaAmounts {
        QuotaAmounts { gpus: Some(r.gpus), cpu_milli: Some(r.cpu_milli), memory_mib: Some(r.memory_mib) }
    }

    /// `[gpus, cpu_milli, memory_mib]`.
    pub const fn as_array(&self) -> [Option<u64>; 3] {
        [self.gpus, self.cpu_milli, self.memory_mib]
    }

    /// Whether any resource is named.
    pub fn names_any(&self) -> bool {
        self.as_array().iter().any(Option::is_some)
    }
}

/// One queue of the tree. A queue that another queue names as `parent` is an inner queue (a
/// cohort): it pools quota for its subtree and receives no gangs. The others are leaf queues.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QueueConfig {
    /// Queue name, as gangs (leaf queues) or `parent` fields (inner queues) name it.
    pub name: String,
    /// The inner queue above this one; `None` puts it directly under the implicit root.
    pub parent: Option<String>,
    /// The queue's own quota. Only named resources are limited (see [`QuotaAmounts`]).
    pub nominal: QuotaAmounts,
    /// How much the subtree may use beyond its subtree quota, per resource; `None` is unlimited.
    pub borrowing_limit: QuotaAmounts,
    /// How much of the subtree quota other queues may borrow, per resource; `None` lends all.
    pub lending_limit: QuotaAmounts,
    /// Fair-share weight (> 0, finite); a queue of weight 2 is entitled to twice the share.
    pub weight: f64,
    /// A nominal GPU quota stated in topology units: `(level, count)`, e.g. two racks.
    /// [`crate::PolicyConfig::resolve_topology`] turns it into GPUs for a given cluster.
    pub nominal_domains: Option<(String, u64)>,
    /// The GPU flavor (model) this queue's quota is for: its gangs run only on nodes of that
    /// flavor. A team with quota on several flavors has one leaf queue per flavor.
    pub flavor: Option<String>,
}

impl QueueConfig {
    /// The old flat queue: under the root, at most `nominal_gpus` GPUs, never borrowing, CPU
    /// and memory not accounted. What `{name, nominal_gpus}` in a policy file means.
    pub fn flat(name: &str, nominal_gpus: u64) -> QueueConfig {
        QueueConfig {
            name: name.to_string(),
            parent: None,
            nominal: QuotaAmounts::gpus(nominal_gpus),
            borrowing_limit: QuotaAmounts::gpus(0),
            lending_limit: QuotaAmounts::UNNAMED,
            weight: 1.0,
            nominal_domains: None,
            flavor: None,
        }
    }
}

/// Amounts as written in the file: `{gpus, cpus, memory_gib}`.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AmountsFile {
    #[serde(default)]
    gpus: Option<u64>,
    #[serde(default)]
    cpus: Option<u64>,
    #[serde(default)]
    memory_gib: Option<u64>,
}

impl AmountsFile {
    fn as_array(&self) -> [Option<u64>; 3] {
        [self.gpus, self.cpus, self.memory_gib]
    }
}

/// One entry of `queues:` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct QueueFile {
    name: String,
    #[serde(default)]
    parent: Option<Spanned<String>>,
    #[serde(default)]
    nominal_gpus: Option<u64>,
    #[serde(default)]
    nominal: Option<Spanned<AmountsFile>>,
    #[serde(default)]
    borrowing_limit: Option<Spanned<AmountsFile>>,
    #[serde(default)]
    lending_limit: Option<Spanned<AmountsFile>>,
    #[serde(default)]
    weight: Option<Spanned<f64>>,
    #[serde(default)]
    nominal_domains: Option<Spanned<BTreeMap<String, u64>>>,
    #[serde(default)]
    flavor: Option<String>,
}

/// Checks the queue list and turns it into [`QueueConfig`]s, in file order.
/// Parents may also be queues of `outside` (declared elsewhere; the merged tree is checked later).
pub(super) fn check_queues(
    queues: Vec<Spanned<QueueFile>>,
    outside: &[String],
    report: &Reporter<'_>,
) -> Result<Vec<QueueConfig>> {
    let mut index: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, q) in queues.iter().enumerate() {
        let line = q.referenced.line();
        let name = q.value.name.as_str();
        if name.trim().is_empty() {
            return Err(report.at(line, format!("queues[{i}].name"), "must not be empty"));
        }
        if index.insert(name, i).is_some() {
            return Err(report.at(line, format!("queues[{i}].name"), format!("queue `{name}` is declared twice")));
        }
        if let Some(d) = &q.value.nominal_domains {
            let field = format!("queues[{i}].nominal_domains");
            let line = d.referenced.line();
            if d.value.len() != 1 || d.value.values().any(|&n| n == 0) {
                return Err(report.at(
                    line,
                    field,
                    format!("queue `{name}`: give one level and a count above 0, e.g. `{{rack: 2}}`"),
                ));
            }
            if q.value.nominal_gpus.is_some() || q.value.nominal.as_ref().is_some_and(|n| n.value.gpus.is_some()) {
                return Err(report.at(
                    line,
                    field,
                    format!("queue `{name}` states its GPU quota twice: in GPUs and in topology units; keep one"),
                ));
            }
        }
        if q.value.nominal_gpus.is_some() && q.value.nominal.is_some() {
            return Err(report.at(
                line,
                format!("queues[{i}].nominal_gpus"),
                format!("queue `{name}` gives both `nominal_gpus` and `nominal`; keep one"),
            ));
        }
        if let Some(w) = &q.value.weight
            && !(w.value.is_finite() && w.value > 0.0)
        {
            return Err(report.at(
                w.referenced.line(),
                format!("queues[{i}].weight"),
                format!("queue `{name}` has weight {}; it must be a finite number above 0", w.value),
            ));
        }
    }
    let mut parents: Vec<Option<usize>> = Vec::with_capacity(queues.len());
    for (i, q) in queues.iter().enumerate() {
        let parent = match &q.value.parent {
            None => None,
            Some(p) if !index.contains_key(p.value.as_str()) && outside.contains(&p.value) => None,
            Some(p) => Some(*index.get(p.value.as_str()).ok_or_else(|| {
                report.at(
                    p.referenced.line(),
                    format!("queues[{i}].parent"),
                    format!("queue `{}` names parent `{}`, which is not declared", q.value.name, p.value),
                )
            })?),
        };
        parents.push(parent);
    }
    if let Some(cycle) = find_cycle(&parents) {
        let first = cycle[0];
        let mut names: Vec<String> = cycle.iter().map(|&c| format!("`{}`", queues[c].value.name)).collect();
        names.push(names[0].clone());
        let line = queues[first].value.parent.as_ref().map_or(queues[first].referenced.line(), |p| p.referenced.line());
        return Err(report.at(
            line,
            format!("queues[{first}].parent"),
            format!("queues {} form a cycle of parents", names.join(" -> ")),
        ));
    }
    let subtree = subtree_nominals(&queues, &parents);
    let mut out = Vec::with_capacity(queues.len());
    for (i, q) in queues.iter().enumerate() {
        let name = &q.value.name;
        let amounts =
            |field: &str, a: &Spanned<AmountsFile>| to_engine_units(a, &format!("queues[{i}].{field}"), report);
        let nominal = match (&q.value.nominal, q.value.nominal_gpus) {
            (Some(n), _) => amounts("nominal", n)?,
            (None, Some(gpus)) => QuotaAmounts::gpus(gpus),
            (None, None) => QuotaAmounts::UNNAMED,
        };
        let borrowing_limit = match (&q.value.borrowing_limit, q.value.nominal_gpus) {
            (Some(b), _) => amounts("borrowing_limit", b)?,
            // The old flat files meant "never more than nominal_gpus".
            (None, Some(_)) => QuotaAmounts::gpus(0),
            (None, None) => QuotaAmounts::UNNAMED,
        };
        let lending_limit = match &q.value.lending_limit {
            Some(l) => {
                for (r, (lend, quota)) in l.value.as_array().into_iter().zip(subtree[i]).enumerate() {
                    if let Some(lend) = lend
                        && lend > quota
                    {
                        let whose = if parents.contains(&Some(i)) { " (with its children's)" } else { "" };
                        return Err(report.at(
                            l.referenced.line(),
                            format!("queues[{i}].lending_limit.{}", YAML_NAMES[r]),
                            format!(
                                "queue `{name}` lends more than its nominal: {lend} {unit} lent, nominal{whose} \
                                 {quota} {unit}",
                                unit = YAML_NAMES[r]
                            ),
                        ));
                    }
                }
                amounts("lending_limit", l)?
            }
            None => QuotaAmounts::UNNAMED,
        };
        out.push(QueueConfig {
            name: name.clone(),
            parent: q.value.parent.as_ref().map(|p| p.value.clone()),
            nominal,
            borrowing_limit,
            lending_limit,
            weight: q.value.weight.as_ref().map_or(1.0, |w| w.value),
            nominal_domains: q
                .value
                .nominal_domains
                .as_ref()
                .and_then(|d| d.value.iter().next().map(|(l, &n)| (l.clone(), n))),
            flavor: q.value.flavor.clone(),
        });
    }
    Ok(out)
}

/// A queue list built in memory that breaks a rule of the queue tree: which queue (by position),
/// which of its fields, and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct TreeError {
    /// Position of the queue in the list.
    pub queue: usize,
    /// Its name.
    pub name: String,
    /// Its field at fault, e.g. `parent` or `lending_limit.gpus`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

/// Checks queues built in memory (a controller's Queue objects merged with the file's) by the
/// rules the file's own queues obey: names, weights, topology-unit quotas, parents, cycles, and
/// lending limits within the subtree's nominal. Amounts are in engine units.
pub fn check_tree(queues: &[QueueConfig]) -> std::result::Result<(), TreeError> {
    let bad = |queue: usize, field: &str, message: String| TreeError {
        queue,
        name: queues[queue].name.clone(),
        field: field.into(),
        message,
    };
    let mut index: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, q) in queues.iter().enumerate() {
        let name = q.name.as_str();
        if name.trim().is_empty() {
            return Err(bad(i, "name", "must not be empty".into()));
        }
        if index.insert(name, i).is_some() {
            return Err(bad(i, "name", format!("queue `{name}` is declared twice")));
        }
        if !(q.weight.is_finite() && q.weight > 0.0) {
            return Err(bad(
                i,
                "weight",
                format!("queue `{name}` has weight {}; it must be a finite number above 0", q.weight),
            ));
        }
        if let Some((_, count)) = &q.nominal_domains {
            if *count == 0 {
                return Err(bad(
                    i,
                    "nominal_domains",
                    format!("queue `{name}`: give a count above 0, e.g. `{{rack: 2}}`"),
                ));
            }
            if q.nominal.gpus.is_some() {
                let message =
                    format!("queue `{name}` states its GPU quota twice: in GPUs and in topology units; keep one");
                return Err(bad(i, "nominal_domains", message));
            }
        }
    }
    let mut parents = Vec::with_capacity(queues.len());
    for (i, q) in queues.iter().enumerate() {
        let parent = match &q.parent {
            None => None,
            Some(p) => Some(*index.get(p.as_str()).ok_or_else(|| {
                bad(i, "parent", format!("queue `{}` names parent `{p}`, which is not declared", q.name))
            })?),
        };
        parents.push(parent);
    }
    if let Some(cycle) = find_cycle(&parents) {
        let mut names: Vec<String> = cycle.iter().map(|&c| format!("`{}`", queues[c].name)).collect();
        names.push(names[0].clone());
        return Err(bad(cycle[0], "parent", format!("queues {} form a cycle of parents", names.join(" -> "))));
    }
    let own: Vec<[u64; 3]> = queues.iter().map(|q| q.nominal.as_array().map(|a| a.unwrap_or(0))).collect();
    let subtree = subtree_sums(own, &parents);
    for (i, q) in queues.iter().enumerate() {
        for (r, (lend, quota)) in q.lending_limit.as_array().into_iter().zip(subtree[i]).enumerate() {
            if let Some(lend) = lend
                && lend > quota
            {
                let whose = if parents.contains(&Some(i)) { " (with its children's)" } else { "" };
                let (lend, quota, unit) = (lend / YAML_SCALE[r], quota / YAML_SCALE[r], YAML_NAMES[r]);
                let message = format!(
                    "queue `{}` lends more than its nominal: {lend} {unit} lent, nominal{whose} {quota} {unit}",
                    q.name
                );
                return Err(bad(i, &format!("lending_limit.{unit}"), message));
            }
        }
    }
    Ok(())
}

/// The members of one cycle of `parents`, starting with the one listed first, if any.
fn find_cycle(parents: &[Option<usize>]) -> Option<Vec<usize>> {
    // 0 = not seen, 1 = on the chain being walked, 2 = known to reach the root.
    let mut state = vec![0u8; parents.len()];
    for start in 0..parents.len() {
        let mut chain = Vec::new();
        let mut at = Some(start);
        while let Some(q) = at {
            match state[q] {
                2 => break,
                1 => {
                    let from = chain.iter().position(|&c| c == q).unwrap_or(0);
                    let mut cycle = chain[from..].to_vec();
                    let min = cycle.iter().enumerate().min_by_key(|&(_, &c)| c).map_or(0, |(k, _)| k);
                    cycle.rotate_left(min);
                    return Some(cycle);
                }
                _ => {
                    state[q] = 1;
                    chain.push(q);
                    at = parents[q];
                }
            }
        }
        for c in chain {
            state[c] = 2;
        }
    }
    None
}

/// Per queue, in file units, its own nominal plus all its descendants' (unnamed counts as 0).
/// The parents must be acyclic.
fn subtree_nominals(queues: &[Spanned<QueueFile>], parents: &[Option<usize>]) -> Vec<[u64; 3]> {
    let own: Vec<[u64; 3]> = queues
        .iter()
        .map(|q| match (&q.value.nominal, q.value.nominal_gpus) {
            (Some(n), _) => n.value.as_array().map(|a| a.unwrap_or(0)),
            (None, gpus) => [gpus.unwrap_or(0), 0, 0],
        })
        .collect();
    subtree_sums(own, parents)
}

/// Each queue's `own` amounts plus all its descendants'; the parents must be acyclic.
fn subtree_sums(own: Vec<[u64; 3]>, parents: &[Option<usize>]) -> Vec<[u64; 3]> {
    let mut total = own.clone();
    for (i, amounts) in own.iter().enumerate() {
        let mut at = parents[i];
        while let Some(p) = at {
            for r in 0..3 {
                total[p][r] = total[p][r].saturating_add(amounts[r]);
            }
            at = parents[p];
        }
    }
    total
}

fn to_engine_units(a: &Spanned<AmountsFile>, field: &str, report: &Reporter<'_>) -> Result<QuotaAmounts> {
    let mut out = [None; 3];
    for (r, v) in a.value.as_array().into_iter().enumerate() {
        if let Some(v) = v {
            out[r] = Some(v.checked_mul(YAML_SCALE[r]).ok_or_else(|| {
                report.at(a.referenced.line(), format!("{field}.{}", YAML_NAMES[r]), format!("{v} is too large"))
            })?);
        }
    }
    Ok(QuotaAmounts { gpus: out[0], cpu_milli: out[1], memory_mib: out[2] })
}
