//! Slurm jobs as trainyard sees them, from slurmrestd's `jobs` or `squeue --json`.

use serde_json::Value;
use trainyard_bridges::slurm::{GANG_COMMENT_PREFIX, GangState, slurm_state};

use crate::error::SlurmError;

/// One Slurm job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobInfo {
    /// Job id.
    pub id: u64,
    /// Job name.
    pub name: String,
    /// The trainyard gang it runs, from its comment (`trainyard-gang=<id>`).
    pub gang: Option<String>,
    /// Slurm's state word(s), as reported.
    pub slurm_state: String,
    /// The state mapped onto a gang's lifecycle.
    pub state: GangState,
    /// Why it waits or ended (`Resources`, `PartitionNodeLimit`, ...).
    pub reason: String,
    /// Its nodes (Slurm hostlist), empty while pending.
    pub nodes: String,
    /// Exit code of the batch script, when it ended.
    pub exit_code: Option<i64>,
    /// Its partition.
    pub partition: String,
    /// Nodes it asked for (or holds).
    pub node_count: u64,
}

/// The `jobs` array of a slurmrestd or `squeue --json` answer.
pub fn parse_jobs(body: &Value) -> Result<Vec<JobInfo>, SlurmError> {
    let bad = |message: String| SlurmError::BadAnswer { what: "jobs".into(), message };
    let jobs = body.get("jobs").and_then(Value::as_array).ok_or_else(|| bad("no `jobs` array".into()))?;
    jobs.iter().enumerate().map(|(i, j)| job(j).ok_or_else(|| bad(format!("jobs[{i}] has no job_id")))).collect()
}

fn text(v: &Value, key: &str) -> String {
    match v.get(key) {
        Some(Value::String(s)) => s.clone(),
        // Newer slurmrestd versions report some fields as arrays of words.
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(","),
        _ => String::new(),
    }
}

fn job(v: &Value) -> Option<JobInfo> {
    let id = v.get("job_id").and_then(Value::as_u64)?;
    let comment = text(v, "comment");
    let words = text(v, "job_state");
    let exit_code = match v.get("exit_code") {
        Some(Value::Number(n)) => n.as_i64(),
        // v0.0.39+: {"status": ..., "return_code": n}
        Some(Value::Object(o)) => o.get("return_code").and_then(Value::as_i64),
        _ => None,
    };
    Some(JobInfo {
        id,
        name: text(v, "name"),
        gang: comment.strip_prefix(GANG_COMMENT_PREFIX).map(str::to_string),
        state: slurm_state(&words),
        slurm_state: words,
        reason: text(v, "state_reason"),
        nodes: text(v, "nodes"),
        exit_code,
        partition: text(v, "partition"),
        node_count: v.get("node_count").and_then(Value::as_u64).unwrap_or(0),
    })
}

/// Pending reasons that mean the job can never start as submitted, whatever the nodes' state
/// (Slurm accepts such jobs when `EnforcePartLimits=NO` and lets them wait forever).
pub const NEVER_STARTS: [&str; 4] = ["PartitionTimeLimit", "InvalidAccount", "InvalidQOS", "AccountNotAllowed"];

/// Reasons Slurm also gives while nodes are down or drained: final only when the job asks for
/// more nodes than its partition has at all.
pub const SIZE_REASONS: [&str; 2] = ["PartitionNodeLimit", "PartitionConfig"];

impl JobInfo {
    /// Whether it waits for something that will never come, given how many nodes its partition
    /// has (`None` when unknown: only the reasons that do not depend on node state count).
    pub fn never_starts(&self, partition_nodes: Option<u64>) -> bool {
        let reason = self.reason.as_str();
        self.state == GangState::Pending
            && (NEVER_STARTS.contains(&reason)
                || SIZE_REASONS.contains(&reason) && partition_nodes.is_some_and(|n| self.node_count > n))
    }
}

/// The newest job of `gang` among `jobs` (a gang resubmitted after it ended has several).
pub fn find_gang<'a>(jobs: &'a [JobInfo], gang: &str) -> Option<&'a JobInfo> {
    jobs.iter().filter(|j| j.gang.as_deref() == Some(gang)).max_by_key(|j| j.id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rest_jobs_are_read_and_gangs_found_by_comment() {
        let body = json!({"jobs": [
            {"job_id": 8, "name": "a", "comment": "trainyard-gang=ns/a", "job_state": "RUNNING",
             "state_reason": "None", "nodes": "n[1-2]", "exit_code": 0},
            {"job_id": 9, "name": "b", "comment": "", "job_state": "PENDING", "state_reason": "Resources"},
            {"job_id": 11, "name": "a", "comment": "trainyard-gang=ns/a", "job_state": "TIMEOUT", "exit_code": 0},
        ]});
        let jobs = parse_jobs(&body).unwrap();
        assert_eq!(jobs[0].state, GangState::Running);
        assert_eq!(jobs[1].gang, None);
        assert_eq!(find_gang(&jobs, "ns/a").unwrap().id, 11);
        assert_eq!(find_gang(&jobs, "ns/a").unwrap().state, GangState::Timeout);
        assert!(parse_jobs(&json!({"jobs": [{"name": "x"}]})).is_err());
        let big =
            parse_jobs(&json!({"jobs": [{"job_id": 3, "job_state": "PENDING", "state_reason": "PartitionNodeLimit",
            "partition": "debug", "node_count": 9}]}))
            .unwrap();
        assert!(big[0].never_starts(Some(4)), "9 nodes asked of a 4-node partition");
        assert!(!big[0].never_starts(Some(16)), "nodes down or drained: it may still start");
        assert!(!big[0].never_starts(None));
    }
}
