//! Runtimes learned per queue from the gangs that finished there: what a start-time estimate
//! ([`crate::Engine::eta`]) assumes for a gang whose submitter gave no estimate of its own.
//!
//! Each queue keeps a bounded window of its most recent runtimes (old behaviour fades out, and
//! memory stays bounded however long a caller runs) alongside the same values sorted and their
//! sum, so that the mean, a median or any quantile is read in O(1): an estimate is asked once
//! per gang per query, for thousands of gangs. Pure and deterministic: the same records in the
//! same order give the same answers, whatever the platform (integers only, nearest-rank
//! quantiles).
//!
//! Estimates are means by default ([`RuntimeStatistic::Mean`]): a start-time estimate waits for
//! the sum of the runtimes ahead, which means add up to and medians understate under the heavy
//! tails training runtimes have. In replays of the Helios and Philly traces the mean put far
//! more estimates between `earliest` and `likely` (the share the answers are reported by) than
//! the median (BENCHMARKS.md, "Start-time estimates"); [`RuntimeHistory::with_statistic`] takes
//! the median instead.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

/// Runtimes kept per queue by default: the most recent ones.
pub const DEFAULT_HISTORY_WINDOW: usize = 256;

/// Runtimes a queue needs by default before what it learnt counts as an estimate: fewer say
/// too little, and the policy's default stands until then.
pub const DEFAULT_HISTORY_MIN_SAMPLES: usize = 10;

/// What a [`RuntimeHistory`] estimates a queue's next runtime as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeStatistic {
    /// The median: what a typical gang of the queue runs.
    Median,
    /// The mean (the default): what gangs of the queue run on average. With the heavy tails
    /// training runtimes have (many short runs, a few of days) it is far above the median, and
    /// it is what a line of gangs adds up to: a start-time estimate waits for the sum of the
    /// runtimes ahead, which medians understate.
    #[default]
    Mean,
}

/// One queue's recent runtimes, in arrival order and sorted, with their sum.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Window {
    recent: VecDeque<u64>,
    sorted: Vec<u64>,
    sum: u128,
}

impl Window {
    fn push(&mut self, seconds: u64, window: usize) {
        if self.recent.len() == window
            && let Some(old) = self.recent.pop_front()
            && let Ok(i) = self.sorted.binary_search(&old)
        {
            self.sorted.remove(i);
            self.sum -= u128::from(old);
        }
        self.recent.push_back(seconds);
        self.sum += u128::from(seconds);
        let at = self.sorted.partition_point(|&x| x <= seconds);
        self.sorted.insert(at, seconds);
    }

    /// The statistic of the kept runtimes above `elapsed` (of all of them for 0); `None` when
    /// none is.
    fn statistic_above(&self, statistic: RuntimeStatistic, elapsed: u64) -> Option<u64> {
        let from = if elapsed == 0 { 0 } else { self.sorted.partition_point(|&x| x <= elapsed) };
        let above = &self.sorted[from..];
        if above.is_empty() {
            return None;
        }
        Some(match statistic {
            // Nearest rank over the runtimes above, as `quantile` over all.
            RuntimeStatistic::Median => above[above.len().div_ceil(2) - 1],
            RuntimeStatistic::Mean => {
                let sum: u128 = if from == 0 { self.sum } else { above.iter().map(|&x| u128::from(x)).sum() };
                // Rounded up: at least the shortest of them, and whole seconds.
                u64::try_from(sum.div_ceil(above.len() as u128)).unwrap_or(u64::MAX)
            }
        })
    }

    /// Nearest rank: the smallest kept runtime with at least `q` of them at or below it.
    fn quantile(&self, q: f64) -> Option<u64> {
        let n = self.sorted.len();
        if n == 0 || q.is_nan() {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * n as f64).ceil() as usize;
        Some(self.sorted[rank.clamp(1, n) - 1])
    }
}

/// Per-queue learned runtimes (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeHistory {
    window: usize,
    min_samples: usize,
    statistic: RuntimeStatistic,
    queues: BTreeMap<String, Window>,
}

impl Default for RuntimeHistory {
    fn default() -> RuntimeHistory {
        RuntimeHistory::new(DEFAULT_HISTORY_WINDOW, DEFAULT_HISTORY_MIN_SAMPLES)
    }
}

/// How much a [`RuntimeHistory`] knows about one queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct QueueRuntimes {
    /// Runtimes kept (at most the window).
    pub samples: usize,
    /// Their median, seconds.
    pub median: u64,
    /// Their 90th percentile, seconds.
    pub p90: u64,
}

impl RuntimeHistory {
    /// A history keeping the last `window` runtimes of each queue (at least 1), whose estimate
    /// needs `min_samples` of them (at least 1).
    pub fn new(window: usize, min_samples: usize) -> RuntimeHistory {
        let window = window.max(1);
        RuntimeHistory {
            window,
            min_samples: min_samples.clamp(1, window),
            statistic: RuntimeStatistic::default(),
            queues: BTreeMap::new(),
        }
    }

    /// The same history estimating with `statistic` (the mean by default).
    pub fn with_statistic(mut self, statistic: RuntimeStatistic) -> RuntimeHistory {
        self.statistic = statistic;
        self
    }

    /// What the estimates are.
    pub fn statistic(&self) -> RuntimeStatistic {
        self.statistic
    }

    /// A gang of `queue` finished after running `seconds`.
    pub fn record(&mut self, queue: &str, seconds: u64) {
        let window = self.window;
        match self.queues.get_mut(queue) {
            Some(w) => w.push(seconds, window),
            None => self.queues.entry(queue.to_string()).or_default().push(seconds, window),
        }
    }

    /// The runtime to expect of the next gang of `queue`: the mean of its kept runtimes (or
    /// [the statistic chosen](RuntimeHistory::with_statistic); at least 1 s), once it has
    /// [the minimum](RuntimeHistory::new) of them; `None` before.
    pub fn estimate(&self, queue: &str) -> Option<u64> {
        self.estimate_after(queue, 0)
    }

    /// The runtime to expect of a gang of `queue` that has already run `elapsed` seconds: the
    /// statistic over the kept runtimes longer than that (a gang still running after a day is
    /// one of the long ones, whatever the queue's median), or the longest kept when none is
    /// (it outlived them all: it is expected to end at any moment). `None` before the queue has
    /// the minimum of runtimes.
    pub fn estimate_after(&self, queue: &str, elapsed: u64) -> Option<u64> {
        let w = self.queues.get(queue).filter(|w| w.sorted.len() >= self.min_samples)?;
        let found = w.statistic_above(self.statistic, elapsed).or_else(|| w.sorted.last().copied())?;
        Some(found.max(1))
    }

    /// The `q`-quantile (0 to 1, nearest rank) of `queue`'s kept runtimes, however few;
    /// `None` when it has none.
    pub fn quantile(&self, queue: &str, q: f64) -> Option<u64> {
        self.queues.get(queue)?.quantile(q)
    }

    /// Runtimes kept for `queue`.
    pub fn samples(&self, queue: &str) -> usize {
        self.queues.get(queue).map_or(0, |w| w.sorted.len())
    }

    /// What is known of each queue with at least one runtime, by name.
    pub fn queues(&self) -> impl Iterator<Item = (&str, QueueRuntimes)> + '_ {
        self.queues.iter().filter_map(|(name, w)| {
            let runtimes = QueueRuntimes { samples: w.sorted.len(), median: w.quantile(0.5)?, p90: w.quantile(0.9)? };
            Some((name.as_str(), runtimes))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_mean_is_the_default_and_the_median_is_asked_for() {
        assert_eq!(RuntimeHistory::default().statistic(), RuntimeStatistic::Mean);
        let mut h = RuntimeHistory::default();
        for s in [60; 9].into_iter().chain([36_060]) {
            h.record("q", s);
        }
        assert_eq!(h.estimate("q"), Some(3_660), "the mean of nine minutes and a ten-hour run");
        let median = h.with_statistic(RuntimeStatistic::Median);
        assert_eq!(median.statistic(), RuntimeStatistic::Median);
        assert_eq!(median.estimate("q"), Some(60));
    }

    #[test]
    fn the_estimate_counts_only_once_enough_runtimes_are_known() {
        let mut h = RuntimeHistory::new(8, 3).with_statistic(RuntimeStatistic::Median);
        h.record("a", 100);
        h.record("a", 300);
        assert_eq!(h.estimate("a"), None, "two runtimes are not enough");
        assert_eq!(h.quantile("a", 0.5), Some(100), "the quantile reads what there is");
        h.record("a", 200);
        assert_eq!(h.estimate("a"), Some(200));
        assert_eq!(h.estimate("b"), None, "another queue knows nothing");
        assert_eq!(h.quantile("a", 0.0), Some(100));
        assert_eq!(h.quantile("a", 1.0), Some(300));
        assert_eq!(h.quantile("a", 0.9), Some(300));
        assert_eq!(h.samples("a"), 3);
    }

    #[test]
    fn only_the_last_runtimes_of_the_window_count() {
        let mut h = RuntimeHistory::new(3, 1);
        for s in [10, 10, 10, 500, 600, 800] {
            h.record("q", s);
        }
        assert_eq!(h.samples("q"), 3);
        assert_eq!(h.estimate("q"), Some(634), "the three 10 s runs left the window: 1900 / 3, rounded up");
        let median = h.clone().with_statistic(RuntimeStatistic::Median);
        assert_eq!(median.estimate("q"), Some(600));
        let listed: Vec<_> = h.queues().collect();
        assert_eq!(listed, vec![("q", QueueRuntimes { samples: 3, median: 600, p90: 800 })]);
    }

    #[test]
    fn a_zero_runtime_estimates_one_second() {
        let mut h = RuntimeHistory::new(4, 1);
        h.record("q", 0);
        assert_eq!(h.estimate("q"), Some(1));
        assert_eq!(h.quantile("q", 0.5), Some(0));
    }

    #[test]
    fn a_running_gang_is_expected_to_run_like_those_that_ran_longer() {
        let mut h = RuntimeHistory::new(16, 4);
        for s in [10, 20, 30, 1_000, 3_000] {
            h.record("q", s);
        }
        assert_eq!(h.statistic(), RuntimeStatistic::Mean);
        assert_eq!(h.estimate("q"), Some(812));
        assert_eq!(h.estimate_after("q", 25), Some(1_344), "4030 / 3, rounded up");
        assert_eq!(h.estimate_after("q", 5_000), Some(3_000), "it outlived them all: the longest");
        let median = h.clone().with_statistic(RuntimeStatistic::Median);
        assert_eq!(median.estimate("q"), Some(30));
        assert_eq!(median.estimate_after("q", 25), Some(1_000), "the median of 30, 1000 and 3000");
        assert_eq!(median.estimate_after("q", 5_000), Some(3_000));
        assert_eq!(RuntimeHistory::new(16, 6).estimate_after("q", 25), None, "too few runtimes");
    }

    proptest! {
        /// The window and its quantiles equal a sort of the last `window` runtimes.
        #[test]
        fn quantiles_equal_a_sort_of_the_window(
            runtimes in proptest::collection::vec(0u64..10_000, 1..300),
            window in 1usize..50,
            q in 0.0f64..=1.0,
        ) {
            let mut h = RuntimeHistory::new(window, 1);
            for &s in &runtimes {
                h.record("q", s);
            }
            let mut last: Vec<u64> = runtimes.iter().rev().take(window).copied().collect();
            last.sort_unstable();
            let rank = ((q * last.len() as f64).ceil() as usize).clamp(1, last.len());
            prop_assert_eq!(h.quantile("q", q), Some(last[rank - 1]));
            prop_assert_eq!(h.samples("q"), last.len());
            let sum: u64 = last.iter().sum();
            let mean = h.clone().with_statistic(RuntimeStatistic::Mean);
            prop_assert_eq!(mean.estimate("q"), Some(sum.div_ceil(last.len() as u64).max(1)));
            let again = {
                let mut g = RuntimeHistory::new(window, 1);
                runtimes.iter().for_each(|&s| g.record("q", s));
                g
            };
            prop_assert_eq!(again, h, "the same records give the same history");
        }
    }
}
