//! A gang as the engine sees it: identity, queue, priority, shape and runtime estimate.

use std::fmt;

use serde::{Deserialize, Serialize};
use trainyard_topology::GangShape;
use trainyard_topology::eligibility::HostFilter;

/// Caller-chosen identifier of a gang, unique for the engine's lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GangId(pub u64);

impl fmt::Display for GangId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// A request to run `shape` as one all-or-nothing unit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GangRequest {
    /// Identifier.
    pub id: GangId,
    /// Tenant queue it is charged to.
    pub queue: String,
    /// Higher goes first.
    pub priority: i32,
    /// Submission time, seconds.
    pub submit: u64,
    /// Pods, pod shape and topology request.
    pub shape: GangShape,
    /// How long the submitter says it will run, seconds; the policy default applies when absent.
    pub runtime_estimate: Option<u64>,
    /// The hosts its pods may use (tolerations, node selector, required affinity); the default
    /// takes every host without a taint.
    #[serde(default)]
    pub hosts: HostFilter,
    /// Breaks ties between gangs of equal priority submitted in the same second, before the
    /// order of submission to the engine (a controller's first-seen order, kept across restarts).
    #[serde(default)]
    pub order: u64,
}
