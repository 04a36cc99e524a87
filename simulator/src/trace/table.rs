//! CSV tables for the readers: header check, rows in file order, typed field parsers.

use std::collections::VecDeque;
use std::io::{self, Read};
use std::num::IntErrorKind;

use csv::ByteRecord;

use super::collect::Collector;
use super::error::{RowError, TraceError};
use crate::job::TraceJob;

/// One data row of a CSV table, with its fields looked up by column name.
pub(crate) struct Row<'a> {
    /// 1-based line of the file where the row starts.
    pub line: u64,
    record: &'a ByteRecord,
    columns: &'a [(&'static str, usize)],
}

impl<'a> Row<'a> {
    /// The trimmed text of a column.
    pub fn text(&self, field: &'static str) -> Result<&'a str, RowError> {
        let bytes = self
            .columns
            .iter()
            .find(|(name, _)| *name == field)
            .and_then(|&(_, index)| self.record.get(index))
            .ok_or_else(|| RowError::field(self.line, field, "column is absent"))?;
        std::str::from_utf8(bytes).map_err(|_| RowError::field(self.line, field, "not valid UTF-8"))
    }

    /// A column parsed by `parse`, whose error message is attached to the field.
    pub fn get<T>(&self, field: &'static str, parse: impl FnOnce(&'a str) -> Result<T, String>) -> Result<T, RowError> {
        parse(self.text(field)?).map_err(|message| RowError::field(self.line, field, message))
    }

    /// An optional column parsed by `parse`; a file without the column reads as an empty field.
    pub fn get_optional<T>(
        &self,
        field: &'static str,
        parse: impl FnOnce(&'a str) -> Result<T, String>,
    ) -> Result<T, RowError> {
        let present = self.columns.iter().any(|(name, _)| *name == field);
        let text = if present { self.text(field)? } else { "" };
        parse(text).map_err(|message| RowError::field(self.line, field, message))
    }
}

/// Walks a CSV table: checks that the header has every column of `required`
/// (and, when `strict`, nothing else), then hands each data row to `parse`
/// and its outcome to the collector. Blank lines are skipped; a row with the
/// wrong number of fields is a bad row. An empty input yields no rows.
pub(crate) fn read_rows<R: Read>(
    input: R,
    coll: &mut Collector<'_>,
    required: &[&'static str],
    optional: &[&'static str],
    strict: bool,
    mut parse: impl FnMut(&Row<'_>) -> Result<TraceJob, RowError>,
) -> Result<(), TraceError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(LineIndex::new(input));
    let mut record = ByteRecord::new();
    if !next_record(&mut reader, &mut record, coll)? {
        return Ok(());
    }
    let header_line = line_of(&mut reader, &record);
    let names: Vec<String> =
        record.iter().map(|f| String::from_utf8_lossy(f).trim_start_matches('\u{feff}').trim().to_string()).collect();
    let missing: Vec<String> =
        required.iter().filter(|r| !names.iter().any(|n| n == *r)).map(|r| r.to_string()).collect();
    if !missing.is_empty() {
        return Err(TraceError::MissingColumns {
            input: coll.input().to_string(),
            line: header_line,
            missing,
            found: names.join(","),
        });
    }
    if strict {
        let known = |n: &String| required.contains(&n.as_str()) || optional.contains(&n.as_str());
        let unknown: Vec<String> = names.iter().filter(|n| !known(n)).cloned().collect();
        if !unknown.is_empty() {
            return Err(TraceError::UnknownColumns {
                input: coll.input().to_string(),
                line: header_line,
                unknown,
                expected: required.join(","),
            });
        }
    }
    let columns: Vec<(&'static str, usize)> =
        required.iter().chain(optional).filter_map(|r| names.iter().position(|n| n == r).map(|i| (*r, i))).collect();
    let width = names.len();
    while next_record(&mut reader, &mut record, coll)? {
        let line = line_of(&mut reader, &record);
        if record.len() == 1 && record[0].is_empty() {
            continue; // a line of spaces only
        }
        if record.len() != width {
            let message = format!("expected {width} fields like the header, found {}", record.len());
            coll.reject(RowError::row(line, message))?;
            continue;
        }
        let row = Row { line, record: &record, columns: &columns };
        coll.take(parse(&row))?;
    }
    Ok(())
}

/// The 1-based file line where `record` starts.
fn line_of<R: Read>(reader: &mut csv::Reader<LineIndex<R>>, record: &ByteRecord) -> u64 {
    let byte = record.position().map_or(0, |p| p.byte());
    reader.get_mut().line_at(byte)
}

/// Wraps the input to find the file line where a record starts. The csv
/// crate's own line count ignores blank lines and miscounts `\r\n`, and its
/// record position points at the terminators before the record (the line
/// break of the previous record, blank lines). So this remembers each run of
/// `\r`/`\n` bytes (start offset, number of `\n`), and a record at byte `p`
/// starts after every run that begins at or before `p`. Only runs not yet
/// passed are kept: about one read buffer's worth.
struct LineIndex<R> {
    inner: R,
    /// Bytes read so far.
    offset: u64,
    /// Closed runs of line terminators: (start offset, newlines in the run).
    runs: VecDeque<(u64, u64)>,
    /// The run still open at the end of what was read.
    open: Option<(u64, u64)>,
    /// Newlines before the last asked-for record.
    passed: u64,
}

impl<R> LineIndex<R> {
    fn new(inner: R) -> Self {
        LineIndex { inner, offset: 0, runs: VecDeque::new(), open: None, passed: 0 }
    }

    /// Line of the record whose position is byte `p`; positions must not decrease between calls.
    fn line_at(&mut self, p: u64) -> u64 {
        while let Some(&(start, newlines)) = self.runs.front() {
            if start > p {
                break;
            }
            self.passed += newlines;
            self.runs.pop_front();
        }
        if let Some((start, newlines)) = &mut self.open
            && *start <= p
        {
            self.passed += *newlines;
            *newlines = 0;
        }
        self.passed + 1
    }
}

impl<R: Read> Read for LineIndex<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        for (i, &b) in buf[..n].iter().enumerate() {
            let at = self.offset + i as u64;
            match (b, &mut self.open) {
                (b'\n' | b'\r', Some((_, newlines))) => *newlines += u64::from(b == b'\n'),
                (b'\n' | b'\r', None) => self.open = Some((at, u64::from(b == b'\n'))),
                (_, open) => {
                    if let Some(run) = open.take() {
                        self.runs.push_back(run);
                    }
                }
            }
        }
        self.offset += n as u64;
        Ok(n)
    }
}

fn next_record<R: Read>(
    reader: &mut csv::Reader<LineIndex<R>>,
    record: &mut ByteRecord,
    coll: &Collector<'_>,
) -> Result<bool, TraceError> {
    reader.read_byte_record(record).map_err(|e| {
        let line = e.position().map_or(0, |p| p.line()); // best effort
        let message = format!("malformed CSV: {e}");
        match e.into_kind() {
            csv::ErrorKind::Io(error) => TraceError::Io { input: coll.input().to_string(), error },
            _ => TraceError::Row { input: coll.input().to_string(), line, message },
        }
    })
}

/// A non-negative whole number.
pub(crate) fn whole(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(v) => Ok(v),
        Err(e) if *e.kind() == IntErrorKind::PosOverflow => {
            Err(format!("too large (at most {}), found {text:?}", u64::MAX))
        }
        Err(_) if text.parse::<i128>().is_ok_and(|v| v < 0) => Err(format!("must not be negative, found {text:?}")),
        Err(_) => Err(format!("expected a whole number, found {text:?}")),
    }
}

/// A non-negative whole number that fits 32 bits.
pub(crate) fn whole_u32(text: &str) -> Result<u32, String> {
    u32::try_from(whole(text)?).map_err(|_| format!("too large (at most {}), found {text:?}", u32::MAX))
}

/// A whole number that may be negative and fits 32 bits.
pub(crate) fn integer_i32(text: &str) -> Result<i32, String> {
    text.parse::<i32>().map_err(|e| match e.kind() {
        IntErrorKind::PosOverflow | IntErrorKind::NegOverflow => {
            format!("out of range ({}..={}), found {text:?}", i32::MIN, i32::MAX)
        }
        _ => format!("expected an integer, found {text:?}"),
    })
}

/// A duration in (possibly fractional) seconds, rounded to the nearest whole
/// second and raised to at least 1.
pub(crate) fn runtime_seconds(text: &str) -> Result<u64, String> {
    let value: f64 = text.parse().map_err(|_| format!("expected a number of seconds, found {text:?}"))?;
    if !value.is_finite() {
        return Err(format!("expected a number of seconds, found {text:?}"));
    }
    if value < 0.0 {
        return Err(format!("must not be negative, found {text:?}"));
    }
    let rounded = value.round();
    if rounded >= u64::MAX as f64 {
        return Err(format!("too large, found {text:?}"));
    }
    Ok((rounded as u64).max(1))
}

/// A duration in whole seconds, raised to at least 1.
pub(crate) fn runtime_seconds_whole(text: &str) -> Result<u64, String> {
    Ok(whole(text)?.max(1))
}

/// Any text but the empty string.
pub(crate) fn non_empty(text: &str) -> Result<&str, String> {
    if text.is_empty() { Err("must not be empty".to_string()) } else { Ok(text) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers_say_what_is_wrong() {
        assert_eq!(whole("42"), Ok(42));
        assert_eq!(whole("x"), Err("expected a whole number, found \"x\"".to_string()));
        assert_eq!(whole(""), Err("expected a whole number, found \"\"".to_string()));
        assert_eq!(whole("-3"), Err("must not be negative, found \"-3\"".to_string()));
        assert_eq!(whole("1.5"), Err("expected a whole number, found \"1.5\"".to_string()));
        assert!(whole("99999999999999999999").unwrap_err().starts_with("too large"));
        assert!(whole_u32("4294967296").unwrap_err().starts_with("too large (at most 4294967295)"));
        assert_eq!(integer_i32("-10"), Ok(-10));
        assert_eq!(integer_i32("ten"), Err("expected an integer, found \"ten\"".to_string()));
    }

    #[test]
    fn runtimes_round_and_have_a_floor() {
        assert_eq!(runtime_seconds("66.0"), Ok(66));
        assert_eq!(runtime_seconds("2.5"), Ok(3));
        assert_eq!(runtime_seconds("2.4"), Ok(2));
        assert_eq!(runtime_seconds("0.2"), Ok(1));
        assert_eq!(runtime_seconds("0"), Ok(1));
        assert_eq!(runtime_seconds("-1"), Err("must not be negative, found \"-1\"".to_string()));
        assert_eq!(runtime_seconds("NaN"), Err("expected a number of seconds, found \"NaN\"".to_string()));
        assert_eq!(runtime_seconds("1e30"), Err("too large, found \"1e30\"".to_string()));
    }
}
