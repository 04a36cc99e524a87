//! Errors of the topology crate: bad cluster descriptions and broken capacity accounting.

/// Result with this crate's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A configuration file (cluster, policy) that cannot be used, named by file, line and field.
/// Shared by every crate that reads YAML so that all of them report bad input alike.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// The YAML did not parse or did not match the schema; the message carries line and column.
    #[error("{source_name}: {message}")]
    Syntax {
        /// File (or other source) the text came from.
        source_name: String,
        /// The parser's message, with line, column and a snippet.
        message: String,
    },
    /// The YAML parsed but a field makes no sense.
    #[error("{source_name}: {}field `{field}`: {message}", line.map(|l| format!("line {l}: ")).unwrap_or_default())]
    Invalid {
        /// File (or other source) the text came from.
        source_name: String,
        /// Line of the field, when known.
        line: Option<u64>,
        /// Path of the offending field, e.g. `nodes[3].at.rack`.
        field: String,
        /// What is wrong with it.
        message: String,
    },
}

impl InputError {
    /// A parser error, prefixed with the source's name.
    pub fn syntax(source_name: &str, message: impl std::fmt::Display) -> InputError {
        InputError::Syntax { source_name: source_name.to_string(), message: message.to_string() }
    }

    /// A field whose value cannot be used.
    pub fn invalid(
        source_name: &str,
        line: Option<u64>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> InputError {
        InputError::Invalid { source_name: source_name.to_string(), line, field: field.into(), message: message.into() }
    }
}

/// Everything that can go wrong while building or mutating a cluster model.
/// "Does not fit" is not an error: placement returns a [`crate::PlacementFailure`] value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The cluster description is malformed.
    #[error(transparent)]
    Input(#[from] InputError),
    /// An allocation asked for more than a host has free: an accounting bug in the caller.
    #[error("host `{host}` has {free} free, cannot allocate {asked}")]
    Overcommit {
        /// Host name.
        host: String,
        /// What it has free.
        free: crate::Resources,
        /// What was asked.
        asked: crate::Resources,
    },
    /// A release would leave a host with more free than its capacity: a double release.
    #[error("host `{host}` would exceed its capacity {capacity} after releasing {released}")]
    OverRelease {
        /// Host name.
        host: String,
        /// Its capacity.
        capacity: crate::Resources,
        /// What was released.
        released: crate::Resources,
    },
    /// A pod that asks for a GPU layout found no group of its host with its GPUs free: an
    /// accounting bug in the caller (placement counts exactly what each host's groups hold).
    #[error("host `{host}`: no {within} has {gpus} free GPUs for a pod that asks for one")]
    GpuLayout {
        /// Host name.
        host: String,
        /// GPUs of the pod.
        gpus: u8,
        /// The group it asks for.
        within: crate::GpuLayout,
    },
    /// A gang's device claims cannot be resolved: the template is missing, or its claim names
    /// a missing DeviceClass, has a selector that does not compile or costs too much, or is
    /// malformed.
    #[error("ResourceClaimTemplate {template}: {message}")]
    DeviceClaim {
        /// The template (several joined by `+`).
        template: String,
        /// What is wrong, naming class, request and expression where one is at fault.
        message: String,
    },
    /// A pod's claims found no devices on the host placement chose for it; nothing was allocated.
    #[error("pod {pod} on node {node}: {reason}")]
    Devices {
        /// Index of the pod in the placement.
        pod: usize,
        /// Its node.
        node: String,
        /// Why, naming claim and request.
        reason: String,
    },
    /// A gang shape this cluster can never hold as written (a TPU shape no torus fits, pods that
    /// do not make whole slices).
    #[error(transparent)]
    Shape(#[from] crate::GangShapeError),
    /// A topology request names a level the cluster does not have.
    #[error("unknown topology level `{level}`; this cluster has levels {known}")]
    UnknownLevel {
        /// The level asked for.
        level: String,
        /// The cluster's levels, comma separated.
        known: String,
    },
}
