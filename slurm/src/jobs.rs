//! Slurm jobs as trainyard sees them, from slurmrestd's `jobs` or `squeue --json`.

use std::collections::BTreeMap;

use serde_json::Value;
use trainyard_bridges::slurm::{GANG_COMMENT_PREFIX, GangState, parse_array_indices, slurm_state};

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
    /// The job array it belongs to, if any.
    pub array: Option<ArrayPart>,
}

/// Which tasks of a job array one job record stands for. Slurm lists an array's tasks that have
/// started as records of their own, and the tasks still waiting as one record of the array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArrayPart {
    /// The array's job id (`%A`; the id `scancel` takes for the whole array).
    pub job_id: u64,
    /// Its task index for a started task; the indices still pending for the array's own record.
    pub tasks: Vec<u32>,
}

/// Most tasks one record is read as standing for: Slurm's own `MaxArraySize` is at most 4,000,001.
const MAX_ARRAY_TASKS: usize = 4_000_001;

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

/// A number as slurmrestd v0.0.38 and squeue write it, or as later versions do
/// (`{"set": true, "number": n}`); absent, unset or NO_VAL-like values are `None`.
fn number(v: &Value, key: &str) -> Option<u64> {
    let n = match v.get(key)? {
        Value::Number(n) => n.as_u64(),
        Value::Object(o) if o.get("set").and_then(Value::as_bool) != Some(false) => {
            o.get("number").and_then(Value::as_u64)
        }
        _ => None,
    }?;
    // Slurm's "no value" markers (NO_VAL = 0xfffffffe, INFINITE = 0xffffffff) are not indices.
    (n < 0xffff_fffe).then_some(n)
}

/// The array a record belongs to: `array_job_id` 0 (or absent) for a job that is not one.
fn array_part(v: &Value) -> Option<ArrayPart> {
    let job_id = number(v, "array_job_id").filter(|&id| id > 0)?;
    let tasks = match number(v, "array_task_id").and_then(|i| u32::try_from(i).ok()) {
        Some(index) => vec![index],
        None => parse_array_indices(&text(v, "array_task_string"), MAX_ARRAY_TASKS).unwrap_or_default(),
    };
    Some(ArrayPart { job_id, tasks })
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
        array: array_part(v),
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

/// The newest job array of `gang` (a gang submitted again after its array ended has several):
/// its records, and every task index Slurm still reports.
pub fn find_array(jobs: &[JobInfo], gang: &str) -> Option<ArrayView> {
    let of_gang = || jobs.iter().filter(|j| j.gang.as_deref() == Some(gang));
    let newest = of_gang().filter_map(|j| j.array.as_ref()).map(|a| a.job_id).max()?;
    let records: Vec<JobInfo> =
        of_gang().filter(|j| j.array.as_ref().is_some_and(|a| a.job_id == newest)).cloned().collect();
    let mut tasks = BTreeMap::new();
    for (at, job) in records.iter().enumerate() {
        for &index in job.array.iter().flat_map(|a| &a.tasks) {
            tasks.insert(index, at);
        }
    }
    Some(ArrayView { job_id: newest, records, tasks })
}

/// One job array as Slurm reports it now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArrayView {
    /// The array's job id.
    pub job_id: u64,
    /// Its records: one per started task, one for the tasks still pending.
    pub records: Vec<JobInfo>,
    /// Each task index Slurm still reports, with the position of its record (ended tasks leave
    /// after `MinJobAge`). Kept apart from the records: thousands of pending tasks share one.
    tasks: BTreeMap<u32, usize>,
}

impl ArrayView {
    /// The record standing for task `index`, if Slurm still reports it.
    pub fn task(&self, index: u32) -> Option<&JobInfo> {
        self.tasks.get(&index).map(|&at| &self.records[at])
    }

    /// Every task index Slurm still reports, in order, with its record.
    pub fn tasks(&self) -> impl Iterator<Item = (u32, &JobInfo)> {
        self.tasks.iter().map(|(&index, &at)| (index, &self.records[at]))
    }

    /// Whether every task it still reports has ended (Slurm will run none of them again).
    pub fn ended(&self) -> bool {
        self.records.iter().all(|j| j.state.is_terminal())
    }
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

    #[test]
    fn array_tasks_are_read_from_their_records_and_the_pending_rest() {
        let body = json!({"jobs": [
            {"job_id": 2, "array_job_id": 1, "array_task_id": 0, "array_task_string": "", "comment": "trainyard-gang=s", "job_state": "COMPLETED"},
            {"job_id": 3, "array_job_id": 1, "array_task_id": 3, "comment": "trainyard-gang=s", "job_state": "FAILED", "exit_code": 768},
            {"job_id": 1, "array_job_id": 1, "array_task_id": null, "array_task_string": "5-7%2", "comment": "trainyard-gang=s", "job_state": "PENDING"},
            {"job_id": 9, "array_job_id": 0, "comment": "trainyard-gang=s", "job_state": "RUNNING"},
            {"job_id": 12, "array_job_id": {"set": true, "number": 12}, "array_task_id": {"set": false, "number": 0},
             "array_task_string": "0-1", "comment": "trainyard-gang=other", "job_state": "PENDING"},
        ]});
        let jobs = parse_jobs(&body).unwrap();
        assert_eq!(jobs[3].array, None, "a plain job");
        assert_eq!(jobs[4].array, Some(ArrayPart { job_id: 12, tasks: vec![0, 1] }), "v0.0.39+ numbers");
        let view = find_array(&jobs, "s").unwrap();
        assert_eq!(view.job_id, 1);
        assert_eq!(view.tasks().map(|(i, _)| i).collect::<Vec<_>>(), vec![0, 3, 5, 6, 7]);
        let failed = view.task(3).unwrap();
        assert_eq!((failed.state, failed.exit_code), (GangState::Failed, Some(768)));
        assert_eq!(view.task(6).unwrap().id, 1, "pending tasks stand on the array's own record");
        assert!(view.task(4).is_none());
        assert!(!view.ended());
        let ended: Vec<JobInfo> = jobs[..2].to_vec();
        assert!(find_array(&ended, "s").unwrap().ended());
        assert!(find_array(&jobs, "nobody").is_none());
    }
}
