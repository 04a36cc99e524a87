//! Errors of the policies crate: bad policy configuration and misuse of the engine.

/// Result with this crate's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Real failures. A gang that cannot run is not an error: see [`crate::PendingReason`]
/// and [`crate::Unschedulable`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The policy YAML did not parse; the message has line, column and a snippet.
    #[error("{source_name}: {message}")]
    Syntax {
        /// File the text came from.
        source_name: String,
        /// Parser message.
        message: String,
    },
    /// The policy parsed but a field makes no sense.
    #[error("{source_name}: {location}field `{field}`: {message}")]
    Invalid {
        /// File the text came from.
        source_name: String,
        /// `line N: ` when known.
        location: String,
        /// Path of the field, e.g. `queues[2].nominal_gpus`.
        field: String,
        /// What is wrong.
        message: String,
    },
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
    /// The cluster model refused a change: an accounting bug, surfaced instead of hidden.
    #[error(transparent)]
    Topology(#[from] trainyard_topology::Error),
}
