//! Trace readers and writers, and a synthetic trace generator.
//!
//! Four input formats become [`TraceJob`]s:
//!
//! | format | file | submit | tenant | id |
//! |---|---|---|---|---|
//! | `philly` | Pollux's Philly table `timestamp,duration,num_gpus,gpu_time,cluster` | timestamp minus the earliest | `cluster` (the VC) | `philly-{line}` |
//! | `dirlab` (`helios`, `philly-dirlab`) | DIR-LAB tables `u_id,user,gpu_num,cpu_num,node_num,interval,run_time,...` | running sum of `interval` | `user-{user}` | `job-{u_id}` |
//! | `csv` | trainyard's own CSV (see [`write_csv`]) | as written | `tenant` | `id` |
//! | `jsonl` | the same fields, one JSON object per line | as written | `tenant` | `id` |
//!
//! The external traces record totals; [`shape_gang`] turns them into gangs of
//! identical pods. Everything is sans-IO: readers take any [`Read`], writers
//! any [`Write`], and nothing here opens files or reads the clock. Bad input
//! never panics: it is a [`TraceError`] naming the input, the 1-based line
//! and the field, or, with [`ReadOptions::skip_bad_rows`], a [`RowWarning`].
//! The jobs of a read are sorted by `(submit, line)` and have unique ids.

mod civil;
mod collect;
mod dirlab;
mod error;
mod jsonl;
mod line_ends;
mod native;
mod native_csv;
mod philly;
mod shape;
mod synth;
mod table;

#[cfg(test)]
mod fixture_tests;
#[cfg(test)]
mod trial_tests;

use std::fmt;
use std::io::{Read, Write};
use std::str::FromStr;

pub use error::{RowWarning, TraceError};
pub use shape::shape_gang;
pub use synth::{SynthConfig, synthesize};

use crate::job::TraceJob;
use collect::Collector;

/// The trace formats [`read_trace`] understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TraceFormat {
    /// Microsoft Philly job table of the Pollux artifact (`philly.csv`).
    Philly,
    /// DIR-LAB job tables of Philly and Helios (`*_data_training.csv`).
    DirLab,
    /// trainyard's own CSV.
    Csv,
    /// trainyard's own JSON lines.
    Jsonl,
}

/// A format name that [`TraceFormat::from_str`] does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown trace format `{0}`; use one of: philly, dirlab (or helios, philly-dirlab), csv, jsonl")]
pub struct ParseTraceFormatError(pub String);

impl TraceFormat {
    /// Every format, in help-text order.
    pub const ALL: [TraceFormat; 4] = [TraceFormat::Philly, TraceFormat::DirLab, TraceFormat::Csv, TraceFormat::Jsonl];

    /// Canonical names of [`TraceFormat::ALL`], for help text.
    pub const NAMES: [&'static str; 4] = ["philly", "dirlab", "csv", "jsonl"];

    /// The canonical name (what [`Display`](fmt::Display) prints).
    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Philly => "philly",
            TraceFormat::DirLab => "dirlab",
            TraceFormat::Csv => "csv",
            TraceFormat::Jsonl => "jsonl",
        }
    }

    /// One line describing the format, for help text.
    pub fn description(self) -> &'static str {
        match self {
            TraceFormat::Philly => "Philly job table of Pollux (timestamp,duration,num_gpus,gpu_time,cluster)",
            TraceFormat::DirLab => {
                "DIR-LAB Philly/Helios table (u_id,user,gpu_num,cpu_num,node_num,interval,run_time,...)"
            }
            TraceFormat::Csv => "trainyard CSV (id,submit_s,runtime_s,...,topology)",
            TraceFormat::Jsonl => "trainyard JSON lines, one job object per line",
        }
    }

    /// Guesses the format from the first line of a file: a leading `{` is
    /// JSONL, otherwise the header's column names decide. `None` when nothing matches.
    pub fn detect(first_line: &str) -> Option<TraceFormat> {
        let line = first_line.trim_start_matches('\u{feff}').trim();
        if line.starts_with('{') {
            return Some(TraceFormat::Jsonl);
        }
        let columns: Vec<&str> = line.split(',').map(|c| c.trim().trim_matches('"')).collect();
        let has = |names: &[&str]| names.iter().all(|n| columns.contains(n));
        if has(&["id", "submit_s", "runtime_s"]) {
            Some(TraceFormat::Csv)
        } else if has(&["timestamp", "duration", "num_gpus"]) {
            Some(TraceFormat::Philly)
        } else if has(&["u_id", "gpu_num", "node_num", "interval", "run_time"]) {
            Some(TraceFormat::DirLab)
        } else {
            None
        }
    }
}

impl fmt::Display for TraceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TraceFormat {
    type Err = ParseTraceFormatError;

    /// Canonical names plus the aliases `helios` and `philly-dirlab` for
    /// `dirlab`; ASCII case is ignored.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "philly" => Ok(TraceFormat::Philly),
            "dirlab" | "helios" | "philly-dirlab" => Ok(TraceFormat::DirLab),
            "csv" => Ok(TraceFormat::Csv),
            "jsonl" => Ok(TraceFormat::Jsonl),
            _ => Err(ParseTraceFormatError(s.to_string())),
        }
    }
}

/// How to read a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadOptions {
    /// GPUs per host, used to shape the gangs of `philly` and `dirlab` jobs.
    pub gpus_per_host: u32,
    /// Turn bad rows into [`RowWarning`]s instead of failing on the first.
    pub skip_bad_rows: bool,
}

impl Default for ReadOptions {
    /// 8 GPUs per host, bad rows are errors.
    fn default() -> Self {
        ReadOptions { gpus_per_host: 8, skip_bad_rows: false }
    }
}

/// What [`read_trace`] produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceRead {
    /// The jobs, sorted by `(submit, line)`; never empty.
    pub jobs: Vec<TraceJob>,
    /// Rows skipped as bad (only with [`ReadOptions::skip_bad_rows`]), in file order.
    pub skipped: Vec<RowWarning>,
}

/// Reads a whole trace of the given format. `source` names the input in
/// messages (usually the file name). Without `skip_bad_rows` the first bad
/// row is the error; a trace without jobs is [`TraceError::NoJobs`].
pub fn read_trace(
    format: TraceFormat,
    input: impl Read,
    source: &str,
    opts: &ReadOptions,
) -> Result<TraceRead, TraceError> {
    let needs_hosts = matches!(format, TraceFormat::Philly | TraceFormat::DirLab);
    if needs_hosts && opts.gpus_per_host == 0 {
        return Err(TraceError::Options {
            input: source.to_string(),
            message: format!("gpus_per_host must be at least 1 to shape {format} jobs"),
        });
    }
    let input = line_ends::LineEnds::new(input);
    match format {
        TraceFormat::Philly => {
            let mut coll = Collector::new(source, opts, "id");
            philly::read(input, &mut coll, opts.gpus_per_host)?;
            coll.finish(true)
        }
        TraceFormat::DirLab => {
            let mut coll = Collector::new(source, opts, "u_id");
            dirlab::read(input, &mut coll, opts.gpus_per_host)?;
            coll.finish(false)
        }
        TraceFormat::Csv => {
            let mut coll = Collector::new(source, opts, "id");
            native_csv::read(input, &mut coll)?;
            coll.finish(false)
        }
        TraceFormat::Jsonl => {
            let mut coll = Collector::new(source, opts, "id");
            jsonl::read(input, &mut coll)?;
            coll.finish(false)
        }
    }
}

/// Writes jobs, in the given order, as trainyard CSV: the header
/// `id,submit_s,runtime_s,runtime_estimate_s,tenant,priority,pods,gpus_per_pod,cpu_milli_per_pod,memory_mib_per_pod,topology`
/// then one row per job (empty `runtime_estimate_s` for none, topology in
/// its text form), `\n`-terminated.
pub fn write_csv(jobs: &[TraceJob], out: impl Write) -> Result<(), TraceError> {
    native_csv::write(jobs, out)
}

/// Writes jobs, in the given order, as trainyard JSON lines (the CSV's
/// fields as keys, `runtime_estimate_s` omitted when there is none).
pub fn write_jsonl(jobs: &[TraceJob], out: impl Write) -> Result<(), TraceError> {
    jsonl::write(jobs, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_names_round_trip_and_aliases_parse() {
        for (format, name) in TraceFormat::ALL.iter().zip(TraceFormat::NAMES) {
            assert_eq!(format.to_string(), name);
            assert_eq!(name.parse::<TraceFormat>(), Ok(*format));
        }
        assert_eq!("helios".parse(), Ok(TraceFormat::DirLab));
        assert_eq!("Philly-DirLab".parse(), Ok(TraceFormat::DirLab));
        let err = "swf".parse::<TraceFormat>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown trace format `swf`; use one of: philly, dirlab (or helios, philly-dirlab), csv, jsonl"
        );
    }

    #[test]
    fn detect_by_header_or_brace() {
        let detect = TraceFormat::detect;
        assert_eq!(detect("timestamp,duration,num_gpus,gpu_time,cluster"), Some(TraceFormat::Philly));
        assert_eq!(
            detect("\u{feff}u_id,user,gpu_num,cpu_num,node_num,interval,run_time,wall_time,new_status\r"),
            Some(TraceFormat::DirLab)
        );
        assert_eq!(
            detect(
                "id,submit_s,runtime_s,runtime_estimate_s,tenant,priority,pods,gpus_per_pod,cpu_milli_per_pod,memory_mib_per_pod,topology"
            ),
            Some(TraceFormat::Csv)
        );
        assert_eq!(detect("  {\"id\":\"a\"}"), Some(TraceFormat::Jsonl));
        assert_eq!(detect("a,b,c"), None);
        assert_eq!(detect(""), None);
    }

    #[test]
    fn zero_gpus_per_host_is_an_options_error() {
        let opts = ReadOptions { gpus_per_host: 0, skip_bad_rows: true };
        let err = read_trace(TraceFormat::Philly, "".as_bytes(), "p.csv", &opts).unwrap_err();
        assert_eq!(err.to_string(), "p.csv: gpus_per_host must be at least 1 to shape philly jobs");
    }

    #[test]
    fn io_errors_name_the_source() {
        struct Broken;
        impl Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("disk on fire"))
            }
        }
        for format in TraceFormat::ALL {
            let err = read_trace(format, Broken, "t.in", &ReadOptions::default()).unwrap_err();
            assert_eq!(err.to_string(), "t.in: cannot read: disk on fire", "{format}");
        }
    }

    #[test]
    fn invalid_utf8_is_a_bad_row() {
        let mut csv = b"id,submit_s,runtime_s,runtime_estimate_s,tenant,priority,pods,gpus_per_pod,cpu_milli_per_pod,memory_mib_per_pod,topology\n".to_vec();
        csv.extend_from_slice(b"a,0,60,,t\xff,0,1,1,0,0,\n");
        let err = read_trace(TraceFormat::Csv, csv.as_slice(), "u.csv", &ReadOptions::default()).unwrap_err();
        assert_eq!(err.to_string(), "u.csv: line 2: field `tenant`: not valid UTF-8");
        let err = read_trace(TraceFormat::Jsonl, b"{\"id\":\"\xff\"}\n".as_slice(), "u.jsonl", &ReadOptions::default())
            .unwrap_err();
        assert_eq!(err.to_string(), "u.jsonl: line 1: not valid UTF-8");
    }
}
