//! How the API commands print what the server answered, in the formats of [`crate::output`]:
//! the same field names in json and yaml, enum values as short lower-case words.

use serde::Serialize;

use crate::output::{Output, structured, table};

use trainyard::grpc::v1;

/// A time as UTC RFC 3339, or `-` for 0 (not known).
pub fn time(seconds: u64) -> String {
    if seconds == 0 { "-".into() } else { trainyard::grpc::utc(seconds) }
}

/// A time for the structured formats: RFC 3339, or null for 0 (not known).
fn time_value(seconds: u64) -> serde_json::Value {
    if seconds == 0 { serde_json::Value::Null } else { serde_json::Value::String(time(seconds)) }
}

/// A list as the structured formats print it, fields in their declared order.
#[derive(Serialize)]
struct Items<T: Serialize> {
    items: Vec<T>,
}

/// A span of seconds as `1d2h`, `3h4m`, `5m6s` or `7s`.
pub fn span(seconds: u64) -> String {
    let (d, h, m, s) = (seconds / 86_400, seconds / 3600 % 24, seconds / 60 % 60, seconds % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m{s}s"),
        (0, _, _) => format!("{h}h{m}m"),
        _ => format!("{d}d{h}h"),
    }
}

/// An enum value's proto name without its prefix, in lower case: `JOB_STATE_PENDING` -> `pending`.
fn short(name: &str, prefix: &str) -> String {
    name.strip_prefix(prefix).unwrap_or(name).to_ascii_lowercase()
}

/// A TrainJob as the structured formats print it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobOut<'a> {
    namespace: &'a str,
    name: &'a str,
    uid: &'a str,
    queue: &'a str,
    priority: i32,
    state: String,
    reason: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    message: &'a str,
    pods: u32,
    gpus: u64,
    created: serde_json::Value,
    #[serde(skip_serializing_if = "str::is_empty")]
    domain: &'a str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    nodes: &'a [String],
    #[serde(skip_serializing_if = "str::is_empty")]
    search: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    cluster: &'a str,
}

/// The structured view of a job.
pub fn job_out(job: &v1::Job) -> JobOut<'_> {
    JobOut {
        namespace: &job.namespace,
        name: &job.name,
        uid: &job.uid,
        queue: &job.queue,
        priority: job.priority,
        state: short(job.state().as_str_name(), "JOB_STATE_"),
        reason: &job.reason,
        message: &job.message,
        pods: job.pods,
        gpus: job.gpus,
        created: time_value(job.created),
        domain: &job.domain,
        nodes: &job.nodes,
        search: &job.search,
        cluster: &job.cluster,
    }
}

/// TrainJobs, one row each; `namespaces` adds the namespace column (all namespaces listed).
pub fn jobs(list: &[v1::Job], output: Output, namespaces: bool) -> anyhow::Result<String> {
    if matches!(output, Output::Json | Output::Yaml) {
        return structured(&Items { items: list.iter().map(job_out).collect() }, output);
    }
    let wide = output == Output::Wide;
    let mut header = vec!["NAME", "QUEUE", "STATE", "REASON", "PODS", "GPUS", "CREATED"];
    if wide {
        header.extend(["PRIORITY", "NODES", "DOMAIN", "MESSAGE"]);
    }
    // Trials show the search they belong to; a list without any keeps its columns.
    let searches = list.iter().any(|j| !j.search.is_empty());
    if searches {
        header.insert(1, "SEARCH");
    }
    // A fleet's manager names the worker cluster each job runs in.
    let clusters = list.iter().any(|j| !j.cluster.is_empty());
    if clusters {
        header.insert(2 + usize::from(searches), "CLUSTER");
    }
    if namespaces {
        header.insert(0, "NAMESPACE");
    }
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|j| {
            let mut row = vec![
                j.name.clone(),
                j.queue.clone(),
                short(j.state().as_str_name(), "JOB_STATE_"),
                j.reason.clone(),
                j.pods.to_string(),
                j.gpus.to_string(),
                time(j.created),
            ];
            if wide {
                let nodes = if j.nodes.is_empty() { "-".to_string() } else { j.nodes.join(",") };
                let domain = if j.domain.is_empty() { "-".to_string() } else { j.domain.clone() };
                row.extend([j.priority.to_string(), nodes, domain, j.message.clone()]);
            }
            if searches {
                row.insert(1, if j.search.is_empty() { "-".into() } else { j.search.clone() });
            }
            if clusters {
                row.insert(
                    2 + usize::from(searches),
                    if j.cluster.is_empty() { "-".into() } else { j.cluster.clone() },
                );
            }
            if namespaces {
                row.insert(0, j.namespace.clone());
            }
            row
        })
        .collect();
    Ok(table(&header, &rows))
}

/// One TrainJob.
pub fn job(job: &v1::Job, output: Output) -> anyhow::Result<String> {
    match output {
        Output::Json | Output::Yaml => structured(&job_out(job), output),
        _ => jobs(std::slice::from_ref(job), output, false),
    }
}

fn refs(list: &[v1::JobRef]) -> String {
    list.iter().map(v1::JobRef::to_string).collect::<Vec<_>>().join(",")
}

/// Why a TrainJob waits.
pub fn explanation(e: &v1::Explanation, output: Output) -> anyhow::Result<String> {
    let job = e.job.clone().unwrap_or_default();
    if matches!(output, Output::Json | Output::Yaml) {
        #[derive(Serialize)]
        struct Out<'a> {
            job: JobOut<'a>,
            counterfactuals: Vec<serde_json::Value>,
        }
        let counterfactuals = e
            .counterfactuals
            .iter()
            .map(|c| {
                serde_json::json!({
                    "kind": c.kind, "text": c.text, "at": time_value(c.at),
                    "jobs": c.jobs.iter().map(v1::JobRef::to_string).collect::<Vec<_>>(),
                    "where": c.r#where, "short": c.short,
                })
            })
            .collect();
        return structured(&Out { job: job_out(&job), counterfactuals }, output);
    }
    let mut out = format!(
        "{}/{} is {} ({}): {}\n",
        job.namespace,
        job.name,
        short(job.state().as_str_name(), "JOB_STATE_"),
        job.reason,
        if job.message.is_empty() { "-" } else { &job.message }
    );
    if e.counterfactuals.is_empty() {
        out.push_str("nothing known would change it\n");
        return Ok(out);
    }
    let wide = output == Output::Wide;
    let mut header = vec!["WOULD START IF", "DETAIL"];
    if wide {
        header.extend(["AT", "JOBS"]);
    }
    let rows: Vec<Vec<String>> = e
        .counterfactuals
        .iter()
        .map(|c| {
            let mut row = vec![c.kind.replace('_', " "), c.text.clone()];
            if wide {
                row.extend([time(c.at), if c.jobs.is_empty() { "-".into() } else { refs(&c.jobs) }]);
            }
            row
        })
        .collect();
    out.push_str(&table(&header, &rows));
    Ok(out)
}

/// An ETA answer as the structured formats print it.
fn eta_value(e: &v1::EtaResponse) -> serde_json::Value {
    let job = e.job.clone().unwrap_or_default();
    serde_json::json!({
        "job": job_out(&job), "answer": short(e.kind().as_str_name(), "KIND_"), "earliest": time_value(e.earliest),
        "likely": time_value(e.likely), "started": time_value(e.started), "reason": e.reason,
        "waitsFor": e.waits_for.iter().map(v1::JobRef::to_string).collect::<Vec<_>>(),
        "waitsForTotal": e.waits_for_total, "asked": time_value(e.now),
    })
}

/// When a TrainJob starts.
pub fn eta(e: &v1::EtaResponse, output: Output) -> anyhow::Result<String> {
    if matches!(output, Output::Json | Output::Yaml) {
        return structured(&eta_value(e), output);
    }
    let wide = output == Output::Wide;
    let mut out = table(&eta_header(wide), &[eta_row(e, wide)]);
    if !wide && !e.reason.is_empty() {
        out.push_str(&format!("{}\n", e.reason));
    }
    Ok(out)
}

fn eta_header(wide: bool) -> Vec<&'static str> {
    let mut header = vec!["NAME", "ANSWER", "EARLIEST", "LIKELY", "IN"];
    if wide {
        header.extend(["WAITS FOR", "REASON"]);
    }
    header
}

/// One ETA answer as a table row.
fn eta_row(e: &v1::EtaResponse, wide: bool) -> Vec<String> {
    let job = e.job.clone().unwrap_or_default();
    let kind = short(e.kind().as_str_name(), "KIND_");
    let (earliest, likely, within) = match e.kind() {
        v1::eta_response::Kind::Estimate => (time(e.earliest), time(e.likely), span(e.likely.saturating_sub(e.now))),
        v1::eta_response::Kind::Running => (time(e.started), time(e.started), "running".into()),
        v1::eta_response::Kind::Stalled => (time(e.earliest), "-".into(), "-".into()),
        _ => ("-".into(), "-".into(), "-".into()),
    };
    let mut row = vec![format!("{}/{}", job.namespace, job.name), kind, earliest, likely, within];
    if wide {
        let shown = refs(&e.waits_for);
        let more = (e.waits_for_total as usize).saturating_sub(e.waits_for.len());
        let waits = match (shown.is_empty(), more) {
            (true, _) => "-".to_string(),
            (false, 0) => shown,
            (false, n) => format!("{shown} (+{n})"),
        };
        row.extend([waits, if e.reason.is_empty() { "-".into() } else { e.reason.clone() }]);
    }
    row
}

/// A hyperparameter search's trials: how many ended, run and wait, when each remaining one
/// starts (`answers`, one per trial not ended) and how many are not made yet.
pub fn search_eta(
    search: &str,
    trials: &[v1::Job],
    answers: &[v1::EtaResponse],
    output: Output,
) -> anyhow::Result<String> {
    let count = |states: &[v1::JobState]| trials.iter().filter(|t| states.contains(&t.state())).count();
    let ended = count(&[v1::JobState::Inactive]);
    let running = count(&[v1::JobState::Admitted, v1::JobState::Degraded]);
    let waiting = trials.len() - ended - running;
    let (total, parallel) =
        trials.iter().find(|t| t.search_trials > 0).map_or((0, 0), |t| (t.search_trials, t.search_parallel));
    let not_made = (total as usize).saturating_sub(trials.len());
    let last_start =
        answers.iter().filter(|e| e.kind() == v1::eta_response::Kind::Estimate).map(|e| e.likely).max().unwrap_or(0);
    if matches!(output, Output::Json | Output::Yaml) {
        let value = serde_json::json!({
            "search": search, "trials": (total > 0).then_some(total), "parallel": (parallel > 0).then_some(parallel),
            "made": trials.len(), "ended": ended, "running": running, "waiting": waiting,
            "notMade": (total > 0).then_some(not_made), "lastLikelyStart": time_value(last_start),
            "items": answers.iter().map(eta_value).collect::<Vec<_>>(),
        });
        return structured(&value, output);
    }
    let wide = output == Output::Wide;
    let mut out = String::new();
    if !answers.is_empty() {
        let rows: Vec<Vec<String>> = answers.iter().map(|e| eta_row(e, wide)).collect();
        out.push_str(&table(&eta_header(wide), &rows));
    }
    let size = if total > 0 { format!("{total} trials, {parallel} at once") } else { "size unknown".to_string() };
    out.push_str(&format!(
        "search {search} ({size}): {} made, {ended} ended, {running} running, {waiting} waiting",
        trials.len()
    ));
    if last_start > 0 {
        out.push_str(&format!("; the last waiting one likely starts {}", time(last_start)));
    }
    match (total, not_made) {
        (0, _) => out.push_str("; more may follow (the search is run elsewhere and its trials do not say its size)\n"),
        (_, 0) => out.push_str("; every trial is made\n"),
        (_, n) => out.push_str(&format!("; {n} not made yet: each starts as a running trial ends\n")),
    }
    Ok(out)
}

/// The queues.
pub fn queues(list: &[v1::Queue], output: Output) -> anyhow::Result<String> {
    if matches!(output, Output::Json | Output::Yaml) {
        let items: Vec<serde_json::Value> = list
            .iter()
            .map(|q| {
                serde_json::json!({
                    "name": q.name, "parent": q.parent,
                    "nominalGpus": if q.has_nominal { serde_json::json!(q.nominal_gpus) } else { serde_json::Value::Null },
                    "usedGpus": q.used_gpus, "borrowedGpus": q.borrowed_gpus,
                    "admitted": q.admitted, "pending": q.pending, "pendingByReason": q.pending_by_reason,
                })
            })
            .collect();
        return structured(&Items { items }, output);
    }
    let wide = output == Output::Wide;
    let mut header = vec!["NAME", "PARENT", "NOMINAL GPUS", "USED", "BORROWED", "ADMITTED", "PENDING"];
    if wide {
        header.push("PENDING BY REASON");
    }
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|q| {
            let mut row = vec![
                q.name.clone(),
                if q.parent.is_empty() { "-".into() } else { q.parent.clone() },
                if q.has_nominal { q.nominal_gpus.to_string() } else { "unlimited".into() },
                q.used_gpus.to_string(),
                q.borrowed_gpus.to_string(),
                q.admitted.to_string(),
                q.pending.to_string(),
            ];
            if wide {
                let mut reasons: Vec<(&String, &u32)> = q.pending_by_reason.iter().collect();
                reasons.sort();
                let text: Vec<String> = reasons.iter().map(|(r, n)| format!("{r}={n}")).collect();
                row.push(if text.is_empty() { "-".into() } else { text.join(",") });
            }
            row
        })
        .collect();
    Ok(table(&header, &rows))
}

/// One Watch event: a table row (the header printed once by the caller), or a document.
pub fn event(e: &v1::Event, output: Output) -> anyhow::Result<String> {
    let job = e.job.clone().unwrap_or_default();
    let kind = short(e.kind().as_str_name(), "KIND_");
    match output {
        Output::Json | Output::Yaml => {
            let document = serde_json::json!({
                "sequence": e.sequence, "kind": kind, "leader": e.leader, "at": time_value(e.at), "job": job_out(&job),
            });
            Ok(match output {
                // One object per line, so a consumer reads events as they come.
                Output::Json => serde_json::to_string(&document)? + "\n",
                _ => format!("---\n{}", structured(&document, Output::Yaml)?),
            })
        }
        Output::Table | Output::Wide => {
            let mut row = vec![
                e.sequence.to_string(),
                kind,
                format!("{}/{}", job.namespace, job.name),
                short(job.state().as_str_name(), "JOB_STATE_"),
                job.reason.clone(),
            ];
            if output == Output::Wide {
                row.extend([e.leader.clone(), time(e.at), job.message.clone()]);
            }
            Ok(row.join("\t").trim_end().to_string() + "\n")
        }
    }
}

/// The header of `watch`'s table.
pub fn event_header(output: Output) -> Option<String> {
    match output {
        Output::Table => Some("SEQ\tEVENT\tTRAINJOB\tSTATE\tREASON\n".into()),
        Output::Wide => Some("SEQ\tEVENT\tTRAINJOB\tSTATE\tREASON\tLEADER\tAT\tMESSAGE\n".into()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str, cluster: &str) -> v1::Job {
        v1::Job { namespace: "team".into(), name: name.into(), cluster: cluster.into(), ..Default::default() }
    }

    #[test]
    fn a_fleets_jobs_name_their_cluster_and_others_keep_their_columns() {
        let fleet = jobs(&[job("a", "east"), job("b", "")], Output::Table, false).unwrap();
        let mut lines = fleet.lines();
        let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(header[..3], ["NAME", "QUEUE", "CLUSTER"], "{fleet}");
        assert!(lines.next().unwrap().contains(" east "), "{fleet}");
        assert!(lines.next().unwrap().contains(" - "), "a job not placed yet: {fleet}");
        let single = jobs(&[job("a", "")], Output::Table, false).unwrap();
        assert!(!single.contains("CLUSTER"), "{single}");
        let json = jobs(&[job("a", "east")], Output::Json, false).unwrap();
        assert!(json.contains("\"cluster\": \"east\""), "{json}");
    }
}
