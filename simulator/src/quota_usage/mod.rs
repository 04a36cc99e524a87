//! Quota usage over virtual time: per leaf queue, the GPUs it holds and borrows, and its waiting gangs.
//!
//! After every scheduling cycle the replay takes one [`QueueSample`] per leaf queue of the
//! engine's quota tree. Like [`crate::fragmentation`], a sample holds until the next cycle,
//! so the [`UsageTracker`] weights it by the time to the next one, and keeps a bounded series
//! of equal-width buckets that double (merging neighbours) whenever the replay outgrows
//! [`MAX_POINTS`] of them: the same samples always give the same points.
//!
//! Borrowed GPUs are the quota tree's: `max(0, E - SQ)` of the leaf, its usage beyond its
//! subtree quota. A queue is *at or over quota* while it holds GPUs and at least as many as its
//! (finite) quota; a queue whose quota is 0 is so whenever it holds any GPU.

mod render;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};
use trainyard_policies::QuotaTree;

pub use crate::series::MAX_POINTS;
use crate::series::Series;
pub use render::render_table;

/// Stands for "no quota" in [`QueueSample::quota_gpus`], as in the quota tree.
pub const UNLIMITED: u64 = u64::MAX;

/// One leaf queue right after one scheduling cycle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueSample {
    /// GPUs its running gangs hold.
    pub used_gpus: u64,
    /// GPUs it holds beyond its subtree quota (taken from the pools above).
    pub borrowed_gpus: u64,
    /// Its subtree quota in GPUs; [`UNLIMITED`] when GPUs are not accounted for it.
    pub quota_gpus: u64,
    /// Its gangs waiting to start.
    pub pending_gangs: u64,
}

impl QueueSample {
    /// The queue holds GPUs beyond its quota.
    pub fn borrowing(&self) -> bool {
        self.borrowed_gpus > 0
    }

    /// The queue holds GPUs, at least as many as its finite quota.
    pub fn at_or_over_quota(&self) -> bool {
        self.quota_gpus != UNLIMITED && self.used_gpus > 0 && self.used_gpus >= self.quota_gpus
    }

    /// The sample of leaf `q` of `tree`, with `pending_gangs` waiting.
    pub fn of(tree: &QuotaTree, q: trainyard_policies::QueueIdx, pending_gangs: u64) -> QueueSample {
        QueueSample {
            used_gpus: tree.usage(q).gpus,
            borrowed_gpus: tree.borrowed(q).gpus,
            quota_gpus: tree.subtree_quota(q).gpus,
            pending_gangs,
        }
    }
}

/// One point of a queue's series: means over `[t, t + duration_s)`, rounded to 3 decimals.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UsagePoint {
    /// Start of the bucket, seconds of virtual time.
    pub t: u64,
    /// Length of the bucket that the replay covered, seconds.
    pub duration_s: u64,
    /// Time-weighted mean of GPUs used.
    pub used_gpus: f64,
    /// Time-weighted mean of GPUs borrowed.
    pub borrowed_gpus: f64,
    /// Time-weighted mean of gangs waiting.
    pub pending_gangs: f64,
}

/// One leaf queue over a whole replay. Means are rounded to 3 decimals, shares to 6.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueUsage {
    /// Queue name.
    pub name: String,
    /// Subtree quota in GPUs when last observed; `None` when GPUs are not accounted for it.
    pub quota_gpus: Option<u64>,
    /// Time-weighted mean of GPUs used.
    pub mean_used_gpus: f64,
    /// Most GPUs used after any cycle.
    pub max_used_gpus: u64,
    /// Time-weighted mean of GPUs borrowed.
    pub mean_borrowed_gpus: f64,
    /// Most GPUs borrowed after any cycle.
    pub max_borrowed_gpus: u64,
    /// Share of the observed time it borrowed.
    pub borrowing_share: f64,
    /// Share of the observed time it was at or over its quota.
    pub at_quota_share: f64,
    /// Time-weighted mean of gangs waiting.
    pub mean_pending_gangs: f64,
    /// Most gangs waiting after any cycle.
    pub max_pending_gangs: u64,
    /// At most [`MAX_POINTS`] buckets of equal width covering the observed time, in time order.
    pub series: Vec<UsagePoint>,
}

/// Quota usage of every leaf queue over a replay, time-weighted from the first cycle to the last.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QuotaUsage {
    /// Seconds from the first scheduling cycle to the last.
    pub observed_s: u64,
    /// Width of the series buckets, seconds.
    pub series_step_s: u64,
    /// Time-weighted mean of the GPUs all leaf queues used, rounded to 3 decimals.
    pub mean_used_gpus: f64,
    /// Time-weighted mean of the GPUs all leaf queues borrowed, rounded to 3 decimals.
    pub mean_borrowed_gpus: f64,
    /// Most GPUs borrowed by all leaf queues together after any cycle.
    pub max_borrowed_gpus: u64,
    /// Share of the observed time some queue borrowed, rounded to 6 decimals.
    pub borrowing_share: f64,
    /// Leaf queues in the quota tree's order: declared ones in file order, then undeclared
    /// ones as their first gang arrived.
    pub queues: Vec<QueueUsage>,
}

impl QuotaUsage {
    /// A queue by name.
    pub fn queue(&self, name: &str) -> Option<&QueueUsage> {
        self.queues.iter().find(|q| q.name == name)
    }
}

/// Integrals of one queue over one bucket or the whole replay (GPU-seconds, gang-seconds).
#[derive(Clone, Copy, Debug, Default)]
struct Integral {
    used: u128,
    borrowed: u128,
    pending: u128,
    borrowing_s: u64,
    at_quota_s: u64,
}

impl Integral {
    fn add(&mut self, seconds: u64, s: &QueueSample) {
        let weight = u128::from(seconds);
        self.used += weight * u128::from(s.used_gpus);
        self.borrowed += weight * u128::from(s.borrowed_gpus);
        self.pending += weight * u128::from(s.pending_gangs);
        if s.borrowing() {
            self.borrowing_s += seconds;
        }
        if s.at_or_over_quota() {
            self.at_quota_s += seconds;
        }
    }

    fn merge(&mut self, o: &Integral) {
        self.used += o.used;
        self.borrowed += o.borrowed;
        self.pending += o.pending;
        self.borrowing_s += o.borrowing_s;
        self.at_quota_s += o.at_quota_s;
    }
}

/// One bucket of the series: its covered seconds and one integral per queue (queues first
/// seen after the bucket was filled have none and count as idle).
#[derive(Clone, Debug, Default)]
struct Bucket {
    seconds: u64,
    queues: Vec<Integral>,
}

impl crate::series::Bucket for Bucket {
    fn merge(&mut self, other: &Bucket) {
        self.seconds += other.seconds;
        if self.queues.len() < other.queues.len() {
            self.queues.resize(other.queues.len(), Integral::default());
        }
        for (a, b) in self.queues.iter_mut().zip(&other.queues) {
            a.merge(b);
        }
    }
}

/// Largest values seen of one queue.
#[derive(Clone, Copy, Debug, Default)]
struct Peak {
    used: u64,
    borrowed: u64,
    pending: u64,
}

/// Accumulates per-queue samples taken at increasing times into a [`QuotaUsage`].
#[derive(Clone, Debug, Default)]
pub struct UsageTracker {
    names: Vec<String>,
    last: Vec<QueueSample>,
    start: Option<u64>,
    last_at: u64,
    seconds: u64,
    total: Vec<Integral>,
    peaks: Vec<Peak>,
    any_borrowing_s: u64,
    max_borrowed_sum: u64,
    any_finite_quota: bool,
    series: Series<Bucket>,
}

impl UsageTracker {
    /// An empty tracker.
    pub fn new() -> UsageTracker {
        UsageTracker::default()
    }

    /// Records the state after the cycle at `now`, one `(name, sample)` per leaf queue; it
    /// holds until the next call. The queues must come in the same order every time; new ones
    /// may be appended, and a queue left out counts as idle. Times must not decrease; an
    /// earlier time is treated as the previous one.
    pub fn observe<'a>(&mut self, now: u64, queues: impl IntoIterator<Item = (&'a str, QueueSample)>) {
        let now = match self.start {
            Some(_) => {
                let now = now.max(self.last_at);
                self.hold(self.last_at, now);
                now
            }
            None => {
                self.start = Some(now);
                now
            }
        };
        self.last_at = now;
        for s in &mut self.last {
            *s = QueueSample { quota_gpus: s.quota_gpus, ..QueueSample::default() };
        }
        let mut borrowed_sum = 0u64;
        for (i, (name, sample)) in queues.into_iter().enumerate() {
            if i == self.names.len() {
                self.names.push(name.to_string());
                self.last.push(QueueSample::default());
                self.total.push(Integral::default());
                self.peaks.push(Peak::default());
            }
            debug_assert_eq!(self.names[i], name, "queues must keep their order");
            self.last[i] = sample;
            let peak = &mut self.peaks[i];
            peak.used = peak.used.max(sample.used_gpus);
            peak.borrowed = peak.borrowed.max(sample.borrowed_gpus);
            peak.pending = peak.pending.max(sample.pending_gangs);
            self.any_finite_quota |= sample.quota_gpus != UNLIMITED;
            borrowed_sum = borrowed_sum.saturating_add(sample.borrowed_gpus);
        }
        self.max_borrowed_sum = self.max_borrowed_sum.max(borrowed_sum);
    }

    /// Records every leaf of `tree` after the cycle at `now`; `pending_by_queue[q]` is the
    /// number of gangs waiting in queue `QueueIdx(q)` (missing entries count as 0).
    pub fn observe_tree(&mut self, now: u64, tree: &QuotaTree, pending_by_queue: &[u64]) {
        let leaves = tree.leaves().map(|q| {
            let pending = pending_by_queue.get(q.0).copied().unwrap_or(0);
            (tree.name(q), QueueSample::of(tree, q, pending))
        });
        self.observe(now, leaves);
    }

    /// Adds the last samples over `[from, to)`.
    fn hold(&mut self, from: u64, to: u64) {
        let seconds = to - from;
        if seconds == 0 {
            return;
        }
        self.seconds += seconds;
        for (total, sample) in self.total.iter_mut().zip(&self.last) {
            total.add(seconds, sample);
        }
        if self.last.iter().any(QueueSample::borrowing) {
            self.any_borrowing_s += seconds;
        }
        let last = &self.last;
        self.series.spread(from, to, |bucket, seconds| {
            bucket.seconds += seconds;
            if bucket.queues.len() < last.len() {
                bucket.queues.resize(last.len(), Integral::default());
            }
            for (integral, sample) in bucket.queues.iter_mut().zip(last) {
                integral.add(seconds, sample);
            }
        });
    }

    /// The statistics of everything observed; `None` when no queue ever had a finite GPU
    /// quota (then quota usage says nothing that utilisation does not).
    pub fn finish(&self) -> Option<QuotaUsage> {
        if !self.any_finite_quota {
            return None;
        }
        let seconds = self.seconds;
        let mean = |total: u128| if seconds == 0 { 0.0 } else { round_to(total as f64 / seconds as f64, 3) };
        let share = |part: u64| if seconds == 0 { 0.0 } else { round_to(part as f64 / seconds as f64, 6) };
        let queues = self
            .names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let (total, peak, quota) = (&self.total[i], &self.peaks[i], self.last[i].quota_gpus);
                let series = self
                    .series
                    .buckets
                    .iter()
                    .enumerate()
                    .map(|(b, bucket)| {
                        let integral = bucket.queues.get(i).copied().unwrap_or_default();
                        let bucket_mean = |v: u128| {
                            if bucket.seconds == 0 { 0.0 } else { round_to(v as f64 / bucket.seconds as f64, 3) }
                        };
                        UsagePoint {
                            t: self.series.time_of(b),
                            duration_s: bucket.seconds,
                            used_gpus: bucket_mean(integral.used),
                            borrowed_gpus: bucket_mean(integral.borrowed),
                            pending_gangs: bucket_mean(integral.pending),
                        }
                    })
                    .collect();
                QueueUsage {
                    name: name.clone(),
                    quota_gpus: (quota != UNLIMITED).then_some(quota),
                    mean_used_gpus: mean(total.used),
                    max_used_gpus: peak.used,
                    mean_borrowed_gpus: mean(total.borrowed),
                    max_borrowed_gpus: peak.borrowed,
                    borrowing_share: share(total.borrowing_s),
                    at_quota_share: share(total.at_quota_s),
                    mean_pending_gangs: mean(total.pending),
                    max_pending_gangs: peak.pending,
                    series,
                }
            })
            .collect();
        Some(QuotaUsage {
            observed_s: seconds,
            series_step_s: self.series.width,
            mean_used_gpus: mean(self.total.iter().map(|t| t.used).sum()),
            mean_borrowed_gpus: mean(self.total.iter().map(|t| t.borrowed).sum()),
            max_borrowed_gpus: self.max_borrowed_sum,
            borrowing_share: share(self.any_borrowing_s),
            queues,
        })
    }
}

/// Rounds `x` to `decimals` decimal places (for readable, stable JSON).
fn round_to(x: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (x * scale).round() / scale
}
