//! Answers about the future and the why, computed on copies of the engine: start-time
//! estimates, explanations with counterfactuals, and the runtimes learned per queue that the
//! estimates assume.

pub(crate) mod eta;
#[cfg(test)]
mod eta_tests;
pub(crate) mod explain;
pub(crate) mod runtime_history;
