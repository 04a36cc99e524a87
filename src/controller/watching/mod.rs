//! What the controller sees: the watches that feed the scheduling loop, nodes and pods read into
//! typed facts, the live picture those events change in place, the caches the reconciles read,
//! and the readings of cached objects into the scheduler's inputs and the planner's views.

pub mod caches;
pub mod facts;
pub mod live;
pub mod planner_views;
pub mod scheduler_inputs;
pub mod watches;
