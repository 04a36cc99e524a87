//! Renders a `SlurmGang` as the body of slurmrestd's `POST /slurm/v0.0.38/job/submit`.

use std::collections::BTreeMap;

use serde_json::Value;

use super::array::format_array_indices;
use super::script::{GANG_COMMENT_PREFIX, render_sbatch};
use super::spec::{SlurmGang, SlurmPlacement, SlurmSpecError};

/// `PATH` of the job when the gang's env sets none. A REST submission carries no environment
/// of a submitting shell, and slurmrestd refuses a job without one.
pub const DEFAULT_JOB_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The v0.0.38 `job/submit` body: `{"script": <render_sbatch>, "job": {...}}`.
///
/// slurmrestd does not read `#SBATCH` lines, so every option is repeated as a job property,
/// spelled as v0.0.38 spells it: `nodes` as an integer (22.05 mishandles the `[min, max]` form
/// its schema documents), `tasks` and `tasks_per_node`, `gres: "gpu:N"`, `memory_per_node`
/// (MiB), `time_limit` (minutes), `array` (`0,3,5-9`), `nodelist` (comma separated; `required_nodes` is refused as a
/// disabled key) and `environment` (always set: `PATH` plus the gang's env).
///
/// Errors with [`SlurmSpecError::Unsupported`] for a `switches` placement: v0.0.38 disables
/// `required_switches` and `wait_for_switch`, so such a gang must go through `sbatch`.
/// Keys come out sorted, so the JSON text is the same whatever serde_json's map order.
pub fn render_rest_body(gang: &SlurmGang) -> Result<Value, SlurmSpecError> {
    let mut job: BTreeMap<&str, Value> = BTreeMap::new();
    job.insert("name", gang.name.clone().into());
    job.insert("comment", format!("{GANG_COMMENT_PREFIX}{}", gang.gang).into());
    job.insert("nodes", gang.nodes.into());
    job.insert("tasks", gang.world_size().into());
    job.insert("tasks_per_node", gang.tasks_per_node.into());
    if gang.gpus_per_node > 0 {
        job.insert("gres", format!("gpu:{}", gang.gpus_per_node).into());
    }
    if let Some(cpus) = gang.cpus_per_task {
        job.insert("cpus_per_task", cpus.into());
    }
    if let Some(mib) = gang.memory_mib {
        job.insert("memory_per_node", mib.into());
    }
    if let Some(minutes) = gang.time_limit_minutes {
        job.insert("time_limit", minutes.into());
    }
    if let Some(indices) = &gang.array {
        job.insert("array", format_array_indices(indices).into());
    }
    for (key, value) in [("partition", &gang.partition), ("account", &gang.account), ("qos", &gang.qos)] {
        if let Some(value) = value {
            job.insert(key, value.clone().into());
        }
    }
    match &gang.placement {
        None => {}
        Some(SlurmPlacement::Nodelist(hosts)) => {
            job.insert("nodelist", hosts.join(",").into());
        }
        Some(SlurmPlacement::Switches(_)) => {
            return Err(SlurmSpecError::Unsupported {
                gang: gang.name.clone(),
                field: "placement.switches".into(),
                message:
                    "slurmrestd v0.0.38 cannot request switches (required_switches is disabled); submit with sbatch"
                        .into(),
            });
        }
    }
    job.insert("current_working_directory", gang.workdir.clone().into());
    job.insert("standard_output", gang.output_path().into());
    let mut environment: BTreeMap<&str, Value> = BTreeMap::new();
    environment.insert("PATH", DEFAULT_JOB_PATH.into());
    for (key, value) in &gang.env {
        environment.insert(key, value.clone().into());
    }
    job.insert("environment", Value::Object(environment.into_iter().map(|(k, v)| (k.to_string(), v)).collect()));
    let job = Value::Object(job.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
    let mut body = serde_json::Map::new();
    body.insert("job".into(), job);
    body.insert("script".into(), render_sbatch(gang).into());
    Ok(Value::Object(body))
}
