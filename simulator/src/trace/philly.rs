//! Reader for the Philly job table of the Pollux artifact (`timestamp,duration,num_gpus,gpu_time,cluster`).
//!
//! Each row becomes a job `philly-{line}`: submitted at its timestamp minus
//! the earliest timestamp of the file (rows are not sorted in the file), running
//! `duration` seconds rounded to the nearest second (at least 1), in tenant =
//! the virtual cluster (`cluster`), priority 0, no runtime estimate. The gang
//! comes from [`shape_gang`](super::shape_gang)`(num_gpus, None, 0, gpus_per_host)`.
//! `gpu_time` is not used and may be absent.

use std::io::Read;

use super::civil::{SECONDS_FROM_YEAR_1_TO_UNIX, parse_timestamp};
use super::collect::Collector;
use super::error::{RowError, TraceError};
use super::shape::shape_gang;
use super::table::{Row, non_empty, read_rows, runtime_seconds, whole};
use crate::job::TraceJob;

/// Columns the reader needs.
const COLUMNS: &[&str] = &["timestamp", "duration", "num_gpus", "cluster"];

/// Reads every row into the collector; submit times are absolute (seconds
/// since 0001-01-01) and must be shifted by the caller's `finish(true)`.
pub(crate) fn read(input: impl Read, coll: &mut Collector<'_>, gpus_per_host: u32) -> Result<(), TraceError> {
    read_rows(input, coll, COLUMNS, &[], false, |row| parse_row(row, gpus_per_host))
}

fn parse_row(row: &Row<'_>, gpus_per_host: u32) -> Result<TraceJob, RowError> {
    let submit = row.get("timestamp", |t| {
        let unix = parse_timestamp(t)?;
        u64::try_from(unix + SECONDS_FROM_YEAR_1_TO_UNIX).map_err(|_| format!("out of range, found {t:?}"))
    })?;
    let runtime = row.get("duration", runtime_seconds)?;
    let gpus = row.get("num_gpus", whole)?;
    let tenant = row.get("cluster", non_empty)?.to_string();
    let (pods, pod) = shape_gang(gpus, None, 0, gpus_per_host).map_err(|m| RowError::field(row.line, "num_gpus", m))?;
    Ok(TraceJob::recorded(format!("philly-{}", row.line), submit, runtime, tenant, (pods, pod), row.line))
}

#[cfg(test)]
mod tests {
    use trainyard_topology::Resources;

    use super::super::{ReadOptions, TraceFormat, read_trace};

    const SAMPLE: &str = "timestamp,duration,num_gpus,gpu_time,cluster\n\
        2017-10-09 07:01:55,66.0,1,66.0,11cb48\n\
        2017-10-09 06:13:03,2951.4,12,35416.8,6214e9\n\
        \n\
        2017-10-09 06:13:03,0.3,2,0.6,6c71a0\n\
        \n";

    #[test]
    fn parses_a_small_sample() {
        let read = read_trace(TraceFormat::Philly, SAMPLE.as_bytes(), "p.csv", &ReadOptions::default()).unwrap();
        assert!(read.skipped.is_empty());
        let jobs = read.jobs;
        assert_eq!(jobs.len(), 3);
        // Sorted by (submit, line); the blank line 4 still counts as a line.
        assert_eq!(jobs.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(), ["philly-3", "philly-5", "philly-2"]);
        assert_eq!(jobs.iter().map(|j| j.submit).collect::<Vec<_>>(), [0, 0, 2932]);
        assert_eq!(jobs.iter().map(|j| j.runtime).collect::<Vec<_>>(), [2951, 1, 66]);
        assert_eq!(jobs.iter().map(|j| j.line).collect::<Vec<_>>(), [3, 5, 2]);
        assert_eq!(jobs[0].tenant, "6214e9");
        assert_eq!(jobs[0].priority, 0);
        assert_eq!(jobs[0].runtime_estimate, None);
        assert_eq!((jobs[0].gang.pods(), jobs[0].gang.sets[0].pod), (2, Resources::gpus(6)));
        assert_eq!((jobs[1].gang.pods(), jobs[1].gang.sets[0].pod), (1, Resources::gpus(2)));
        assert_eq!(jobs[2].gang.topology, trainyard_topology::TopologyRequest::Unconstrained);
    }

    #[test]
    fn bad_rows_name_line_and_field() {
        let cases = [
            ("2017-10-09 07:01:55,66.0,x,66.0,11cb48", "field `num_gpus`: expected a whole number, found \"x\""),
            (
                "2017-02-30 07:01:55,66.0,1,66.0,11cb48",
                "field `timestamp`: day 30 is out of range for 2017-02 (28 days) in \"2017-02-30 07:01:55\"",
            ),
            ("2017-10-09 07:01:55,-5,1,66.0,11cb48", "field `duration`: must not be negative, found \"-5\""),
            ("2017-10-09 07:01:55,66.0,0,66.0,11cb48", "field `num_gpus`: job asks for no GPUs and no CPUs"),
            ("2017-10-09 07:01:55,66.0,1,66.0,", "field `cluster`: must not be empty"),
            ("2017-10-09 07:01:55,66.0,1", "expected 5 fields like the header, found 3"),
        ];
        for (row, message) in cases {
            let text =
                format!("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 06:00:00,1.0,1,1.0,a\n{row}\n");
            let err =
                read_trace(TraceFormat::Philly, text.as_bytes(), "philly.csv", &ReadOptions::default()).unwrap_err();
            assert_eq!(err.to_string(), format!("philly.csv: line 3: {message}"));
            let opts = ReadOptions { skip_bad_rows: true, ..ReadOptions::default() };
            let read = read_trace(TraceFormat::Philly, text.as_bytes(), "philly.csv", &opts).unwrap();
            assert_eq!(read.jobs.len(), 1);
            assert_eq!(read.skipped.len(), 1);
            assert_eq!(read.skipped[0].line, 3);
            assert_eq!(read.skipped[0].message, message);
        }
    }

    #[test]
    fn header_must_have_the_columns() {
        let err =
            read_trace(TraceFormat::Philly, "timestamp,gpus,cluster\n".as_bytes(), "p.csv", &ReadOptions::default())
                .unwrap_err();
        assert_eq!(
            err.to_string(),
            "p.csv: line 1: header is missing column(s) `duration`, `num_gpus`; found `timestamp,gpus,cluster`"
        );
    }
}
