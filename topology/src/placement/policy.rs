//! The selectable placement policies and their names on the command line and in YAML.

use std::fmt;
use std::str::FromStr;

/// How a gang's pods are mapped onto hosts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlacementPolicy {
    /// Greedy search, then the exact tree search; the cheaper answer under the cost model wins.
    #[default]
    Trainyard,
    /// trainyard's greedy search alone: lowest level that fits, best fit within it.
    Greedy,
    /// Topology-blind: hosts in declaration order, as many pods on each as fit.
    FirstFit,
    /// Kueue's topology-aware BestFit (and LeastFreeCapacity for unconstrained requests).
    KueueBestFit,
    /// Slurm's topology/tree: the lowest switch that fits, then best fit over its leaf switches.
    SlurmTree,
}

impl PlacementPolicy {
    /// Every policy, trainyard's first.
    pub const ALL: [PlacementPolicy; 5] = [
        PlacementPolicy::Trainyard,
        PlacementPolicy::Greedy,
        PlacementPolicy::FirstFit,
        PlacementPolicy::KueueBestFit,
        PlacementPolicy::SlurmTree,
    ];

    /// The name used in YAML and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            PlacementPolicy::Trainyard => "trainyard",
            PlacementPolicy::Greedy => "greedy",
            PlacementPolicy::FirstFit => "first-fit",
            PlacementPolicy::KueueBestFit => "kueue-best-fit",
            PlacementPolicy::SlurmTree => "slurm-tree",
        }
    }
}

impl fmt::Display for PlacementPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The text named no placement policy; the message lists the known ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a placement policy; use one of trainyard, greedy, first-fit, kueue-best-fit, slurm-tree")]
pub struct ParsePlacementPolicyError(pub String);

impl FromStr for PlacementPolicy {
    type Err = ParsePlacementPolicyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PlacementPolicy::ALL
            .into_iter()
            .find(|p| p.name() == s.trim())
            .ok_or_else(|| ParsePlacementPolicyError(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_listed() {
        for p in PlacementPolicy::ALL {
            assert_eq!(p.name().parse::<PlacementPolicy>().unwrap(), p);
        }
        let err = "best".parse::<PlacementPolicy>().unwrap_err().to_string();
        assert!(err.contains("`best`") && err.contains("kueue-best-fit"), "{err}");
    }
}
