//! A cluster's live free capacity over its topology, with transactions for tentative work.
//!
//! Every allocation or release walks from the host to the root, so one change costs
//! O(depth). While a transaction is open, each change is journaled; rolling back replays
//! the journal backwards, so a gang that does not fully fit leaves no trace.

use crate::placement::{
    self, CostModel, Explanation, JointOptions, JointPlacement, JointRequest, Placement, PlacementFailure,
    PlacementPolicy, PlacementRequest, SearchPath,
};
use crate::{ClusterSpec, DomainId, Error, HostId, Resources, Result, Topology};

/// A mark in the journal; pass it back to [`Cluster::rollback`] or [`Cluster::commit`].
#[derive(Debug)]
#[must_use = "a transaction must be committed or rolled back"]
pub struct Txn {
    journal_len: usize,
}

#[derive(Clone, Copy, Debug)]
enum Change {
    Allocated(u32, Resources),
    Released(u32, Resources),
}

/// Topology plus free capacity per domain.
#[derive(Clone, Debug)]
pub struct Cluster {
    topo: Topology,
    free: Vec<Resources>,
    journal: Vec<Change>,
    open_txns: usize,
    scratch: placement::Scratch,
    policy: PlacementPolicy,
    model: CostModel,
}

impl Cluster {
    /// An empty cluster (everything free) over a topology.
    pub fn new(topo: Topology) -> Cluster {
        let free = topo.capacities().to_vec();
        let scratch = placement::Scratch::new(topo.domain_count(), topo.host_depth());
        Cluster {
            topo,
            free,
            journal: Vec::new(),
            open_txns: 0,
            scratch,
            policy: PlacementPolicy::default(),
            model: CostModel::default(),
        }
    }

    /// Chooses how [`Cluster::place`] maps gangs onto hosts.
    pub fn set_placement_policy(&mut self, policy: PlacementPolicy) {
        self.policy = policy;
    }

    /// The policy [`Cluster::place`] uses.
    pub fn placement_policy(&self) -> PlacementPolicy {
        self.policy
    }

    /// The cost model placements are judged by.
    pub fn cost_model(&self) -> &CostModel {
        &self.model
    }

    /// Free capacity of every domain, indexed by domain.
    pub fn free_all(&self) -> &[Resources] {
        &self.free
    }

    /// Parses, validates and builds a cluster from YAML.
    pub fn from_yaml(text: &str, source_name: &str) -> Result<Cluster> {
        let spec = ClusterSpec::from_yaml(text, source_name)?.resolve(source_name)?;
        Ok(Cluster::new(Topology::build(&spec)?))
    }

    /// The immutable tree.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// Free capacity of any domain.
    pub fn free(&self, d: DomainId) -> Resources {
        self.free[d.0 as usize]
    }

    /// Free capacity of one host.
    pub fn host_free(&self, host: HostId) -> Resources {
        self.free(self.topo.host_domain(host))
    }

    /// Free capacity of the whole cluster.
    pub fn total_free(&self) -> Resources {
        self.free[0]
    }

    /// Capacity of the whole cluster.
    pub fn total_capacity(&self) -> Resources {
        self.topo.capacity(DomainId::ROOT)
    }

    /// How many pods of this shape the free capacity holds, host by host, cluster wide.
    pub fn fit_count(&self, pod: &Resources) -> u64 {
        self.topo.hosts().fold(0u64, |acc, h| acc.saturating_add(self.host_free(h).fit_count(pod)))
    }

    /// Takes `amount` from a host and every domain above it.
    pub fn allocate(&mut self, host: HostId, amount: Resources) -> Result<()> {
        let d = self.topo.host_domain(host);
        let free = self.free[d.0 as usize];
        if !free.covers(&amount) {
            return Err(Error::Overcommit { host: self.topo.host_name(host).to_string(), free, asked: amount });
        }
        self.walk_up(d.0, |f| f.checked_sub(&amount).expect("ancestors hold at least what their hosts hold"));
        if self.open_txns > 0 {
            self.journal.push(Change::Allocated(d.0, amount));
        }
        Ok(())
    }

    /// Gives `amount` back to a host and every domain above it.
    pub fn release(&mut self, host: HostId, amount: Resources) -> Result<()> {
        let d = self.topo.host_domain(host);
        let capacity = self.topo.capacity(d);
        let after = self.free[d.0 as usize].checked_add(&amount);
        if !after.is_some_and(|a| capacity.covers(&a)) {
            return Err(Error::OverRelease { host: self.topo.host_name(host).to_string(), capacity, released: amount });
        }
        self.walk_up(d.0, |f| f.checked_add(&amount).expect("bounded by capacity"));
        if self.open_txns > 0 {
            self.journal.push(Change::Released(d.0, amount));
        }
        Ok(())
    }

    fn walk_up(&mut self, mut d: u32, f: impl Fn(Resources) -> Resources) {
        let parents = self.topo.parents();
        loop {
            self.free[d as usize] = f(self.free[d as usize]);
            let p = parents[d as usize];
            if p == u32::MAX {
                break;
            }
            d = p;
        }
    }

    /// Allocates every pod of a placement, all or nothing.
    pub fn allocate_placement(&mut self, placement: &Placement, pod: Resources) -> Result<()> {
        let txn = self.begin();
        for (host, count) in placement.per_host() {
            let amount = pod.checked_mul(u64::from(count)).unwrap_or(Resources { gpus: u64::MAX, ..Resources::ZERO });
            if let Err(e) = self.allocate(host, amount) {
                self.rollback(txn);
                return Err(e);
            }
        }
        self.commit(txn);
        Ok(())
    }

    /// Releases every pod of a placement, all or nothing.
    pub fn release_placement(&mut self, placement: &Placement, pod: Resources) -> Result<()> {
        let txn = self.begin();
        for (host, count) in placement.per_host() {
            let amount = pod.checked_mul(u64::from(count)).unwrap_or(Resources { gpus: u64::MAX, ..Resources::ZERO });
            if let Err(e) = self.release(host, amount) {
                self.rollback(txn);
                return Err(e);
            }
        }
        self.commit(txn);
        Ok(())
    }

    /// Opens a (possibly nested) transaction.
    pub fn begin(&mut self) -> Txn {
        self.open_txns += 1;
        Txn { journal_len: self.journal.len() }
    }

    /// Undoes every change since `txn` was opened.
    pub fn rollback(&mut self, txn: Txn) {
        while self.journal.len() > txn.journal_len {
            let change = self.journal.pop().expect("length checked");
            match change {
                Change::Allocated(d, r) => self.walk_up(d, |f| f.checked_add(&r).expect("undo of an allocation")),
                Change::Released(d, r) => self.walk_up(d, |f| f.checked_sub(&r).expect("undo of a release")),
            }
        }
        self.close(txn);
    }

    /// Keeps every change since `txn` was opened.
    pub fn commit(&mut self, txn: Txn) {
        self.close(txn);
    }

    fn close(&mut self, _txn: Txn) {
        self.open_txns = self.open_txns.checked_sub(1).expect("more transactions closed than opened");
        if self.open_txns == 0 {
            self.journal.clear();
        }
    }

    /// Finds where a gang would go now under the cluster's policy, without allocating anything.
    pub fn place(&mut self, request: &PlacementRequest) -> std::result::Result<Placement, PlacementFailure> {
        self.place_with(self.policy, request)
    }

    /// Finds where a gang would go now under `policy`, without allocating anything.
    pub fn place_with(
        &mut self,
        policy: PlacementPolicy,
        request: &PlacementRequest,
    ) -> std::result::Result<Placement, PlacementFailure> {
        placement::place(&self.topo, &self.free, request, policy, &self.model, &mut self.scratch)
    }

    /// Places a gang under `policy` without allocating, and explains the answer.
    pub fn explain(
        &mut self,
        policy: PlacementPolicy,
        request: &PlacementRequest,
    ) -> std::result::Result<Explanation, PlacementFailure> {
        placement::explain::explain(&self.topo, &self.free, request, policy, &self.model, &mut self.scratch)
    }

    /// Finds where a gang of several pod sets would go now (greedy, then the exact model),
    /// without allocating anything.
    pub fn place_joint(
        &mut self,
        request: &JointRequest,
        options: &JointOptions,
    ) -> std::result::Result<JointPlacement, PlacementFailure> {
        placement::joint::place(&self.topo, &self.free, request, &self.model, options, &mut self.scratch.greedy)
    }

    /// Finds where a gang would go on the empty cluster: `Err` means it can never run here.
    pub fn place_on_empty(&mut self, request: &PlacementRequest) -> std::result::Result<Placement, PlacementFailure> {
        let (topo, model) = (&self.topo, &self.model);
        placement::place(topo, topo.capacities(), request, PlacementPolicy::Greedy, model, &mut self.scratch)
    }

    /// The placement of pods already on `hosts` (one entry per pod), costed on the current free
    /// capacity: how a restarted scheduler takes back what it decided before. `None` for no pods.
    pub fn recorded_placement(&self, pod: Resources, hosts: Vec<HostId>) -> Option<Placement> {
        if hosts.is_empty() {
            return None;
        }
        Some(placement::greedy::finish(&self.topo, &self.free, pod, hosts, SearchPath::Recorded, &self.model))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Cluster {
        Cluster::from_yaml("name: t\nlevels: [rack, host]\ngenerate:\n  counts: [2, 2]\n  node: {gpus: 8}\n", "t")
            .unwrap()
    }

    #[test]
    fn allocation_updates_every_ancestor() {
        let mut c = small();
        c.allocate(HostId(3), Resources::gpus(5)).unwrap();
        assert_eq!(c.host_free(HostId(3)).gpus, 3);
        let rack = c.topology().parent(c.topology().host_domain(HostId(3))).unwrap();
        assert_eq!(c.free(rack).gpus, 11);
        assert_eq!(c.total_free().gpus, 27);
    }

    #[test]
    fn overcommit_and_over_release_are_errors() {
        let mut c = small();
        assert!(matches!(c.allocate(HostId(0), Resources::gpus(9)), Err(Error::Overcommit { .. })));
        assert!(matches!(c.release(HostId(0), Resources::gpus(1)), Err(Error::OverRelease { .. })));
        assert_eq!(c.total_free().gpus, 32);
    }

    #[test]
    fn rollback_restores_the_exact_state() {
        let mut c = small();
        c.allocate(HostId(1), Resources::gpus(2)).unwrap();
        let txn = c.begin();
        c.allocate(HostId(0), Resources::gpus(8)).unwrap();
        c.release(HostId(1), Resources::gpus(2)).unwrap();
        let inner = c.begin();
        c.allocate(HostId(2), Resources::gpus(1)).unwrap();
        c.commit(inner);
        c.rollback(txn);
        assert_eq!(c.host_free(HostId(0)).gpus, 8);
        assert_eq!(c.host_free(HostId(1)).gpus, 6);
        assert_eq!(c.host_free(HostId(2)).gpus, 8);
        assert_eq!(c.total_free().gpus, 30);
    }
}
