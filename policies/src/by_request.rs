//! Pending gangs grouped by what they ask of the cluster. Gangs of one request fit or fail
//! together, so questions about the whole queue (which gangs can never run here, whether any
//! gang left in a cycle could still start) cost one look per kind of gang, not one per gang.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use trainyard_topology::Demand;

use crate::GangId;
use crate::gang_map::FastHash;

/// The pending gangs of one request.
#[derive(Clone, Debug, Default)]
struct Group {
    ids: BTreeSet<GangId>,
    /// Runtime estimates with how many gangs have each: the shortest says whether any of them
    /// could end before a reservation.
    estimates: BTreeMap<u64, u32>,
}

/// Pending gangs by request (looked up by request only; never iterated into a decision
/// without sorting).
#[derive(Clone, Debug, Default)]
pub(crate) struct ByRequest {
    groups: HashMap<Demand, Group, FastHash>,
}

impl ByRequest {
    pub(crate) fn insert(&mut self, demand: &Demand, id: GangId, estimate: u64) {
        let group = self.groups.entry(demand.clone()).or_default();
        if group.ids.insert(id) {
            *group.estimates.entry(estimate).or_default() += 1;
        }
    }

    pub(crate) fn remove(&mut self, demand: &Demand, id: GangId, estimate: u64) {
        let Some(group) = self.groups.get_mut(demand) else { return };
        if !group.ids.remove(&id) {
            return;
        }
        if let Some(n) = group.estimates.get_mut(&estimate) {
            *n -= 1;
            if *n == 0 {
                group.estimates.remove(&estimate);
            }
        }
        if group.ids.is_empty() {
            self.groups.remove(demand);
        }
    }

    pub(crate) fn clear(&mut self) {
        self.groups.clear();
    }

    /// The distinct requests waiting, each with the shortest runtime estimate among its gangs.
    pub(crate) fn requests(&self) -> impl Iterator<Item = (&Demand, u64)> + '_ {
        self.groups.iter().map(|(d, g)| (d, g.estimates.keys().next().copied().unwrap_or(0)))
    }

    /// The pending gangs of one request, by id.
    pub(crate) fn ids(&self, demand: &Demand) -> impl Iterator<Item = GangId> + '_ {
        self.groups.get(demand).into_iter().flat_map(|g| g.ids.iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainyard_topology::{Cluster, GangShape, HostClass, Resources, TopologyRequest};

    fn demand(gpus: u64) -> Demand {
        let cluster = Cluster::from_yaml(
            "name: t\nlevels: [host]\ngenerate:\n  counts: [2]\n  node: {gpus: 8, cpus: 8, memory_gib: 8}\n",
            "t",
        )
        .expect("cluster");
        let shape = GangShape::single(1, Resources::gpus(gpus), TopologyRequest::Unconstrained);
        cluster.topology().demand(&shape, None, HostClass::default()).expect("demand")
    }

    #[test]
    fn the_shortest_estimate_follows_gangs_coming_and_going() {
        let (a, b) = (demand(1), demand(2));
        let mut by = ByRequest::default();
        by.insert(&a, GangId(1), 600);
        by.insert(&a, GangId(2), 60);
        by.insert(&a, GangId(3), 60);
        by.insert(&b, GangId(4), 900);
        let shortest = |by: &ByRequest, d: &Demand| by.requests().find(|(x, _)| *x == d).map(|(_, s)| s);
        assert_eq!(shortest(&by, &a), Some(60));
        by.remove(&a, GangId(2), 60);
        assert_eq!(shortest(&by, &a), Some(60), "another gang still has 60");
        by.remove(&a, GangId(3), 60);
        assert_eq!(shortest(&by, &a), Some(600));
        // Removing a gang that is not there changes nothing.
        by.remove(&a, GangId(9), 600);
        assert_eq!(shortest(&by, &a), Some(600));
        by.remove(&a, GangId(1), 600);
        assert_eq!(by.requests().count(), 1, "an empty group is dropped");
        assert_eq!(by.ids(&b).collect::<Vec<_>>(), vec![GangId(4)]);
    }
}
