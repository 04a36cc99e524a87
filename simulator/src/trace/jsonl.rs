//! trainyard's JSON-lines trace format: reader and writer.
//!
//! One JSON object per line with the keys of the CSV format: `id`,
//! `submit_s`, `runtime_s`, `tenant`, `pods` and `gpus_per_pod` are
//! required; `runtime_estimate_s` and `topology` may be absent or `null`;
//! `priority`, `cpu_milli_per_pod` and `memory_mib_per_pod` default to 0;
//! `slice` and `pod_sets` (strings, as in the CSV format) may be absent, and so may `search`
//! (a string, as in the CSV format) and `objective` (a number).
//! Unknown keys are errors. Blank lines are skipped. Every error names the
//! line and, when one key is at fault, that key.

use std::io::{self, BufRead, BufReader, Read, Write};

use serde::Serialize;
use serde_json::{Map, Value};
use trainyard_topology::TopologyRequest;

use super::collect::Collector;
use super::error::{RowError, TraceError};
use super::native::{
    COLUMNS, NativeRow, OPTIONAL_COLUMNS, claims, claims_text, gpu_layout, gpu_layout_text, pod_sets, pod_sets_text,
    search, search_text, slice, slice_text, topology, tpu, tpu_text,
};
use crate::job::TraceJob;
use crate::trial::Objective;

/// Reads every line into the collector.
pub(crate) fn read(input: impl Read, coll: &mut Collector<'_>) -> Result<(), TraceError> {
    let mut reader = BufReader::new(input);
    let mut buf = Vec::new();
    let mut line = 0u64;
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .map_err(|error| TraceError::Io { input: coll.input().to_string(), error })?;
        if n == 0 {
            return Ok(());
        }
        line += 1;
        let Ok(text) = std::str::from_utf8(&buf) else {
            coll.reject(RowError::row(line, "not valid UTF-8"))?;
            continue;
        };
        let text = text.trim_start_matches('\u{feff}').trim();
        if !text.is_empty() {
            coll.take(parse_line(text, line))?;
        }
    }
}

fn parse_line(text: &str, line: u64) -> Result<TraceJob, RowError> {
    let value: Value = serde_json::from_str(text).map_err(|e| RowError::row(line, json_error(&e)))?;
    let Value::Object(map) = value else {
        return Err(RowError::row(line, format!("expected a JSON object, found {}", kind(&value))));
    };
    let known = |k: &str| COLUMNS.contains(&k) || OPTIONAL_COLUMNS.contains(&k);
    if let Some(key) = map.keys().find(|k| !known(k.as_str())) {
        let message = format!("unknown field, expected one of {}, {}", COLUMNS.join(", "), OPTIONAL_COLUMNS.join(", "));
        return Err(RowError::field(line, key.as_str(), message));
    }
    let f = Fields { map: &map, line };
    let parsed = NativeRow {
        id: f.required("id", string)?,
        submit_s: f.required("submit_s", whole)?,
        runtime_s: f.required("runtime_s", whole)?,
        runtime_estimate_s: f.optional("runtime_estimate_s", |v| whole(v).map(Some), None)?,
        tenant: f.required("tenant", string)?,
        priority: f.optional("priority", integer_i32, 0)?,
        pods: f.required("pods", whole_u32)?,
        gpus_per_pod: f.required("gpus_per_pod", whole)?,
        cpu_milli_per_pod: f.optional("cpu_milli_per_pod", whole, 0)?,
        memory_mib_per_pod: f.optional("memory_mib_per_pod", whole, 0)?,
        topology: f.optional("topology", |v| topology(&string(v)?), TopologyRequest::Unconstrained)?,
        slice: f.optional("slice", |v| slice(&string(v)?), None)?,
        pod_sets: f.optional("pod_sets", |v| pod_sets(&string(v)?), Vec::new())?,
        tpu: f.optional("tpu", |v| tpu(&string(v)?), None)?,
        gpu_layout: f.optional("gpu_layout", |v| gpu_layout(&string(v)?), None)?,
        claims: f.optional("claims", |v| claims(&string(v)?), Vec::new())?,
        search: f.optional("search", |v| search(&string(v)?), None)?,
        objective: f.optional("objective", |v| objective(v).map(Some), None)?,
    };
    parsed.into_job(line)
}

/// serde_json's message without its "at line 1 column N" (always line 1
/// here), with the column kept.
fn json_error(e: &serde_json::Error) -> String {
    let full = e.to_string();
    let message = full.rfind(" at line ").map_or(full.as_str(), |i| &full[..i]);
    format!("invalid JSON at column {}: {message}", e.column())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The keys of one object, converted with messages that blame the key.
struct Fields<'a> {
    map: &'a Map<String, Value>,
    line: u64,
}

impl Fields<'_> {
    fn required<T>(&self, key: &'static str, conv: impl FnOnce(&Value) -> Result<T, String>) -> Result<T, RowError> {
        let value = self.map.get(key).ok_or_else(|| RowError::field(self.line, key, "missing"))?;
        conv(value).map_err(|m| RowError::field(self.line, key, m))
    }

    fn optional<T>(
        &self,
        key: &'static str,
        conv: impl FnOnce(&Value) -> Result<T, String>,
        default: T,
    ) -> Result<T, RowError> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(value) => conv(value).map_err(|m| RowError::field(self.line, key, m)),
        }
    }
}

fn string(v: &Value) -> Result<String, String> {
    v.as_str().map(str::to_string).ok_or_else(|| format!("expected a string, found {v}"))
}

/// A finite number (JSON has no other kind).
fn objective(v: &Value) -> Result<Objective, String> {
    v.as_f64().and_then(Objective::new).ok_or_else(|| format!("expected a number, found {v}"))
}

fn whole(v: &Value) -> Result<u64, String> {
    if let Some(n) = v.as_u64() {
        return Ok(n);
    }
    if v.as_i64().is_some_and(|n| n < 0) {
        return Err(format!("must not be negative, found {v}"));
    }
    Err(format!("expected a whole number, found {v}"))
}

fn whole_u32(v: &Value) -> Result<u32, String> {
    u32::try_from(whole(v)?).map_err(|_| format!("too large (at most {}), found {v}", u32::MAX))
}

fn integer_i32(v: &Value) -> Result<i32, String> {
    match v.as_i64() {
        Some(n) => i32::try_from(n).map_err(|_| format!("out of range ({}..={}), found {v}", i32::MIN, i32::MAX)),
        None => Err(format!("expected an integer, found {v}")),
    }
}

/// One line of output; field order matches the CSV columns.
#[derive(Serialize)]
struct JsonRow<'a> {
    id: &'a str,
    submit_s: u64,
    runtime_s: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    runtime_estimate_s: Option<u64>,
    tenant: &'a str,
    priority: i32,
    pods: u32,
    gpus_per_pod: u64,
    cpu_milli_per_pod: u64,
    memory_mib_per_pod: u64,
    topology: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    slice: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pod_sets: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    tpu: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    gpu_layout: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    claims: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    search: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    objective: Option<Objective>,
}

/// Writes the jobs, in the given order, one JSON object per line.
pub(crate) fn write(jobs: &[TraceJob], out: impl Write) -> Result<(), TraceError> {
    let fail = |error: io::Error| TraceError::Write { format: "jsonl", error };
    let mut out = io::BufWriter::new(out);
    for job in jobs {
        let native = NativeRow::from_job(job);
        let row = JsonRow {
            id: &job.id,
            submit_s: job.submit,
            runtime_s: job.runtime,
            runtime_estimate_s: job.runtime_estimate,
            tenant: &job.tenant,
            priority: job.priority,
            pods: native.pods,
            gpus_per_pod: native.gpus_per_pod,
            cpu_milli_per_pod: native.cpu_milli_per_pod,
            memory_mib_per_pod: native.memory_mib_per_pod,
            topology: native.topology.to_string(),
            slice: slice_text(native.slice.as_ref()),
            pod_sets: pod_sets_text(&native.pod_sets),
            tpu: tpu_text(native.tpu.as_ref()),
            gpu_layout: gpu_layout_text(native.gpu_layout),
            claims: claims_text(&native.claims),
            search: search_text(native.search.as_ref()),
            objective: native.objective,
        };
        serde_json::to_writer(&mut out, &row).map_err(|e| fail(io::Error::from(e)))?;
        out.write_all(b"\n").map_err(fail)?;
    }
    out.flush().map_err(fail)
}

#[cfg(test)]
mod tests {
    use trainyard_topology::{Resources, TopologyRequest};

    use super::super::{ReadOptions, TraceError, TraceFormat, TraceRead, read_trace, write_jsonl};

    fn read(text: &str, skip: bool) -> Result<TraceRead, TraceError> {
        let opts = ReadOptions { skip_bad_rows: skip, ..ReadOptions::default() };
        read_trace(TraceFormat::Jsonl, text.as_bytes(), "jobs.jsonl", &opts)
    }

    #[test]
    fn parses_a_small_sample() {
        let text = "\n{\"id\":\"big\",\"submit_s\":7,\"runtime_s\":3600,\"runtime_estimate_s\":4500,\"tenant\":\"team-a\",\"priority\":-1,\"pods\":4,\"gpus_per_pod\":8,\"cpu_milli_per_pod\":32000,\"memory_mib_per_pod\":1024,\"topology\":\"required:rack\"}\r\n\
            {\"id\":\"small\",\"submit_s\":3,\"runtime_s\":60,\"tenant\":\"team-b\",\"pods\":1,\"gpus_per_pod\":1,\"topology\":null}\n  \n";
        let jobs = read(text, false).unwrap().jobs;
        assert_eq!(jobs.len(), 2);
        let (small, big) = (&jobs[0], &jobs[1]);
        assert_eq!((small.id.as_str(), small.submit, small.runtime, small.line), ("small", 3, 60, 3));
        assert_eq!((small.runtime_estimate, small.priority, small.tenant.as_str()), (None, 0, "team-b"));
        assert_eq!((small.gang.pods(), small.gang.sets[0].pod), (1, Resources::gpus(1)));
        assert_eq!(small.gang.topology, TopologyRequest::Unconstrained);
        assert_eq!(
            (big.submit, big.runtime, big.runtime_estimate, big.priority, big.line),
            (7, 3600, Some(4500), -1, 2)
        );
        assert_eq!(big.gang.pods(), 4);
        assert_eq!(big.gang.sets[0].pod, Resources { gpus: 8, cpu_milli: 32_000, memory_mib: 1024 });
        assert_eq!(big.gang.topology, TopologyRequest::Required("rack".into()));
    }

    #[test]
    fn bad_lines_name_line_and_field() {
        let good = r#"{"id":"ok","submit_s":0,"runtime_s":60,"tenant":"t","pods":1,"gpus_per_pod":1}"#;
        let cases = [
            (
                r#"{"id":"x","submit_s":"soon","runtime_s":60,"tenant":"t","pods":1,"gpus_per_pod":1}"#,
                "field `submit_s`: expected a whole number, found \"soon\"",
            ),
            (r#"{"id":"x","submit_s":0,"runtime_s":60,"tenant":"t","pods":1}"#, "field `gpus_per_pod`: missing"),
            (
                r#"{"id":"x","submit_s":0,"runtime_s":60,"tenant":"t","pods":1,"gpus_per_pod":1,"colour":"red"}"#,
                "field `colour`: unknown field, expected one of id, submit_s, runtime_s, runtime_estimate_s, tenant, priority, pods, gpus_per_pod, cpu_milli_per_pod, memory_mib_per_pod, topology, slice, pod_sets, tpu, gpu_layout, claims, search, objective",
            ),
            (
                r#"{"id":"x","submit_s":0,"runtime_s":60,"tenant":"t","pods":0,"gpus_per_pod":1}"#,
                "field `pods`: must be at least 1",
            ),
            (
                r#"{"id":"x","submit_s":0,"runtime_s":60,"tenant":"t","pods":1,"gpus_per_pod":-2}"#,
                "field `gpus_per_pod`: must not be negative, found -2",
            ),
            (
                r#"{"id":"x","submit_s":0,"runtime_s":60,"tenant":"t","pods":1,"gpus_per_pod":0}"#,
                "field `gpus_per_pod`: a pod must ask for GPUs, CPU or memory, but all three are 0",
            ),
            (
                r#"{"id":"x","submit_s":0,"runtime_s":60,"tenant":"t","pods":1,"gpus_per_pod":1,"priority":1.5}"#,
                "field `priority`: expected an integer, found 1.5",
            ),
            (
                r#"{"id":"ok","submit_s":0,"runtime_s":60,"tenant":"t","pods":1,"gpus_per_pod":1}"#,
                "field `id`: duplicate id \"ok\" (first used on line 1)",
            ),
            (r#"{"id":"x","submit_s":0"#, "invalid JSON at column 22: EOF while parsing an object"),
            ("[1,2]", "expected a JSON object, found an array"),
        ];
        for (row, message) in cases {
            let text = format!("{good}\n\n{row}\n");
            assert_eq!(read(&text, false).unwrap_err().to_string(), format!("jobs.jsonl: line 3: {message}"));
            let read = read(&text, true).unwrap();
            assert_eq!((read.jobs.len(), read.skipped.len()), (1, 1));
            assert_eq!(read.skipped[0].line, 3);
            assert_eq!(read.skipped[0].message, message);
        }
    }

    #[test]
    fn writes_one_object_per_line() {
        let text = "{\"id\":\"a\",\"submit_s\":3,\"runtime_s\":60,\"tenant\":\"t\",\"priority\":0,\"pods\":1,\"gpus_per_pod\":1,\"cpu_milli_per_pod\":0,\"memory_mib_per_pod\":0,\"topology\":\"unconstrained\"}\n\
            {\"id\":\"b\",\"submit_s\":7,\"runtime_s\":61,\"runtime_estimate_s\":900,\"tenant\":\"t\",\"priority\":10,\"pods\":2,\"gpus_per_pod\":8,\"cpu_milli_per_pod\":100,\"memory_mib_per_pod\":5,\"topology\":\"preferred:rack\"}\n";
        let jobs = read(text, false).unwrap().jobs;
        let mut out = Vec::new();
        write_jsonl(&jobs, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), text);
    }

    #[test]
    fn pod_sets_and_slices_read_and_write_back() {
        let text = r#"{"id":"g","submit_s":0,"runtime_s":60,"tenant":"t","pods":8,"gpus_per_pod":8,"slice":"rack:4","pod_sets":"leader=1x1 required=rack"}
{"id":"h","submit_s":1,"runtime_s":60,"tenant":"t","pods":1,"gpus_per_pod":1}
"#;
        let jobs = read(text, false).unwrap().jobs;
        let g = &jobs[0].gang;
        assert_eq!(g.sets.len(), 2);
        assert_eq!((g.sets[0].slice.as_ref().map(|s| s.size), g.sets[1].name.as_str()), (Some(4), "leader"));
        let mut out = Vec::new();
        write_jsonl(&jobs, &mut out).unwrap();
        let written = String::from_utf8(out).unwrap();
        assert!(
            written.lines().nth(1).is_some_and(|l| !l.contains("pod_sets")),
            "one-set rows stay as they were: {written}"
        );
        let again = read(&written, false).unwrap().jobs;
        assert_eq!(again[0].gang, jobs[0].gang);
        let bad = r#"{"id":"g","submit_s":0,"runtime_s":60,"tenant":"t","pods":6,"gpus_per_pod":8,"slice":"rack:4"}"#;
        assert_eq!(
            read(bad, false).unwrap_err().to_string(),
            "jobs.jsonl: line 1: field `slice`: pod set \"main\": 6 pods do not divide into slices of 4"
        );
    }
}
