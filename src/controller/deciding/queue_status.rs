//! What each Queue object reports: usage charged by admitted gangs, and how many wait or run.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use trainyard_policies::Engine;

use crate::api::Queue;
use crate::api::queue::{Amounts, QueueStatus};
use crate::controller::deciding::conditions::{self, Want};
use crate::controller::deciding::scheduling_loop::{Decision, JobEntry, JobState};

/// Condition type on a Queue: part of a valid quota tree.
pub const ACTIVE: &str = "Active";

/// The status each Queue object should show; `problem` is set when the quota tree could not be
/// built (the previous tree stays in use) and turns every queue's `Active` condition False.
pub fn queue_statuses(
    queues: &[&Queue],
    engine: &Engine,
    jobs: &[&JobEntry],
    decision: &dyn Fn(&str) -> Option<Decision>,
    problem: Option<&str>,
    now: &Time,
) -> Vec<(String, QueueStatus)> {
    let mut pending: BTreeMap<&str, u64> = BTreeMap::new();
    let mut admitted: BTreeMap<&str, u64> = BTreeMap::new();
    for job in jobs {
        match (&job.state, decision(&job.key)) {
            (JobState::Admitted(intent, _), _) | (JobState::Waiting(intent), Some(Decision::Admit(_))) => {
                *admitted.entry(intent.queue.as_str()).or_default() += 1;
            }
            (JobState::Waiting(intent), _) => *pending.entry(intent.queue.as_str()).or_default() += 1,
            (JobState::Inactive | JobState::Kept, _) => {}
        }
    }
    let quotas = engine.quotas();
    queues
        .iter()
        .map(|q| {
            let name = q.metadata.name.clone().unwrap_or_default();
            let usage = quotas.find(&name).map(|i| quotas.usage(i)).unwrap_or_default();
            let current = q.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
            let want = match problem {
                None => Want::new(ACTIVE, true, "Ready", "part of the quota tree"),
                Some(p) => Want::new(ACTIVE, false, "InvalidQuotaTree", p),
            };
            let conditions =
                conditions::merge(&current, &[ACTIVE], &[want], q.metadata.generation, now).unwrap_or(current);
            let status = QueueStatus {
                usage: Amounts {
                    gpus: Some(usage.gpus),
                    cpus: Some(usage.cpu_milli.div_ceil(1000)),
                    // The Slurm loop counts node slots where memory would be; Slurm itself holds memory.
                    memory_gib: q.spec.slurm.is_none().then(|| usage.memory_mib.div_ceil(1024)),
                },
                pending: pending.get(name.as_str()).copied().unwrap_or(0),
                admitted: admitted.get(name.as_str()).copied().unwrap_or(0),
                conditions,
            };
            (name, status)
        })
        .collect()
}
