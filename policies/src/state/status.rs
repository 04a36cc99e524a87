//! The reason a pending gang reads, and the gangs whose decision a caller has yet to hear of:
//! a reason counts as changed only when a caller would report it again.

use crate::cycle::blanket;
use crate::gangs::record::{GangRecord, GangState};
use crate::state::State;
use crate::{GangId, PendingReason, PendingStatus};

impl State {
    /// Why a pending gang is waiting; `None` if it is not pending.
    pub(crate) fn pending_status(&self, id: GangId) -> Option<PendingStatus> {
        let gang = self.gangs.get(&id)?;
        let GangState::Pending { status, cycle } = &gang.state else {
            return None;
        };
        if *cycle >= self.cycle {
            return Some(status.clone());
        }
        let blanket = self.blanket.as_ref().and_then(|b| blanket::status(b, &self.quotas, self.last_now, gang));
        Some(blanket.unwrap_or_else(|| status.clone()))
    }

    pub(crate) fn set_status(&mut self, id: GangId, reason: PendingReason, reserved_at: Option<u64>) {
        let cycle = self.cycle;
        let Some(g) = self.gangs.get_mut(&id) else { return };
        let status = PendingStatus { reason, reserved_at };
        // Only a change a caller would report again counts (not the amounts that move meanwhile).
        let before = match &g.state {
            GangState::Pending { status: s, cycle: c } if *c >= cycle.saturating_sub(1) => {
                Some(s.reason.steady_eq(&status.reason) && s.reserved_at.is_some() == status.reserved_at.is_some())
            }
            _ => None,
        };
        let old = std::mem::replace(&mut g.state, GangState::Pending { status, cycle });
        // A quota reason giving way to another is kept for the next time the same limit blocks.
        if let GangState::Pending { status: old, .. } = old
            && matches!(old.reason, PendingReason::Quota { .. })
            && !matches!(&g.state, GangState::Pending { status, .. } if matches!(status.reason, PendingReason::Quota { .. }))
        {
            g.quota_reason = Some(Box::new(old.reason));
        }
        if before != Some(true) {
            self.touch(id);
        }
    }

    /// Marks a pending gang as looked at in this cycle with its reason unchanged, when `same`
    /// says its reason (with no reservation) is the one it would be given now; the amounts in it
    /// stay those of when it was built. Building a reason allocates; most gangs keep theirs cycle
    /// after cycle.
    pub(crate) fn keep_status(&mut self, id: GangId, same: impl FnOnce(&GangRecord, &PendingReason) -> bool) -> bool {
        let cycle = self.cycle;
        let Some(g) = self.gangs.get_mut(&id) else { return false };
        let kept = match &g.state {
            GangState::Pending { status, .. } => status.reserved_at.is_none() && same(g, &status.reason),
            GangState::Running { .. } => false,
        };
        let GangState::Pending { cycle: seen, .. } = &mut g.state else { return false };
        if !kept {
            return false;
        }
        // Not looked at in the last cycle: a caller was shown another (blanket) reason since, so
        // it hears of this one again, though the reason itself is kept.
        let stale = *seen < cycle.saturating_sub(1);
        *seen = cycle;
        if stale {
            self.touch(id);
        }
        true
    }

    /// Records that what the caller should say about `id` may have changed.
    pub(crate) fn touch(&mut self, id: GangId) {
        if self.follows_changes {
            self.changed.insert(id);
        }
    }

    /// For a caller that never takes the changed gangs (a replay): they are not kept, so the set
    /// does not grow with every gang that ever came; [`State::take_changed`] then lists none.
    pub(crate) fn ignore_changes(&mut self) {
        self.follows_changes = false;
        self.changed.clear();
    }

    /// The gangs whose decision may have changed since the last call: submitted, started,
    /// stopped, or pending for another reason. Lets a caller follow the engine in O(changes).
    pub(crate) fn take_changed(&mut self) -> Vec<GangId> {
        if std::mem::take(&mut self.blanket_moved) && self.follows_changes {
            // Gangs the last cycle did not reach read the blanket reason, which moved since the
            // last call. A gang reached since then was touched when its reason was set or kept.
            let (gangs, changed, now) = (&self.gangs, &mut self.changed, self.cycle);
            for id in gangs.pending().ids() {
                if matches!(gangs[&id].state, GangState::Pending { cycle, .. } if cycle < now) {
                    changed.insert(id);
                }
            }
        }
        let mut ids: Vec<GangId> = std::mem::take(&mut self.changed).into_iter().collect();
        ids.sort_unstable();
        ids
    }
}
