//! The order in which a cycle visits pending gangs: strict priority-then-submission, or
//! weighted dominant-resource fair sharing across queues.
//!
//! Fair sharing keeps priority first (a higher priority class always goes first), then
//! picks the queue whose weighted dominant share is lowest (current usage plus decayed
//! history, see `quota/fair_share.rs`), then the earliest submission. The share of the
//! queue just served is read afresh at every pick, so a queue that was just given a gang
//! moves back behind the others within the same cycle.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::ops::Bound;

use crate::gangs::pending::Pending;
use crate::gangs::record::OrderKey;
use trainyard_topology::Resources;

use crate::GangId;
use crate::quota::{FairShare, QueueIdx, QuotaTree};

/// Fixed-point scale of shares, so that they order exactly and deterministically.
pub(crate) const SHARE_SCALE: f64 = 1e9;

/// A queue's head gang as the fair order ranks it: priority, share, submission, tie-breaker, arrival.
type HeadKey = (std::cmp::Reverse<i32>, u64, u64, u64, u64, GangId);

/// Visiting order of one cycle, read straight from the pending maps by a cursor: no snapshot,
/// so a cycle that stops early costs nothing for the gangs it never reaches, and gangs that
/// return to the queue during the cycle wait for the next (see `gangs/pending.rs`).
pub(crate) enum Order {
    /// Priority, then submission, then arrival.
    Cursor(Cursor),
    /// Fair sharing: each queue's pending gangs in order, picked by share.
    Fair(FairOrder),
}

/// Gangs a cursor reads ahead at first, and at most: it doubles from the first to the last
/// as it is drawn on, so a queue the cycle reaches once (most of 200 fair-shared queues in a
/// cycle that stops early) costs a few keys, and a long walk few map lookups.
const FIRST_CHUNK: usize = 4;
const LAST_CHUNK: usize = 64;

/// Where a walk over one map stands: where the next read starts (after the last key handed
/// out, or at a key skipped to) and the next few read ahead.
pub(crate) struct Cursor {
    from: Bound<OrderKey>,
    ahead: VecDeque<(OrderKey, GangId)>,
    done: bool,
    /// Gangs the last refill read.
    chunk: usize,
}

impl Default for Cursor {
    fn default() -> Cursor {
        Cursor { from: Bound::Unbounded, ahead: VecDeque::new(), done: false, chunk: 0 }
    }
}

impl Cursor {
    fn peek(&mut self, pending: &Pending, queue: Option<QueueIdx>) -> Option<(OrderKey, GangId)> {
        if self.ahead.is_empty() && !self.done {
            self.chunk = (self.chunk * 2).clamp(FIRST_CHUNK, LAST_CHUNK);
            pending.fill(queue, self.from, &mut self.ahead, self.chunk);
            self.done = self.ahead.is_empty();
        }
        self.ahead.front().copied()
    }

    fn advance(&mut self) {
        if let Some((k, _)) = self.ahead.pop_front() {
            self.from = Bound::Excluded(k);
        }
    }

    /// Goes on from `key` (ahead of the cursor): the gangs before it are passed over.
    fn skip_to(&mut self, key: OrderKey) {
        while self.ahead.front().is_some_and(|&(k, _)| k < key) {
            self.ahead.pop_front();
        }
        if self.ahead.is_empty() && !self.done {
            self.from = Bound::Included(key);
            // The gangs read ahead were passed over: read few again, so that a walk that
            // passes over the line gang after gang does not read (and drop) whole chunks.
            self.chunk = 0;
        }
    }
}

/// A cursor per queue plus the ranked head of every queue. Only the queue whose gang was just
/// handed out can have changed its share (an admission charges that queue alone), so each pick
/// re-ranks one queue: O(log queues), not a scan. The heads are a binary heap (keys are unique:
/// they end in the gang's id), which picks the same gang as a sorted set, in less time.
pub(crate) struct FairOrder {
    cursors: BTreeMap<QueueIdx, Cursor>,
    heads: BinaryHeap<Reverse<(HeadKey, QueueIdx)>>,
    started: bool,
    last: Option<QueueIdx>,
}

impl FairOrder {
    fn rank(&mut self, pending: &Pending, queue: QueueIdx, share: &impl Fn(QueueIdx) -> u64) {
        let Some(cursor) = self.cursors.get_mut(&queue) else { return };
        if let Some((k, id)) = cursor.peek(pending, Some(queue)) {
            self.heads.push(Reverse(((k.0, share(queue), k.1, k.2, k.3, id), queue)));
        }
    }
}

impl Order {
    /// The order of a cycle over `pending`, by queue when sharing fairly.
    pub(crate) fn new(pending: &Pending, fair: bool) -> Order {
        if !fair {
            return Order::Cursor(Cursor::default());
        }
        let cursors = pending.queues().map(|q| (q, Cursor::default())).collect();
        Order::Fair(FairOrder { cursors, heads: BinaryHeap::new(), started: false, last: None })
    }

    /// The next gang to look at; `share` gives a queue's current weighted share (scaled).
    pub(crate) fn next(&mut self, pending: &Pending, share: impl Fn(QueueIdx) -> u64) -> Option<(OrderKey, GangId)> {
        match self {
            Order::Cursor(cursor) => {
                let next = cursor.peek(pending, None);
                cursor.advance();
                next
            }
            Order::Fair(fair) => {
                if !fair.started {
                    fair.started = true;
                    let queues: Vec<QueueIdx> = fair.cursors.keys().copied().collect();
                    for q in queues {
                        fair.rank(pending, q, &share);
                    }
                } else if let Some(q) = fair.last.take() {
                    fair.rank(pending, q, &share);
                }
                let Reverse(((priority, _, submit, order, arrival, id), queue)) = fair.heads.pop()?;
                if let Some(cursor) = fair.cursors.get_mut(&queue) {
                    cursor.advance();
                }
                fair.last = Some(queue);
                Some(((priority, submit, order, arrival), id))
            }
        }
    }
}

impl Order {
    /// Whether the walk may pass over gangs ([`Order::skip_to`]): in priority-then-submission
    /// order only, where the gangs of a request stand in the same order as in the whole line.
    pub(crate) fn may_skip(&self) -> bool {
        matches!(self, Order::Cursor(_))
    }

    /// Goes on from the gang under `key`, passing over those before it (priority-then-submission
    /// order only; fair sharing visits every gang it reaches).
    pub(crate) fn skip_to(&mut self, key: OrderKey) {
        if let Order::Cursor(cursor) = self {
            cursor.skip_to(key);
        }
    }
}

/// A queue's weighted dominant share now (with its decayed history when fair sharing has a
/// half-life), scaled by [`SHARE_SCALE`] into the integer the fair order sorts by.
pub(crate) fn scaled_share(fair_share: &FairShare, quotas: &QuotaTree, capacity: Resources, queue: QueueIdx) -> u64 {
    (fair_share.share(quotas, queue, capacity) * SHARE_SCALE) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fair_order_takes_the_lowest_share_first_but_priority_before_all() {
        let mut pending = Pending::default();
        pending.keep_per_queue(true);
        let key = |prio: i32, submit: u64| (std::cmp::Reverse(prio), submit, 0, submit);
        pending.insert(key(0, 1), GangId(1), QueueIdx(0));
        pending.insert(key(0, 2), GangId(2), QueueIdx(1));
        pending.insert(key(5, 9), GangId(3), QueueIdx(1)); // higher priority
        let mut order = Order::new(&pending, true);
        let shares = |q: QueueIdx| if q.0 == 0 { 500 } else { 100 };
        let picked: Vec<u64> = std::iter::from_fn(|| order.next(&pending, shares)).map(|(_, id)| id.0).collect();
        assert_eq!(picked, vec![3, 2, 1]);
    }

    #[test]
    fn a_cursor_skips_to_a_key_ahead_whether_read_ahead_or_not() {
        let mut pending = Pending::default();
        let key = |submit: u64| (std::cmp::Reverse(0), submit, 0, submit);
        for n in 1..=200 {
            pending.insert(key(n), GangId(n), QueueIdx(0));
        }
        let mut order = Order::new(&pending, false);
        assert!(order.may_skip());
        assert_eq!(order.next(&pending, |_| 0).map(|(_, id)| id), Some(GangId(1)));
        // Within what the cursor read ahead.
        order.skip_to(key(3));
        assert_eq!(order.next(&pending, |_| 0).map(|(_, id)| id), Some(GangId(3)));
        // Far beyond it.
        order.skip_to(key(150));
        let rest: Vec<u64> = std::iter::from_fn(|| order.next(&pending, |_| 0)).map(|(_, id)| id.0).collect();
        assert_eq!(rest, (150..=200).collect::<Vec<_>>());
        pending.keep_per_queue(true);
        assert!(!Order::new(&pending, true).may_skip());
    }

    #[test]
    fn a_gang_returned_during_the_cycle_waits_for_the_next() {
        let mut pending = Pending::default();
        let key = |submit: u64| (std::cmp::Reverse(0), submit, 0, submit);
        pending.insert(key(1), GangId(1), QueueIdx(0));
        pending.insert(key(3), GangId(3), QueueIdx(0));
        pending.open_cycle();
        for fair in [false, true] {
            pending.keep_per_queue(fair);
            let mut order = Order::new(&pending, fair);
            assert_eq!(order.next(&pending, |_| 0).map(|(_, id)| id), Some(GangId(1)));
            pending.remove(&key(1));
            // A victim with an earlier key comes back: this cycle does not visit it.
            pending.insert(key(2), GangId(2), QueueIdx(0));
            assert_eq!(order.next(&pending, |_| 0).map(|(_, id)| id), Some(GangId(3)));
            assert_eq!(order.next(&pending, |_| 0), None);
            pending.remove(&key(2));
            pending.insert(key(1), GangId(1), QueueIdx(0));
            pending.open_cycle();
        }
        pending.close_cycle();
        assert_eq!(Order::new(&pending, false).next(&pending, |_| 0).map(|(_, id)| id), Some(GangId(1)));
    }
}
