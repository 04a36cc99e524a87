//! What is known about placements at the cluster's current state: requests that never fit
//! the empty cluster (by cluster generation), failures found since free capacity last grew
//! (by free-capacity epoch, carried over ends that free no room for them), and placements
//! found and not yet used (by cluster version).

use std::sync::Arc;

use trainyard_topology::{Demand, Placement, PlacementFailure, PlacementPolicy};

use crate::state::State;

impl State {
    /// Whether a placement request cannot fit even the empty cluster as it stands (cached until
    /// the cluster's structure changes).
    pub(crate) fn never_fits(&mut self, request: &Demand) -> Option<trainyard_topology::PlacementFailure> {
        let generation = self.cluster.generation();
        if self.never_fits_generation != generation {
            self.never_fits.clear();
            self.never_fits_generation = generation;
        }
        let cluster = &mut self.cluster;
        if let Some(known) = self.never_fits.get(request) {
            return known.clone();
        }
        let answer = cluster.place_demand_on_empty(request).err();
        self.never_fits.insert(request.clone(), answer.clone());
        answer
    }

    /// Where a gang of `request` would go now: the placement kept from the cluster's state
    /// (taken out), or a new search. Hand it back with [`State::keep_placement`] unless a gang
    /// starts on it.
    pub(crate) fn take_placement(
        &mut self,
        request: &Demand,
    ) -> std::result::Result<trainyard_topology::Placement, PlacementFailure> {
        if let Some(found) = self.placed.take(self.cluster.version(), request) {
            // Tests check every answer taken from the memo against a new search.
            debug_assert_eq!(self.cluster.place_demand(request).as_ref(), Ok(&found), "a stale placement");
            return Ok(found);
        }
        self.cluster.place_demand(request)
    }

    /// Whether a gang of `request` would find a place now (a kept placement says so without a
    /// search; a new one is kept for the gang that will take it).
    pub(crate) fn probe_placement(&mut self, request: &Demand) -> std::result::Result<(), PlacementFailure> {
        if self.placed.holds(self.cluster.version(), request) {
            // Tests check every answer taken from the memo against a new search.
            debug_assert!(self.cluster.place_demand(request).is_ok(), "a stale placement");
            return Ok(());
        }
        let placement = self.cluster.place_demand(request)?;
        self.keep_placement(request, placement);
        Ok(())
    }

    /// Keeps a placement of `request` found at the cluster's state and not used, for the next
    /// gang of the request while that state stands.
    pub(crate) fn keep_placement(&mut self, request: &Demand, placement: trainyard_topology::Placement) {
        self.placed.insert(self.cluster.version(), request, placement);
    }

    /// The failure a search for `demand` met at today's free-capacity epoch: it stands, since
    /// capacity only shrank since (a search that finds no room finds none on less).
    pub(crate) fn failure_known_now(&self, demand: &Demand) -> Option<&Arc<trainyard_topology::PlacementFailure>> {
        self.failed_at.get(demand).filter(|(e, _)| *e == self.cluster.epoch()).map(|(_, f)| f)
    }

    /// A gang that held `released` ended, and free capacity grew from `before` to the
    /// cluster's epoch now: the placement failures known at `before` that it frees no room for
    /// stand at the new epoch too (see the module documentation).
    pub(crate) fn carry_failures(&mut self, before: u64, released: &Placement) {
        let now = self.cluster.epoch();
        if now == before || self.failed_at.is_empty() {
            return;
        }
        let complete = matches!(self.cluster.placement_policy(), PlacementPolicy::Trainyard | PlacementPolicy::Greedy);
        let cluster = &self.cluster;
        for (demand, (epoch, _)) in &mut self.failed_at {
            let Demand::Single(r) = demand else { continue };
            // Free resources bound what a host holds from above, whatever its GPU layout or
            // devices add: none means none.
            let no_room = || released.hosts.iter().all(|&h| cluster.host_free(h).fit_count(&r.pod) == 0);
            if *epoch == before && complete && r.constraint.slice.is_none() && no_room() {
                *epoch = now;
            }
        }
        #[cfg(debug_assertions)]
        {
            // Tests check every carried failure against a search.
            let carried: Vec<Demand> =
                self.failed_at.iter().filter(|(_, (e, _))| *e == now).map(|(d, _)| d.clone()).collect();
            for demand in carried {
                assert!(self.cluster.place_demand(&demand).is_err(), "a carried failure finds room");
            }
        }
    }
}
