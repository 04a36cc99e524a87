//! Hyperparameter searches (Trainer's `OptimizationJob`) run by trainyard: the spec checked, each
//! trial's values drawn, the trials as TrainJobs, and the step from the trials seen to the trials
//! to create and the search's status.

pub mod space;
pub mod trials;
pub mod validate;

pub use trials::{Phase, Step, Trial, observe, step, trial_name, trial_object};
pub use validate::{Search, SpecError, validate};
