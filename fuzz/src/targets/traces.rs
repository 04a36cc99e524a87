//! The trace readers (trainyard CSV and JSON Lines, Philly, DIR-LAB), under the invariant that
//! no row is lost: with bad rows skipped, the jobs read plus the rows skipped are the rows given.

use trainyard_simulator::trace::{
    ReadOptions, SynthConfig, TraceFormat, read_trace, synthesize, write_csv, write_jsonl,
};

use super::{Target, Verdict, seed};
use crate::mutate::Mutator;

pub(super) fn targets() -> Vec<Target> {
    vec![
        Target {
            name: "trace-csv",
            source: "fuzz-trace.csv",
            seeds: || vec![seed!("examples/traces/dra-sample.csv"), ("synthesized", synthesized(false, 1))],
            generate: Some(|m| rows_mutated(m, false)),
            run: |bytes| read(TraceFormat::Csv, bytes, "fuzz-trace.csv"),
        },
        Target {
            name: "trace-jsonl",
            source: "fuzz-trace.jsonl",
            seeds: || vec![("synthesized", synthesized(true, 1)), ("synthesized rich", synthesized(true, 2))],
            generate: Some(|m| rows_mutated(m, true)),
            run: |bytes| read(TraceFormat::Jsonl, bytes, "fuzz-trace.jsonl"),
        },
        Target {
            name: "trace-philly",
            source: "fuzz-philly.csv",
            seeds: || vec![seed!("data/traces/philly-excerpt.csv", 300)],
            generate: None,
            run: |bytes| read(TraceFormat::Philly, bytes, "fuzz-philly.csv"),
        },
        Target {
            name: "trace-dirlab",
            source: "fuzz-dirlab.csv",
            seeds: || vec![seed!("data/traces/helios-excerpt.csv", 300)],
            generate: None,
            run: |bytes| read(TraceFormat::DirLab, bytes, "fuzz-dirlab.csv"),
        },
    ]
}

/// A synthesized trace of 60 jobs, as CSV or JSON Lines (`seed` 2: a third rich).
fn synthesized(jsonl: bool, seed: u64) -> Vec<u8> {
    let config = SynthConfig {
        seed,
        jobs: 60,
        rich_percent: if seed == 2 { 33 } else { 0 },
        gpu_layout_percent: if seed == 2 { 20 } else { 0 },
        ..SynthConfig::default()
    };
    let jobs = synthesize(&config);
    let mut out = Vec::new();
    let written = if jsonl { write_jsonl(&jobs, &mut out) } else { write_csv(&jobs, &mut out) };
    written.expect("writing to memory");
    out
}

/// A synthesized trace whose fields are replaced, row by row, with values of the wrong kind,
/// out of range, or empty: what a hand-edited trace holds.
fn rows_mutated(m: &mut Mutator, jsonl: bool) -> Vec<u8> {
    let seed = m.rng().next_u64();
    let text = String::from_utf8(synthesized(jsonl, seed)).expect("written as UTF-8");
    let values = ["", "0", "-1", "18446744073709551616", "1e400", "NaN", "x", "\"", "required:nowhere", "8:8", " "];
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for _ in 0..1 + m.below(6) {
        let row = 1 + m.below(lines.len().saturating_sub(1).max(1));
        let Some(line) = lines.get_mut(row) else { continue };
        if jsonl {
            // A value of the object replaced by a bare token.
            if let Some(colon) = line.match_indices(':').map(|(i, _)| i).nth(m.below(8)) {
                let end = line[colon..].find([',', '}']).map_or(line.len(), |e| colon + e);
                let value = *m.pick(&values);
                line.replace_range(colon + 1..end, value);
            }
        } else {
            let mut fields: Vec<String> = line.split(',').map(str::to_string).collect();
            let i = m.below(fields.len());
            fields[i] = (*m.pick(&values)).to_string();
            *line = fields.join(",");
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out.into_bytes()
}

/// Reads `bytes` as a trace of `format` with bad rows skipped, and checks that no row was lost.
fn read(format: TraceFormat, bytes: &[u8], source: &str) -> Verdict {
    let options = ReadOptions { skip_bad_rows: true, ..ReadOptions::default() };
    match read_trace(format, bytes, source, &options) {
        Err(e) => Verdict::Refused(e.to_string()),
        Ok(read) => {
            let given = rows_given(format, bytes);
            let accounted = read.jobs.len() + read.skipped.len();
            if accounted == given {
                Verdict::Accepted
            } else {
                Verdict::Broken(format!(
                    "{given} rows given, {} jobs read and {} rows skipped: {} lost",
                    read.jobs.len(),
                    read.skipped.len(),
                    given as i64 - accounted as i64
                ))
            }
        }
    }
}

/// The data rows of a trace, counted apart from its reader: the CSV records after the header
/// (blank ones left out), or the JSON Lines' non-blank lines.
fn rows_given(format: TraceFormat, bytes: &[u8]) -> usize {
    let text = String::from_utf8_lossy(bytes);
    let text = trainyard_topology::input_text::normalize(&text);
    if format == TraceFormat::Jsonl {
        return text.lines().filter(|l| !l.trim().is_empty()).count();
    }
    let mut reader = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(text.as_bytes());
    let records: Vec<csv::StringRecord> = reader.records().map_while(Result::ok).collect();
    // A line of nothing but spaces is blank; one with commas is a row of empty fields.
    let blank = |r: &csv::StringRecord| r.len() == 1 && r[0].trim().is_empty();
    records.iter().filter(|r| !blank(r)).count().saturating_sub(1)
}
