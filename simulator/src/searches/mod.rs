//! Hyperparameter searches in a replay, as Kubeflow Trainer's OptimizationJob runs them: each
//! trial is an ordinary gang, and a search keeps at most `parallel` of its trials submitted and
//! not yet ended, creating the next one only when one ends ([`gate`]). What each search came to
//! is a [`SearchSummary`].

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::report::{clean, human_duration_long, render_rows};
use crate::trial::{Direction, Objective};

pub(crate) mod gate;

/// What became of one search in a replay.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchSummary {
    /// Name of the search.
    pub name: String,
    /// Its limit of trials live at once.
    pub parallel: u32,
    /// Whether a larger or a smaller objective won.
    pub direction: Direction,
    /// Trials in the trace.
    pub trials: u64,
    /// Trials that ran to completion.
    pub finished: u64,
    /// Trials that could never run (each freed its slot when found so).
    pub unschedulable: u64,
    /// The most trials submitted and not yet ended at any moment; never above `parallel`.
    pub max_live: u32,
    /// When the first trial was submitted, seconds of virtual time.
    pub first_submit_s: u64,
    /// When the last trial ended (or was found unschedulable).
    pub last_end_s: u64,
    /// `last_end_s - first_submit_s`.
    pub makespan_s: u64,
    /// The finished trial with the best objective (the first in trace order among equals);
    /// none when no finished trial reported one.
    pub best: Option<BestTrial>,
}

/// The winning trial of a search.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BestTrial {
    /// Job id of the trial.
    pub id: String,
    /// What it reported.
    pub objective: Objective,
}

/// The searches section of the text report.
pub fn render_table(searches: &[SearchSummary]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "\nSearches (trials of a hyperparameter search, at most `parallel` live at once)");
    let rows: Vec<Vec<String>> = searches
        .iter()
        .map(|s| {
            let best = s.best.as_ref().map_or_else(
                || "none".to_string(),
                |b| format!("{} ({} {})", clean(&b.id), s.direction.name(), b.objective),
            );
            vec![
                clean(&s.name),
                s.parallel.to_string(),
                s.trials.to_string(),
                s.finished.to_string(),
                s.unschedulable.to_string(),
                s.max_live.to_string(),
                human_duration_long(s.makespan_s),
                best,
            ]
        })
        .collect();
    let header = ["search", "parallel", "trials", "finished", "unschedulable", "max live", "makespan", "best trial"];
    let right = [false, true, true, true, true, true, true, false];
    out.push_str(&render_rows(&header, &right, &rows));
    out
}
