//! The lifecycle steps of a TrainJob whose gang runs as a Slurm job: submit once admitted, follow
//! the job's state into conditions, cancel on delete, suspend, preemption or deadline.

use trainyard_bridges::slurm::GangState;
use trainyard_slurm::JobInfo;

use super::{Action, Planner};
use crate::controller::acting::admission_record::AdmissionRecord;
use crate::controller::deciding::conditions::{ADMITTED, COMPLETE, FAILED, QUEUED, Want};
use crate::controller::slurm::gang_job::{gang_id, slurm_gang};

/// Condition reason on a TrainJob whose Slurm job Slurm refused or can never start.
pub const SLURM_REJECTED: &str = "SlurmRejected";

impl Planner<'_, '_> {
    /// Whether this TrainJob's gang runs on Slurm: its admission was placed there (whatever its
    /// queue says now), or, before admission, its queue runs on Slurm.
    pub(super) fn on_slurm(&self, record: Option<&AdmissionRecord>) -> bool {
        match record {
            Some(r) => r.slurm,
            None => self.inp.intent.as_ref().is_ok_and(|i| i.slurm.is_some()),
        }
    }

    fn gang(&self, record: &AdmissionRecord) -> String {
        let uid = self.inp.job.metadata.uid.as_deref().unwrap_or_default();
        gang_id(self.namespace(), self.name(), uid, record)
    }

    fn slurm_job(&self, record: &AdmissionRecord) -> Option<&JobInfo> {
        self.inp.slurm?.job(&self.gang(record))
    }

    /// Cancels the Slurm job of the admission unless it is known to have ended. A job the
    /// snapshot does not show may have been submitted after the last look, so it is cancelled
    /// too: the bridge looks the gang up live and cancelling nothing is harmless.
    pub(super) fn cancel_slurm(&mut self, record: Option<&AdmissionRecord>) {
        let Some(record) = record else { return };
        if !self.on_slurm(Some(record)) {
            return;
        }
        if !self.slurm_job(record).is_some_and(|j| j.state.is_terminal()) {
            self.actions.push(Action::CancelSlurm { gang: self.gang(record) });
        }
    }

    /// An admitted Slurm gang: submitted once, then followed.
    pub(super) fn slurm_admitted(&mut self, record: &AdmissionRecord) {
        let Some(snapshot) = self.inp.slurm else {
            let message = "the queue runs on Slurm, but trainyard runs without --slurm";
            self.want(Want::new(ADMITTED, false, "SlurmNotConfigured", message), Some(true));
            return;
        };
        let gang = self.gang(record);
        self.want(Want::new(QUEUED, false, "Admitted", "admitted by trainyard"), None);
        if let Some(message) = snapshot.refused.get(&gang) {
            self.want(Want::new(FAILED, true, SLURM_REJECTED, format!("Slurm refused the job: {message}")), Some(true));
            return;
        }
        let unreachable = snapshot.unreachable.as_deref();
        let Some(job) = snapshot.job(&gang) else {
            if unreachable.is_none()
                && snapshot.jobs.is_some()
                && let Some(seen) = self.seen_job(record)
            {
                // Slurm forgets an ended job after MinJobAge; submitting again would rerun it.
                let message = format!(
                    "{seen} is no longer reported by Slurm and its end was not seen; it is not submitted again"
                );
                self.want(Want::new(FAILED, true, "SlurmJobLost", message), Some(true));
                return;
            }
            if let Some(error) = unreachable {
                let message = format!("admitted; waiting for Slurm to answer before submitting: {error}");
                self.want(Want::new(ADMITTED, true, "SlurmUnreachable", message), Some(true));
                return;
            }
            if snapshot.jobs.is_none() {
                let message = "admitted; waiting for the first answer from Slurm";
                self.want(Want::new(ADMITTED, true, "SlurmUnreachable", message), None);
                return;
            }
            return self.submit(record);
        };
        if job.never_starts(snapshot.nodes_in(&job.partition)) {
            self.actions.push(Action::CancelSlurm { gang });
            let message = format!("Slurm job {} can never start as submitted: {}", job.id, job.reason);
            self.want(Want::new(FAILED, true, SLURM_REJECTED, message), Some(true));
            return;
        }
        let id = job.id;
        let exit = job.exit_code.map(|c| format!(", exit code {c}")).unwrap_or_default();
        let reason =
            if job.reason.is_empty() || job.reason == "None" { String::new() } else { format!(": {}", job.reason) };
        let (type_, status, code, message) = match job.state {
            GangState::Completed => (COMPLETE, true, "Completed", format!("Slurm job {id} completed")),
            GangState::Failed => (FAILED, true, "SlurmJobFailed", format!("Slurm job {id} failed{exit}{reason}")),
            GangState::Timeout => (FAILED, true, "SlurmTimeLimit", format!("Slurm job {id} reached its time limit")),
            GangState::NodeFail => (FAILED, true, "SlurmNodeFail", format!("Slurm job {id} lost a node{reason}")),
            GangState::Cancelled => {
                (FAILED, true, "SlurmJobCancelled", format!("Slurm job {id} was cancelled outside trainyard{reason}"))
            }
            GangState::Pending => (ADMITTED, true, "SlurmPending", format!("Slurm job {id} is pending{reason}")),
            GangState::Running => (ADMITTED, true, "SlurmRunning", format!("Slurm job {id} runs on {}", job.nodes)),
            GangState::Requeued => (ADMITTED, true, "SlurmRequeued", format!("Slurm job {id} was requeued{reason}")),
        };
        if type_ != ADMITTED {
            self.want(Want::new(type_, status, code, message), Some(type_ == FAILED));
            return;
        }
        match unreachable {
            Some(error) => {
                let message = format!("{message} when last seen; Slurm does not answer now: {error}");
                self.want(Want::new(ADMITTED, true, "SlurmUnreachable", message), Some(true));
            }
            None => self.want(Want::new(ADMITTED, true, code, message), Some(false)),
        }
    }

    /// `Slurm job <id>` when the TrainJob's conditions say a look at Slurm has seen the job of
    /// this admission (a condition True since before it belongs to an earlier run).
    fn seen_job(&self, record: &AdmissionRecord) -> Option<String> {
        let admitted = self.conditions().iter().find(|c| c.type_ == ADMITTED && c.status == "True")?;
        if admitted.last_transition_time.0.as_second() < i64::try_from(record.at).unwrap_or(i64::MAX) {
            return None;
        }
        let rest = admitted.message.strip_prefix("Slurm job ")?;
        let id: String = rest.chars().take_while(char::is_ascii_digit).collect();
        (!id.is_empty()).then(|| format!("Slurm job {id}"))
    }

    fn submit(&mut self, record: &AdmissionRecord) {
        let (Some(runtime), Ok(intent)) = (self.inp.runtime, self.inp.intent.as_ref()) else {
            let message = "admitted on Slurm, but the TrainJob no longer names a runtime and a Slurm queue";
            self.want(Want::new(FAILED, true, "InvalidSpec", message), Some(true));
            return;
        };
        let Some(target) = &intent.slurm else {
            let message = "admitted on Slurm, but its queue no longer runs there; nothing was submitted";
            self.want(Want::new(FAILED, true, "SlurmQueueChanged", message), Some(true));
            return;
        };
        let job = match self.inp.job.to_bridge() {
            Ok(job) => job,
            Err(e) => {
                self.want(Want::new(FAILED, true, "InvalidSpec", e.to_string()), Some(true));
                return;
            }
        };
        match slurm_gang(&job, runtime, target, &intent.shape.largest_pod(), record) {
            Ok(gang) => {
                let message = format!("submitting {} nodes to Slurm ({})", gang.nodes, record.slots().join(","));
                self.actions.push(Action::SubmitSlurm(Box::new(gang)));
                self.want(Want::new(ADMITTED, true, "SlurmSubmitted", message), Some(false));
            }
            Err(problem) => {
                self.want(Want::new(FAILED, true, problem.reason, problem.describe()), Some(true));
            }
        }
    }
}
