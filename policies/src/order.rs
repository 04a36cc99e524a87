//! The order in which a cycle visits pending gangs: strict priority-then-submission, or
//! weighted dominant-resource fair sharing across queues.
//!
//! Fair sharing keeps priority first (a higher priority class always goes first), then
//! picks the queue whose weighted dominant share is lowest (current usage plus decayed
//! history, see `quota_tree/fair_share.rs`), then the earliest submission. The share of the
//! queue just served is read afresh at every pick, so a queue that was just given a gang
//! moves back behind the others within the same cycle.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::engine::OrderKey;
use crate::quota_tree::FairShare;
use crate::quota_tree::QueueIdx;
use crate::{Engine, FairSharing, GangId};

/// Fixed-point scale of shares, so that they order exactly and deterministically.
pub(crate) const SHARE_SCALE: f64 = 1e9;

/// A queue's head gang as the fair order ranks it: priority, share, submission, tie-breaker, arrival.
type HeadKey = (std::cmp::Reverse<i32>, u64, u64, u64, u64, GangId);

/// Visiting order of one cycle.
pub(crate) enum Order {
    /// Priority, then submission, then arrival: a snapshot walked once.
    Fifo(std::vec::IntoIter<(OrderKey, GangId)>),
    /// The same order read straight from the pending map, one key after another: no
    /// snapshot, so a cycle that stops early costs nothing for the gangs it never reaches.
    /// Only when nothing re-enters the pending map during the cycle (no preemption).
    Cursor(Option<OrderKey>),
    /// Fair sharing: each queue's pending gangs in order, picked by share.
    Fair(FairOrder),
}

/// Per-queue snapshots plus the ranked head of every queue. Only the queue whose gang was
/// just handed out can have changed its share (an admission charges that queue alone), so
/// each pick re-ranks one queue: O(log queues), not a scan.
pub(crate) struct FairOrder {
    by_queue: BTreeMap<QueueIdx, VecDeque<(OrderKey, GangId)>>,
    heads: BTreeSet<(HeadKey, QueueIdx)>,
    started: bool,
    last: Option<QueueIdx>,
}

impl FairOrder {
    fn rank(&mut self, queue: QueueIdx, share: &impl Fn(QueueIdx) -> u64) {
        if let Some(&(k, id)) = self.by_queue.get(&queue).and_then(|g| g.front()) {
            self.heads.insert(((k.0, share(queue), k.1, k.2, k.3, id), queue));
        }
    }
}

impl Order {
    /// Snapshot of the pending gangs, grouped by queue when sharing fairly.
    pub(crate) fn new(
        pending: &BTreeMap<OrderKey, GangId>,
        queue_of: impl Fn(GangId) -> QueueIdx,
        fair: bool,
        requeues: bool,
    ) -> Order {
        match (fair, requeues) {
            (false, false) => return Order::Cursor(None),
            (false, true) => {
                return Order::Fifo(pending.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>().into_iter());
            }
            (true, _) => {}
        }
        let mut by_queue: BTreeMap<QueueIdx, VecDeque<(OrderKey, GangId)>> = BTreeMap::new();
        for (k, v) in pending {
            by_queue.entry(queue_of(*v)).or_default().push_back((*k, *v));
        }
        Order::Fair(FairOrder { by_queue, heads: BTreeSet::new(), started: false, last: None })
    }

    /// The next gang to look at; `share` gives a queue's current weighted share (scaled).
    pub(crate) fn next(
        &mut self,
        pending: &BTreeMap<OrderKey, GangId>,
        share: impl Fn(QueueIdx) -> u64,
    ) -> Option<(OrderKey, GangId)> {
        match self {
            Order::Fifo(it) => it.next(),
            Order::Cursor(after) => {
                let next = match after {
                    None => pending.iter().next(),
                    Some(k) => pending.range((std::ops::Bound::Excluded(*k), std::ops::Bound::Unbounded)).next(),
                }
                .map(|(k, v)| (*k, *v));
                *after = next.map(|(k, _)| k);
                next
            }
            Order::Fair(fair) => {
                if !fair.started {
                    fair.started = true;
                    let queues: Vec<QueueIdx> = fair.by_queue.keys().copied().collect();
                    for q in queues {
                        fair.rank(q, &share);
                    }
                } else if let Some(q) = fair.last.take() {
                    fair.rank(q, &share);
                }
                let (_, queue) = fair.heads.pop_first()?;
                fair.last = Some(queue);
                fair.by_queue.get_mut(&queue).and_then(VecDeque::pop_front)
            }
        }
    }
}

impl Engine {
    /// Turns fair sharing on (with an optional half-life for past usage) or off.
    pub fn set_fair_sharing(&mut self, fair: Option<FairSharing>) {
        self.fair = fair;
        self.fair_share = FairShare::new(fair.and_then(|f| f.half_life_s));
    }

    /// A queue's weighted dominant share now (with its decayed history when fair sharing has
    /// a half-life), scaled by [`SHARE_SCALE`].
    pub fn share(&self, queue: QueueIdx) -> u64 {
        let capacity = self.cluster.total_capacity();
        (self.fair_share.share(&self.quotas, queue, capacity) * SHARE_SCALE) as u64
    }

    /// Accounts every queue's usage up to `now` into the fair-share history; called before
    /// any change of usage.
    pub(crate) fn advance_history(&mut self, now: u64) {
        self.fair_share.advance(&self.quotas, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fair_order_takes_the_lowest_share_first_but_priority_before_all() {
        let mut pending = BTreeMap::new();
        let key = |prio: i32, submit: u64| (std::cmp::Reverse(prio), submit, 0, submit);
        pending.insert(key(0, 1), GangId(1)); // queue 0
        pending.insert(key(0, 2), GangId(2)); // queue 1
        pending.insert(key(5, 9), GangId(3)); // queue 1, higher priority
        let queue_of = |id: GangId| QueueIdx(if id.0 == 1 { 0 } else { 1 });
        let mut order = Order::new(&pending, queue_of, true, false);
        let shares = |q: QueueIdx| if q.0 == 0 { 500 } else { 100 };
        let picked: Vec<u64> = std::iter::from_fn(|| order.next(&pending, shares)).map(|(_, id)| id.0).collect();
        assert_eq!(picked, vec![3, 2, 1]);
    }
}
