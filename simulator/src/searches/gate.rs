//! The search controller's side of a replay: a trial reaching its submit time is submitted only
//! while its search has fewer than `parallel` trials live, else it is held; each trial that
//! ends (finished or found unschedulable) hands its slot to the search's oldest held trial.
//!
//! Trials are released in trace order, so a search's held trials are always the run of its
//! trials between the last released and the last arrived: two cursors into the search's trial
//! list, and every step is O(1), never a scan of the trace.

use std::collections::HashMap;

use super::{BestTrial, SearchSummary};
use crate::job::{Fate, JobOutcome, TraceJob};

/// Marks a job of no search in [`Gate::search_of`].
const NONE: u32 = u32::MAX;

/// Every search of a replay and the state of its slots.
#[derive(Debug)]
pub(crate) struct Gate {
    /// Index into `searches` of each job's search, [`NONE`] for a job of no search; empty
    /// when the trace has no search, so ordinary replays pay nothing.
    search_of: Vec<u32>,
    searches: Vec<Slots>,
    /// Trials submitted later than their trace submit time, with the moment they were.
    late: Vec<(usize, u64)>,
}

/// One search's trials and slots.
#[derive(Debug)]
struct Slots {
    /// Its trials (job indices) in the replay's arrival order.
    trials: Vec<usize>,
    /// The limit the search's first trial gives (the trace readers refuse trials that differ).
    parallel: u32,
    /// `trials[..arrived]` reached their submit time, `trials[..released]` were submitted.
    arrived: usize,
    released: usize,
    /// Submitted and not yet ended, and the most there ever were.
    live: u32,
    max_live: u32,
    first_submit: Option<u64>,
    last_end: u64,
}

impl Gate {
    /// The searches of `jobs`, whose arrivals come in `order`.
    pub(crate) fn new(jobs: &[TraceJob], order: &[usize]) -> Gate {
        let mut gate = Gate { search_of: Vec::new(), searches: Vec::new(), late: Vec::new() };
        if jobs.iter().all(|j| j.trial.is_none()) {
            return gate;
        }
        gate.search_of = vec![NONE; jobs.len()];
        let mut index: HashMap<&str, u32> = HashMap::new();
        for &i in order {
            let Some(trial) = &jobs[i].trial else { continue };
            let next = gate.searches.len() as u32;
            let s = *index.entry(trial.search.name.as_str()).or_insert(next);
            if s == next {
                gate.searches.push(Slots {
                    trials: Vec::new(),
                    parallel: trial.search.parallel.max(1),
                    arrived: 0,
                    released: 0,
                    live: 0,
                    max_live: 0,
                    first_submit: None,
                    last_end: 0,
                });
            }
            gate.search_of[i] = s;
            gate.searches[s as usize].trials.push(i);
        }
        gate
    }

    fn slots_of(&mut self, job: usize) -> Option<&mut Slots> {
        let s = *self.search_of.get(job).filter(|&&s| s != NONE)?;
        Some(&mut self.searches[s as usize])
    }

    /// `job` reached its submit time at `now`: whether to submit it now (always, for a job of
    /// no search) rather than hold it.
    pub(crate) fn arrive(&mut self, job: usize, now: u64) -> bool {
        let Some(slots) = self.slots_of(job) else { return true };
        debug_assert_eq!(slots.trials[slots.arrived], job, "trials arrive in the order they were listed");
        slots.arrived += 1;
        if slots.live >= slots.parallel {
            return false;
        }
        // A free slot means nothing is held: an ending trial hands its slot on at once.
        debug_assert_eq!(slots.released + 1, slots.arrived);
        slots.take_slot(now);
        true
    }

    /// `job` ended at `now` (finished, or found unschedulable): the held trial of its search
    /// to submit now in its place, if there is one.
    pub(crate) fn end(&mut self, job: usize, now: u64) -> Option<usize> {
        let slots = self.slots_of(job)?;
        slots.live -= 1;
        slots.last_end = slots.last_end.max(now);
        if slots.released == slots.arrived {
            return None;
        }
        let next = slots.trials[slots.released];
        slots.take_slot(now);
        self.late.push((next, now));
        Some(next)
    }

    /// The outcomes with each held trial's `submit` moved to when it was released.
    pub(crate) fn move_submits(&self, outcomes: &mut [JobOutcome]) {
        for &(i, at) in &self.late {
            outcomes[i].job.submit = at;
        }
    }

    /// What each search came to, in the order their first trials arrived.
    pub(crate) fn summaries(&self, outcomes: &[JobOutcome]) -> Vec<SearchSummary> {
        self.searches.iter().map(|slots| slots.summary(outcomes)).collect()
    }
}

impl Slots {
    /// Submits the oldest trial not yet submitted.
    fn take_slot(&mut self, now: u64) {
        self.released += 1;
        self.live += 1;
        self.max_live = self.max_live.max(self.live);
        self.first_submit.get_or_insert(now);
    }

    fn summary(&self, outcomes: &[JobOutcome]) -> SearchSummary {
        let first = outcomes[self.trials[0]].job.trial.as_ref().expect("a search's jobs are trials");
        let direction = first.search.direction;
        let (mut finished, mut unschedulable) = (0, 0);
        let mut best: Option<BestTrial> = None;
        for &i in &self.trials {
            let outcome = &outcomes[i];
            if let Fate::Unschedulable { .. } = outcome.fate {
                unschedulable += 1;
                continue;
            }
            finished += 1;
            let Some(objective) = outcome.job.trial.as_ref().and_then(|t| t.objective) else { continue };
            if best.as_ref().is_none_or(|b| objective.beats(b.objective, direction)) {
                best = Some(BestTrial { id: outcome.job.id.clone(), objective });
            }
        }
        let first_submit = self.first_submit.unwrap_or(0);
        SearchSummary {
            name: first.search.name.clone(),
            parallel: self.parallel,
            direction,
            trials: self.trials.len() as u64,
            finished,
            unschedulable,
            max_live: self.max_live,
            first_submit_s: first_submit,
            last_end_s: self.last_end,
            makespan_s: self.last_end.saturating_sub(first_submit),
            best,
        }
    }
}

#[cfg(test)]
mod tests {
    use trainyard_topology::Resources;

    use super::*;
    use crate::trial::{Search, Trial};

    fn trial(id: &str, submit: u64, parallel: u32) -> TraceJob {
        let mut job = TraceJob::recorded(id.into(), submit, 10, "t".into(), (1, Resources::gpus(1)), 0);
        let search = Search { name: "s".into(), parallel, direction: Default::default() };
        job.trial = Some(Trial { search, objective: None });
        job
    }

    #[test]
    fn a_full_search_holds_its_next_trials_and_each_end_releases_one_in_order() {
        let mut jobs: Vec<TraceJob> = (0..4).map(|i| trial(&format!("t{i}"), 0, 2)).collect();
        jobs.push(TraceJob::recorded("plain".into(), 0, 10, "t".into(), (1, Resources::gpus(1)), 0));
        let mut gate = Gate::new(&jobs, &[0, 1, 2, 3, 4]);
        assert_eq!([0, 1, 2, 3, 4].map(|i| gate.arrive(i, 0)), [true, true, false, false, true]);
        assert_eq!(gate.end(4, 5), None, "a job of no search frees nothing");
        assert_eq!(gate.end(1, 5), Some(2));
        assert_eq!(gate.end(0, 7), Some(3));
        assert_eq!((gate.end(2, 9), gate.end(3, 9)), (None, None));
        let s = &gate.searches[0];
        assert_eq!((s.live, s.max_live, s.first_submit, s.last_end), (0, 2, Some(0), 9));
        assert_eq!(gate.late, [(2, 5), (3, 7)]);
    }

    #[test]
    fn a_trace_without_searches_allocates_nothing() {
        let jobs = vec![TraceJob::recorded("a".into(), 0, 1, "t".into(), (1, Resources::gpus(1)), 0)];
        let mut gate = Gate::new(&jobs, &[0]);
        assert!(gate.search_of.is_empty() && gate.arrive(0, 0) && gate.end(0, 1).is_none());
        assert!(gate.summaries(&[]).is_empty());
    }
}
