//! Pending gangs grouped by what they ask of the cluster. Gangs of one request fit or fail
//! together, so questions about the whole queue (which gangs can never run here, whether any
//! gang left in a cycle could still start) cost one look per kind of gang, not one per gang.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use trainyard_topology::Demand;

use crate::GangId;
use crate::gangs::by_id::FastHash;
use crate::gangs::record::OrderKey;
use crate::quota::QueueIdx;

/// The pending gangs of one request.
#[derive(Clone, Debug, Default)]
pub(crate) struct Group {
    /// The gangs by pending-order key: where the next one stands in the line.
    keys: BTreeMap<OrderKey, GangId>,
    /// Runtime estimates with how many gangs have each: the shortest says whether any of them
    /// could end before a reservation.
    estimates: BTreeMap<u64, u32>,
    /// Queues with how many of the gangs each has: whether any of them has quota left.
    queues: BTreeMap<QueueIdx, u32>,
}

impl Group {
    /// The shortest runtime estimate among the gangs.
    pub(crate) fn shortest(&self) -> u64 {
        self.estimates.keys().next().copied().unwrap_or(0)
    }

    /// The first of the gangs after `after` in the pending order.
    pub(crate) fn first_after(&self, after: OrderKey) -> Option<OrderKey> {
        self.keys.range((Bound::Excluded(after), Bound::Unbounded)).next().map(|(k, _)| *k)
    }

    /// How many queues the gangs wait in.
    pub(crate) fn queue_count(&self) -> usize {
        self.queues.len()
    }

    /// The queues the gangs wait in, in index order.
    pub(crate) fn queues(&self) -> impl Iterator<Item = QueueIdx> + '_ {
        self.queues.keys().copied()
    }
}

/// Adds one to a count, or takes one away and forgets a count of zero.
fn count<K: Ord>(counts: &mut BTreeMap<K, u32>, key: K, add: bool) {
    if add {
        *counts.entry(key).or_default() += 1;
    } else if let Some(n) = counts.get_mut(&key) {
        *n -= 1;
        if *n == 0 {
            counts.remove(&key);
        }
    }
}

/// Pending gangs by request (looked up by request only; never iterated into a decision
/// without sorting).
#[derive(Clone, Debug, Default)]
pub(crate) struct ByRequest {
    /// Every request waiting, and up to [`EMPTY_GROUPS`] that emptied: a request often
    /// empties and comes back (a gang of a kind starts as soon as it arrives), and an emptied
    /// group left in place takes its next gang without hashing and copying the request again,
    /// its maps keeping their nodes.
    groups: HashMap<Demand, Group, FastHash>,
    /// Groups in `groups` with no gang.
    empty: usize,
    /// Gangs filed so far: what a list of requests taken from here missed once it moves.
    additions: u64,
}

/// Emptied groups left in place at most.
const EMPTY_GROUPS: usize = 16;

impl ByRequest {
    pub(crate) fn insert(&mut self, demand: &Demand, key: OrderKey, id: GangId, estimate: u64, queue: QueueIdx) {
        self.additions += 1;
        // Most gangs join a request already waiting or emptied: look it up before cloning a key.
        let group = match self.groups.get_mut(demand) {
            Some(group) => {
                if group.keys.is_empty() {
                    self.empty -= 1;
                }
                group
            }
            None => self.groups.entry(demand.clone()).or_default(),
        };
        if group.keys.insert(key, id).is_none() {
            count(&mut group.estimates, estimate, true);
            count(&mut group.queues, queue, true);
        }
    }

    pub(crate) fn remove(&mut self, demand: &Demand, key: OrderKey, estimate: u64, queue: QueueIdx) {
        let Some(group) = self.groups.get_mut(demand) else { return };
        if group.keys.remove(&key).is_none() {
            return;
        }
        count(&mut group.estimates, estimate, false);
        count(&mut group.queues, queue, false);
        if group.keys.is_empty() {
            if self.empty < EMPTY_GROUPS {
                self.empty += 1;
            } else {
                self.groups.remove(demand);
            }
        }
    }

    pub(crate) fn clear(&mut self) {
        self.groups.clear();
        self.empty = 0;
        self.additions += 1;
    }

    /// Moves whenever a gang is filed (a request may have come, or a group gained a gang):
    /// while it stands, requests and their groups only lose gangs.
    pub(crate) fn additions(&self) -> u64 {
        self.additions
    }

    /// The distinct requests waiting, each with its gangs.
    pub(crate) fn requests(&self) -> impl Iterator<Item = (&Demand, &Group)> + '_ {
        self.groups.iter().filter(|(_, g)| !g.keys.is_empty())
    }

    /// The gangs of one request, if any waits.
    pub(crate) fn group(&self, demand: &Demand) -> Option<&Group> {
        self.groups.get(demand).filter(|g| !g.keys.is_empty())
    }

    /// The pending gangs of one request, in pending order.
    pub(crate) fn ids(&self, demand: &Demand) -> impl Iterator<Item = GangId> + '_ {
        self.groups.get(demand).into_iter().flat_map(|g| g.keys.values().copied())
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
    fn the_shortest_estimate_and_the_queues_follow_gangs_coming_and_going() {
        let (a, b) = (demand(1), demand(2));
        let mut by = ByRequest::default();
        let (q0, q1) = (QueueIdx(0), QueueIdx(1));
        let key = |n: u64| (std::cmp::Reverse(0), n, 0, n);
        by.insert(&a, key(1), GangId(1), 600, q0);
        by.insert(&a, key(2), GangId(2), 60, q1);
        by.insert(&a, key(3), GangId(3), 60, q1);
        by.insert(&b, key(4), GangId(4), 900, q0);
        let group = |by: &ByRequest, d: &Demand| {
            by.requests().find(|(x, _)| *x == d).map(|(_, g)| (g.shortest(), g.queues().collect::<Vec<_>>()))
        };
        assert_eq!(group(&by, &a), Some((60, vec![q0, q1])));
        let first_after = |by: &ByRequest, d: &Demand, n: u64| {
            by.requests().find(|(x, _)| *x == d).and_then(|(_, g)| g.first_after(key(n)))
        };
        assert_eq!(first_after(&by, &a, 1), Some(key(2)));
        assert_eq!(first_after(&by, &a, 3), None, "gang 3 is the last of its request");
        by.remove(&a, key(2), 60, q1);
        assert_eq!(group(&by, &a), Some((60, vec![q0, q1])), "another gang still has 60, in q1");
        assert_eq!(first_after(&by, &a, 1), Some(key(3)));
        by.remove(&a, key(3), 60, q1);
        assert_eq!(group(&by, &a), Some((600, vec![q0])));
        // Removing a gang that is not there changes nothing.
        by.remove(&a, key(9), 600, q0);
        assert_eq!(group(&by, &a), Some((600, vec![q0])));
        by.remove(&a, key(1), 600, q0);
        assert_eq!(by.requests().count(), 1, "an empty group is not listed");
        assert!(by.group(&a).is_none(), "nor found");
        by.insert(&a, key(5), GangId(5), 30, q1);
        assert_eq!(group(&by, &a), Some((30, vec![q1])), "an emptied group takes gangs again");
        assert_eq!(by.ids(&b).collect::<Vec<_>>(), vec![GangId(4)]);
    }
}
