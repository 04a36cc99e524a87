//! Manager mode: an admitted gang runs as a copy on the worker cluster its record places it in.
//!
//! The manager's record is the commit point, written before the copy: a manager that stops
//! between the two writes the copy on its next look. The manager's engine decides for the whole
//! fleet, node loss included (a worker out of reach is all its nodes lost), so a worker's own
//! trainyard waits on lost nodes (`node_loss: wait`) and never moves a copy: a copy whose record
//! the worker changed or dropped is queued again here.

use super::{Action, Planner};
use crate::controller::acting::admission_record::AdmissionRecord;
use crate::controller::deciding::conditions::{ADMITTED, NODES_READY, QUEUED, SUSPENDED, Want, is_true, reason_of};
use crate::controller::deciding::scheduling_loop::Decision;
use crate::controller::fleet::copies::{CopyView, copy_body, local_record};

/// What a manager reconcile sees of the worker the gang runs in: the one its record places it
/// in, or, for a decision that records a new placement (an admission, a move), the new one, so
/// that the copy is written in the same reconcile as the record.
#[derive(Clone, Debug, Default)]
pub struct FleetInputs<'a> {
    /// The worker cluster.
    pub cluster: String,
    /// The copy on that worker, when it shows one.
    pub copy: Option<&'a CopyView>,
    /// Whether the manager reaches that worker.
    pub reachable: bool,
    /// The runtime the TrainJob names, when that worker lacks it (`ClusterTrainingRuntime x`).
    pub runtime_missing: Option<String>,
}

/// The worker a reconcile of `job` acts on, given the loop's `decision` (see [`FleetInputs`]).
pub fn acting_on(job: &crate::api::TrainJob, decision: Option<&Decision>) -> Option<String> {
    let record = super::recorded(job);
    let next = match decision {
        Some(Decision::Move(moved)) if record.as_ref() != Some(moved) => Some(moved.clone()),
        Some(Decision::Admit(decided)) if record.is_none() => Some(decided.clone()),
        _ => record,
    };
    next.and_then(|r| local_record(&r)).map(|(cluster, _)| cluster)
}

impl<'a> Planner<'a, '_> {
    fn fleet(&self) -> Option<&FleetInputs<'_>> {
        self.inp.fleet.as_ref().filter(|_| self.manager())
    }

    /// What the reconcile sees of `cluster`, when it looked at that one.
    fn fleet_on(&self, cluster: &str) -> Option<&FleetInputs<'_>> {
        self.fleet().filter(|f| f.cluster == cluster)
    }

    /// The copy on `cluster`, when it is of this TrainJob (a copy of an earlier TrainJob of the
    /// name is not).
    fn own_copy(&self, cluster: &str) -> Option<&CopyView> {
        let uid = self.inp.job.metadata.uid.as_deref()?;
        self.fleet_on(cluster)?.copy.filter(|c| c.origin == uid && !c.deleting)
    }

    /// The record as the worker shows it: a copy of this placement that the worker queued again,
    /// or moved, is queued again here and placed anew (`None`: planning ends here). A copy of an
    /// earlier placement is replaced by [`Self::dispatched`].
    pub(super) fn fleet_record(&mut self, record: Option<AdmissionRecord>) -> Option<Option<AdmissionRecord>> {
        if !self.manager() {
            return Some(record);
        }
        let Some(mine) = record else { return Some(None) };
        let Some((cluster, _)) = local_record(&mine) else { return Some(Some(mine)) };
        let Some(copy) = self.own_copy(&cluster).cloned() else { return Some(Some(mine)) };
        let ended = copy.workload.completed.is_some() || copy.workload.failed.is_some();
        let earlier = copy.admitted_at != Some(mine.at);
        if earlier || ended || copy.workload.suspended || copy.record.as_ref() == Some(&mine) {
            return Some(Some(mine));
        }
        let message = match copy.record {
            None => format!("worker cluster {cluster} queued the gang again; it is placed anew"),
            Some(_) => format!(
                "worker cluster {cluster} moved the gang's pods (a worker's node_loss must be wait); it is placed anew"
            ),
        };
        self.requeued("RequeuedByWorker", &message, true);
        None
    }

    /// Deletes the copy on the worker the record places the gang in; a worker out of reach has
    /// it removed when it comes back (its sweep finds the copy no longer wanted).
    pub(super) fn withdraw(&mut self) {
        let placed = super::recorded(self.inp.job).and_then(|r| local_record(&r)).map(|(c, _)| c);
        if let Some(cluster) = placed
            && self.fleet_on(&cluster).is_some_and(|f| f.reachable && f.copy.is_some_and(|c| !c.deleting))
        {
            self.actions.push(Action::Withdraw { cluster });
        }
    }

    /// An admitted gang of the fleet: its copy written where the record places it, the worker's
    /// verdict (end, per-job counts) mirrored back by the caller's workload view.
    pub(super) fn dispatched(&mut self, record: &AdmissionRecord) {
        let Some((cluster, local)) = local_record(record) else {
            let message = "the admission record names nodes of no single worker cluster; the gang is placed anew";
            return self.requeued("InvalidRecord", message, true);
        };
        let reachable = self.fleet_on(&cluster).is_some_and(|f| f.reachable);
        if let Some(runtime) = self.fleet_on(&cluster).and_then(|f| f.runtime_missing.clone()) {
            let message = format!("{runtime} does not exist on worker cluster {cluster}; the gang waits for it there");
            self.want(Want::new(ADMITTED, false, "RuntimeNotFound", message), Some(true));
            self.want(Want::new(QUEUED, false, "RuntimeNotFound", "admitted, not yet dispatched"), None);
            return;
        }
        match self.own_copy(&cluster).map(|c| c.admitted_at == Some(record.at)) {
            Some(true) => {}
            // A copy of an earlier placement (its worker was away when it was withdrawn): it goes
            // first, and the next look writes this one.
            Some(false) if reachable => self.actions.push(Action::Withdraw { cluster: cluster.clone() }),
            None if reachable => {
                let body = copy_body(self.inp.job, &cluster, &local);
                self.actions.push(Action::Dispatch { cluster: cluster.clone(), copy: body });
            }
            _ => {}
        }
        let message = format!(
            "{} pods on {} nodes of worker cluster {cluster} (placement cost {})",
            record.pods(),
            record.nodes.len(),
            record.cost
        );
        self.want(Want::new(ADMITTED, true, "Admitted", message), None);
        self.want(Want::new(QUEUED, false, "Admitted", "admitted by trainyard"), None);
        match self.inp.decision {
            Some(Decision::Degraded { .. }) if !reachable => {
                let message = format!("worker cluster {cluster} cannot be reached; its gangs stay charged there");
                self.want(Want::new(NODES_READY, false, "WorkerClusterUnreachable", message), Some(true));
            }
            _ if reason_of(self.conditions(), NODES_READY).is_some() && !is_true(self.conditions(), NODES_READY) => {
                let message = format!("worker cluster {cluster} is reachable again");
                self.want(Want::new(NODES_READY, true, "WorkerClusterReachable", message), Some(false));
            }
            _ => {}
        }
        if is_true(self.conditions(), SUSPENDED) {
            self.want(Want::new(SUSPENDED, false, "Resumed", "TrainJob is resumed"), Some(false));
        }
    }
}
