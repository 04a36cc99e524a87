//! trainyard-policies: queues, quotas, ordering and backfill: the engine's decide step.
//!
//! ```text
//!  GangRequest ──submit──> pending (priority, submit time, arrival)
//!                               │ schedule(now): for each gang in order
//!                               ▼
//!              quota (queue nominal) ──> placement (trainyard-topology)
//!                 │ blocked                 │ fits        │ blocked
//!                 ▼                         ▼             ▼
//!        FIFO: block queue          respect reservation   FIFO: block all
//!        EASY: reserve / hold       then start (commit)   EASY: reserve first
//! ```
//! No I/O, no clock: the caller passes time in and acts on the returned [`Cycle`].

mod backfill;
mod config;
mod cycle;
mod decisions;
mod engine;
mod error;
mod estimates;
mod gangs;
mod lifecycle;
mod preemption;
mod quota;
mod state;

pub use config::{
    AdmissionTimeoutConfig, BUILTIN_POLICIES, BackfillMode, DEFAULT_BACKOFF_S, DEFAULT_MAX_BACKOFF_S,
    DEFAULT_NODE_LOSS_GRACE_S, DEFAULT_PRIORITY_CLASS, DEFAULT_RUNTIME_ESTIMATE_S, FairSharingConfig, NodeLossAction,
    NodeLossConfig, PolicyConfig, PreemptionConfig, PriorityClass, QueueConfig, QuotaAmounts, StarvationConfig,
    TreeError, UndeclaredQueues, check_tree, parse_duration,
};
pub use decisions::outcome::{Admission, Cycle, NodeLoss, Preemption, Replacement, Reservation, Submitted};
pub use decisions::reasons::{PendingReason, PendingStatus, Unschedulable};
pub use engine::Engine;
pub use error::{Error, Result};
pub use estimates::eta::{
    DEFAULT_ETA_COARSE_DIVISOR, DEFAULT_ETA_EXACT_HOST_CYCLES, DEFAULT_ETA_HORIZON_S, DEFAULT_ETA_MAX_CYCLES,
    ETA_WAITS_FOR_SHOWN, Eta, EtaAnswer, EtaLimits,
};
pub use estimates::explain::{Counterfactual, Explanation};
pub use estimates::runtime_history::{
    DEFAULT_HISTORY_MIN_SAMPLES, DEFAULT_HISTORY_WINDOW, QueueRuntimes, RuntimeHistory, RuntimeStatistic,
};
pub use gangs::request::{GangId, GangRequest};
pub use lifecycle::LifecycleRules;
pub use preemption::PreemptionRules;
pub use quota::{FairShare, FairSharing, QueueIdx, QuotaBlock, QuotaLimit, QuotaTree, RESOURCE_NAMES, Reclaim};
