//! Errors of the trace readers and writers, and the row warnings `--skip-bad-rows` produces.

use std::fmt;
use std::io;

/// Why a trace could not be read or written. Every message names the input
/// (the `source` label given to [`read_trace`](super::read_trace)) and, for
/// problems inside the file, the 1-based line and the field.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// One field of a row did not parse or made no sense.
    #[error("{input}: line {line}: field `{field}`: {message}")]
    Field {
        /// Name of the input, as given by the caller.
        input: String,
        /// 1-based line of the file.
        line: u64,
        /// Column (CSV) or key (JSONL) at fault.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A row is malformed as a whole (wrong number of fields, invalid JSON, ...).
    #[error("{input}: line {line}: {message}")]
    Row {
        /// Name of the input.
        input: String,
        /// 1-based line of the file.
        line: u64,
        /// What is wrong with the row.
        message: String,
    },
    /// The header lacks columns the format needs.
    #[error("{input}: line {line}: header is missing column(s) {}; found `{found}`", quote_list(.missing))]
    MissingColumns {
        /// Name of the input.
        input: String,
        /// Line of the header (normally 1).
        line: u64,
        /// The required columns that are absent, in the format's order.
        missing: Vec<String>,
        /// The header as found.
        found: String,
    },
    /// The header has columns the (strict) format does not know.
    #[error("{input}: line {line}: header has unknown column(s) {}; expected `{expected}`", quote_list(.unknown))]
    UnknownColumns {
        /// Name of the input.
        input: String,
        /// Line of the header (normally 1).
        line: u64,
        /// The columns that are not part of the format.
        unknown: Vec<String>,
        /// The header the format expects.
        expected: String,
    },
    /// Reading the input failed.
    #[error("{input}: cannot read: {error}")]
    Io {
        /// Name of the input.
        input: String,
        /// The underlying error.
        #[source]
        error: io::Error,
    },
    /// The trace holds no job (empty file, header only, or every row skipped).
    #[error("{input}: no jobs{}", skipped_note(.skipped))]
    NoJobs {
        /// Name of the input.
        input: String,
        /// The bad rows skipped on the way, in file order.
        skipped: Vec<RowWarning>,
    },
    /// The read options cannot work for this format (e.g. zero GPUs per host).
    #[error("{input}: {message}")]
    Options {
        /// Name of the input.
        input: String,
        /// What is wrong with the options.
        message: String,
    },
    /// Writing a trace failed.
    #[error("cannot write {format} trace: {error}")]
    Write {
        /// The format being written (`csv` or `jsonl`).
        format: &'static str,
        /// The underlying error.
        #[source]
        error: io::Error,
    },
}

fn quote_list(names: &[String]) -> String {
    names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
}

/// Names the first skipped row, so that a trace whose rows were all bad says why.
fn skipped_note(skipped: &[RowWarning]) -> String {
    match skipped {
        [] => String::new(),
        [only] => format!(" (1 bad row skipped: {only})"),
        [first, rest @ ..] => format!(" ({} bad rows skipped; the first: {first})", rest.len() + 1),
    }
}

/// A bad row that [`ReadOptions::skip_bad_rows`](super::ReadOptions::skip_bad_rows)
/// turned into a warning instead of an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowWarning {
    /// 1-based line of the file.
    pub line: u64,
    /// What was wrong, starting with ``field `name`: `` when one field is at fault.
    pub message: String,
}

impl fmt::Display for RowWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// A problem with one row, before it is known whether it is fatal or a warning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RowError {
    pub line: u64,
    pub field: Option<String>,
    pub message: String,
}

impl RowError {
    /// A problem with one field.
    pub fn field(line: u64, field: impl Into<String>, message: impl Into<String>) -> Self {
        RowError { line, field: Some(field.into()), message: message.into() }
    }

    /// A problem with the row as a whole.
    pub fn row(line: u64, message: impl Into<String>) -> Self {
        RowError { line, field: None, message: message.into() }
    }

    /// The fatal form, naming the input.
    pub fn into_error(self, input: &str) -> TraceError {
        let input = input.to_string();
        match self.field {
            Some(field) => TraceError::Field { input, line: self.line, field, message: self.message },
            None => TraceError::Row { input, line: self.line, message: self.message },
        }
    }

    /// The warning form.
    pub fn into_warning(self) -> RowWarning {
        let message = match self.field {
            Some(field) => format!("field `{field}`: {}", self.message),
            None => self.message,
        };
        RowWarning { line: self.line, message }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_input_line_and_field() {
        let e = RowError::field(17, "num_gpus", "expected a whole number, found \"x\"");
        assert_eq!(
            e.clone().into_error("philly.csv").to_string(),
            "philly.csv: line 17: field `num_gpus`: expected a whole number, found \"x\""
        );
        assert_eq!(e.into_warning().to_string(), "line 17: field `num_gpus`: expected a whole number, found \"x\"");
        let missing = TraceError::MissingColumns {
            input: "t.csv".into(),
            line: 1,
            missing: vec!["a".into(), "b".into()],
            found: "c".into(),
        };
        assert_eq!(missing.to_string(), "t.csv: line 1: header is missing column(s) `a`, `b`; found `c`");
        assert_eq!(TraceError::NoJobs { input: "t.csv".into(), skipped: vec![] }.to_string(), "t.csv: no jobs");
        let bad = |line| RowWarning { line, message: "field `runtime_s`: must be at least 1".into() };
        assert_eq!(
            TraceError::NoJobs { input: "t.csv".into(), skipped: vec![bad(2), bad(3)] }.to_string(),
            "t.csv: no jobs (2 bad rows skipped; the first: line 2: field `runtime_s`: must be at least 1)"
        );
    }
}
