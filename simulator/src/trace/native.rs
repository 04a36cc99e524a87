//! trainyard's own trace schema, shared by the `csv` and `jsonl` formats: field names, checks, conversion.

use trainyard_topology::{GangShape, Resources, TopologyRequest};

use super::error::RowError;
use crate::job::TraceJob;

/// The fields of the schema, in CSV column order (also the JSONL keys).
pub(crate) const COLUMNS: [&str; 11] = [
    "id",
    "submit_s",
    "runtime_s",
    "runtime_estimate_s",
    "tenant",
    "priority",
    "pods",
    "gpus_per_pod",
    "cpu_milli_per_pod",
    "memory_mib_per_pod",
    "topology",
];

/// One row of the schema, each field parsed but not yet checked as a whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NativeRow {
    pub id: String,
    pub submit_s: u64,
    pub runtime_s: u64,
    pub runtime_estimate_s: Option<u64>,
    pub tenant: String,
    pub priority: i32,
    pub pods: u32,
    pub gpus_per_pod: u64,
    pub cpu_milli_per_pod: u64,
    pub memory_mib_per_pod: u64,
    pub topology: TopologyRequest,
}

impl NativeRow {
    /// The row a writer emits for `job`.
    pub fn from_job(job: &TraceJob) -> Self {
        NativeRow {
            id: job.id.clone(),
            submit_s: job.submit,
            runtime_s: job.runtime,
            runtime_estimate_s: job.runtime_estimate,
            tenant: job.tenant.clone(),
            priority: job.priority,
            pods: job.gang.pods(),
            gpus_per_pod: job.gang.largest_pod().gpus,
            cpu_milli_per_pod: job.gang.largest_pod().cpu_milli,
            memory_mib_per_pod: job.gang.largest_pod().memory_mib,
            topology: job.gang.topology.clone(),
        }
    }

    /// Checks the row (non-empty id and tenant, runtimes of at least 1 s,
    /// at least one pod, pods that ask for something) and makes the job.
    pub fn into_job(self, line: u64) -> Result<TraceJob, RowError> {
        let bad = |field: &str, message: &str| Err(RowError::field(line, field, message));
        if self.id.is_empty() {
            return bad("id", "must not be empty");
        }
        if self.runtime_s == 0 {
            return bad("runtime_s", "must be at least 1");
        }
        if self.runtime_estimate_s == Some(0) {
            return bad("runtime_estimate_s", "must be at least 1 (or left empty)");
        }
        if self.tenant.is_empty() {
            return bad("tenant", "must not be empty");
        }
        if self.pods == 0 {
            return bad("pods", "must be at least 1");
        }
        let pod = Resources {
            gpus: self.gpus_per_pod,
            cpu_milli: self.cpu_milli_per_pod,
            memory_mib: self.memory_mib_per_pod,
        };
        if pod.is_zero() {
            return bad("gpus_per_pod", "a pod must ask for GPUs, CPU or memory, but all three are 0");
        }
        Ok(TraceJob {
            id: self.id,
            submit: self.submit_s,
            runtime: self.runtime_s,
            runtime_estimate: self.runtime_estimate_s,
            tenant: self.tenant,
            priority: self.priority,
            gang: GangShape::single(self.pods, pod, self.topology),
            line,
        })
    }
}

/// The text form of a topology request; empty means unconstrained.
pub(crate) fn topology(text: &str) -> Result<TopologyRequest, String> {
    text.parse().map_err(|e: trainyard_topology::ParseTopologyRequestError| e.to_string())
}
