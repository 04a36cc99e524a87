//! Errors of the policies crate: bad policy configuration and misuse of the engine.

/// Result with this crate's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Real failures. A gang that cannot run is not an error: see [`crate::PendingReason`]
/// and [`crate::Unschedulable`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The policy file is malformed.
    #[error(transparent)]
    Input(#[from] trainyard_topology::InputError),
    /// A gang id was submitted twice.
    #[error("gang {0} is already known to the engine")]
    DuplicateGang(crate::GangId),
    /// An operation named a gang the engine does not have.
    #[error("gang {0} is not known to the engine")]
    UnknownGang(crate::GangId),
    /// `finish` was called for a gang that is not running.
    #[error("gang {0} is not running")]
    NotRunning(crate::GangId),
    /// Time went backwards between calls.
    #[error("time went backwards: {now} is before the last cycle at {last}")]
    TimeWentBackwards {
        /// The time given.
        now: u64,
        /// The time of the previous call.
        last: u64,
    },
    /// A recorded placement handed to [`crate::Engine::adopt`] does not fit its gang.
    #[error("cannot adopt gang {id}: {message}")]
    BadRecord {
        /// The gang.
        id: crate::GangId,
        /// What does not match.
        message: String,
    },
    /// Gangs hold as many distinct host filters (tolerations, selectors, affinity) as the engine
    /// keeps apart; this one cannot be queued until some of them are gone.
    #[error("too many distinct host filters (65,535) are in use; gang {0} cannot be queued now")]
    TooManyHostFilters(crate::GangId),
    /// The cluster model refused a change: an accounting bug, surfaced instead of hidden.
    #[error(transparent)]
    Topology(#[from] trainyard_topology::Error),
}
