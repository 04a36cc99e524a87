//! One job of a trace, already shaped as a gang, and what became of it in a replay.

use serde::{Deserialize, Serialize};
use trainyard_topology::{GangShape, Resources};

use crate::trial::Trial;

/// A job read from a trace, in trainyard's terms. Times are whole seconds of
/// virtual time; `submit` is relative to the start of the trace (the earliest
/// submission in the file is at 0 for formats with absolute timestamps).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceJob {
    /// Stable identifier, unique within the trace (from the file, or derived from the row).
    pub id: String,
    /// Submission time in seconds since the start of the trace.
    pub submit: u64,
    /// How long the job actually ran once started, in seconds (at least 1).
    pub runtime: u64,
    /// What the user said the job would take, if the trace records it.
    pub runtime_estimate: Option<u64>,
    /// Tenant queue the job was submitted to.
    pub tenant: String,
    /// Higher runs first.
    pub priority: i32,
    /// The gang: pod count, pod shape and topology request.
    pub gang: GangShape,
    /// Line of the source file the job came from (1-based, header is line 1 for CSV).
    pub line: u64,
    /// The search the job is a trial of, if any. Absent from JSON written before searches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trial: Option<Trial>,
}

impl TraceJob {
    /// A job as public traces record it: one pod shape, no estimate, no priority and no
    /// topology request.
    pub fn recorded(
        id: String,
        submit: u64,
        runtime: u64,
        tenant: String,
        (pods, pod): (u32, Resources),
        line: u64,
    ) -> Self {
        TraceJob {
            id,
            submit,
            runtime,
            runtime_estimate: None,
            tenant,
            priority: 0,
            gang: GangShape::single(pods, pod, trainyard_topology::TopologyRequest::Unconstrained),
            line,
            trial: None,
        }
    }

    /// Total GPUs of the gang.
    pub fn gpus(&self) -> u64 {
        self.gang.total().gpus
    }

    /// Total resources of the gang.
    pub fn total(&self) -> Resources {
        self.gang.total()
    }
}

/// How a replay ended for one job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum Fate {
    /// Ran to completion.
    Finished {
        /// When it started, seconds of virtual time.
        start: u64,
        /// When it ended.
        end: u64,
        /// Whether it started by backfill, ahead of a gang holding a reservation.
        backfilled: bool,
        /// Level of the smallest domain that held all its pods (`cluster` for the whole
        /// cluster); it chose the job's slowdown factor. Empty in outcomes made elsewhere.
        #[serde(default)]
        span_level: String,
    },
    /// Could never run on this cluster under this policy.
    Unschedulable {
        /// Human-readable reason from the engine.
        reason: String,
    },
}

/// A job and its fate: the input of the metrics.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobOutcome {
    /// The job as read from the trace, except that a search's trial held back until a trial
    /// before it ended has the moment it was released as `submit`: the engine's queue, and so
    /// every wait measured from `submit`, begins then.
    pub job: TraceJob,
    /// What happened to it.
    pub fate: Fate,
}
