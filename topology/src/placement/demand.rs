//! What a whole gang asks of the cluster, whatever its shape: one pod set (the single-set search
//! of `greedy.rs` and `exact.rs`), several placed together (`joint.rs`), or TPU slices on the
//! cluster's tori (`tpu.rs`).

use std::sync::Arc;

use super::{JointRequest, PlacementRequest, TpuRequest};
use crate::{HostClass, LevelConstraint, Resources};

/// A gang's demand on the cluster. Cheap to clone and hashable, so that answers can be cached
/// per distinct demand.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Demand {
    /// Identical pods (possibly cut into slices).
    Single(PlacementRequest),
    /// Several pod sets, each with its own shape and constraint, inside one gang domain.
    Joint(Arc<JointRequest>),
    /// Whole TPU hosts in slices of a torus shape.
    Tpu(Arc<TpuRequest>),
}

impl Demand {
    /// Resources of the whole gang.
    pub fn total(&self) -> Resources {
        match self {
            Demand::Single(r) => r.total(),
            Demand::Joint(j) => j.total(),
            Demand::Tpu(t) => t.total(),
        }
    }

    /// Pods of the whole gang.
    pub fn pods(&self) -> u32 {
        match self {
            Demand::Single(r) => r.pods,
            Demand::Joint(j) => j.pods(),
            Demand::Tpu(t) => t.pods,
        }
    }

    /// The eligibility class its pods must pass.
    pub fn hosts(&self) -> HostClass {
        match self {
            Demand::Single(r) => r.hosts,
            Demand::Joint(j) => j.hosts,
            Demand::Tpu(t) => t.hosts,
        }
    }

    /// The GPU flavor its hosts must have, if any.
    pub fn flavor(&self) -> Option<u16> {
        match self {
            Demand::Single(r) => r.flavor,
            Demand::Joint(j) => j.flavor,
            Demand::Tpu(t) => t.flavor,
        }
    }

    /// Where the whole gang must (or would like to) stay.
    pub fn constraint(&self) -> LevelConstraint {
        match self {
            Demand::Single(r) => r.constraint,
            Demand::Joint(j) => j.constraint,
            Demand::Tpu(t) => t.constraint,
        }
    }

    /// The same demand restricted to a GPU flavor.
    pub fn with_flavor(&self, flavor: Option<u16>) -> Demand {
        match self {
            Demand::Single(r) => Demand::Single(PlacementRequest { flavor, ..*r }),
            Demand::Joint(j) => Demand::Joint(Arc::new(JointRequest { flavor, ..(**j).clone() })),
            Demand::Tpu(t) => Demand::Tpu(Arc::new(TpuRequest { flavor, ..(**t).clone() })),
        }
    }

    /// The same demand on the hosts of another eligibility class.
    pub fn with_hosts(self, hosts: HostClass) -> Demand {
        match self {
            Demand::Single(r) => Demand::Single(PlacementRequest { hosts, ..r }),
            Demand::Joint(j) if j.hosts == hosts => Demand::Joint(j),
            Demand::Joint(j) => Demand::Joint(Arc::new(JointRequest { hosts, ..(*j).clone() })),
            Demand::Tpu(t) if t.hosts == hosts => Demand::Tpu(t),
            Demand::Tpu(t) => Demand::Tpu(Arc::new(TpuRequest { hosts, ..(*t).clone() })),
        }
    }

    /// The pod shape every pod has, for a single-set demand.
    pub fn uniform_pod(&self) -> Option<Resources> {
        match self {
            Demand::Single(r) => Some(r.pod),
            Demand::Tpu(t) => Some(t.pod),
            Demand::Joint(_) => None,
        }
    }

    /// The single-set request of `pods` pods of set `k`'s shape only (`k` = 0 for a single set),
    /// without slices, for searches that place one pod shape at a time (a lost host's pods).
    /// `None` for TPU slices: a host of a slice cannot be swapped for one outside its box.
    pub fn set_request(&self, k: usize, pods: u32) -> Option<PlacementRequest> {
        match self {
            Demand::Single(r) => (k == 0).then_some(PlacementRequest {
                pods,
                constraint: LevelConstraint { slice: None, ..r.constraint },
                ..*r
            }),
            Demand::Joint(j) => {
                let s = j.sets.get(k)?;
                Some(PlacementRequest {
                    pods,
                    pod: s.pod,
                    constraint: LevelConstraint::UNCONSTRAINED,
                    flavor: j.flavor,
                    hosts: j.hosts,
                })
            }
            Demand::Tpu(_) => None,
        }
    }
}
