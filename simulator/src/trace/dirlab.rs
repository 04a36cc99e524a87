//! Reader for the DIR-LAB job tables of Philly and Helios (`u_id,user,gpu_num,cpu_num,node_num,interval,run_time,...`).
//!
//! Each row becomes a job `job-{u_id}` of tenant `user-{user}`, priority 0,
//! no runtime estimate, submitted at the running sum of `interval` (seconds
//! since the previous submission), running `run_time` seconds (at least 1).
//! The gang comes from
//! [`shape_gang`](super::shape_gang)`(gpu_num, Some(node_num), cpu_num, gpus_per_host)`.
//! A row skipped as bad still advances the clock by its `interval` when that
//! field itself is readable, so later jobs keep their true submit times.
//! `wall_time` and `new_status` are not used and may be absent.

use std::io::Read;

use super::collect::Collector;
use super::error::{RowError, TraceError};
use super::shape::shape_gang;
use super::table::{Row, non_empty, read_rows, runtime_seconds_whole, whole, whole_u32};
use crate::job::TraceJob;

/// Columns the reader needs.
const COLUMNS: &[&str] = &["u_id", "user", "gpu_num", "cpu_num", "node_num", "interval", "run_time"];

/// Reads every row into the collector, submit times already relative to the first row.
pub(crate) fn read(input: impl Read, coll: &mut Collector<'_>, gpus_per_host: u32) -> Result<(), TraceError> {
    let mut clock: u64 = 0;
    read_rows(input, coll, COLUMNS, &[], false, |row| {
        let interval = row.get("interval", whole)?;
        clock = clock
            .checked_add(interval)
            .ok_or_else(|| RowError::field(row.line, "interval", "submit time overflows"))?;
        parse_row(row, clock, gpus_per_host)
    })
}

fn parse_row(row: &Row<'_>, submit: u64, gpus_per_host: u32) -> Result<TraceJob, RowError> {
    let id = format!("job-{}", row.get("u_id", non_empty)?);
    let tenant = format!("user-{}", row.get("user", non_empty)?);
    let gpus = row.get("gpu_num", whole)?;
    let cpus = row.get("cpu_num", whole)?;
    let nodes = row.get("node_num", whole_u32)?;
    let runtime = row.get("run_time", runtime_seconds_whole)?;
    let (pods, pod) =
        shape_gang(gpus, Some(nodes), cpus, gpus_per_host).map_err(|m| RowError::field(row.line, "gpu_num", m))?;
    Ok(TraceJob::recorded(id, submit, runtime, tenant, (pods, pod), row.line))
}

#[cfg(test)]
mod tests {
    use trainyard_topology::Resources;

    use super::super::{ReadOptions, TraceFormat, read_trace};

    const HEADER: &str = "u_id,user,gpu_num,cpu_num,node_num,interval,run_time,wall_time,new_status\r\n";

    #[test]
    fn parses_a_small_sample_with_crlf() {
        let text = format!(
            "{HEADER}0,1,1,1,1,0,84,0,Pass\r\n1,7,16,64,2,94,0,0,Failed\r\n2,1,0,16,2,151,30,0,Killed\r\n3,2,8,0,4,0,5,0,Pass\r\n"
        );
        let read = read_trace(TraceFormat::DirLab, text.as_bytes(), "h.csv", &ReadOptions::default()).unwrap();
        let jobs = read.jobs;
        assert_eq!(jobs.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(), ["job-0", "job-1", "job-2", "job-3"]);
        assert_eq!(jobs.iter().map(|j| j.submit).collect::<Vec<_>>(), [0, 94, 245, 245]);
        assert_eq!(jobs.iter().map(|j| j.runtime).collect::<Vec<_>>(), [84, 1, 30, 5]);
        assert_eq!(jobs.iter().map(|j| j.line).collect::<Vec<_>>(), [2, 3, 4, 5]);
        assert_eq!(jobs[1].tenant, "user-7");
        assert_eq!(jobs[1].runtime_estimate, None);
        assert_eq!(jobs[1].gang.pods(), 2);
        assert_eq!(jobs[1].gang.sets[0].pod, Resources { gpus: 8, cpu_milli: 32_000, memory_mib: 0 });
        assert_eq!(jobs[0].gang.sets[0].pod, Resources { gpus: 1, cpu_milli: 1_000, memory_mib: 0 });
        assert_eq!(
            (jobs[2].gang.pods(), jobs[2].gang.sets[0].pod),
            (2, Resources { gpus: 0, cpu_milli: 8_000, memory_mib: 0 })
        );
        assert_eq!((jobs[3].gang.pods(), jobs[3].gang.sets[0].pod), (4, Resources::gpus(2)));
    }

    #[test]
    fn bad_rows_name_line_and_field_and_keep_the_clock() {
        let text = format!(
            "{HEADER}0,1,1,0,1,10,84,0,Pass\n1,1,two,0,1,20,84,0,Pass\n2,1,0,0,1,30,84,0,Pass\n3,1,1,0,1,x,84,0,Pass\n4,1,1,0,1,5,84,0,Pass\n"
        );
        let err = read_trace(TraceFormat::DirLab, text.as_bytes(), "helios.csv", &ReadOptions::default()).unwrap_err();
        assert_eq!(err.to_string(), "helios.csv: line 3: field `gpu_num`: expected a whole number, found \"two\"");
        let opts = ReadOptions { skip_bad_rows: true, ..ReadOptions::default() };
        let read = read_trace(TraceFormat::DirLab, text.as_bytes(), "helios.csv", &opts).unwrap();
        let messages: Vec<String> = read.skipped.iter().map(|w| w.to_string()).collect();
        assert_eq!(
            messages,
            [
                "line 3: field `gpu_num`: expected a whole number, found \"two\"",
                "line 4: field `gpu_num`: job asks for no GPUs and no CPUs",
                "line 5: field `interval`: expected a whole number, found \"x\"",
            ]
        );
        // Rows 3 and 4 still advanced the clock (10 + 20 + 30); row 5 could not.
        assert_eq!(
            read.jobs.iter().map(|j| (j.id.as_str(), j.submit)).collect::<Vec<_>>(),
            [("job-0", 10), ("job-4", 65)]
        );
    }

    #[test]
    fn duplicate_ids_are_bad_rows() {
        let text = format!("{HEADER}7,1,1,0,1,0,84,0,Pass\n7,1,1,0,1,0,84,0,Pass\n");
        let err = read_trace(TraceFormat::DirLab, text.as_bytes(), "d.csv", &ReadOptions::default()).unwrap_err();
        assert_eq!(err.to_string(), "d.csv: line 3: field `u_id`: duplicate id \"job-7\" (first used on line 2)");
    }
}
