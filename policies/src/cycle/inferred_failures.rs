//! What a what-if copy of the engine (`estimates/eta.rs`) may skip: it reads what the engine decides,
//! never why a gang waits, so a placement failure it can infer needs no search.
//!
//! A request of identical pods needs at least as much as another one of the same pods (same
//! eligibility class and flavor, neither sliced) asking no fewer pods within no wider a level:
//! each domain holds as many of the same pods either way, it must hold more of them, and it
//! must be a domain the other could use too. Where hosts hold pods by their free resources
//! alone (the class has no GPU layout and no device claims), a pod asking at least as much of
//! every resource counts too: no host holds more of it. The searches of trainyard's and
//! greedy's policy are complete (they find room whenever some allowed domain holds the gang),
//! so once the other request failed, this one fails too, for as long as the free capacity only
//! shrank (the cluster's free-capacity epoch stands). The engine then decides as after a
//! search; only the failure it reports (the smaller request's) differs, and nothing in a
//! what-if reads it. Searches were most of an EASY cycle, and most failures of a cycle follow
//! from another one.
//!
//! A failure also outlives an end that frees no room for it: when every host the ending gang
//! held holds no pod of the request afterwards, no host holds more of its pods than when it
//! failed (the others only lost capacity since, the free-capacity epoch says), so it still
//! fails. A what-if copy carries such failures to the new epoch (`carry_failures`); the next
//! cycle reads them as known, passing over the request's gangs without a search. Most ends of a
//! forward run free part of a host, where a gang of whole hosts fits no better than before.
//!
//! Refusals around a reservation follow the same way: a request that needs at least as much as
//! one refused room around the reservation in this cycle finds none either, as
//! free capacity and the reserved hosts' slack only shrink within a cycle once the reservation
//! stands. Its gangs running past the reservation are refused without a search: they do not
//! start, as after the searches (a normal one, then one around the reservation) that would
//! have failed or refused them; only the reason may differ (a refusal for a failure).

use std::sync::Arc;

use trainyard_topology::{Demand, PlacementFailure, PlacementPolicy, PlacementRequest};

use crate::backfill::ReservationPlan;
use crate::state::State;

/// Whether a request of identical pods `needy` needs at least as much as `other` (see the
/// module documentation); `plain` says the class's hosts hold pods by their resources alone.
fn needs_more(needy: &PlacementRequest, other: &PlacementRequest, plain: bool) -> bool {
    (other.pod == needy.pod || (plain && needy.pod.covers(&other.pod)))
        && other.hosts == needy.hosts
        && other.flavor == needy.flavor
        && other.constraint.slice.is_none()
        && other.pods <= needy.pods
        && other.constraint.top_depth <= needy.constraint.top_depth
}

/// Placement failures a walk found by search, with the free-capacity epoch of each.
#[derive(Debug, Default)]
pub(crate) struct Searched {
    failures: Vec<(u64, PlacementRequest, Arc<PlacementFailure>)>,
}

/// Keeps a failure a search of `request` met, when this engine infers failures (see the
/// module documentation).
pub(crate) fn note_failure(s: &State, searched: &mut Searched, request: &Demand, failure: &Arc<PlacementFailure>) {
    if let (true, Demand::Single(r)) = (s.decisions_only, request) {
        searched.failures.push((s.cluster.epoch(), *r, Arc::clone(failure)));
    }
}

/// A failure of `request` that follows from one found by search in this walk at today's
/// free-capacity epoch; `None` when none does or this engine does not infer failures.
pub(crate) fn inferred_failure(s: &State, searched: &Searched, request: &Demand) -> Option<Arc<PlacementFailure>> {
    let r = inferable(s, request)?;
    let (epoch, plain) = (s.cluster.epoch(), plain(s, r));
    let (_, _, failure) = searched.failures.iter().find(|(e, other, _)| *e == epoch && needs_more(r, other, plain))?;
    Some(Arc::clone(failure))
}

/// Whether a gang of `request` expected to end at `end` is refused around the walk's
/// reservation because another request it needs more than was (see the module
/// documentation); `false` when that does not follow or this engine does not infer.
pub(crate) fn inferred_refusal(s: &State, reservation: Option<&ReservationPlan>, request: &Demand, end: u64) -> bool {
    let (Some(r), Some(res)) = (inferable(s, request), reservation) else { return false };
    let plain = plain(s, r);
    end > res.at && res.refused.iter().any(|d| matches!(d, Demand::Single(other) if needs_more(r, other, plain)))
}

/// Whether the hosts of the request's class hold pods by their free resources alone (no
/// GPU layout inside the host, no device claims), so that a larger pod fits wherever a
/// smaller one does not fail to.
fn plain(s: &State, r: &PlacementRequest) -> bool {
    s.cluster.class_layout(r.hosts).is_none() && s.cluster.class_device_fit(r.hosts).is_none()
}

/// The request, when this engine infers and its answers follow from others' (one set of
/// identical pods, not sliced, under a policy whose searches are complete).
fn inferable<'a>(s: &State, request: &'a Demand) -> Option<&'a PlacementRequest> {
    if !s.decisions_only {
        return None;
    }
    let Demand::Single(r) = request else { return None };
    let complete = matches!(s.cluster.placement_policy(), PlacementPolicy::Trainyard | PlacementPolicy::Greedy);
    (complete && r.constraint.slice.is_none()).then_some(r)
}
