//! The pending gangs in visiting order, over all queues and per queue, kept together, and the
//! gangs that came back to the queue during the cycle under way.
//!
//! A cycle visits the gangs that were pending when it began. Walking the maps with a cursor
//! (rather than copying them into a snapshot every cycle) costs only the gangs the cycle reaches;
//! a gang sent back during the cycle (a preemption victim) is skipped until the next one, which
//! is exactly what the snapshot gave.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::ops::Bound;

use crate::GangId;
use crate::gangs::by_id::FastHash;
use crate::gangs::record::OrderKey;
use crate::quota::QueueIdx;

/// Pending gangs by visiting key, overall and within each queue.
#[derive(Clone, Debug, Default)]
pub(crate) struct Pending {
    all: BTreeMap<OrderKey, (GangId, QueueIdx)>,
    /// Kept only while `per_queue` is on: the fair order alone reads it.
    by_queue: BTreeMap<QueueIdx, BTreeMap<OrderKey, GangId>>,
    per_queue: bool,
    /// Whether a cycle is under way, and the gangs that entered since it began.
    open: bool,
    returned: HashSet<GangId, FastHash>,
}

impl Pending {
    /// Adds a gang of `queue` under `key`.
    pub(crate) fn insert(&mut self, key: OrderKey, id: GangId, queue: QueueIdx) {
        self.all.insert(key, (id, queue));
        if self.per_queue {
            self.by_queue.entry(queue).or_default().insert(key, id);
        }
        if self.open {
            self.returned.insert(id);
        }
    }

    /// Removes the gang under `key`.
    pub(crate) fn remove(&mut self, key: &OrderKey) -> Option<GangId> {
        let (id, queue) = self.all.remove(key)?;
        // A queue's map stays when it empties (one per queue at most), to be filled again.
        if self.per_queue
            && let Some(q) = self.by_queue.get_mut(&queue)
        {
            q.remove(key);
        }
        Some(id)
    }

    /// Files every gang under the queue `queue_of` gives it now (the queues were re-resolved).
    pub(crate) fn refile(&mut self, queue_of: impl Fn(GangId) -> QueueIdx) {
        for (id, queue) in self.all.values_mut() {
            *queue = queue_of(*id);
        }
        self.file_by_queue();
    }

    /// Keeps the gangs filed by queue too, or stops (an order over all queues never reads them,
    /// and filing every gang twice is a fifth of a gang's way through the queue).
    pub(crate) fn keep_per_queue(&mut self, on: bool) {
        if self.per_queue != on {
            self.per_queue = on;
            self.file_by_queue();
        }
    }

    fn file_by_queue(&mut self) {
        self.by_queue.clear();
        if self.per_queue {
            for (key, &(id, queue)) in &self.all {
                self.by_queue.entry(queue).or_default().insert(*key, id);
            }
        }
    }

    /// Number of pending gangs.
    pub(crate) fn len(&self) -> usize {
        self.all.len()
    }

    /// Pending gangs in visiting order.
    pub(crate) fn ids(&self) -> impl Iterator<Item = GangId> + '_ {
        self.all.values().map(|&(id, _)| id)
    }

    /// Pending gangs ahead of `key` in visiting order (priority, submission, arrival), first
    /// first; O(their number).
    pub(crate) fn ids_before(&self, key: &OrderKey) -> impl Iterator<Item = GangId> + '_ {
        self.all.range(..key).map(|(_, &(id, _))| id)
    }

    /// Pending gangs behind `key` in visiting order.
    pub(crate) fn ids_after(&self, key: &OrderKey) -> impl Iterator<Item = GangId> + '_ {
        self.all.range((Bound::Excluded(key), Bound::Unbounded)).map(|(_, &(id, _))| id)
    }

    /// The first pending gang in visiting order.
    pub(crate) fn first(&self) -> Option<GangId> {
        self.all.values().next().map(|&(id, _)| id)
    }

    /// A cycle begins: gangs entering from now on wait for the next one.
    pub(crate) fn open_cycle(&mut self) {
        self.open = true;
        self.returned.clear();
    }

    /// The cycle ended.
    pub(crate) fn close_cycle(&mut self) {
        self.open = false;
        self.returned.clear();
    }

    /// Refills `buf` with the next `chunk` gangs from `from` on that
    /// were pending when the cycle began, over all queues or within `queue`. Read in chunks: a gang
    /// ahead of the cursor leaves the maps only once visited, and one that enters is a returned
    /// gang the cycle skips, so a chunk stays true while it is served.
    pub(crate) fn fill(
        &self,
        queue: Option<QueueIdx>,
        from: Bound<OrderKey>,
        buf: &mut VecDeque<(OrderKey, GangId)>,
        chunk: usize,
    ) {
        let fresh = |&(_, id): &(OrderKey, GangId)| !self.returned_now(id);
        match queue {
            None => buf.extend(
                self.all.range((from, Bound::Unbounded)).map(|(k, &(id, _))| (*k, id)).filter(fresh).take(chunk),
            ),
            Some(q) => {
                debug_assert!(self.per_queue, "gangs are filed by queue only while asked to");
                if let Some(map) = self.by_queue.get(&q) {
                    buf.extend(map.range((from, Bound::Unbounded)).map(|(k, &id)| (*k, id)).filter(fresh).take(chunk));
                }
            }
        }
    }

    fn returned_now(&self, id: GangId) -> bool {
        !self.returned.is_empty() && self.returned.contains(&id)
    }

    /// Queues with pending gangs, in index order.
    pub(crate) fn queues(&self) -> impl Iterator<Item = QueueIdx> + '_ {
        debug_assert!(self.per_queue, "gangs are filed by queue only while asked to");
        self.by_queue.iter().filter(|(_, gangs)| !gangs.is_empty()).map(|(q, _)| *q)
    }
}
