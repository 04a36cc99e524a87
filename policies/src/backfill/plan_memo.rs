//! The last reservation plan, kept while nothing it was built from changed: the versions it
//! was built from, what its replay found, and the shapes refused room around it at exactly
//! that state.

use std::collections::HashSet;

use trainyard_topology::{Demand, HostId, Resources};

use crate::GangId;
use crate::gangs::by_id::FastHash;

/// The versions a reservation plan was built from (see `backfill::plan_reservation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PlanKey {
    pub(crate) holder: GangId,
    pub(crate) cluster: u64,
    pub(crate) running: u64,
    pub(crate) quotas: u64,
}

/// What a replay of expected ends found: the end at which the holder fits, its hosts, what
/// the reserved hosts keep free for others, and the quota its queue keeps (before `now`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) end: u64,
    pub(crate) hosts: Vec<(HostId, u32)>,
    pub(crate) slack: Vec<(HostId, Resources)>,
    pub(crate) slack_gpus: u64,
}

/// The last reservation plan and what it was built from.
#[derive(Clone, Debug)]
pub(crate) struct PlanMemo {
    pub(crate) key: PlanKey,
    pub(crate) found: Option<Found>,
    /// Shapes refused room around the plan at exactly this state (see
    /// `ReservationPlan::at_plan_state`): a search around it would refuse them again.
    pub(crate) refused: HashSet<Demand, FastHash>,
}

impl PlanMemo {
    /// A running gang expected to end at `end` stopped; `before` and `after` are the versions
    /// (cluster, running gangs, quotas) just before and after, `first` whether it was the first
    /// running gang by expected end. Whether the kept plan stands (its key then moves to
    /// `after`): it does when that stop is all that changed since it was made and the gang
    /// ended before the plan's end. The plan's replay released that gang first, and a new
    /// replay, starting where it stands now, makes the same later checks on the same states
    /// (releases add up the same in any order); only the check right after that first release
    /// is not made again, and it failed, as the plan found room only later.
    pub(crate) fn stands_after_stop(
        &mut self,
        before: (u64, u64, u64),
        after: (u64, u64, u64),
        first: bool,
        end: u64,
    ) -> bool {
        let key = &mut self.key;
        let stands = first
            && (key.cluster, key.running, key.quotas) == before
            && self.found.as_ref().is_none_or(|found| end < found.end);
        if stands {
            (key.cluster, key.running, key.quotas) = after;
            // Capacity came free: a shape refused before may find room now.
            self.refused.clear();
        }
        stands
    }
}
