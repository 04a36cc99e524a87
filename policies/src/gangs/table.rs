//! The gang table: every gang the engine tracks, with every index over them (the pending
//! order overall and per queue, pending gangs by size and by request, backoffs, running gangs
//! by expected end, by queue and by host). A gang changes state only through the table's
//! transitions (enqueue, start, stop, requeue, remove), each of which updates every index in
//! the same call, so no caller keeps an index in step by hand and none can disagree with the
//! records.
//!
//! ```text
//! enqueue ──> pending ──start──> running ──stop──> stopped ──requeue──> pending
//!               │                                     │
//!               └───────────── remove <───────────────┘
//! ```
//! A stopped gang holds nothing and is in no index: the engine either requeues it (preempted,
//! unready, lost hosts) or removes it (finished) within the same call.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use trainyard_topology::{Demand, HostId, Placement, Resources};

use crate::gangs::by_id::{FastHash, GangMap};
use crate::gangs::by_request::ByRequest;
use crate::gangs::pending::Pending;
use crate::gangs::record::{GangRecord, GangState, OrderKey};
use crate::quota::QueueIdx;
use crate::{GangId, PendingStatus};

/// Size order of pending gangs: fewest GPUs, smallest pod, higher priority, earlier submission.
type SizeKey = (u64, Resources, Reverse<i32>, u64, GangId);

fn size_key(id: GangId, record: &GangRecord) -> SizeKey {
    let request = &record.request;
    (record.gpus, request.shape.largest_pod(), Reverse(request.priority), request.submit, id)
}

/// The pending-order key of a gang: higher priority first, then earlier submission, then the
/// caller's tie-breaker, then arrival order.
fn order_key(g: &GangRecord) -> OrderKey {
    (Reverse(g.request.priority), g.request.submit, g.request.order, g.arrival)
}

/// The indices over pending gangs besides their order.
#[derive(Clone, Debug, Default)]
struct PendingIndex {
    without_gpus: usize,
    /// Pending gangs that ask for GPUs, smallest first (for fragmentation metrics); not kept
    /// in a what-if copy (`sizes_dropped`), which never asks.
    by_size: BTreeSet<SizeKey>,
    sizes_dropped: bool,
    by_request: ByRequest,
    /// Pending gangs waiting out a backoff, by the time they may start.
    backoffs: BTreeSet<(u64, GangId)>,
}

impl PendingIndex {
    fn add(&mut self, id: GangId, record: &GangRecord) {
        if record.gpus == 0 {
            self.without_gpus += 1;
        } else if !self.sizes_dropped {
            self.by_size.insert(size_key(id, record));
        }
        self.by_request.insert(&record.demand, order_key(record), id, record.estimate, record.queue);
    }

    fn remove(&mut self, id: GangId, record: &GangRecord) {
        if record.gpus == 0 {
            self.without_gpus -= 1;
        } else if !self.sizes_dropped {
            self.by_size.remove(&size_key(id, record));
        }
        self.by_request.remove(&record.demand, order_key(record), record.estimate, record.queue);
        if !self.backoffs.is_empty() {
            self.backoffs.remove(&(record.not_before, id));
        }
    }
}

/// Files a running gang's pods under their hosts, or takes them out.
fn index_hosts(
    on_host: &mut HashMap<HostId, BTreeSet<GangId>, FastHash>,
    id: GangId,
    placement: &Placement,
    add: bool,
) {
    // A host listed once per pod: filing the gang twice under it changes nothing.
    for &host in &placement.hosts {
        if add {
            on_host.entry(host).or_default().insert(id);
        } else if let Some(set) = on_host.get_mut(&host) {
            set.remove(&id);
        }
    }
}

/// Files a running gang under its queue by priority, or takes it out.
fn index_queue(by_queue: &mut BTreeMap<QueueIdx, BTreeSet<(i32, GangId)>>, id: GangId, record: &GangRecord, add: bool) {
    let key = (record.request.priority, id);
    if add {
        by_queue.entry(record.queue).or_default().insert(key);
    } else if let Some(set) = by_queue.get_mut(&record.queue) {
        // A queue's set stays when it empties (one per queue at most), to be filled again.
        set.remove(&key);
    }
}

/// The gangs and their indices (see the module documentation).
#[derive(Clone, Debug)]
pub(crate) struct GangTable {
    gangs: GangMap,
    pending: Pending,
    /// The pending gangs by size, by request and by backoff (apart from the records, so that a
    /// transition updates a record in place while it files it).
    waiting: PendingIndex,
    running_by_end: BTreeSet<(u64, GangId)>,
    /// Running gangs of each queue by priority, lowest first: the preemption candidates.
    /// Kept only while `by_queue_kept` (preemption is on); otherwise a scan answers.
    running_by_queue: BTreeMap<QueueIdx, BTreeSet<(i32, GangId)>>,
    by_queue_kept: bool,
    /// Running gangs with pods on each host (looked up only). A host's set stays when it
    /// empties: hosts fill and empty all the time, and the sets are at most one per host.
    /// Kept only while `on_host_kept`; otherwise a scan answers.
    on_host: HashMap<HostId, BTreeSet<GangId>, FastHash>,
    on_host_kept: bool,
    /// Moves whenever a gang starts, stops or moves, or gangs are refiled: what a reservation's
    /// replay of expected ends reads (see [`GangTable::running_version`]).
    running_version: u64,
}

impl Default for GangTable {
    fn default() -> GangTable {
        GangTable {
            gangs: GangMap::default(),
            pending: Pending::default(),
            waiting: PendingIndex::default(),
            running_by_end: BTreeSet::new(),
            running_by_queue: BTreeMap::new(),
            by_queue_kept: true,
            on_host: HashMap::default(),
            on_host_kept: true,
            running_version: 0,
        }
    }
}

impl std::ops::Index<&GangId> for GangTable {
    type Output = GangRecord;

    fn index(&self, id: &GangId) -> &GangRecord {
        &self.gangs[id]
    }
}

impl GangTable {
    /// A copy for a what-if run (`estimates/eta.rs`): the same gangs and indices, but the running gangs
    /// are not filed by host (a scan answers if a host is lost) and the pending ones not by
    /// size (only fragmentation metrics read it), as the copy would pay for both at every start
    /// and stop, and for copying them, without ever reading them.
    pub(crate) fn what_if_copy(&self) -> GangTable {
        let waiting = PendingIndex {
            without_gpus: self.waiting.without_gpus,
            by_size: BTreeSet::new(),
            sizes_dropped: true,
            by_request: self.waiting.by_request.clone(),
            backoffs: self.waiting.backoffs.clone(),
        };
        GangTable {
            gangs: self.gangs.clone(),
            pending: self.pending.clone(),
            waiting,
            running_by_end: self.running_by_end.clone(),
            running_by_queue: self.running_by_queue.clone(),
            by_queue_kept: self.by_queue_kept,
            on_host: HashMap::default(),
            on_host_kept: false,
            running_version: self.running_version,
        }
    }

    pub(crate) fn get(&self, id: &GangId) -> Option<&GangRecord> {
        self.gangs.get(id).map(|r| &**r)
    }

    /// A record to read and to update its status and lifecycle fields; what the indices key on
    /// (whether it is pending or running, its placement, queue, request, demand, estimate,
    /// arrival and `not_before`) changes only through the transitions.
    pub(crate) fn get_mut(&mut self, id: &GangId) -> Option<&mut GangRecord> {
        self.gangs.get_mut(id).map(Arc::make_mut)
    }

    pub(crate) fn contains_key(&self, id: &GangId) -> bool {
        self.gangs.contains_key(id)
    }

    /// Every gang's id, sorted: the order any decision-bearing walk over all gangs takes.
    pub(crate) fn ids(&self) -> Vec<GangId> {
        let mut ids: Vec<GangId> = self.gangs.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// The pending order.
    pub(crate) fn pending(&self) -> &Pending {
        &self.pending
    }

    /// The pending order, to open and close a cycle on it.
    pub(crate) fn pending_cycle(&mut self) -> &mut Pending {
        &mut self.pending
    }

    pub(crate) fn pending_without_gpus(&self) -> usize {
        self.waiting.without_gpus
    }

    /// The smallest pending gang that asks for GPUs.
    pub(crate) fn smallest_pending(&self) -> Option<GangId> {
        debug_assert!(!self.waiting.sizes_dropped, "a what-if copy keeps no sizes");
        self.waiting.by_size.first().map(|k| k.4)
    }

    /// Pending gangs by request.
    pub(crate) fn by_request(&self) -> &ByRequest {
        &self.waiting.by_request
    }

    /// Running gangs by expected end.
    /// Equal versions: the same running gangs with the same placements, expected ends, queues
    /// and totals, and no gang's request or queue changed.
    pub(crate) fn running_version(&self) -> u64 {
        self.running_version
    }

    pub(crate) fn running_by_end(&self) -> &BTreeSet<(u64, GangId)> {
        &self.running_by_end
    }

    /// Running gangs of `queue`, lowest priority first.
    pub(crate) fn running_in(&self, queue: QueueIdx) -> impl Iterator<Item = (i32, GangId)> + '_ {
        let kept = self.by_queue_kept.then(|| self.running_by_queue.get(&queue)).flatten();
        let scanned = (!self.by_queue_kept).then(|| self.scan_queue(queue));
        kept.into_iter().flatten().copied().chain(scanned.into_iter().flatten())
    }

    /// The running gangs with their records, by expected end.
    fn running(&self) -> impl Iterator<Item = (GangId, &GangRecord)> + '_ {
        self.running_by_end.iter().map(|&(_, id)| (id, &*self.gangs[&id]))
    }

    fn scan_queue(&self, queue: QueueIdx) -> Vec<(i32, GangId)> {
        let mut found: Vec<(i32, GangId)> =
            (self.running()).filter(|(_, g)| g.queue == queue).map(|(id, g)| (g.request.priority, id)).collect();
        found.sort_unstable();
        found
    }

    /// Running gangs with pods on `host`, by id.
    pub(crate) fn on_host(&self, host: HostId) -> impl Iterator<Item = GangId> + '_ {
        let kept = self.on_host_kept.then(|| self.on_host.get(&host)).flatten();
        let scanned = (!self.on_host_kept).then(|| self.scan_host(host));
        kept.into_iter().flatten().copied().chain(scanned.into_iter().flatten())
    }

    fn scan_host(&self, host: HostId) -> Vec<GangId> {
        let mut found: Vec<GangId> = (self.running())
            .filter(
                |(_, g)| matches!(&g.state, GangState::Running { placement, .. } if placement.hosts.contains(&host)),
            )
            .map(|(id, _)| id)
            .collect();
        found.sort_unstable();
        found
    }

    /// Keeps the running gangs filed by queue (what preemption reads), or stops: a policy that
    /// never preempts never asks, and a scan of the running gangs answers if anything does.
    pub(crate) fn keep_queue_index(&mut self, on: bool) {
        if self.by_queue_kept != on {
            self.by_queue_kept = on;
            self.file_running();
        }
    }

    /// Keeps the running gangs filed by host (what a lost host reads), or stops: a replay
    /// without host failures never asks, and a scan of the running gangs answers if anything does.
    pub(crate) fn keep_host_index(&mut self, on: bool) {
        if self.on_host_kept != on {
            self.on_host_kept = on;
            self.file_running();
        }
    }

    /// Files every running gang anew under the indices kept (by queue, by host).
    fn file_running(&mut self) {
        self.running_by_queue.clear();
        self.on_host.clear();
        for &(_, id) in &self.running_by_end {
            let record = &self.gangs[&id];
            if self.by_queue_kept {
                index_queue(&mut self.running_by_queue, id, record, true);
            }
            if let GangState::Running { placement, .. } = &record.state
                && self.on_host_kept
            {
                index_hosts(&mut self.on_host, id, placement, true);
            }
        }
    }

    /// When the first backoff ends.
    pub(crate) fn next_backoff(&self) -> Option<u64> {
        self.waiting.backoffs.first().map(|&(t, _)| t)
    }

    /// Forgets backoffs that ended by `now` (the gangs' `not_before` says the same).
    pub(crate) fn expire_backoffs(&mut self, now: u64) {
        while self.waiting.backoffs.first().is_some_and(|&(t, _)| t <= now) {
            self.waiting.backoffs.pop_first();
        }
    }

    /// Takes a new gang in as pending (its state must be pending).
    pub(crate) fn enqueue(&mut self, record: GangRecord) {
        debug_assert!(matches!(record.state, GangState::Pending { .. }));
        let id = record.request.id;
        self.pending.insert(order_key(&record), id, record.queue);
        self.waiting.add(id, &record);
        self.gangs.insert(id, Arc::new(record));
    }

    /// A pending gang starts on `placement` at `now`: it leaves the pending order and indices
    /// and enters the running ones. Returns its expected end, or `None` if it is not pending.
    pub(crate) fn start(&mut self, id: GangId, placement: &Placement, now: u64) -> Option<u64> {
        if !self.gangs.get(&id).is_some_and(|g| matches!(g.state, GangState::Pending { .. })) {
            return None;
        }
        let record = Arc::make_mut(self.gangs.get_mut(&id)?);
        self.pending.remove(&order_key(record));
        self.waiting.remove(id, record);
        let expected_end = now.saturating_add(record.estimate);
        self.running_version += 1;
        record.state = GangState::Running { placement: Arc::new(placement.clone()), start: now, expected_end };
        record.ready = false;
        self.running_by_end.insert((expected_end, id));
        if self.by_queue_kept {
            index_queue(&mut self.running_by_queue, id, record, true);
        }
        if self.on_host_kept {
            index_hosts(&mut self.on_host, id, placement, true);
        }
        Some(expected_end)
    }

    /// A running gang stops holding anything: it leaves the running indices and is returned
    /// with its placement and start; the caller requeues or removes it. Its record reads
    /// running until then (in the same call), so that a record shared with a copy of the engine
    /// is not copied for a gang about to leave.
    pub(crate) fn stop(&mut self, id: GangId) -> Option<(Arc<Placement>, u64)> {
        let record = self.gangs.get(&id)?;
        let GangState::Running { placement, start, expected_end } = &record.state else { return None };
        let (placement, start, expected_end) = (Arc::clone(placement), *start, *expected_end);
        self.running_version += 1;
        self.running_by_end.remove(&(expected_end, id));
        if self.by_queue_kept {
            index_queue(&mut self.running_by_queue, id, record, false);
        }
        if self.on_host_kept {
            index_hosts(&mut self.on_host, id, &placement, false);
        }
        Some((placement, start))
    }

    /// A stopped gang waits again, in its old place in the order, with `status` as of `cycle`.
    pub(crate) fn requeue(&mut self, id: GangId, status: PendingStatus, cycle: u64) {
        let Some(record) = self.gangs.get_mut(&id).map(Arc::make_mut) else { return };
        record.state = GangState::Pending { status, cycle };
        self.pending.insert(order_key(record), id, record.queue);
        self.waiting.add(id, record);
    }

    /// A pending or stopped gang leaves the table.
    pub(crate) fn remove(&mut self, id: GangId) -> Option<Arc<GangRecord>> {
        let record = self.gangs.remove(&id)?;
        if matches!(record.state, GangState::Pending { .. }) {
            self.pending.remove(&order_key(&record));
            self.waiting.remove(id, &record);
        }
        Some(record)
    }

    /// Gives a gang another runtime estimate, as a what-if on a copy of the engine does
    /// (`estimates/eta.rs`): a pending gang is filed again under it, a running one is expected to end that
    /// long after its start.
    pub(crate) fn re_estimate(&mut self, id: GangId, estimate: u64) {
        let Some(record) = self.gangs.get_mut(&id).map(Arc::make_mut) else { return };
        if record.estimate == estimate {
            return;
        }
        let key = order_key(record);
        match &mut record.state {
            GangState::Pending { .. } => {
                self.waiting.by_request.remove(&record.demand, key, record.estimate, record.queue);
                record.estimate = estimate;
                self.waiting.by_request.insert(&record.demand, key, id, estimate, record.queue);
            }
            GangState::Running { start, expected_end, .. } => {
                self.running_by_end.remove(&(*expected_end, id));
                *expected_end = start.saturating_add(estimate);
                self.running_by_end.insert((*expected_end, id));
                record.estimate = estimate;
                self.running_version += 1;
            }
        }
    }

    /// Gives every gang the estimate `estimate` says (see [`GangTable::re_estimate`]).
    pub(crate) fn re_estimate_all(&mut self, estimate: impl Fn(&GangRecord) -> u64) {
        // Any order: each gang is filed again under its own estimate only.
        let changed: Vec<(GangId, u64)> = (self.gangs.iter())
            .filter_map(|(&id, g)| Some((id, estimate(g))).filter(|&(_, e)| e != g.estimate))
            .collect();
        for (id, e) in changed {
            self.re_estimate(id, e);
        }
    }

    /// The pending-order key of a gang.
    pub(crate) fn order_key(&self, id: GangId) -> Option<OrderKey> {
        self.get(&id).map(order_key)
    }

    /// A pending gang may not start before `until`.
    pub(crate) fn back_off(&mut self, id: GangId, until: u64) {
        let Some(record) = self.gangs.get_mut(&id).map(Arc::make_mut) else { return };
        self.waiting.backoffs.remove(&(record.not_before, id));
        record.not_before = until;
        self.waiting.backoffs.insert((until, id));
    }

    /// A running gang moved its pods off `from` onto `placement`.
    pub(crate) fn moved(&mut self, id: GangId, from: HostId, placement: &Placement) {
        let Some(record) = self.gangs.get_mut(&id).map(Arc::make_mut) else { return };
        let GangState::Running { placement: p, .. } = &mut record.state else { return };
        *p = Arc::new(placement.clone());
        self.running_version += 1;
        if !self.on_host_kept {
            return;
        }
        if let Some(set) = self.on_host.get_mut(&from) {
            set.remove(&id);
        }
        for &h in &placement.hosts {
            self.on_host.entry(h).or_default().insert(id);
        }
    }

    /// Gives every gang the queue and demand `resolve` says (the policy or the cluster's
    /// flavors changed) and files it again under them.
    pub(crate) fn refile(&mut self, mut resolve: impl FnMut(&GangRecord) -> (QueueIdx, Demand)) {
        self.running_version += 1;
        self.waiting.by_request.clear();
        // Any order: each gang lands in its own queue's and request's sets.
        for (id, gang) in self.gangs.iter_mut() {
            let gang = Arc::make_mut(gang);
            let (queue, demand) = resolve(gang);
            gang.queue = queue;
            if matches!(gang.state, GangState::Pending { .. }) {
                gang.demand = demand;
                self.waiting.by_request.insert(&gang.demand, order_key(gang), *id, gang.estimate, queue);
            }
        }
        self.file_running();
        let gangs = &self.gangs;
        self.pending.refile(|id| gangs[&id].queue);
    }

    /// Every index agrees with the records (for tests): each pending gang is in the pending
    /// order and pending indices once, each running gang in the running ones, nothing else.
    #[cfg(test)]
    pub(crate) fn check(&self) -> Result<(), String> {
        let mut pending = 0;
        let (mut without_gpus, mut running) = (0, 0);
        for (id, g) in &self.gangs {
            match &g.state {
                GangState::Pending { .. } => {
                    pending += 1;
                    if g.gpus == 0 {
                        without_gpus += 1;
                    } else if !self.waiting.sizes_dropped && !self.waiting.by_size.contains(&size_key(*id, g)) {
                        return Err(format!("pending gang {id:?} missing from the size index"));
                    }
                    if !self.waiting.by_request.ids(&g.demand).any(|x| x == *id) {
                        return Err(format!("pending gang {id:?} missing from the request index"));
                    }
                }
                GangState::Running { placement, expected_end, .. } => {
                    running += 1;
                    if !self.running_by_end.contains(&(*expected_end, *id)) {
                        return Err(format!("running gang {id:?} missing from the end index"));
                    }
                    if !self.running_in(g.queue).any(|(_, x)| x == *id) {
                        return Err(format!("running gang {id:?} missing from its queue's index"));
                    }
                    if placement.per_host().iter().any(|&(h, _)| !self.on_host(h).any(|x| x == *id)) {
                        return Err(format!("running gang {id:?} missing from a host's index"));
                    }
                }
            }
        }
        let by_queue: usize =
            if self.by_queue_kept { self.running_by_queue.values().map(BTreeSet::len).sum() } else { running };
        let on_hosts =
            if self.on_host_kept { self.on_host.values().flatten().collect::<BTreeSet<_>>().len() } else { running };
        // A what-if copy keeps no sizes.
        let sizes =
            if self.waiting.sizes_dropped { pending } else { self.waiting.without_gpus + self.waiting.by_size.len() };
        let checks = [
            (self.pending.len(), pending, "pending order"),
            (sizes, pending, "pending sizes"),
            (self.waiting.without_gpus, without_gpus, "pending gangs without GPUs"),
            (
                self.waiting.by_request.requests().map(|(d, _)| self.waiting.by_request.ids(d).count()).sum(),
                pending,
                "requests",
            ),
            (self.running_by_end.len(), running, "running by end"),
            (by_queue, running, "running by queue"),
            (on_hosts, running, "running by host"),
        ];
        for (indexed, actual, what) in checks {
            if indexed != actual {
                return Err(format!("{what}: {indexed} indexed, {actual} gangs"));
            }
        }
        Ok(())
    }
}
