//! What the engine tells its caller: what a cycle did (admissions, preemptions, requeues,
//! moves, the reservation) and why a gang waits or can never run. Values only; nothing here
//! reads the engine.

pub(crate) mod outcome;
pub(crate) mod reasons;
