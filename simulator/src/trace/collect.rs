//! Gathers the jobs of one read: duplicate-id check, trials that agree on their search,
//! bad-row policy, final sort.

use std::collections::HashMap;

use super::error::{RowError, RowWarning, TraceError};
use super::{ReadOptions, TraceRead};
use crate::job::TraceJob;
use crate::trial::Search;

/// Accumulates jobs and bad rows while a reader walks its input.
pub(crate) struct Collector<'a> {
    input: &'a str,
    skip_bad_rows: bool,
    jobs: Vec<TraceJob>,
    skipped: Vec<RowWarning>,
    /// Line of the first job with each id.
    seen: HashMap<String, u64>,
    /// Field named when an id repeats.
    id_field: &'static str,
    /// Each search as its first trial gave it, with that trial's line.
    searches: HashMap<String, (u64, Search)>,
}

impl<'a> Collector<'a> {
    /// `id_field` is the field blamed for a duplicate id.
    pub fn new(input: &'a str, opts: &ReadOptions, id_field: &'static str) -> Self {
        Collector {
            input,
            skip_bad_rows: opts.skip_bad_rows,
            jobs: Vec::new(),
            skipped: Vec::new(),
            seen: HashMap::new(),
            id_field,
            searches: HashMap::new(),
        }
    }

    /// Name of the input, for errors built outside rows.
    pub fn input(&self) -> &'a str {
        self.input
    }

    /// A bad row: a warning when skipping, else the error to return.
    pub fn reject(&mut self, error: RowError) -> Result<(), TraceError> {
        if self.skip_bad_rows {
            self.skipped.push(error.into_warning());
            Ok(())
        } else {
            Err(error.into_error(self.input))
        }
    }

    /// Either outcome of parsing one row.
    pub fn take(&mut self, row: Result<TraceJob, RowError>) -> Result<(), TraceError> {
        match row {
            Ok(job) => self.push(job),
            Err(e) => self.reject(e),
        }
    }

    /// A parsed job; a repeated id makes the later row bad (field `id`), and so does a trial
    /// whose search runs another number of trials at once or keeps the other objective than the
    /// search's first trial said (field `search`).
    pub fn push(&mut self, job: TraceJob) -> Result<(), TraceError> {
        if let Some(first) = self.seen.get(&job.id) {
            let message = format!("duplicate id {:?} (first used on line {first})", job.id);
            return self.reject(RowError::field(job.line, self.id_field, message));
        }
        if let Some(trial) = &job.trial {
            match self.searches.get(&trial.search.name) {
                Some((line, first)) => {
                    if let Some(message) = disagreement(first, &trial.search, *line) {
                        return self.reject(RowError::field(job.line, "search", message));
                    }
                }
                None => {
                    self.searches.insert(trial.search.name.clone(), (job.line, trial.search.clone()));
                }
            }
        }
        self.seen.insert(job.id.clone(), job.line);
        self.jobs.push(job);
        Ok(())
    }

    /// Sorts by (submit, line); with `shift_to_zero` first moves submit times
    /// so that the earliest job is at 0. An empty result is an error.
    pub fn finish(mut self, shift_to_zero: bool) -> Result<TraceRead, TraceError> {
        if self.jobs.is_empty() {
            return Err(TraceError::NoJobs { input: self.input.to_string(), skipped: self.skipped });
        }
        if shift_to_zero {
            let earliest = self.jobs.iter().map(|j| j.submit).min().unwrap_or(0);
            for job in &mut self.jobs {
                job.submit -= earliest;
            }
        }
        self.jobs.sort_by_key(|j| (j.submit, j.line));
        Ok(TraceRead { jobs: self.jobs, skipped: self.skipped })
    }
}

/// How `other` contradicts `first`, the search as its trial on `line` gave it.
fn disagreement(first: &Search, other: &Search, line: u64) -> Option<String> {
    let name = &first.name;
    if first.parallel != other.parallel {
        return Some(format!(
            "search {name:?} runs {} trials at once (line {line}), not {}",
            first.parallel, other.parallel
        ));
    }
    (first.direction != other.direction).then(|| {
        format!(
            "search {name:?} keeps the {} objective (line {line}), not the {}",
            first.direction.name(),
            other.direction.name()
        )
    })
}
