//! The cluster's own binder in a plan: which one holds the gang, and its PodGroup going when the
//! gang stops (Trainer leaves a Volcano or coscheduling group behind a finished TrainJob until the
//! TrainJob is deleted; a group with no pods would hold the binder's queue for nothing).

use super::{Action, Planner};
use crate::controller::acting::binders::{Binder, binder_of};

impl Planner<'_, '_> {
    /// The binder of the gang: its runtime's `podGroupPolicy`, else the cluster's. Standalone
    /// mode only: in companion mode Trainer makes the group.
    pub(super) fn binder(&self) -> Option<Binder> {
        if !self.standalone() {
            return None;
        }
        let runtime = self.inp.runtime?;
        binder_of(&runtime.spec, runtime.metadata.name.as_deref().unwrap_or_default(), self.inp.default_binder)
    }

    /// Deletes the binder's PodGroup of the gang, if it has a binder (a group already gone is
    /// done).
    pub(super) fn delete_binder_group(&mut self) {
        if let Some(binder) = self.binder() {
            self.actions.push(Action::Delete(binder.group_ref(self.namespace(), self.name())));
        }
    }
}
