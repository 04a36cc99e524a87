//! The controller process: the watches, the scheduling task, the status writer and the
//! reconcilers wired together, standalone mode's search controller, and how soon it retries
//! after the API server failed it.

mod discovery;
pub mod retry;
pub mod run;
pub mod searches;
mod triggers;
