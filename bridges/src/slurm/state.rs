//! Maps Slurm job states (squeue, sacct, slurmrestd) onto the lifecycle of a trainyard gang.

use serde::{Deserialize, Serialize};

/// Where a gang submitted to Slurm stands, as far as trainyard cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum GangState {
    /// Waiting for resources, held, or in a state this mapping does not know: nothing runs.
    Pending,
    /// Holds its nodes: starting, running, suspended or finishing.
    Running,
    /// Ended with exit code 0 in every task.
    Completed,
    /// Ended with an error of its own (non-zero exit, out of memory, launch failure).
    Failed,
    /// Stopped from outside: `scancel`, an administrator, or Slurm's preemption.
    Cancelled,
    /// Killed at its time limit or deadline.
    Timeout,
    /// Ended because a node failed (or failed to boot).
    NodeFail,
    /// Being put back in the queue by Slurm; it will run again without a new submission.
    Requeued,
}

impl GangState {
    /// Whether the gang has ended and Slurm will not run it again.
    pub fn is_terminal(self) -> bool {
        !matches!(self, GangState::Pending | GangState::Running | GangState::Requeued)
    }
}

/// Maps one state word (long or squeue's short form, upper case) to a gang state.
fn one_state(word: &str) -> Option<GangState> {
    use GangState::*;
    Some(match word {
        // Held for a deleted reservation: still queued, waiting for an administrator.
        "PENDING" | "PD" | "RESV_DEL_HOLD" | "RD" => Pending,
        // CONFIGURING: nodes are allocated and booting; the gang owns them already.
        // COMPLETING / STAGE_OUT: the command ended but nodes are still held and the final
        // state is not known yet. SUSPENDED / STOPPED keep the allocation and resume in place.
        // RESIZING and SIGNALING are transient flags of a running job.
        "RUNNING" | "R" | "CONFIGURING" | "CF" | "COMPLETING" | "CG" | "STAGE_OUT" | "SO" | "SUSPENDED" | "S"
        | "STOPPED" | "ST" | "RESIZING" | "RS" | "SIGNALING" | "SI" | "POWER_UP_NODE" => Running,
        "COMPLETED" | "CD" => Completed,
        // SPECIAL_EXIT: requeued held after a site-defined exit code; it needs a person, like a failure.
        "FAILED" | "F" | "OUT_OF_MEMORY" | "OOM" | "SPECIAL_EXIT" | "SE" | "LAUNCH_FAILED" | "RECONFIG_FAIL" => Failed,
        // PREEMPTED is terminal only with PreemptMode=CANCEL (a requeued preemptee shows REQUEUED,
        // then PENDING), so it is a stop from outside. REVOKED: a federation sibling ran instead.
        "CANCELLED" | "CA" | "PREEMPTED" | "PR" | "REVOKED" | "RV" => Cancelled,
        // DEADLINE: ended because it could not finish before its --deadline; a time limit too.
        "TIMEOUT" | "TO" | "DEADLINE" | "DL" => Timeout,
        "NODE_FAIL" | "NF" | "BOOT_FAIL" | "BF" => NodeFail,
        "REQUEUED" | "RQ" | "REQUEUE_FED" | "RF" | "REQUEUE_HOLD" | "RH" => Requeued,
        _ => return None,
    })
}

/// Maps a Slurm job state to a [`GangState`].
///
/// Accepts the long names (`RUNNING`), squeue's short codes (`R`, `CG`), any case, sacct's
/// decorations (`CANCELLED by 0`, a trailing `+` of a truncated column) and lists of a base
/// state plus flags (`PENDING,REQUEUED`, as newer slurmrestd versions return them). In a list, a
/// requeue flag wins (the job is on its way back into the queue); otherwise the first known word
/// decides. An unknown state maps to `Pending`: a state that is neither running nor terminal
/// for sure must not make the bridge resubmit or release the gang.
pub fn slurm_state(job_state: &str) -> GangState {
    let upper = job_state.trim().to_ascii_uppercase();
    let words: Vec<&str> = upper
        .split([',', '|', '[', ']', '"', ' ', '\t'])
        .map(|w| w.trim_end_matches('+'))
        .filter(|w| !w.is_empty())
        .collect();
    // "CANCELLED by 0": the words after the state are sacct's note on who cancelled it.
    let words = match words.iter().position(|&w| w == "BY") {
        Some(by) => &words[..by],
        None => &words[..],
    };
    let states: Vec<GangState> = words.iter().filter_map(|w| one_state(w)).collect();
    if states.contains(&GangState::Requeued) {
        return GangState::Requeued;
    }
    states.first().copied().unwrap_or(GangState::Pending)
}
