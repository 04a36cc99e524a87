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
