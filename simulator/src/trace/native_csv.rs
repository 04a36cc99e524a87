//! trainyard's own CSV trace format: reader and writer.
//!
//! Header (column order is free, but no column may be missing or unknown):
//! `id,submit_s,runtime_s,runtime_estimate_s,tenant,priority,pods,gpus_per_pod,cpu_milli_per_pod,memory_mib_per_pod,topology`,
//! and optionally `slice` (`<level>:<size>`: the row's pods in slices, each inside one domain)
//! and `pod_sets` (the gang's other pod sets, see `native::pod_sets`), `search`
//! (`<name>:<parallel>[:max|min]`: the row is a trial of that search) and `objective` (the
//! trial's reported metric, a finite number).
//! Submit times are taken as written. `runtime_estimate_s` and `topology` may
//! be empty (no estimate, unconstrained); empty `priority`,
//! `cpu_milli_per_pod` and `memory_mib_per_pod` mean 0. `priority` may be
//! negative. `topology` is `unconstrained`, `preferred:<level>` or
//! `required:<level>`. Spaces around fields are trimmed; quote fields per
//! RFC 4180 when they hold commas, quotes or line breaks (the writer does).

use std::io::{self, Read, Write};

use super::collect::Collector;
use super::error::{RowError, TraceError};
use super::native::{
    COLUMNS, NativeRow, OPTIONAL_COLUMNS, claims, claims_text, gpu_layout, gpu_layout_text, objective, objective_text,
    pod_sets, pod_sets_text, search, search_text, slice, slice_text, topology, tpu, tpu_text,
};
use super::table::{Row, integer_i32, read_rows, whole, whole_u32};
use crate::job::TraceJob;

/// Reads every row into the collector.
pub(crate) fn read(input: impl Read, coll: &mut Collector<'_>) -> Result<(), TraceError> {
    read_rows(input, coll, &COLUMNS, &OPTIONAL_COLUMNS, true, parse_row)
}

/// `parse` applied to a non-empty text, `default` for an empty one.
fn or_default<T>(default: T, parse: impl FnOnce(&str) -> Result<T, String>) -> impl FnOnce(&str) -> Result<T, String> {
    move |text| if text.is_empty() { Ok(default) } else { parse(text) }
}

fn parse_row(row: &Row<'_>) -> Result<TraceJob, RowError> {
    let parsed = NativeRow {
        id: row.text("id")?.to_string(),
        submit_s: row.get("submit_s", whole)?,
        runtime_s: row.get("runtime_s", whole)?,
        runtime_estimate_s: row.get("runtime_estimate_s", or_default(None, |t| whole(t).map(Some)))?,
        tenant: row.text("tenant")?.to_string(),
        priority: row.get("priority", or_default(0, integer_i32))?,
        pods: row.get("pods", whole_u32)?,
        gpus_per_pod: row.get("gpus_per_pod", whole)?,
        cpu_milli_per_pod: row.get("cpu_milli_per_pod", or_default(0, whole))?,
        memory_mib_per_pod: row.get("memory_mib_per_pod", or_default(0, whole))?,
        topology: row.get("topology", topology)?,
        slice: row.get_optional("slice", slice)?,
        pod_sets: row.get_optional("pod_sets", pod_sets)?,
        tpu: row.get_optional("tpu", tpu)?,
        gpu_layout: row.get_optional("gpu_layout", gpu_layout)?,
        claims: row.get_optional("claims", claims)?,
        search: row.get_optional("search", search)?,
        objective: row.get_optional("objective", objective)?,
    };
    parsed.into_job(row.line)
}

/// Writes the jobs, in the given order, as trainyard CSV.
pub(crate) fn write(jobs: &[TraceJob], out: impl Write) -> Result<(), TraceError> {
    let fail = |e: csv::Error| TraceError::Write { format: "csv", error: io::Error::from(e) };
    let mut writer = csv::WriterBuilder::new().terminator(csv::Terminator::Any(b'\n')).from_writer(out);
    let rows: Vec<NativeRow> = jobs.iter().map(NativeRow::from_job).collect();
    // Files of one-set gangs keep the columns every earlier reader knows.
    let rich = rows.iter().any(NativeRow::is_rich);
    let with_tpu = rows.iter().any(NativeRow::has_tpu);
    let mut header: Vec<&str> = COLUMNS.to_vec();
    if rich {
        header.extend(&OPTIONAL_COLUMNS[..2]);
    }
    if with_tpu {
        header.push(OPTIONAL_COLUMNS[2]);
    }
    let with_layout = rows.iter().any(NativeRow::has_gpu_layout);
    if with_layout {
        header.push(OPTIONAL_COLUMNS[3]);
    }
    let with_claims = rows.iter().any(NativeRow::has_claims);
    if with_claims {
        header.push(OPTIONAL_COLUMNS[4]);
    }
    let with_trials = rows.iter().any(NativeRow::is_trial);
    if with_trials {
        header.extend(&OPTIONAL_COLUMNS[5..7]);
    }
    writer.write_record(&header).map_err(fail)?;
    for r in rows {
        let mut extra: Vec<String> = Vec::new();
        if rich {
            extra.extend([slice_text(r.slice.as_ref()), pod_sets_text(&r.pod_sets)]);
        }
        if with_tpu {
            extra.push(tpu_text(r.tpu.as_ref()));
        }
        if with_layout {
            extra.push(gpu_layout_text(r.gpu_layout));
        }
        if with_claims {
            extra.push(claims_text(&r.claims));
        }
        if with_trials {
            extra.extend([search_text(r.search.as_ref()), objective_text(r.objective)]);
        }
        let fields = [
            r.id,
            r.submit_s.to_string(),
            r.runtime_s.to_string(),
            r.runtime_estimate_s.map(|s| s.to_string()).unwrap_or_default(),
            r.tenant,
            r.priority.to_string(),
            r.pods.to_string(),
            r.gpus_per_pod.to_string(),
            r.cpu_milli_per_pod.to_string(),
            r.memory_mib_per_pod.to_string(),
            r.topology.to_string(),
        ];
        writer.write_record(fields.into_iter().chain(extra)).map_err(fail)?;
    }
    writer.flush().map_err(|error| TraceError::Write { format: "csv", error })
}

#[cfg(test)]
mod tests {
    use trainyard_topology::{Resources, TopologyRequest};

    use super::super::{ReadOptions, TraceFormat, read_trace, write_csv};

    const HEADER: &str = "id,submit_s,runtime_s,runtime_estimate_s,tenant,priority,pods,gpus_per_pod,cpu_milli_per_pod,memory_mib_per_pod,topology\n";

    fn read(text: &str, skip: bool) -> Result<super::super::TraceRead, super::super::TraceError> {
        let opts = ReadOptions { skip_bad_rows: skip, ..ReadOptions::default() };
        read_trace(TraceFormat::Csv, text.as_bytes(), "jobs.csv", &opts)
    }

    #[test]
    fn parses_a_small_sample() {
        let text = format!(
            "{HEADER}b,30,600,900,team-a,-5,2,8,32000,65536,required:rack\n\
             a,30,60,,\"team, b\",10,1,0,500,,\n\
             c,5,1,,team-a,,1,1,,,preferred:block\n"
        );
        let jobs = read(&text, false).unwrap().jobs;
        assert_eq!(jobs.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(), ["c", "b", "a"]);
        let b = &jobs[1];
        assert_eq!((b.submit, b.runtime, b.runtime_estimate, b.priority, b.line), (30, 600, Some(900), -5, 2));
        assert_eq!(b.tenant, "team-a");
        assert_eq!(b.gang.pods(), 2);
        assert_eq!(b.gang.sets[0].pod, Resources { gpus: 8, cpu_milli: 32_000, memory_mib: 65_536 });
        assert_eq!(b.gang.topology, TopologyRequest::Required("rack".into()));
        let a = &jobs[2];
        assert_eq!((a.runtime_estimate, a.priority, a.tenant.as_str()), (None, 10, "team, b"));
        assert_eq!(a.gang.sets[0].pod, Resources { gpus: 0, cpu_milli: 500, memory_mib: 0 });
        assert_eq!(a.gang.topology, TopologyRequest::Unconstrained);
        assert_eq!((jobs[0].priority, jobs[0].gang.topology.clone()), (0, TopologyRequest::Preferred("block".into())));
    }

    #[test]
    fn lines_are_file_lines_across_blank_lines_crlf_and_quoted_breaks() {
        let text = format!(
            "\n{}\r\n\r\na,0,60,,\"multi\r\nline\",0,1,1,0,0,\r\n\r\n  \r\nb,1,60,,t,0,1,1,0,0,\r\nc,0,60,,t,0,1,x,0,0,\n",
            HEADER.trim_end()
        );
        /// Hands out one byte per read, so line breaks straddle every buffer boundary.
        struct Trickle<'a>(&'a [u8]);
        impl std::io::Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                match (self.0.split_first(), buf.first_mut()) {
                    (Some((&b, rest)), Some(slot)) => {
                        *slot = b;
                        self.0 = rest;
                        Ok(1)
                    }
                    _ => Ok(0),
                }
            }
        }
        let opts = ReadOptions { skip_bad_rows: true, ..ReadOptions::default() };
        for input in [
            read_trace(TraceFormat::Csv, text.as_bytes(), "l.csv", &opts),
            read_trace(TraceFormat::Csv, Trickle(text.as_bytes()), "l.csv", &opts),
        ] {
            let read = input.unwrap();
            assert_eq!(read.jobs.iter().map(|j| (j.id.as_str(), j.line)).collect::<Vec<_>>(), [("a", 4), ("b", 8)]);
            // Every line ending reads as LF, inside quotes too (`trace/line_ends.rs`).
            assert_eq!(read.jobs[0].tenant, "multi\nline");
            assert_eq!(
                read.skipped[0].to_string(),
                "line 9: field `gpus_per_pod`: expected a whole number, found \"x\""
            );
        }
    }

    #[test]
    fn bad_rows_name_line_and_field() {
        let good = "ok,0,60,,t,0,1,1,0,0,\n";
        let cases = [
            ("x,0,60,,t,0,0,1,0,0,", "field `pods`: must be at least 1"),
            (
                "x,0,60,,t,0,1,0,0,0,",
                "field `gpus_per_pod`: a pod must ask for GPUs, CPU or memory, but all three are 0",
            ),
            ("x,soon,60,,t,0,1,1,0,0,", "field `submit_s`: expected a whole number, found \"soon\""),
            ("x,0,0,,t,0,1,1,0,0,", "field `runtime_s`: must be at least 1"),
            ("x,0,60,,t,high,1,1,0,0,", "field `priority`: expected an integer, found \"high\""),
            ("x,0,60,,,0,1,1,0,0,", "field `tenant`: must not be empty"),
            (
                "x,0,60,,t,0,1,1,0,0,strict:rack",
                "field `topology`: `strict:rack` is not a topology request; use `unconstrained`, `preferred:<level>` or `required:<level>`",
            ),
            ("ok,0,60,,t,0,1,1,0,0,", "field `id`: duplicate id \"ok\" (first used on line 2)"),
            ("x,0,60", "expected 11 fields like the header, found 3"),
        ];
        for (row, message) in cases {
            let text = format!("{HEADER}{good}{row}\n");
            assert_eq!(read(&text, false).unwrap_err().to_string(), format!("jobs.csv: line 3: {message}"));
            let read = read(&text, true).unwrap();
            assert_eq!((read.jobs.len(), read.skipped.len()), (1, 1));
            assert_eq!(read.skipped[0].to_string(), format!("line 3: {message}"));
        }
    }

    #[test]
    fn header_must_be_exact() {
        let missing = read("id,submit_s,runtime_s\n", false).unwrap_err().to_string();
        assert!(
            missing.starts_with("jobs.csv: line 1: header is missing column(s) `runtime_estimate_s`, `tenant`,"),
            "{missing}"
        );
        let extra = HEADER.trim_end().to_string() + ",colour\n";
        let unknown = read(&extra, false).unwrap_err().to_string();
        assert!(
            unknown.starts_with("jobs.csv: line 1: header has unknown column(s) `colour`; expected `id,submit_s,"),
            "{unknown}"
        );
    }

    #[test]
    fn empty_traces_have_no_jobs() {
        assert_eq!(read("", false).unwrap_err().to_string(), "jobs.csv: no jobs");
        assert_eq!(read(HEADER, false).unwrap_err().to_string(), "jobs.csv: no jobs");
        let all_bad = format!("{HEADER}x,0,0,,t,0,1,1,0,0,\n");
        assert_eq!(
            read(&all_bad, true).unwrap_err().to_string(),
            "jobs.csv: no jobs (1 bad row skipped: line 2: field `runtime_s`: must be at least 1)"
        );
    }

    #[test]
    fn writes_the_documented_format() {
        let text = format!(
            "{HEADER}b,30,600,900,team-a,-5,2,8,32000,65536,required:rack\na,31,60,,\"team, b\",10,1,0,500,0,unconstrained\n"
        );
        let jobs = read(&text, false).unwrap().jobs;
        let mut out = Vec::new();
        write_csv(&jobs, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), text);
    }

    const RICH_HEADER: &str = "id,submit_s,runtime_s,runtime_estimate_s,tenant,priority,pods,gpus_per_pod,cpu_milli_per_pod,memory_mib_per_pod,topology,slice,pod_sets\n";

    #[test]
    fn pod_sets_and_slices_read_and_write_back() {
        let text = format!(
            "{RICH_HEADER}a,0,60,,t,0,8,8,0,0,required:block,rack:4,\n\
             b,0,60,,t,0,16,8,0,0,,,launcher=1x0 cpu_milli=4000;workers=4x8 required=rack slice=host:2\n\
             c,1,60,,t,0,1,8,0,0,,,\n"
        );
        let jobs = read(&text, false).unwrap().jobs;
        let sets = |i: usize| jobs[i].gang.sets.iter().map(|s| (s.name.as_str(), s.pods)).collect::<Vec<_>>();
        assert_eq!(
            jobs[0].gang.sets[0].slice,
            Some(trainyard_topology::SliceRequest { level: "rack".into(), size: 4 })
        );
        assert_eq!(sets(1), [("main", 16), ("launcher", 1), ("workers", 4)]);
        let workers = &jobs[1].gang.sets[2];
        assert_eq!(workers.topology, TopologyRequest::Required("rack".into()));
        assert_eq!(workers.slice.as_ref().map(|s| s.size), Some(2));
        assert_eq!(jobs[1].gang.sets[1].pod, Resources { gpus: 0, cpu_milli: 4000, memory_mib: 0 });
        assert!(jobs[2].gang.is_simple());
        let mut out = Vec::new();
        write_csv(&jobs, &mut out).unwrap();
        let again = read(&String::from_utf8(out).unwrap(), false).unwrap().jobs;
        assert_eq!(again.iter().map(|j| &j.gang).collect::<Vec<_>>(), jobs.iter().map(|j| &j.gang).collect::<Vec<_>>());
    }

    #[test]
    fn bad_pod_sets_name_line_and_field() {
        let good = "ok,0,60,,t,0,1,1,0,0,,,\n";
        let cases = [
            ("x,0,60,,t,0,6,1,0,0,,rack:4,", "field `slice`: pod set \"main\": 6 pods do not divide into slices of 4"),
            (
                "x,0,60,,t,0,1,1,0,0,,rack,",
                "field `slice`: \"rack\" is not a slice; write <level>:<pods per slice>, e.g. rack:4",
            ),
            ("x,0,60,,t,0,1,1,0,0,,,w=1x1;w=2x1", "field `pod_sets`: pod set \"w\": two pod sets have this name"),
            ("x,0,60,,t,0,1,1,0,0,,,main=1x1", "field `pod_sets`: pod set \"main\": two pod sets have this name"),
            ("x,0,60,,t,0,1,1,0,0,,,w=0x1", "field `pod_sets`: pod set 1 (\"w=0x1\"): a pod set needs at least 1 pod"),
            (
                "x,0,60,,t,0,1,1,0,0,,,w=2x1 colour=red",
                "field `pod_sets`: pod set 1 (\"w=2x1 colour=red\"): unknown key \"colour\"; use cpu_milli, memory_mib, required, slice, tpu, layout or claims",
            ),
            ("x,0,60,,t,0,1,1,0,0,,,w", "field `pod_sets`: pod set 1 (\"w\"): write <name>=<pods>x<gpus per pod>"),
        ];
        for (row, message) in cases {
            let text = format!("{RICH_HEADER}{good}{row}\n");
            assert_eq!(read(&text, false).unwrap_err().to_string(), format!("jobs.csv: line 3: {message}"), "{row}");
        }
    }

    #[test]
    fn files_of_one_set_gangs_are_written_without_the_new_columns() {
        let text = format!("{RICH_HEADER}a,0,60,,t,0,2,8,0,0,unconstrained,,\n");
        let jobs = read(&text, false).unwrap().jobs;
        let mut out = Vec::new();
        write_csv(&jobs, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), format!("{HEADER}a,0,60,,t,0,2,8,0,0,unconstrained\n"));
    }

    #[test]
    fn gpu_layouts_round_trip_and_bad_ones_name_line_and_field() {
        let header = HEADER.trim_end().to_string() + ",pod_sets,gpu_layout\n";
        let text = format!("{header}a,0,60,,t,0,2,2,0,0,,l=1x2 layout=switch,switch\n");
        let jobs = read(&text, false).unwrap().jobs;
        assert_eq!(jobs[0].gang.sets[0].gpu_layout, Some(trainyard_topology::GpuLayout::Switch));
        assert_eq!(jobs[0].gang.sets[1].gpu_layout, Some(trainyard_topology::GpuLayout::Switch));
        let mut out = Vec::new();
        write_csv(&jobs, &mut out).unwrap();
        let written = String::from_utf8(out).unwrap();
        assert!(written.ends_with(",,l=1x2 layout=switch,switch\n"), "{written}");
        assert_eq!(read(&written, false).unwrap().jobs, jobs);
        let cases = [
            (
                "x,0,60,,t,0,1,1,0,0,,,pcie",
                "field `gpu_layout`: `pcie` is not a GPU layout; use `switch` (one PCIe switch per pod) or `numa` (one NUMA node per pod)",
            ),
            (
                "x,0,60,,t,0,1,2,0,0,,l=1x4 layout=numa,switch",
                "field `pod_sets`: pod set \"l\": asks for 4 GPUs per pod within one numa, but pod set \"main\" asks for 2 within one switch; the pod sets of one gang that ask for a GPU layout must ask for the same one",
            ),
            (
                "x,0,60,,t,0,1,0,1000,0,,,switch",
                "field `gpu_layout`: pod set \"main\": a GPU layout needs 1 to 64 GPUs per pod, not 0",
            ),
        ];
        for (row, message) in cases {
            let text = format!("{header}{row}\n");
            assert_eq!(read(&text, false).unwrap_err().to_string(), format!("jobs.csv: line 2: {message}"), "{row}");
        }
    }

    #[test]
    fn claim_templates_round_trip_and_bad_ones_name_line_and_field() {
        let header = HEADER.trim_end().to_string() + ",pod_sets,claims\n";
        let text = format!("{header}a,0,60,,t,0,2,1,0,0,,l=1x0 cpu_milli=500,gpu-nic-pair+scratch.v1\n");
        let jobs = read(&text, false).unwrap().jobs;
        assert_eq!(jobs[0].gang.sets[0].claims, ["gpu-nic-pair", "scratch.v1"]);
        assert!(jobs[0].gang.sets[1].claims.is_empty());
        let mut out = Vec::new();
        write_csv(&jobs, &mut out).unwrap();
        let written = String::from_utf8(out).unwrap();
        assert!(written.ends_with(",,l=1x0 cpu_milli=500,gpu-nic-pair+scratch.v1\n"), "{written}");
        assert_eq!(read(&written, false).unwrap().jobs, jobs);
        let cases = [
            (
                "x,0,60,,t,0,1,1,0,0,,,GPU_pair",
                "field `claims`: \"GPU_pair\" is not a ResourceClaimTemplate name (lower-case letters, digits, '-' and '.'); join several with '+'",
            ),
            (
                "x,0,60,,t,0,1,1,0,0,,w=1x1 claims=other,gpu-nic-pair",
                "field `pod_sets`: pod set \"w\": carries claims [\"other\"] on pods of 1 GPU, but pod set \"main\" carries [\"gpu-nic-pair\"] on pods of 1 GPU; the pod sets of one gang that carry device claims must carry the same ones on the same pods",
            ),
        ];
        for (row, message) in cases {
            let text = format!("{header}{row}\n");
            assert_eq!(read(&text, false).unwrap_err().to_string(), format!("jobs.csv: line 2: {message}"), "{row}");
        }
    }
}
