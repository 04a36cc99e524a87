//! A gang shape resolved against this cluster's levels: the demand the placement searches take.

use std::sync::Arc;

use super::{SliceConstraint, Topology};
use crate::placement::{Demand, JointRequest, PlacementRequest, PodSet};
use crate::{GangShape, HostClass, Result, TopologyRequest};

impl Topology {
    /// The demand of `shape` on hosts of `flavor` (any when `None`) that `hosts` admits. A gang of
    /// one set is the single-set search's request (its slices included); several sets are
    /// placed jointly. Level names the cluster lacks are an [`crate::Error::UnknownLevel`].
    pub fn demand(&self, shape: &GangShape, flavor: Option<u16>, hosts: HostClass) -> Result<Demand> {
        let gang = self.resolve(&shape.topology)?;
        if let [set] = shape.sets.as_slice() {
            // One set: its own constraint is the gang's, when the gang names none.
            let mut constraint = match (&shape.topology, &set.topology) {
                (TopologyRequest::Unconstrained, own) => self.resolve(own)?,
                _ => gang,
            };
            constraint.slice = self.slice(set.slice.as_ref())?;
            return Ok(Demand::Single(PlacementRequest { pods: set.pods, pod: set.pod, constraint, flavor, hosts }));
        }
        let sets = shape
            .sets
            .iter()
            .map(|s| {
                let within = match &s.topology {
                    TopologyRequest::Required(level) => Some(self.level_depth(level)?),
                    _ => None,
                };
                Ok(PodSet {
                    name: s.name.clone(),
                    pods: s.pods,
                    pod: s.pod,
                    within,
                    slice: self.slice(s.slice.as_ref())?,
                })
            })
            .collect::<Result<Vec<PodSet>>>()?;
        Ok(Demand::Joint(Arc::new(JointRequest { sets, constraint: gang, flavor, hosts })))
    }

    fn slice(&self, slice: Option<&crate::SliceRequest>) -> Result<Option<SliceConstraint>> {
        slice.map(|s| Ok(SliceConstraint { depth: self.level_depth(&s.level)?, size: s.size })).transpose()
    }
}
