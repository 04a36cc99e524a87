//! Placement searches over the cluster's free sums: every policy's answer for a gang, inside a
//! domain, on the empty cluster, or for pods already running; nothing is allocated here.

use super::Cluster;
use crate::placement::{
    self, Demand, Explanation, JointOptions, JointPlacement, JointRequest, PlacedSet, Placement, PlacementFailure,
    PlacementPolicy, PlacementRequest, SearchPath,
};
use crate::{DomainId, HostClass, HostId};

impl Cluster {
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
        self.scratch.fit(self.topo.domain_count(), self.topo.host_depth());
        if let Some(found) = self.place_one_pod(policy, request) {
            // Tests check every indexed answer against the full search.
            debug_assert_eq!(
                Ok(&found),
                placement::place(&self.topo, &self.free, request, policy, &self.model, &mut self.scratch).as_ref(),
                "the index of hosts by free GPUs disagrees with the search"
            );
            return self.stamp(request.hosts, Ok::<_, PlacementFailure>(found));
        }
        let free = self.classes.free(request.hosts, &self.free);
        let found = placement::place(&self.topo, free, request, policy, &self.model, &mut self.scratch);
        self.stamp(request.hosts, found)
    }

    /// A gang of one pod asking GPUs, of a class that sees every usable host, under greedy or
    /// trainyard's policy: the host greedy's count would choose, read off the index of hosts by
    /// free GPUs instead of walking every host with room. `None` when the search must run.
    fn place_one_pod(&self, policy: PlacementPolicy, request: &PlacementRequest) -> Option<Placement> {
        let simple = request.pods == 1 && request.constraint.slice.is_none() && request.flavor.is_none();
        if !simple || !matches!(policy, PlacementPolicy::Greedy | PlacementPolicy::Trainyard) {
            return None;
        }
        if self.classes.has_own_sums(request.hosts) {
            return None;
        }
        let domain = self.free_index.best_fit(&self.free, &request.pod)?;
        let host = self.topo.as_host(DomainId(domain))?;
        placement::one_pod_on(&self.topo, &self.free, request, host, policy, &self.model)
    }

    /// Marks a placement with the GPU layout of the class it was found for.
    fn stamp<F>(
        &self,
        class: HostClass,
        found: std::result::Result<Placement, F>,
    ) -> std::result::Result<Placement, F> {
        found.map(|mut p| {
            p.layout = self.classes.layout(class);
            p.device_fit = self.classes.device_fit(class);
            p
        })
    }

    /// Finds room for a gang inside the subtree of `domain` only (greedy), without allocating:
    /// how a running gang's lost host is replaced inside its domain.
    pub fn place_within(
        &mut self,
        request: &PlacementRequest,
        domain: DomainId,
    ) -> std::result::Result<Placement, PlacementFailure> {
        self.scratch.fit(self.topo.domain_count(), self.topo.host_depth());
        let free = self.classes.free(request.hosts, &self.free);
        let found =
            placement::greedy::place_under(&self.topo, free, request, domain, &self.model, &mut self.scratch.greedy);
        self.stamp(request.hosts, found)
    }

    /// Places a gang under `policy` without allocating, and explains the answer.
    pub fn explain(
        &mut self,
        policy: PlacementPolicy,
        request: &PlacementRequest,
    ) -> std::result::Result<Explanation, PlacementFailure> {
        self.scratch.fit(self.topo.domain_count(), self.topo.host_depth());
        let free = self.classes.free(request.hosts, &self.free);
        let mut explained =
            placement::explain::explain(&self.topo, free, request, policy, &self.model, &mut self.scratch)?;
        explained.placement = self.stamp(request.hosts, Ok::<_, PlacementFailure>(explained.placement))?;
        Ok(explained)
    }

    /// Finds where a gang of several pod sets would go now (greedy, then the exact model),
    /// without allocating anything.
    pub fn place_joint(
        &mut self,
        request: &JointRequest,
        options: &JointOptions,
    ) -> std::result::Result<JointPlacement, PlacementFailure> {
        self.scratch.fit(self.topo.domain_count(), self.topo.host_depth());
        placement::joint::place(&self.topo, &self.free, request, &self.model, options, &mut self.scratch.greedy)
    }

    /// Finds where a gang would go on the empty cluster (every host of its class, usable or not,
    /// with nothing running): `Err` means it can never run here as the cluster stands.
    pub fn place_on_empty(&mut self, request: &PlacementRequest) -> std::result::Result<Placement, PlacementFailure> {
        self.scratch.fit(self.topo.domain_count(), self.topo.host_depth());
        let capacity =
            self.classes.capacity(request.hosts, &self.topo, &self.hosts, self.generation, self.devices.as_deref_mut());
        let (topo, model) = (&self.topo, &self.model);
        placement::place(topo, capacity, request, PlacementPolicy::Greedy, model, &mut self.scratch)
    }

    /// The placement of pods already on `hosts` (one entry per pod, the pods of `sets` one after
    /// another), costed on the current free capacity: how a restarted scheduler takes back what it
    /// decided before. `None` for no pods, or when `hosts` does not match the sets' pod count.
    pub fn recorded_placement(&self, sets: &[PlacedSet], hosts: Vec<HostId>) -> Option<Placement> {
        let pods: usize = sets.iter().map(|s| s.pods as usize).sum();
        if hosts.is_empty() || hosts.len() != pods {
            return None;
        }
        let pod = sets.first()?.pod;
        let mut placement =
            placement::greedy::finish(&self.topo, &self.free, pod, hosts, SearchPath::Recorded, &self.model);
        if sets.len() > 1 {
            placement.sets = sets.to_vec();
            placement.cost = self.model.usage_cost(&self.topo, &self.free, &placement.per_host_usage());
        }
        Some(placement)
    }

    /// Finds where a gang would go now under the cluster's policy, without allocating anything.
    pub fn place_demand(&mut self, demand: &Demand) -> std::result::Result<Placement, PlacementFailure> {
        self.place_demand_with(self.policy, demand)
    }

    /// Finds where a gang would go now under `policy`, without allocating anything. A gang of
    /// several pod sets takes the joint greedy search, and under trainyard's policy the exact
    /// joint search after it; both depend on nothing but the cluster's state, so replays repeat.
    pub fn place_demand_with(
        &mut self,
        policy: PlacementPolicy,
        demand: &Demand,
    ) -> std::result::Result<Placement, PlacementFailure> {
        match demand {
            Demand::Single(r) => self.place_with(policy, r),
            Demand::Joint(j) if policy == PlacementPolicy::Trainyard => self.place_joint_exactly(j),
            Demand::Joint(j) => self.place_joint_under(j, DomainId::ROOT),
            Demand::Tpu(t) => {
                let free = self.classes.free(t.hosts, &self.free);
                placement::tpu::place(&self.topo, free, t, &self.model)
            }
        }
    }

    /// Finds room for a whole gang inside the subtree of `domain` only (greedy), without
    /// allocating: how a preemptor is fitted into the domain its victims free. TPU slices are
    /// searched on every torus; the caller checks the domain.
    pub fn place_demand_within(
        &mut self,
        demand: &Demand,
        domain: DomainId,
    ) -> std::result::Result<Placement, PlacementFailure> {
        match demand {
            Demand::Single(r) => self.place_within(r, domain),
            Demand::Joint(j) => self.place_joint_under(j, domain),
            Demand::Tpu(_) => self.place_demand_with(PlacementPolicy::Greedy, demand),
        }
    }

    /// The joint greedy answer, then the exact search where few hosts could take the gang.
    fn place_joint_exactly(&mut self, request: &JointRequest) -> std::result::Result<Placement, PlacementFailure> {
        self.scratch.fit(self.topo.domain_count(), self.topo.host_depth());
        let free = self.classes.free(request.hosts, &self.free);
        let found = placement::joint_exact::place(&self.topo, free, request, &self.model, &mut self.scratch.greedy)
            .map(|p| p.into_placement(request));
        self.stamp(request.hosts, found)
    }

    /// Finds where a gang would go on the empty cluster (every host of its class, usable or not,
    /// with nothing running): `Err` means it can never run here as the cluster stands.
    pub fn place_demand_on_empty(&mut self, demand: &Demand) -> std::result::Result<Placement, PlacementFailure> {
        match demand {
            Demand::Single(r) => self.place_on_empty(r),
            Demand::Joint(j) => {
                self.scratch.fit(self.topo.domain_count(), self.topo.host_depth());
                let capacity = self.classes.capacity(
                    j.hosts,
                    &self.topo,
                    &self.hosts,
                    self.generation,
                    self.devices.as_deref_mut(),
                );
                let (topo, model) = (&self.topo, &self.model);
                placement::joint::greedy_under(topo, capacity, j, DomainId::ROOT, model, &mut self.scratch.greedy)
                    .map(|p| p.into_placement(j))
            }
            Demand::Tpu(t) => {
                let capacity = self.classes.capacity(
                    t.hosts,
                    &self.topo,
                    &self.hosts,
                    self.generation,
                    self.devices.as_deref_mut(),
                );
                placement::tpu::place(&self.topo, capacity, t, &self.model)
            }
        }
    }

    /// The joint greedy search over the free capacity of the request's class, inside `root`.
    fn place_joint_under(
        &mut self,
        request: &JointRequest,
        root: DomainId,
    ) -> std::result::Result<Placement, PlacementFailure> {
        self.scratch.fit(self.topo.domain_count(), self.topo.host_depth());
        let free = self.classes.free(request.hosts, &self.free);
        let found =
            placement::joint::greedy_under(&self.topo, free, request, root, &self.model, &mut self.scratch.greedy)
                .map(|p| p.into_placement(request));
        self.stamp(request.hosts, found)
    }
}
