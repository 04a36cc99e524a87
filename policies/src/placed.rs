//! Placements a cycle found, kept while the free capacity they were found on stands. Within a
//! cycle the free capacity changes only when a gang starts (an admission) or a victim is
//! preempted (which frees capacity and moves the cluster's free-capacity epoch); every other
//! search (reservation plans, victim sets, room around a reservation) runs in a transaction
//! that is rolled back. Gangs of one request that the walk reaches between two admissions (a
//! queue's quota hold or the reservation sends most of them back after placing them) then cost
//! one placement search, not one each: the answer is the same, as a search depends on nothing
//! but the request and the free capacity.

use std::collections::HashMap;

use trainyard_topology::{Demand, Placement};

use crate::gang_map::FastHash;

/// What the free capacity is at: the cluster's free-capacity epoch and the gangs started so
/// far in the cycle. Both only grow within a cycle, and one of them moves at every change.
pub(crate) type Capacity = (u64, usize);

/// Placements found at one [`Capacity`], by request.
#[derive(Debug, Default)]
pub(crate) struct Placed {
    at: Capacity,
    found: HashMap<Demand, Placement, FastHash>,
}

impl Placed {
    /// The placement found for `demand` while the free capacity was at `at`, if any.
    pub(crate) fn get(&self, at: Capacity, demand: &Demand) -> Option<&Placement> {
        if self.at != at {
            return None;
        }
        self.found.get(demand)
    }

    /// Forgets every placement (keeping the map's room).
    pub(crate) fn clear(&mut self) {
        self.found.clear();
        self.at = Capacity::default();
    }

    /// Remembers the placement found for `demand` at `at`; whatever was found at another
    /// capacity is forgotten.
    pub(crate) fn insert(&mut self, at: Capacity, demand: &Demand, placement: &Placement) {
        if self.at != at {
            self.found.clear();
            self.at = at;
        }
        self.found.insert(demand.clone(), placement.clone());
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
        placed.insert((0, 0), &demand, &placement);
        assert_eq!(placed.get((0, 0), &demand), Some(&placement));
        assert_eq!(placed.get((0, 1), &demand), None, "a gang started since");
        assert_eq!(placed.get((1, 0), &demand), None, "capacity freed since");
        placed.insert((0, 1), &demand, &placement);
        assert_eq!(placed.get((0, 0), &demand), None, "what was found before is forgotten");
    }
}
