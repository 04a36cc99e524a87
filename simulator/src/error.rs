//! Errors of the simulator crate.

use trainyard_policies::GangId;

/// A replay that cannot go on. Jobs that cannot run are not errors: they are reported as
/// unschedulable in the outcome.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The engine refused an operation: a bug, surfaced instead of hidden.
    #[error("engine: {0}")]
    Engine(#[from] trainyard_policies::Error),
    /// The slowdown names a level the cluster does not have.
    #[error(transparent)]
    Slowdown(#[from] crate::slowdown::SlowdownError),
    /// The failure model lets no work progress.
    #[error("{0}")]
    Failures(String),
    /// Work remained past the replay's horizon.
    #[error(
        "the replay reached its horizon, {} of simulated time after the last submission, with {left} of {total} jobs not done; \
         a replay that needs longer takes --horizon (failures faster than work, or a queue that never drains, need another model)",
        crate::report::human_duration_long(*horizon_s)
    )]
    Horizon {
        /// The horizon, simulated seconds after the last submission.
        horizon_s: u64,
        /// The simulated time it ends at.
        at: u64,
        /// Jobs neither finished nor found unschedulable.
        left: u64,
        /// Jobs in the trace.
        total: u64,
    },
    /// Gangs were left waiting with nothing running and nothing left to arrive.
    #[error("{count} gangs are still pending with nothing running or arriving (first: gang {first}: {reason})")]
    Stuck {
        /// How many.
        count: usize,
        /// The first one in order.
        first: GangId,
        /// Its pending reason.
        reason: String,
    },
}
