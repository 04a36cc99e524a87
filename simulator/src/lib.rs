//! trainyard-simulator: replays cluster traces through the trainyard engine on a virtual clock.
//!
//! ```text
//!  trace file ──trace::read_trace──> Vec<TraceJob> ──replay──> engine (trainyard-policies)
//!                                                     │ arrivals, completions, one cycle per instant
//!                                                     ▼
//!                                     Vec<JobOutcome> ──metrics──> Report (table, JSON)
//! ```
//! The engine is the same one the controller runs; only the clock and the events differ.

mod error;
pub mod job;
pub mod metrics;
mod replay;
pub mod report;
pub mod trace;

pub use error::SimError;
pub use job::{Fate, JobOutcome, TraceJob};
pub use replay::{EstimateSource, Progress, ReplayOptions, ReplayResult, replay};
