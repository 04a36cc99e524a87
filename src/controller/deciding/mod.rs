//! What the controller decides, pure and tested by value: what a TrainJob asks (intent, host
//! filter, pod sets), the scheduling task and the one scheduling loop over the engine, each
//! TrainJob's lifecycle plan, which gated pod goes to which node, and the conditions and Queue
//! status it reports.

pub mod conditions;
pub mod host_filter;
pub mod intent;
pub mod plan;
pub mod pod_bindings;
pub mod pod_sets;
pub mod queue_status;
pub mod scheduling_loop;
pub mod scheduling_task;
