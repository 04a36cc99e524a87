//! trainyard-simulator: replays cluster traces through the trainyard engine on a virtual clock.
//!
//! ```text
//!  trace file ──trace::read_trace──> Vec<TraceJob> ──replay──> engine (trainyard-policies)
//!                                                     │ arrivals, completions, one cycle per instant
//!                                                     ▼
//!                                     Vec<JobOutcome> ──metrics──> Report (table, JSON)
//! ```
//! Runtimes grow with how widely a gang is spread ([`slowdown`]); after every cycle the
//! replay measures the free GPUs the smallest waiting gang cannot use ([`fragmentation`]).
//! With several tenants the report adds their fairness ([`fairness`]) and, when queues have
//! quotas, what each used and borrowed over time ([`quota_usage`]); [`tenants`] turns
//! published per-VC quotas into policy files.
//! [`eta_accuracy`] holds start-time estimates ([`trainyard_policies::Engine::eta`]) asked
//! during a replay against the starts the replay gave.
//! Trials of a hyperparameter search enter no faster than their search lets them
//! ([`searches`]).
//! The engine is the same one the controller runs; only the clock and the events differ.

pub mod compare;
pub mod device_locality;
mod error;
pub mod eta_accuracy;
pub mod failures;
pub mod fairness;
pub mod fleet;
pub mod fragmentation;
pub mod gpu_locality;
pub mod html;
pub mod job;
pub mod metrics;
pub mod placement;
pub mod quota_usage;
mod replay;
pub mod report;
mod runs;
pub mod searches;
mod series;
pub mod slowdown;
pub mod sweep;
pub mod tenants;
pub mod timeline;
pub mod trace;
pub mod trial;

pub use error::SimError;
pub use job::{Fate, JobOutcome, TraceJob};
pub use replay::{EstimateSource, Progress, ReplayOptions, ReplayResult, replay, replay_observed};
pub use slowdown::{Slowdown, SlowdownError};
pub use trial::{Direction, Objective, Search, Trial};
