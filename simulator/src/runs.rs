//! Each job's current run in a replay: its completion event, when it began computing, the
//! restart it paid, and the work its checkpoints saved. A run that stops (preempted, requeued,
//! crashed) leaves its completion in the heap; the job's generation moves on, so the event is
//! stale and skipped.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::failures::crash;

/// The runs of every job of a replay, by job index.
#[derive(Clone, Debug)]
pub(crate) struct Runs {
    /// (end, job, generation) of every run started, stale ones included.
    completions: BinaryHeap<Reverse<(u64, usize, u32)>>,
    generation: Vec<u32>,
    /// Work saved at checkpoints, in seconds of the job's runtime (not slowed down).
    saved_work: Vec<u64>,
    /// When the current run began, and the restart it began with.
    run_from: Vec<u64>,
    restart_paid: Vec<u64>,
    /// Whether the next run starts by restoring a checkpoint after a crash.
    needs_restart: Vec<bool>,
}

impl Runs {
    pub(crate) fn new(jobs: usize) -> Runs {
        Runs {
            completions: BinaryHeap::new(),
            generation: vec![0; jobs],
            saved_work: vec![0; jobs],
            run_from: vec![0; jobs],
            restart_paid: vec![0; jobs],
            needs_restart: vec![false; jobs],
        }
    }

    /// When the next run still going ends.
    pub(crate) fn next_end(&mut self) -> Option<u64> {
        while self.completions.peek().is_some_and(|Reverse((_, i, g))| self.generation[*i] != *g) {
            self.completions.pop();
        }
        self.completions.peek().map(|Reverse((t, _, _))| *t)
    }

    /// The next job whose run ends at `now`.
    pub(crate) fn pop_ended(&mut self, now: u64) -> Option<usize> {
        while let Some(&Reverse((t, i, g))) = self.completions.peek() {
            if t != now {
                return None;
            }
            self.completions.pop();
            if self.generation[i] == g {
                return Some(i);
            }
        }
        None
    }

    /// Whether any completion, stale or not, is still queued.
    pub(crate) fn any_queued(&self) -> bool {
        !self.completions.is_empty()
    }

    /// The latest queued completion, for the last progress report.
    pub(crate) fn last_queued(&self) -> Option<u64> {
        self.completions.peek().map(|Reverse((t, _, _))| *t)
    }

    /// Runtime job `i` still has to do, not slowed down.
    pub(crate) fn work_left(&self, i: usize, runtime: u64) -> u64 {
        runtime - self.saved_work[i]
    }

    /// Whether job `i`'s next run restores a checkpoint after a crash.
    pub(crate) fn needs_restart(&self, i: usize) -> bool {
        self.needs_restart[i]
    }

    /// Job `i` runs from `now`: `restart` seconds restoring, then `runtime` computing.
    pub(crate) fn start(&mut self, i: usize, now: u64, restart: u64, runtime: u64) {
        self.generation[i] += 1;
        self.run_from[i] = now;
        self.restart_paid[i] = restart;
        self.needs_restart[i] = false;
        self.completions.push(Reverse((now.saturating_add(restart + runtime), i, self.generation[i])));
    }

    /// Job `i`'s run stops: what it keeps is `kept` seconds of the slowed clock, the work of a
    /// run slowed by `factor`; never more than its `runtime`.
    pub(crate) fn stop(&mut self, i: usize, kept: u64, factor: f64, runtime: u64) {
        self.generation[i] += 1;
        self.saved_work[i] = (self.saved_work[i] + (kept as f64 / factor) as u64).min(runtime);
    }

    /// Job `i`'s run crashes at `now`: it keeps the work of its last checkpoint and will
    /// restart. Returns the seconds of its run that were lost.
    pub(crate) fn crash(&mut self, i: usize, now: u64, checkpoint_s: u64, factor: f64, runtime: u64) -> u64 {
        let (kept, lost) = crash(now - self.run_from[i], self.restart_paid[i], checkpoint_s);
        self.stop(i, kept, factor, runtime);
        self.needs_restart[i] = true;
        lost
    }

    /// Job `i` stops without running again from this run's end (requeued after a crash).
    pub(crate) fn drop_end(&mut self, i: usize) {
        self.generation[i] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_run_never_ends_and_a_restart_costs_time() {
        let mut runs = Runs::new(2);
        runs.start(0, 0, 0, 100);
        runs.start(1, 0, 0, 50);
        assert_eq!(runs.next_end(), Some(50));
        // Job 1 crashes at 40 with a 30 s checkpoint: it keeps 30 s, loses 10 s.
        assert_eq!(runs.crash(1, 40, 30, 1.0, 50), 10);
        assert!(runs.needs_restart(1));
        assert_eq!(runs.next_end(), Some(100));
        // Back at 60: 5 s restart and the 20 s left.
        assert_eq!(runs.work_left(1, 50), 20);
        runs.start(1, 60, 5, runs.work_left(1, 50));
        assert!(!runs.needs_restart(1));
        assert_eq!(runs.next_end(), Some(85));
        assert_eq!(runs.pop_ended(85), Some(1));
        assert_eq!(runs.pop_ended(85), None);
        assert_eq!(runs.pop_ended(100), Some(0));
        assert!(!runs.any_queued());
    }
}
