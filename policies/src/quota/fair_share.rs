//! Fair-share state: each queue's exponentially decayed resource-time, and the DRF order.
//!
//! History of queue `q` in resource `r` at time `t`, with half-life `h` and `λ = ln 2 / h`:
//! `H(t) = ∫ U(s) e^(-λ (t - s)) ds` over the past. Usage is constant between events, so
//! [`FairShare::advance`] integrates exactly: over a step of `Δ` seconds at usage `u`,
//! `H ← H e^(-λΔ) + u (1 - e^(-λΔ)) / λ`.
//!
//! The share of a queue with weight `w` against the cluster's `capacity`:
//! `share(q) = (max_r U_r / C_r + max_r H_r / (C_r / λ)) / w`. `C / λ` is the history a
//! queue gets by holding the whole cluster forever, so a queue that has held a fraction `f`
//! of the cluster for many half-lives has a history term of `f`, like its current term.
//! Without a half-life the history term is 0.

use std::cmp::Ordering;

use trainyard_topology::Resources;

use super::{QueueIdx, QuotaTree, R, amounts, dominant};
use crate::FairSharingConfig;

/// Weighted dominant-resource fair sharing across queues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FairSharing {
    /// Past usage counts too, decaying by half every this many seconds; `None` counts only
    /// what queues hold now.
    pub half_life_s: Option<u64>,
}

/// Decayed usage history of every queue of a [`QuotaTree`]. Deterministic: the caller
/// passes time in, and `advance` must be called before every change of usage.
#[derive(Clone, Debug, Default)]
pub struct FairShare {
    half_life_s: Option<u64>,
    last: Option<u64>,
    history: Vec<[f64; R]>,
}

impl FairShare {
    /// Empty history; `half_life_s` of `None` (or 0) keeps no history.
    pub fn new(half_life_s: Option<u64>) -> FairShare {
        FairShare { half_life_s: half_life_s.filter(|&h| h > 0), last: None, history: Vec::new() }
    }

    /// Empty history with the policy's half-life.
    pub fn from_config(config: &FairSharingConfig) -> FairShare {
        FairShare::new(config.half_life_s)
    }

    /// `λ = ln 2 / h`, if there is a history.
    fn rate(&self) -> Option<f64> {
        self.half_life_s.map(|h| std::f64::consts::LN_2 / h as f64)
    }

    /// Accounts the usage the tree holds now for the time since the previous call (the usage
    /// must not have changed in between). The first call only sets the clock; a time before
    /// the previous one counts as no time passing.
    pub fn advance(&mut self, tree: &QuotaTree, now: u64) {
        let since = self.last.map_or(0, |last| now.saturating_sub(last));
        self.last = Some(self.last.map_or(now, |last| last.max(now)));
        let Some(rate) = self.rate() else { return };
        self.history.resize(tree.nodes.len(), [0.0; R]);
        if since == 0 {
            return;
        }
        let x = -rate * since as f64;
        let keep = x.exp();
        // 1 - e^x without the cancellation of small steps.
        let gained = -x.exp_m1() / rate;
        for (h, node) in self.history.iter_mut().zip(&tree.nodes) {
            for (h, u) in h.iter_mut().zip(node.usage) {
                *h = *h * keep + u as f64 * gained;
            }
        }
    }

    /// The time history was last accounted to.
    pub fn last(&self) -> Option<u64> {
        self.last
    }

    /// Takes over `old`'s history for the queues of `new_tree` that `old_tree` had by name (a
    /// replaced quota tree keeps what each queue used), accounted up to `now`.
    pub fn carry_over(&mut self, old: &FairShare, old_tree: &QuotaTree, new_tree: &QuotaTree, now: u64) {
        self.last = old.last.or(Some(now));
        if self.rate().is_none() {
            return;
        }
        self.history =
            new_tree.nodes.iter().map(|n| old_tree.find(&n.name).map_or([0.0; R], |q| old.history(q))).collect();
    }

    /// The decayed resource-seconds of `q`: `[gpus, cpu_milli, memory_mib]`.
    pub fn history(&self, q: QueueIdx) -> [f64; R] {
        self.history.get(q.0).copied().unwrap_or([0.0; R])
    }

    /// The history term of the share: `max_r H_r λ / C_r` (0 without a half-life).
    pub fn history_share(&self, q: QueueIdx, capacity: Resources) -> f64 {
        match self.rate() {
            Some(rate) => dominant(self.history(q).map(|h| h * rate), amounts(capacity)),
            None => 0.0,
        }
    }

    /// `(dominant share of current usage + history share) / weight`; lower goes first.
    pub fn share(&self, tree: &QuotaTree, q: QueueIdx, capacity: Resources) -> f64 {
        (tree.dominant_share(q, capacity) + self.history_share(q, capacity)) / tree.weight(q)
    }

    /// Hierarchical DRF order of two queues: at the first level where their paths from the
    /// root part, the queue with the lower [`share`](Self::share) goes first; equal shares go
    /// by index. A queue goes before its own descendants.
    pub fn compare(&self, tree: &QuotaTree, a: QueueIdx, b: QueueIdx, capacity: Resources) -> Ordering {
        let (pa, pb) = (path_from_root(tree, a), path_from_root(tree, b));
        for (&x, &y) in pa.iter().zip(&pb) {
            if x != y {
                let (sx, sy) = (self.share(tree, x, capacity), self.share(tree, y, capacity));
                return sx.total_cmp(&sy).then(x.cmp(&y));
            }
        }
        pa.len().cmp(&pb.len())
    }
}

fn path_from_root(tree: &QuotaTree, q: QueueIdx) -> Vec<QueueIdx> {
    let mut path = vec![q];
    let mut at = q;
    while let Some(p) = tree.parent(at) {
        path.push(p);
        at = p;
    }
    path.reverse();
    path
}
