//! A gang shape resolved against this cluster's levels and tori: the demand the placement
//! searches take.

use std::sync::Arc;

use super::{SliceConstraint, Topology};
use crate::placement::{Demand, JointRequest, PlacementRequest, PodSet, TpuRequest, tpu};
use crate::{GangShape, GangShapeError, HostClass, Result, TopologyRequest};

impl Topology {
    /// The demand of `shape` on hosts of `flavor` (any when `None`) that `hosts` admits. A gang of
    /// one set is the single-set search's request (its slices included); several sets are
    /// placed jointly; a TPU set is slices on the tori. Level names the cluster lacks are an
    /// [`crate::Error::UnknownLevel`]; a TPU shape it can never hold an [`crate::Error::Shape`].
    pub fn demand(&self, shape: &GangShape, flavor: Option<u16>, hosts: HostClass) -> Result<Demand> {
        let gang = self.resolve(&shape.topology)?;
        if let [set] = shape.sets.as_slice() {
            // One set: its own constraint is the gang's, when the gang names none.
            let mut constraint = match (&shape.topology, &set.topology) {
                (TopologyRequest::Unconstrained, own) => self.resolve(own)?,
                _ => gang,
            };
            if let Some(slice) = &set.tpu {
                let named = |message: String| GangShapeError { set: Some(set.name.clone()), message };
                let per_slice = tpu::hosts_per_slice(self, slice).map_err(named)?;
                if set.pods % per_slice != 0 {
                    let message =
                        format!("{} pods do not make whole TPU slices of {slice} ({per_slice} hosts each)", set.pods);
                    return Err(named(message).into());
                }
                let (pods, pod, shape) = (set.pods, set.pod, slice.clone());
                let request = TpuRequest { pods, pod, shape, hosts_per_slice: per_slice, constraint, flavor, hosts };
                return Ok(Demand::Tpu(Arc::new(request)));
            }
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
