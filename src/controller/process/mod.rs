//! The controller process: the watches, the scheduling task, the status writer and the
//! reconcilers wired together, and how soon it retries after the API server failed it.

pub mod retry;
pub mod run;
mod triggers;
