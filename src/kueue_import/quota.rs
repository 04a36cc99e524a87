//! A Kueue `resourceGroups` list as one quota per resource: every flavor's nominal quota summed,
//! and the borrowing and lending limits summed where every flavor sets one (one flavor without a
//! limit leaves the resource unlimited, as in Kueue).

use std::collections::BTreeMap;

use serde_json::Value;
use trainyard_topology::sources::k8s_nodes::quantity::{QuantityError, parse_mebibytes, parse_millis, parse_whole};

use super::{At, ImportError};
use crate::api::queue::Amounts;

/// What a trainyard Queue holds of a resource, or that it holds nothing of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Resource {
    Gpus,
    /// Counted in millicores.
    Cpus,
    /// Counted in MiB.
    Memory,
}

/// One resource's quota over the flavors: nominal, and each limit unless some flavor has none.
#[derive(Clone, Copy, Debug, Default)]
struct Sum {
    nominal: u64,
    borrowing: Option<u64>,
    lending: Option<u64>,
    /// Whether every flavor so far set a borrowing (lending) limit.
    all_borrowing: bool,
    all_lending: bool,
    flavors: usize,
}

/// A resource group list read into one quota per resource.
#[derive(Clone, Debug, Default)]
pub(super) struct Quota {
    pub nominal: Amounts,
    pub borrowing: Option<Amounts>,
    pub lending: Option<Amounts>,
    /// Flavors that give GPUs (a nominal quota above zero), in the order listed.
    pub gpu_flavors: Vec<String>,
    /// Every flavor named, in the order listed.
    pub flavors: Vec<String>,
    /// What has no equivalent, as sentences.
    pub notes: Vec<String>,
}

/// Reads `spec.resourceGroups` (absent: no quota of any resource).
pub(super) fn read_groups(groups: Option<&Value>, at: &At, gpu_resources: &[String]) -> Result<Quota, ImportError> {
    let mut quota = Quota::default();
    let Some(groups) = groups else { return Ok(quota) };
    let groups = list(at, Some(groups), "spec.resourceGroups")?;
    let mut sums: BTreeMap<Resource, Sum> = BTreeMap::new();
    let mut dropped: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (g, group) in groups.iter().enumerate() {
        let flavors = list(at, group.get("flavors"), &format!("spec.resourceGroups[{g}].flavors"))?;
        for (f, flavor) in flavors.iter().enumerate() {
            let field = format!("spec.resourceGroups[{g}].flavors[{f}]");
            let name = named(at, flavor, &field, "a ResourceFlavor")?;
            quota.flavors.push(name.to_string());
            for (r, resource) in list(at, flavor.get("resources"), &format!("{field}.resources"))?.iter().enumerate() {
                let field = format!("{field}.resources[{r}]");
                let rname = named(at, resource, &field, "a resource")?;
                let kind = match rname {
                    "cpu" => Resource::Cpus,
                    "memory" => Resource::Memory,
                    n if gpu_resources.iter().any(|g| g == n) => Resource::Gpus,
                    other => {
                        dropped.entry(other.to_string()).or_default().push(name.to_string());
                        continue;
                    }
                };
                let amount = |key: &str| -> Result<Option<u64>, ImportError> {
                    resource
                        .get(key)
                        .map(|v| parse(v, kind).map_err(|e| at.error(&format!("{field}.{key}"), &e.to_string())))
                        .transpose()
                };
                let nominal = amount("nominalQuota")?.unwrap_or(0);
                let (borrowing, lending) = (amount("borrowingLimit")?, amount("lendingLimit")?);
                let sum = sums.entry(kind).or_insert(Sum { all_borrowing: true, all_lending: true, ..Sum::default() });
                sum.nominal = sum.nominal.saturating_add(nominal);
                sum.flavors += 1;
                sum.all_borrowing &= borrowing.is_some();
                sum.all_lending &= lending.is_some();
                sum.borrowing = Some(sum.borrowing.unwrap_or(0).saturating_add(borrowing.unwrap_or(0)));
                sum.lending = Some(sum.lending.unwrap_or(0).saturating_add(lending.unwrap_or(0)));
                if kind == Resource::Gpus && nominal > 0 && !quota.gpu_flavors.iter().any(|f| f == name) {
                    quota.gpu_flavors.push(name.to_string());
                }
            }
        }
    }
    for (resource, flavors) in dropped {
        quota.notes.push(format!(
            "resource `{resource}` (flavors {}) has no equivalent: a trainyard Queue holds GPUs, CPUs and memory; its quota is left out",
            flavors.join(", ")
        ));
    }
    let mut borrowing = Amounts::default();
    let mut lending = Amounts::default();
    for (resource, sum) in &sums {
        let (nominal, round_note) = whole_units(*resource, sum.nominal);
        quota.notes.extend(round_note.map(|n| format!("nominal {n}")));
        set(&mut quota.nominal, *resource, nominal);
        if sum.all_borrowing {
            let (b, round_note) = whole_units(*resource, sum.borrowing.unwrap_or(0));
            quota.notes.extend(round_note.map(|n| format!("borrowing limit {n}")));
            set(&mut borrowing, *resource, b);
        }
        if sum.all_lending {
            let (l, round_note) = whole_units(*resource, sum.lending.unwrap_or(0));
            quota.notes.extend(round_note.map(|n| format!("lending limit {n}")));
            set(&mut lending, *resource, l);
        }
        if sum.flavors > 1 {
            quota.notes.push(format!(
                "{} quotas of {} flavors are added up into one: a trainyard Queue holds one quota per resource, not one per flavor",
                label(*resource),
                sum.flavors
            ));
        }
    }
    quota.borrowing = (borrowing != Amounts::default()).then_some(borrowing);
    quota.lending = (lending != Amounts::default()).then_some(lending);
    Ok(quota)
}

/// The list at `field`.
fn list<'a>(at: &At, value: Option<&'a Value>, field: &str) -> Result<&'a Vec<Value>, ImportError> {
    value.and_then(Value::as_array).ok_or_else(|| at.error(field, "must be a list"))
}

/// The `name` of the entry at `field`, which names `what`.
fn named<'a>(at: &At, entry: &'a Value, field: &str, what: &str) -> Result<&'a str, ImportError> {
    entry
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| at.error(&format!("{field}.name"), &format!("must name {what}")))
}

/// A quantity as YAML gives it (a number or a string) in the resource's counting unit.
fn parse(value: &Value, kind: Resource) -> Result<u64, QuantityError> {
    let text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match kind {
        Resource::Gpus => parse_whole(&text),
        Resource::Cpus => parse_millis(&text),
        Resource::Memory => parse_mebibytes(&text),
    }
}

/// An amount in the Queue's units (whole CPUs, GiB), rounded down, with a note when that lost
/// something.
fn whole_units(resource: Resource, amount: u64) -> (u64, Option<String>) {
    let (per, unit, from) = match resource {
        Resource::Gpus => return (amount, None),
        Resource::Cpus => (1000, "CPUs", "millicores"),
        Resource::Memory => (1024, "GiB", "MiB"),
    };
    let whole = amount / per;
    let note = (!amount.is_multiple_of(per))
        .then(|| format!("{amount} {from} is rounded down to {whole} {unit}: a trainyard Queue counts whole {unit}"));
    (whole, note)
}

fn set(amounts: &mut Amounts, resource: Resource, value: u64) {
    match resource {
        Resource::Gpus => amounts.gpus = Some(value),
        Resource::Cpus => amounts.cpus = Some(value),
        Resource::Memory => amounts.memory_gib = Some(value),
    }
}

fn label(resource: Resource) -> &'static str {
    match resource {
        Resource::Gpus => "GPU",
        Resource::Cpus => "CPU",
        Resource::Memory => "memory",
    }
}
