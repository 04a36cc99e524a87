//! The Kubernetes controller, one folder per role in the order data flows: [`watching`] (the
//! watches, typed facts, the live picture, the caches reconciles read), [`deciding`] (the
//! scheduling task and loop, intents and pod sets, each TrainJob's plan), [`acting`] (requests,
//! the status writer, the objects created for a gang, the commit record), [`serving`] (HTTP,
//! metrics, leadership, the researcher API's answers), [`slurm`] (queues whose gangs run on
//! Slurm), [`fleet`] (manager mode: worker clusters as one more level, and the copies written
//! there) and [`process`] (the process wired together, and how it retries).
//!
//! Everything that decides is pure and tested by value: [`deciding::intent`] (what a TrainJob
//! asks), [`deciding::scheduling_loop`] (the engine over a snapshot), [`deciding::plan`] (the
//! lifecycle steps of one TrainJob) and [`deciding::pod_bindings`] (which gated pod goes to
//! which node). The I/O modules only carry out plans.

pub mod acting;
pub mod deciding;
pub mod fleet;
pub mod process;
pub mod serving;
pub mod slurm;
pub mod watching;
