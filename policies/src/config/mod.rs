//! The policy configuration (YAML): backfill, runtime estimates, the queue tree with its
//! quotas, priority classes, fair sharing, preemption, starvation and admission timeouts.
//!
//! ```yaml
//! backfill: easy                  # none (strict FIFO) | easy (EASY backfill)
//! default_runtime_estimate: 4h    # for gangs that state no estimate
//! queues:                         # a tree; `parent` omitted = under the implicit root
//!   - name: research              # an inner queue (cohort): has children, receives no gangs
//!     nominal: {gpus: 0}          # its own extra quota, usually 0
//!     borrowing_limit: {gpus: 64} # subtree may use this much beyond its subtree quota (omitted: unlimited)
//!   - name: team-a
//!     parent: research
//!     nominal: {gpus: 64, cpus: 512, memory_gib: 4096}   # only named resources are limited
//!     lending_limit: {gpus: 16}   # at most this much of its quota is lent (omitted: all of it)
//!     weight: 2                   # fair-share weight, default 1
//!   - {name: team-b, nominal_gpus: 32}   # the old form: GPUs only, never borrows
//! root_cohort: false             # true: top-level queues borrow one another's idle quota
//! undeclared_queues: reject       # reject | unlimited | {catch_all: <leaf queue>}: gangs naming a queue not listed
//! placement: trainyard            # trainyard | greedy | first-fit | kueue-best-fit | slurm-tree
//! priority_classes: [{name: low, value: 0}, {name: high, value: 100}]
//! default_priority_class: low     # for gangs naming no class (default: a class named `default`, else 0)
//! fair_sharing: {enabled: true, half_life: 24h}
//! preemption: {within_queue: true, reclaim: true, checkpoint_interval: 1h}
//! starvation: {max_wait: 12h}
//! admission_timeout: {wait: 10m, backoff: 1m, max_backoff: 30m}
//! node_loss: {action: replace, grace: 2m}   # wait | requeue | replace, when a node under a gang is lost
//! ```
//!
//! A queue without a parent is capped at its own subtree quota: borrowing happens only among
//! queues that share a parent (a cohort), as with Kueue ClusterQueues and their cohorts. With
//! `root_cohort: true` the top-level queues form one cohort under the implicit root instead.

mod node_loss;
mod options;
mod queues;

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;
use trainyard_topology::{InputError, PlacementPolicy};

pub use node_loss::{DEFAULT_NODE_LOSS_GRACE_S, NodeLossAction, NodeLossConfig};
pub use options::{
    AdmissionTimeoutConfig, DEFAULT_BACKOFF_S, DEFAULT_MAX_BACKOFF_S, FairSharingConfig, PreemptionConfig,
    PriorityClass, StarvationConfig,
};
pub use queues::{QueueConfig, QuotaAmounts, TreeError, check_tree};

use crate::{Error, Result};

/// Runtime estimate used when a gang gives none: four hours. Philly's median job runs
/// 19 minutes but its mean is five hours, so a short default would make EASY backfill
/// promise reservations it cannot keep; a long one would stop all backfilling.
pub const DEFAULT_RUNTIME_ESTIMATE_S: u64 = 4 * 3600;

/// Name of the priority class gangs get when they name none and the file sets no default.
pub const DEFAULT_PRIORITY_CLASS: &str = "default";

/// How gangs that cannot start affect the ones behind them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackfillMode {
    /// Strict FIFO: a gang blocked on capacity blocks everything behind it; one blocked on
    /// its queue's quota blocks the rest of its queue.
    None,
    /// EASY: the first blocked gang gets a reservation; later gangs may start when they do
    /// not delay it.
    #[default]
    Easy,
}

/// What to do with gangs that name a queue the configuration does not list.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UndeclaredQueues {
    /// Give them a leaf queue under the root without any quota (and outside every pool).
    #[default]
    Unlimited,
    /// Report such gangs as unschedulable (a controller keeps them waiting until the queue exists).
    Reject,
    /// Charge them to this declared leaf queue.
    CatchAll(String),
}

/// The whole policy.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicyConfig {
    /// Short name shown in reports.
    pub name: String,
    /// Backfill mode.
    pub backfill: BackfillMode,
    /// Seconds assumed for gangs without an estimate.
    pub default_runtime_estimate_s: u64,
    /// Declared queues, in file order; parents may come after their children.
    pub queues: Vec<QueueConfig>,
    /// Treatment of queues not declared.
    pub undeclared_queues: UndeclaredQueues,
    /// Top-level queues share one cohort under the root and borrow one another's idle quota;
    /// by default each is capped at its own subtree quota.
    pub root_cohort: bool,
    /// How gangs are mapped onto hosts.
    pub placement: PlacementPolicy,
    /// Named priorities, in file order.
    pub priority_classes: Vec<PriorityClass>,
    /// Class of gangs that name none; `None`: [`DEFAULT_PRIORITY_CLASS`] if declared, else 0.
    pub default_priority_class: Option<String>,
    /// Dominant-resource fair sharing (off by default).
    pub fair_sharing: FairSharingConfig,
    /// Preemption (off by default).
    pub preemption: PreemptionConfig,
    /// Starvation guard for backfill (off by default).
    pub starvation: StarvationConfig,
    /// Requeue of gangs not ready in time; `None`: never.
    pub admission_timeout: Option<AdmissionTimeoutConfig>,
    /// What becomes of running gangs whose hosts are lost.
    pub node_loss: NodeLossConfig,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    backfill: BackfillMode,
    #[serde(default)]
    default_runtime_estimate: Option<Spanned<String>>,
    #[serde(default)]
    queues: Vec<Spanned<queues::QueueFile>>,
    #[serde(default)]
    undeclared_queues: Option<Spanned<UndeclaredQueues>>,
    #[serde(default)]
    root_cohort: bool,
    #[serde(default)]
    placement: PlacementPolicy,
    #[serde(default)]
    priority_classes: Vec<Spanned<PriorityClass>>,
    #[serde(default)]
    default_priority_class: Option<Spanned<String>>,
    #[serde(default)]
    fair_sharing: Option<options::FairSharingFile>,
    #[serde(default)]
    preemption: Option<options::PreemptionFile>,
    #[serde(default)]
    starvation: Option<options::StarvationFile>,
    #[serde(default)]
    admission_timeout: Option<options::AdmissionTimeoutFile>,
    #[serde(default)]
    node_loss: Option<node_loss::NodeLossFile>,
}

/// A catch-all queue must be a declared leaf: gangs are charged to it.
fn check_undeclared(
    file: Option<Spanned<UndeclaredQueues>>,
    queues: &[QueueConfig],
    report: &Reporter<'_>,
) -> Result<UndeclaredQueues> {
    let Some(spanned) = file else { return Ok(UndeclaredQueues::default()) };
    if let UndeclaredQueues::CatchAll(name) = &spanned.value {
        let line = spanned.referenced.line();
        if !queues.iter().any(|q| &q.name == name) {
            return Err(report.at(line, "undeclared_queues.catch_all", format!("no queue `{name}` is declared")));
        }
        if queues.iter().any(|q| q.parent.as_deref() == Some(name.as_str())) {
            let message = format!("`{name}` is an inner queue (a cohort) and receives no gangs; name a leaf");
            return Err(report.at(line, "undeclared_queues.catch_all", message));
        }
    }
    Ok(spanned.value)
}

/// Builds the errors of one file.
pub(crate) struct Reporter<'a> {
    source_name: &'a str,
}

impl Reporter<'_> {
    /// A field at `line` that cannot be used.
    pub(crate) fn at(&self, line: u64, field: impl Into<String>, message: impl Into<String>) -> Error {
        Error::from(InputError::invalid(self.source_name, Some(line), field, message))
    }
}

/// Names of the built-in policies, for help texts.
pub const BUILTIN_POLICIES: [&str; 2] = ["fifo", "easy-backfill"];

impl PolicyConfig {
    /// Checks queue flavors against the cluster's nodes, and turns quotas stated in topology units (`nominal_domains: {rack: 2}`) into GPUs for
    /// this cluster: the count times the smallest GPU capacity of a domain of that level, so
    /// the quota covers that many whole domains whichever ones they are. Errors name the
    /// queue: an unknown level, or more domains than the cluster has.
    pub fn resolve_topology(&mut self, topo: &trainyard_topology::Topology) -> Result<()> {
        for (i, q) in self.queues.iter_mut().enumerate() {
            if let Some(flavor) = &q.flavor
                && topo.flavor_id(flavor).is_none()
            {
                let known = if topo.flavors().is_empty() { "none".to_string() } else { topo.flavors().join(", ") };
                let message =
                    format!("queue `{}` is for flavor `{flavor}`, which no node has (flavors: {known})", q.name);
                return Err(InputError::invalid(&self.name, None, format!("queues[{i}].flavor"), message).into());
            }
            let Some((level, count)) = q.nominal_domains.clone() else { continue };
            let invalid = |message: String| {
                crate::Error::from(InputError::invalid(
                    &self.name,
                    None,
                    format!("queues[{i}].nominal_domains"),
                    message,
                ))
            };
            let depth = topo.level_depth(&level).map_err(|e| invalid(format!("queue `{}`: {e}", q.name)))?;
            let sizes: Vec<u64> = (0..topo.domain_count() as u32)
                .map(trainyard_topology::DomainId)
                .filter(|&d| topo.depth(d) == depth)
                .map(|d| topo.capacity(d).gpus)
                .collect();
            if count > sizes.len() as u64 {
                return Err(invalid(format!(
                    "queue `{}` asks for {count} {level} domains; the cluster has {}",
                    q.name,
                    sizes.len()
                )));
            }
            let smallest = sizes.iter().copied().min().unwrap_or(0);
            q.nominal.gpus = Some(count * smallest);
            q.nominal_domains = None;
        }
        Ok(())
    }

    /// A built-in policy by name: `fifo` (strict FIFO) or `easy-backfill`. Both have no
    /// declared queue (every queue is unlimited), no priority classes, and neither fair
    /// sharing nor preemption.
    pub fn builtin(name: &str) -> Option<PolicyConfig> {
        let backfill = match name {
            "fifo" => BackfillMode::None,
            "easy-backfill" => BackfillMode::Easy,
            _ => return None,
        };
        Some(PolicyConfig {
            name: name.to_string(),
            backfill,
            default_runtime_estimate_s: DEFAULT_RUNTIME_ESTIMATE_S,
            queues: Vec::new(),
            undeclared_queues: UndeclaredQueues::Unlimited,
            root_cohort: false,
            placement: PlacementPolicy::default(),
            priority_classes: Vec::new(),
            default_priority_class: None,
            fair_sharing: FairSharingConfig::default(),
            preemption: PreemptionConfig::default(),
            starvation: StarvationConfig::default(),
            admission_timeout: None,
            node_loss: NodeLossConfig::default(),
        })
    }

    /// Parses and checks a policy file; `source_name` prefixes every error.
    pub fn from_yaml(text: &str, source_name: &str) -> Result<PolicyConfig> {
        PolicyConfig::from_yaml_beside(text, source_name, &[])
    }

    /// [`PolicyConfig::from_yaml`] for a file whose queues may name as parent a queue declared
    /// elsewhere (`outside`: a controller's Queue objects); the merged tree is checked with
    /// [`PolicyConfig::with_queues`].
    pub fn from_yaml_beside(text: &str, source_name: &str, outside: &[String]) -> Result<PolicyConfig> {
        let file: PolicyFile = trainyard_topology::input_text::yaml(text, source_name)?;
        let report = Reporter { source_name };
        let default_runtime_estimate_s = match &file.default_runtime_estimate {
            None => DEFAULT_RUNTIME_ESTIMATE_S,
            Some(text) => options::positive_duration(text, "default_runtime_estimate", &report)?,
        };
        let queues = queues::check_queues(file.queues, outside, &report)?;
        let (priority_classes, default_priority_class) =
            options::check_priority_classes(file.priority_classes, file.default_priority_class, &report)?;
        let fair_sharing = options::check_fair_sharing(file.fair_sharing, &report)?;
        let preemption = options::check_preemption(file.preemption, &report)?;
        let starvation = options::check_starvation(file.starvation, &report)?;
        let admission_timeout = options::check_admission_timeout(file.admission_timeout, &report)?;
        let node_loss = node_loss::check_node_loss(file.node_loss, &report)?;
        let undeclared_queues = check_undeclared(file.undeclared_queues, &queues, &report)?;
        let name = file.name.unwrap_or_else(|| {
            std::path::Path::new(source_name)
                .file_stem()
                .map_or_else(|| source_name.to_string(), |s| s.to_string_lossy().into_owned())
        });
        Ok(PolicyConfig {
            name,
            backfill: file.backfill,
            default_runtime_estimate_s,
            queues,
            undeclared_queues,
            root_cohort: file.root_cohort,
            placement: file.placement,
            priority_classes,
            default_priority_class,
            fair_sharing,
            preemption,
            starvation,
            admission_timeout,
            node_loss,
        })
    }

    /// This policy with `queues` added (each replaces a queue of the same name), checked by the
    /// rules of the file's own queues; a catch-all queue must still be a declared leaf. An error
    /// names the queue by its position in the merged list ([`PolicyConfig::queues`]).
    pub fn with_queues(mut self, queues: Vec<QueueConfig>) -> std::result::Result<PolicyConfig, TreeError> {
        for q in queues {
            self.queues.retain(|e| e.name != q.name);
            self.queues.push(q);
        }
        check_tree(&self.queues)?;
        if let UndeclaredQueues::CatchAll(name) = &self.undeclared_queues {
            let leaf = self.queues.iter().any(|q| &q.name == name)
                && !self.queues.iter().any(|q| q.parent.as_deref() == Some(name.as_str()));
            if !leaf {
                let queue = self.queues.iter().position(|q| &q.name == name).unwrap_or(0);
                let message = format!("the catch-all queue `{name}` must be a declared leaf queue");
                let field = "undeclared_queues.catch_all".to_string();
                return Err(TreeError { queue, name: name.clone(), field, message });
            }
        }
        Ok(self)
    }

    /// The priority value of a class: `None` names the default class (the file's
    /// `default_priority_class`, else a class called [`DEFAULT_PRIORITY_CLASS`], else 0).
    /// An unknown class name gives `None`.
    pub fn priority_value(&self, class: Option<&str>) -> Option<i32> {
        let find = |name: &str| self.priority_classes.iter().find(|c| c.name == name).map(|c| c.value);
        match class {
            Some(name) => find(name),
            None => match &self.default_priority_class {
                Some(name) => find(name),
                None => Some(find(DEFAULT_PRIORITY_CLASS).unwrap_or(0)),
            },
        }
    }
}

impl fmt::Display for BackfillMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackfillMode::None => "none",
            BackfillMode::Easy => "easy",
        })
    }
}

/// Parses `90`, `90s`, `30m`, `4h`, `2d` (or a sum such as `1h30m`) into seconds.
pub fn parse_duration(text: &str) -> Option<u64> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if let Ok(s) = text.parse::<u64>() {
        return Some(s);
    }
    let mut total: u64 = 0;
    let mut digits = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return None,
        };
        let n: u64 = digits.parse().ok()?;
        total = total.checked_add(n.checked_mul(unit)?)?;
        digits.clear();
    }
    digits.is_empty().then_some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_the_usual_units() {
        assert_eq!(parse_duration("90"), Some(90));
        assert_eq!(parse_duration("30m"), Some(1800));
        assert_eq!(parse_duration("1h30m"), Some(5400));
        assert_eq!(parse_duration("2d"), Some(172_800));
        assert_eq!(parse_duration("4x"), None);
        assert_eq!(parse_duration("4h3"), None);
        assert_eq!(parse_duration(""), None);
    }

    #[test]
    fn a_full_policy_file_parses() {
        let p = PolicyConfig::from_yaml(
            "backfill: none\ndefault_runtime_estimate: 2h\nqueues:\n  - {name: a, nominal_gpus: 8}\nundeclared_queues: reject\nplacement: slurm-tree\n",
            "strict.yaml",
        )
        .unwrap();
        assert_eq!(p.name, "strict");
        assert_eq!(p.backfill, BackfillMode::None);
        assert_eq!(p.default_runtime_estimate_s, 7200);
        assert_eq!(p.queues, vec![QueueConfig::flat("a", 8)]);
        assert_eq!(p.undeclared_queues, UndeclaredQueues::Reject);
        assert_eq!(p.placement, PlacementPolicy::SlurmTree);
    }

    #[test]
    fn an_unknown_placement_policy_names_the_line() {
        let err = PolicyConfig::from_yaml("backfill: easy\nplacement: best\n", "p.yaml").unwrap_err().to_string();
        assert!(err.contains("p.yaml") && err.contains("line 2") && err.contains("best"), "{err}");
    }

    #[test]
    fn bad_fields_are_named_with_their_line() {
        let err = PolicyConfig::from_yaml(
            "queues:\n  - {name: a, nominal_gpus: 8}\n  - {name: a, nominal_gpus: 4}\n",
            "p.yaml",
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "p.yaml: line 3: field `queues[1].name`: queue `a` is declared twice");
        let err = PolicyConfig::from_yaml("default_runtime_estimate: soon\n", "p.yaml").unwrap_err();
        assert!(err.to_string().starts_with("p.yaml: line 1: field `default_runtime_estimate`"), "{err}");
        let err = PolicyConfig::from_yaml("backfill: sometimes\n", "p.yaml").unwrap_err();
        assert!(err.to_string().contains("line 1"), "{err}");
        let err = PolicyConfig::from_yaml("queues:\n  - {name: a, nominal_gpus: -3}\n", "p.yaml").unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
    }

    #[test]
    fn builtins_exist_for_every_listed_name() {
        for name in BUILTIN_POLICIES {
            assert_eq!(PolicyConfig::builtin(name).unwrap().name, name);
        }
        assert!(PolicyConfig::builtin("lottery").is_none());
    }
}
