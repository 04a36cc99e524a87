//! Placements found, kept while the cluster state they were found on stands: a search
//! depends on nothing but the request and the cluster's state, and the cluster's version names
//! that state (every change moves it to a number no state had before; a what-if's rollback
//! takes it back). Gangs of one request that the walk reaches between two admissions (a
//! queue's quota hold or the reservation sends most of them back after placing them), and the
//! same requests in the next cycle when only arrivals happened meanwhile, then cost one
//! placement search, not one each.

use std::collections::HashMap;

use trainyard_topology::{Demand, Placement};

use crate::gangs::by_id::FastHash;

/// Placements found at one cluster version, by request. A placement is taken out to be used
/// and put back when it was not (the gang did not start): one that starts a gang moves the
/// cluster to another version, where it would never be read again, so it is never copied.
#[derive(Clone, Debug, Default)]
pub(crate) struct Placed {
    at: u64,
    found: HashMap<Demand, Placement, FastHash>,
}

impl Placed {
    /// Takes out the placement found for `demand` while the cluster was at version `at`, if any.
    pub(crate) fn take(&mut self, at: u64, demand: &Demand) -> Option<Placement> {
        if self.at != at {
            return None;
        }
        self.found.remove(demand)
    }

    /// Whether a placement for `demand` found at version `at` is kept.
    pub(crate) fn holds(&self, at: u64, demand: &Demand) -> bool {
        self.at == at && self.found.contains_key(demand)
    }

    /// Remembers the placement found for `demand` at version `at`; whatever was found at
    /// another version is forgotten.
    pub(crate) fn insert(&mut self, at: u64, demand: &Demand, placement: Placement) {
        if self.at != at {
            self.found.clear();
            self.at = at;
        }
        self.found.insert(demand.clone(), placement);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainyard_topology::{Cluster, GangShape, HostClass, Resources, TopologyRequest};

    #[test]
    fn a_placement_is_kept_only_while_the_capacity_stands() {
        let mut cluster = Cluster::from_yaml(
            "name: t\nlevels: [host]\ngenerate:\n  counts: [2]\n  node: {gpus: 8, cpus: 8, memory_gib: 8}\n",
            "t",
        )
        .expect("cluster");
        let shape = GangShape::single(1, Resources::gpus(2), TopologyRequest::Unconstrained);
        let demand = cluster.topology().demand(&shape, None, HostClass::default()).expect("demand");
        let placement = cluster.place_demand(&demand).expect("fits");
        let mut placed = Placed::default();
        placed.insert(cluster.version(), &demand, placement.clone());
        assert_eq!(placed.take(cluster.version(), &demand).as_ref(), Some(&placement));
        assert_eq!(placed.take(cluster.version(), &demand), None, "taken out to be used");
        placed.insert(cluster.version(), &demand, placement.clone());
        let before = cluster.version();
        let mut started = placement.clone();
        cluster.allocate_placement(&mut started).expect("fits");
        assert_eq!(placed.take(cluster.version(), &demand), None, "a gang started since");
        placed.insert(cluster.version(), &demand, placement);
        assert_eq!(placed.take(before, &demand), None, "what was found before is forgotten");
    }
}
