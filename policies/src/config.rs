//! The policy configuration: backfill mode, runtime estimates and tenant queues (YAML).
//!
//! ```yaml
//! backfill: easy                  # none (strict FIFO) | easy (EASY backfill)
//! default_runtime_estimate: 4h    # for gangs that state no estimate
//! queues:
//!   - {name: team-a, nominal_gpus: 64}
//!   - {name: team-b, nominal_gpus: 32}
//! undeclared_queues: unlimited    # unlimited | reject: gangs naming a queue not listed above
//! placement: trainyard            # trainyard | greedy | first-fit | kueue-best-fit | slurm-tree
//! ```

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;
use trainyard_topology::{InputError, PlacementPolicy};

use crate::{Error, Result};

/// Runtime estimate used when a gang gives none: four hours. Philly's median job runs
/// 19 minutes but its mean is five hours, so a short default would make EASY backfill
/// promise reservations it cannot keep; a long one would stop all backfilling.
pub const DEFAULT_RUNTIME_ESTIMATE_S: u64 = 4 * 3600;

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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UndeclaredQueues {
    /// Give them a queue without a quota.
    #[default]
    Unlimited,
    /// Report such gangs as unschedulable.
    Reject,
}

/// One tenant queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    /// Queue name, as gangs name it.
    pub name: String,
    /// GPUs the queue's running gangs may hold at once (no borrowing).
    pub nominal_gpus: u64,
}

/// The whole policy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PolicyConfig {
    /// Short name shown in reports.
    pub name: String,
    /// Backfill mode.
    pub backfill: BackfillMode,
    /// Seconds assumed for gangs without an estimate.
    pub default_runtime_estimate_s: u64,
    /// Declared queues, in file order.
    pub queues: Vec<QueueConfig>,
    /// Treatment of queues not declared.
    pub undeclared_queues: UndeclaredQueues,
    /// How gangs are mapped onto hosts.
    pub placement: PlacementPolicy,
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
    queues: Vec<Spanned<QueueConfig>>,
    #[serde(default)]
    undeclared_queues: UndeclaredQueues,
    #[serde(default)]
    placement: PlacementPolicy,
}

/// Names of the built-in policies, for help texts.
pub const BUILTIN_POLICIES: [&str; 2] = ["fifo", "easy-backfill"];

impl PolicyConfig {
    /// A built-in policy by name: `fifo` (strict FIFO) or `easy-backfill`.
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
            placement: PlacementPolicy::default(),
        })
    }

    /// Parses and checks a policy file; `source_name` prefixes every error.
    pub fn from_yaml(text: &str, source_name: &str) -> Result<PolicyConfig> {
        let file: PolicyFile = serde_saphyr::from_str(text).map_err(|e| InputError::syntax(source_name, e))?;
        let invalid = |line: u64, field: String, message: String| {
            Error::from(InputError::invalid(source_name, Some(line), field, message))
        };
        let default_runtime_estimate_s = match &file.default_runtime_estimate {
            None => DEFAULT_RUNTIME_ESTIMATE_S,
            Some(text) => match parse_duration(&text.value) {
                Some(s) if s > 0 => s,
                _ => {
                    return Err(invalid(
                        text.referenced.line(),
                        "default_runtime_estimate".into(),
                        format!("`{}` is not a positive duration such as 90s, 30m, 4h or 2d", text.value),
                    ));
                }
            },
        };
        let mut names = BTreeSet::new();
        for (i, q) in file.queues.iter().enumerate() {
            let line = q.referenced.line();
            if q.value.name.trim().is_empty() {
                return Err(invalid(line, format!("queues[{i}].name"), "must not be empty".into()));
            }
            if !names.insert(q.value.name.as_str()) {
                return Err(invalid(
                    line,
                    format!("queues[{i}].name"),
                    format!("queue `{}` is declared twice", q.value.name),
                ));
            }
        }
        let name = file.name.unwrap_or_else(|| {
            std::path::Path::new(source_name)
                .file_stem()
                .map_or_else(|| source_name.to_string(), |s| s.to_string_lossy().into_owned())
        });
        Ok(PolicyConfig {
            name,
            backfill: file.backfill,
            default_runtime_estimate_s,
            queues: file.queues.into_iter().map(|q| q.value).collect(),
            undeclared_queues: file.undeclared_queues,
            placement: file.placement,
        })
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
        assert_eq!(p.queues, vec![QueueConfig { name: "a".into(), nominal_gpus: 8 }]);
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
