//! What a gang asks of the topology: how many pods of which shape, and how close together.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::Resources;

/// How tightly the pods of one gang must be packed, in terms of the
/// cluster's named levels (for example `block`, `rack`, `host`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TopologyRequest {
    /// Anywhere in the cluster; placement still prefers the lowest level that fits.
    #[default]
    Unconstrained,
    /// Prefer one domain of this level; spill to higher levels when none fits.
    Preferred(String),
    /// All pods inside one domain of this level, or the gang waits.
    Required(String),
}

impl TopologyRequest {
    /// The level named by the request, if any.
    pub fn level(&self) -> Option<&str> {
        match self {
            TopologyRequest::Unconstrained => None,
            TopologyRequest::Preferred(l) | TopologyRequest::Required(l) => Some(l),
        }
    }
}

impl fmt::Display for TopologyRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopologyRequest::Unconstrained => f.write_str("unconstrained"),
            TopologyRequest::Preferred(l) => write!(f, "preferred:{l}"),
            TopologyRequest::Required(l) => write!(f, "required:{l}"),
        }
    }
}

/// The text form did not parse; the message says what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a topology request; use `unconstrained`, `preferred:<level>` or `required:<level>`")]
pub struct ParseTopologyRequestError(pub String);

impl FromStr for TopologyRequest {
    type Err = ParseTopologyRequestError;

    /// Parses `unconstrained` (or an empty string), `preferred:<level>` and
    /// `required:<level>`, the form used in trace files and on the command line.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.is_empty() || s == "unconstrained" {
            return Ok(TopologyRequest::Unconstrained);
        }
        let bad = || ParseTopologyRequestError(s.to_string());
        let (kind, level) = s.split_once(':').ok_or_else(bad)?;
        let level = level.trim();
        if level.is_empty() {
            return Err(bad());
        }
        match kind.trim() {
            "preferred" => Ok(TopologyRequest::Preferred(level.to_string())),
            "required" => Ok(TopologyRequest::Required(level.to_string())),
            _ => Err(bad()),
        }
    }
}

/// A gang's demand on the cluster: `pods` identical pods of shape `pod`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GangShape {
    /// Number of pods; all or none of them run.
    pub pods: u32,
    /// What each pod needs.
    pub pod: Resources,
    /// How close together the pods must be.
    pub topology: TopologyRequest,
}

impl GangShape {
    /// Total resources of the whole gang (saturating: a gang this large can never fit anyway).
    pub fn total(&self) -> Resources {
        self.pod.checked_mul(u64::from(self.pods)).unwrap_or(Resources {
            gpus: u64::MAX,
            cpu_milli: u64::MAX,
            memory_mib: u64::MAX,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topology_request_round_trips_through_text() {
        for text in ["unconstrained", "preferred:rack", "required:host"] {
            let parsed: TopologyRequest = text.parse().unwrap();
            assert_eq!(parsed.to_string(), text);
        }
        assert_eq!("".parse::<TopologyRequest>().unwrap(), TopologyRequest::Unconstrained);
    }

    #[test]
    fn topology_request_rejects_unknown_kinds() {
        let err = "strict:rack".parse::<TopologyRequest>().unwrap_err();
        assert!(err.to_string().contains("strict:rack"));
        assert!("required:".parse::<TopologyRequest>().is_err());
    }
}
