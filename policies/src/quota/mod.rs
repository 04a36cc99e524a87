//! Hierarchical queues (cohorts) with borrowing and lending: quota checks in O(depth).
//!
//! # Semantics (trainyard's, modelled on Kueue's hierarchical cohorts)
//!
//! The queues form a tree under an implicit root. Leaves receive gangs; inner queues only
//! pool quota. Every rule below holds per resource (GPUs, CPU millicores, memory MiB),
//! independently of the others.
//!
//! * **Accounting.** A queue *names* a resource when its `nominal`, `borrowing_limit` or
//!   `lending_limit` gives it. A queue is *accounted* for a resource when it, a declared
//!   ancestor or a descendant names it; the root is accounted when a child is. Unaccounted
//!   queues are unlimited in that resource and their usage enters no sum. So in the old flat
//!   files (`nominal_gpus` only) CPU and memory are free, and undeclared queues are outside
//!   every pool, as before. An accounted queue that does not name the resource has nominal 0
//!   and unlimited borrowing in it.
//! * **Quota.** Subtree quota `SQ(Q) = nominal(Q) + Σ SQ(children)`. Lendable
//!   `L(Q) = min(SQ(Q), lending_limit(Q))`; guaranteed `G(Q) = SQ(Q) - L(Q)`, capacity only
//!   Q's subtree may use.
//! * **Demand.** What a queue takes from its parent's pool: `E(leaf) = max(U(leaf), G(leaf))`
//!   with `U` the leaf's usage, and `E(Q) = max(D(Q), G(Q))` for an inner queue, where
//!   `D(Q) = Σ E(children)`. For a leaf `D = U`. Unused guarantees count as taken: they are
//!   never lent.
//! * **Limits.** Every accounted queue keeps `D(Q) <= SQ(Q) + borrowing_limit(Q)` (no limit
//!   when the borrowing limit is unlimited); the root keeps `D(root) <= SQ(root)`.
//! * **Borrowing.** `borrowed(Q) = max(0, E(Q) - SQ(Q))`; a queue with a non-zero component
//!   is *over nominal* (a borrower), and its gangs are the ones reclaim may preempt.
//!
//! Admitting `x` to a leaf raises the demand seen by each ancestor by `max(0, x - H)`, where
//! `H` sums the unused guarantees `max(0, G - D)` of the queues below it on the path. So
//! each queue on the path leaves the leaf a *room* of `SQ + BL - D + H`, and [`QuotaTree::check`]
//! compares the request with those rooms: O(depth × resources). `charge`/`refund` update the
//! cached `U` and `D` along the path; [`QuotaTree::audit`] recomputes them from scratch.

mod blocked_reason;
mod build;
mod fair_share;

use std::collections::BTreeMap;

use trainyard_topology::Resources;

pub use fair_share::{FairShare, FairSharing};

use crate::UndeclaredQueues;
/// Index of a queue (inner or leaf) in a [`QuotaTree`]; the root is `QueueIdx(0)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueueIdx(pub usize);

/// Number of resources accounted.
const R: usize = 3;
/// Per-resource amounts: `[gpus, cpu_milli, memory_mib]`.
type Amounts = [u64; R];
/// Stands for "no limit" in [`Resources`] results and in cached limits.
const UNLIMITED: u64 = u64::MAX;

/// The ceiling of a queue without any limit.
pub(crate) const UNLIMITED_CEILING: Resources =
    Resources { gpus: UNLIMITED, cpu_milli: UNLIMITED, memory_mib: UNLIMITED };
/// Resource names used in [`QuotaBlock::resource`], in the engine's units.
pub const RESOURCE_NAMES: [&str; 3] = ["gpus", "cpu_milli", "memory_mib"];

fn amounts(r: Resources) -> Amounts {
    [r.gpus, r.cpu_milli, r.memory_mib]
}

fn resources(a: Amounts) -> Resources {
    Resources { gpus: a[0], cpu_milli: a[1], memory_mib: a[2] }
}

/// Which limit stops an admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QuotaLimit {
    /// The leaf itself would exceed its nominal plus its borrowing limit.
    Nominal,
    /// An inner queue's borrowing limit: the subtree on the path below it would borrow more
    /// than that queue lets its subtree borrow.
    Borrowing,
    /// The pool of an ancestor is used up: either others borrow the part the path is
    /// entitled to (reclaim can get it back), or the path asks to borrow from the root's
    /// pool and nothing is free there.
    Cohort,
}

/// Why an admission does not fit the quotas: the lowest queue on the path whose limit breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaBlock {
    /// The queue whose limit breaks (the leaf for [`QuotaLimit::Nominal`]).
    pub queue: QueueIdx,
    /// Which limit.
    pub kind: QuotaLimit,
    /// The resource, one of [`RESOURCE_NAMES`].
    pub resource: &'static str,
    /// How much the request asks for of that resource.
    pub needed: u64,
    /// The most of that resource that this queue's limit leaves for the request now.
    pub available: u64,
}

/// What preempting other queues' gangs could do for a blocked request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reclaim {
    /// The request fits now.
    Fits,
    /// The request would fit if no queue but the requester borrowed. Preempting every gang
    /// of `victims` is sure to make room; fewer may do (refund, then `check` again).
    Borrowers {
        /// Leaves that borrow a blocked resource below the highest blocking queue, by index.
        victims: Vec<QueueIdx>,
        /// The lowest blocking limit, as [`QuotaTree::check`] reports it now.
        block: QuotaBlock,
    },
    /// A limit that preempting other queues does not lift: the leaf's own, or one that
    /// still breaks when no other queue borrows (its `available` is counted that way).
    Blocked(QuotaBlock),
}

/// One queue of the tree with its static quota and its cached usage.
#[derive(Clone, Debug)]
struct Node {
    name: String,
    parent: Option<QueueIdx>,
    children: Vec<QueueIdx>,
    leaf: bool,
    weight: f64,
    accounted: [bool; R],
    /// Own nominal; 0 where not named.
    nominal: Amounts,
    /// `SQ`.
    quota: Amounts,
    /// `SQ + BL` (the root: `SQ`); [`UNLIMITED`] where borrowing is unlimited.
    limit: Amounts,
    /// `L`.
    lendable: Amounts,
    /// `G`.
    guaranteed: Amounts,
    /// Subtree usage of every leaf below, accounted or not.
    usage: Amounts,
    /// `D`: a leaf's accounted usage, or the sum of the accounted children's `E`.
    demand: Amounts,
    /// `D` when nothing runs.
    idle_demand: Amounts,
}

impl Node {
    fn e(&self, r: usize) -> u64 {
        self.demand[r].max(self.guaranteed[r])
    }
}

/// The queue tree with quotas and usage. Pure bookkeeping: the engine charges a leaf when
/// a gang starts and refunds it when the gang ends. See the module docs for the rules.
#[derive(Clone, Debug)]
pub struct QuotaTree {
    nodes: Vec<Node>,
    by_name: BTreeMap<String, QueueIdx>,
    undeclared: UndeclaredQueues,
    /// Moves with every charge, refund and new queue (see [`QuotaTree::version`]).
    version: u64,
}

/// The demands a walk reads: now, as if nothing ran, or computed for a what-if.
#[derive(Clone, Copy)]
enum Base<'a> {
    Now,
    Empty,
    Given(&'a [Amounts]),
}

/// One queue on the path from a leaf to the root, as a walk sees it.
#[derive(Clone, Copy, Debug)]
struct Step {
    /// Position on the path: 0 for the queue the walk starts at.
    depth: usize,
    node: QueueIdx,
    /// The most the start may add before this queue's limit breaks.
    room: u64,
    /// With the walk's amount added, the child's `E` would exceed its `SQ`.
    child_borrows: bool,
}

impl QuotaTree {
    /// The implicit root.
    pub fn root(&self) -> QueueIdx {
        QueueIdx(0)
    }

    /// Every queue: the root, the declared ones in file order, then undeclared ones as resolved.
    pub fn queues(&self) -> impl Iterator<Item = QueueIdx> + '_ {
        (0..self.nodes.len()).map(QueueIdx)
    }

    /// The leaf queues, in index order.
    pub fn leaves(&self) -> impl Iterator<Item = QueueIdx> + '_ {
        self.queues().filter(|&q| self.is_leaf(q))
    }

    /// A declared (or already resolved) queue by name, leaf or inner; creates nothing.
    pub fn find(&self, name: &str) -> Option<QueueIdx> {
        self.by_name.get(name).copied()
    }

    /// The leaf gangs of `name` are charged to. An undeclared name gets a new unlimited leaf
    /// under the root under [`UndeclaredQueues::Unlimited`] and `None` under `Reject`; an
    /// inner queue gives `None` (it receives no gangs).
    pub fn resolve(&mut self, name: &str) -> Option<QueueIdx> {
        if let Some(q) = self.find(name) {
            return self.is_leaf(q).then_some(q);
        }
        match &self.undeclared {
            UndeclaredQueues::Unlimited => Some(self.add_unlimited_leaf(name)),
            UndeclaredQueues::Reject => None,
            UndeclaredQueues::CatchAll(leaf) => self.find(leaf).filter(|&q| self.is_leaf(q)),
        }
    }

    /// The leaf a gang that already runs is charged to: its queue; when the queue is gone, the leaf
    /// its name resolves to now (an unlimited leaf of its own, or the catch-all queue); when it is
    /// no longer a leaf, an unlimited leaf of its own, so that what runs stays counted.
    pub fn keep(&mut self, name: &str) -> QueueIdx {
        match self.find(name) {
            Some(q) if self.is_leaf(q) => q,
            Some(_) => {
                let kept = format!("{name} (running)");
                match self.find(&kept) {
                    Some(q) => q,
                    None => self.add_unlimited_leaf(&kept),
                }
            }
            None => self.resolve(name).unwrap_or_else(|| self.add_unlimited_leaf(name)),
        }
    }

    /// Whether gangs may be charged to `q`.
    pub fn is_leaf(&self, q: QueueIdx) -> bool {
        self.nodes[q.0].leaf
    }

    /// The parent; `None` for the root.
    pub fn parent(&self, q: QueueIdx) -> Option<QueueIdx> {
        self.nodes[q.0].parent
    }

    /// The children, in index order.
    pub fn children(&self, q: QueueIdx) -> &[QueueIdx] {
        &self.nodes[q.0].children
    }

    /// The name (`<root>` for the root).
    pub fn name(&self, q: QueueIdx) -> &str {
        &self.nodes[q.0].name
    }

    /// Fair-share weight.
    pub fn weight(&self, q: QueueIdx) -> f64 {
        self.nodes[q.0].weight
    }

    /// Usage of the whole subtree, accounted or not.
    pub fn usage(&self, q: QueueIdx) -> Resources {
        resources(self.nodes[q.0].usage)
    }

    /// Per resource, the node's value where it is accounted and `u64::MAX` elsewhere.
    fn limited(&self, q: QueueIdx, value: impl Fn(&Node, usize) -> u64) -> Resources {
        let n = &self.nodes[q.0];
        resources(std::array::from_fn(|r| if n.accounted[r] { value(n, r) } else { UNLIMITED }))
    }

    /// The queue's own nominal; `u64::MAX` for resources it is not accounted for.
    pub fn nominal(&self, q: QueueIdx) -> Resources {
        self.limited(q, |n, r| n.nominal[r])
    }

    /// `SQ`: own nominal plus the children's subtree quotas; `u64::MAX` where unaccounted.
    pub fn subtree_quota(&self, q: QueueIdx) -> Resources {
        self.limited(q, |n, r| n.quota[r])
    }

    /// `SQ + borrowing limit`, the most `D` may reach; `u64::MAX` where unlimited.
    pub fn limit(&self, q: QueueIdx) -> Resources {
        self.limited(q, |n, r| n.limit[r])
    }

    /// `G`: the part of the subtree quota that is never lent (0 where unaccounted).
    pub fn guaranteed(&self, q: QueueIdx) -> Resources {
        resources(self.nodes[q.0].guaranteed)
    }

    /// `E`: what the queue takes from its parent's pool, unused guarantees included.
    pub fn demand(&self, q: QueueIdx) -> Resources {
        let n = &self.nodes[q.0];
        resources(std::array::from_fn(|r| n.e(r)))
    }

    /// `max(0, E - SQ)` per accounted resource: what the subtree takes from the pools above
    /// beyond its own quota. For a leaf, its usage beyond its nominal.
    pub fn borrowed(&self, q: QueueIdx) -> Resources {
        let n = &self.nodes[q.0];
        resources(std::array::from_fn(|r| if n.accounted[r] { n.e(r).saturating_sub(n.quota[r]) } else { 0 }))
    }

    /// Whether the queue borrows any resource (its gangs are reclaim victims).
    pub fn over_nominal(&self, q: QueueIdx) -> bool {
        !self.borrowed(q).is_zero()
    }

    /// The part of `q`'s lendable, unused quota (`SQ - E`) that `q` could not take back now
    /// without preemption, because the pools above are used by other queues:
    /// `max(0, (SQ - E) - room)`, where `room` is how much `E(q)` could grow under the limits
    /// of its ancestors. Never more than the lendable part; 0 where unaccounted and for the root.
    pub fn lent_out(&self, q: QueueIdx) -> Resources {
        let n = &self.nodes[q.0];
        resources(std::array::from_fn(|r| {
            if !n.accounted[r] {
                return 0;
            }
            let e = n.e(r);
            let idle = n.quota[r].saturating_sub(e);
            let mut room = UNLIMITED;
            self.climb(q, r, 0, e, e, 0, Base::Now, &mut |s| {
                room = room.min(s.room);
                true
            });
            idle.saturating_sub(room)
        }))
    }

    /// Whether admitting `request` to `leaf` keeps every limit; else the lowest limit that
    /// breaks (lowest queue first, then gpus, cpu, memory).
    pub fn check(&self, leaf: QueueIdx, request: Resources) -> Result<(), QuotaBlock> {
        let x = amounts(request);
        let mut first: Option<(usize, usize, QuotaBlock)> = None;
        for (r, x) in x.into_iter().enumerate() {
            self.walk(leaf, r, x, Base::Now, &mut |s| {
                if x <= s.room {
                    return true;
                }
                let block = self.block(leaf, r, x, &s);
                if first.as_ref().is_none_or(|f| (s.depth, r) < (f.0, f.1)) {
                    first = Some((s.depth, r, block));
                }
                false
            });
        }
        first.map_or(Ok(()), |f| Err(f.2))
    }

    /// Per resource, the most `leaf` could be charged now (`u64::MAX`: unlimited).
    pub fn available(&self, leaf: QueueIdx) -> Resources {
        self.min_room(leaf, Base::Now)
    }

    /// Per resource, the most `leaf` could be charged if nothing ran anywhere: a request
    /// above it can never be admitted.
    pub fn ceiling(&self, leaf: QueueIdx) -> Resources {
        self.min_room(leaf, Base::Empty)
    }

    fn min_room(&self, leaf: QueueIdx, base: Base<'_>) -> Resources {
        resources(std::array::from_fn(|r| {
            let mut room = UNLIMITED;
            self.walk(leaf, r, 0, base, &mut |s| {
                room = room.min(s.room);
                true
            });
            room
        }))
    }

    /// Whether preempting gangs of other queues could make room for `request` in `leaf`,
    /// and whose. Preemption can help when the request fits once every other leaf is cut
    /// back to its nominal (no borrowing left but the requester's); the victims are then the
    /// leaves that borrow a blocked resource below the highest blocking queue. O(queues).
    pub fn reclaimable_for(&self, leaf: QueueIdx, request: Resources) -> Reclaim {
        let x = amounts(request);
        let Err(block) = self.check(leaf, request) else { return Reclaim::Fits };
        let capped = self.recompute_demands(|q, n| {
            if q == leaf { n.usage } else { std::array::from_fn(|r| n.usage[r].min(n.quota[r])) }
        });
        let mut hard: Option<(usize, usize, QuotaBlock)> = None;
        // Per resource, the highest queue whose limit the request breaks now.
        let mut highest: [Option<QueueIdx>; R] = [None; R];
        for r in 0..R {
            self.walk(leaf, r, x[r], Base::Given(&capped), &mut |s| {
                if x[r] > s.room && hard.as_ref().is_none_or(|h| (s.depth, r) < (h.0, h.1)) {
                    hard = Some((s.depth, r, self.block(leaf, r, x[r], &s)));
                }
                true
            });
            self.walk(leaf, r, x[r], Base::Now, &mut |s| {
                if x[r] > s.room {
                    highest[r] = Some(s.node);
                }
                true
            });
        }
        if let Some(h) = hard {
            return Reclaim::Blocked(h.2);
        }
        let mut victims = Vec::new();
        for (r, top) in highest.into_iter().enumerate() {
            if let Some(top) = top {
                self.borrowing_leaves(top, r, &mut victims);
            }
        }
        victims.retain(|&v| v != leaf);
        victims.sort_unstable();
        victims.dedup();
        Reclaim::Borrowers { victims, block }
    }

    fn borrows(&self, q: QueueIdx, r: usize) -> bool {
        let n = &self.nodes[q.0];
        n.e(r) > n.quota[r]
    }

    /// Pushes the leaves under `q` (itself included) that borrow resource `r`.
    fn borrowing_leaves(&self, q: QueueIdx, r: usize, out: &mut Vec<QueueIdx>) {
        let mut stack = vec![q];
        while let Some(q) = stack.pop() {
            let n = &self.nodes[q.0];
            if !n.accounted[r] {
                continue;
            }
            if n.leaf {
                if self.borrows(q, r) {
                    out.push(q);
                }
            } else {
                stack.extend_from_slice(&n.children);
            }
        }
    }

    fn block(&self, leaf: QueueIdx, r: usize, x: u64, s: &Step) -> QuotaBlock {
        let kind = if s.node == leaf {
            QuotaLimit::Nominal
        } else if s.child_borrows && self.parent(s.node).is_some() {
            QuotaLimit::Borrowing
        } else {
            QuotaLimit::Cohort
        };
        QuotaBlock { queue: s.node, kind, resource: RESOURCE_NAMES[r], needed: x, available: s.room }
    }

    /// A human-readable account of a block, with queue names.
    pub fn describe(&self, block: &QuotaBlock) -> String {
        let QuotaBlock { queue, kind, resource, needed, available } = *block;
        let name = self.name(queue);
        match kind {
            QuotaLimit::Nominal => {
                format!("queue `{name}` may use {available} more {resource} within its quota, the gang needs {needed}")
            }
            QuotaLimit::Borrowing => format!(
                "the borrowing limit of `{name}` leaves {available} {resource} for this queue, the gang needs {needed}"
            ),
            QuotaLimit::Cohort => {
                format!("the pool of `{name}` has {available} {resource} left for this queue, the gang needs {needed}")
            }
        }
    }

    /// Which limit blocks, without the amounts that move while a gang waits: `the quota of
    /// queue `a``, `the borrowing limit of `org``, `the pool of `org``.
    pub fn limit_name(&self, block: &QuotaBlock) -> String {
        let name = self.name(block.queue);
        match block.kind {
            QuotaLimit::Nominal => format!("the quota of queue `{name}`"),
            QuotaLimit::Borrowing => format!("the borrowing limit of `{name}`"),
            QuotaLimit::Cohort => format!("the pool of `{name}`"),
        }
    }

    /// Walks from `leaf` to the root for resource `r` as if `x` more were charged to the
    /// leaf; `visit` returns false to stop. Unaccounted resources visit nothing.
    fn walk(&self, leaf: QueueIdx, r: usize, x: u64, base: Base<'_>, visit: &mut impl FnMut(Step) -> bool) {
        let n = &self.nodes[leaf.0];
        if !n.accounted[r] {
            return;
        }
        let d = self.d(leaf, r, base);
        let room = if n.limit[r] == UNLIMITED { UNLIMITED } else { n.limit[r].saturating_sub(d) };
        if !visit(Step { depth: 0, node: leaf, room, child_borrows: false }) {
            return;
        }
        let g = n.guaranteed[r];
        self.climb(leaf, r, g.saturating_sub(d), d.max(g), d.saturating_add(x).max(g), 1, base, visit);
    }

    /// The ancestors of `from`, given the unused guarantees `headroom` absorbed up to and
    /// including `from` and its demand on its parent before (`e_old`) and after (`e_new`).
    #[allow(clippy::too_many_arguments)]
    fn climb(
        &self,
        from: QueueIdx,
        r: usize,
        mut headroom: u64,
        mut e_old: u64,
        mut e_new: u64,
        mut depth: usize,
        base: Base<'_>,
        visit: &mut impl FnMut(Step) -> bool,
    ) {
        let mut child = from;
        while let Some(p) = self.nodes[child.0].parent {
            let n = &self.nodes[p.0];
            let d = self.d(p, r, base);
            let room = match n.limit[r] {
                UNLIMITED => UNLIMITED,
                limit if limit >= d => (limit - d).saturating_add(headroom),
                _ => 0,
            };
            let child_borrows = e_new > self.nodes[child.0].quota[r];
            if !visit(Step { depth, node: p, room, child_borrows }) {
                return;
            }
            let g = n.guaranteed[r];
            headroom = headroom.saturating_add(g.saturating_sub(d));
            let rise = e_new - e_old;
            (e_old, e_new) = (d.max(g), d.saturating_add(rise).max(g));
            depth += 1;
            child = p;
        }
    }

    fn d(&self, q: QueueIdx, r: usize, base: Base<'_>) -> u64 {
        match base {
            Base::Now => self.nodes[q.0].demand[r],
            Base::Empty => self.nodes[q.0].idle_demand[r],
            Base::Given(demand) => demand[q.0][r],
        }
    }

    /// Records that gangs of `leaf` now also hold `amount`. The caller checks first; the
    /// tree records whatever it is told. Panics if `leaf` is not a leaf.
    pub fn charge(&mut self, leaf: QueueIdx, amount: Resources) {
        self.version += 1;
        self.shift(leaf, amounts(amount), true);
    }

    /// Refunds `(leaf, amount)` pairs one after another until `probe` answers, then charges them
    /// all back, so the tree ends as it began: a what-if over expected ends without copying the
    /// tree. Returns the position of the refund after which `probe` answered, and its answer.
    pub(crate) fn replay_refunds<T>(
        &mut self,
        refunds: impl IntoIterator<Item = (QueueIdx, Resources)>,
        mut probe: impl FnMut(&QuotaTree) -> Option<T>,
    ) -> Option<(usize, T)> {
        let version = self.version;
        let mut undo: Vec<(QueueIdx, Resources)> = Vec::new();
        let mut found = None;
        for (i, (leaf, amount)) in refunds.into_iter().enumerate() {
            self.refund(leaf, amount);
            undo.push((leaf, amount));
            found = probe(self).map(|t| (i, t));
            if found.is_some() {
                break;
            }
        }
        self.recharge(undo);
        // Every refund was charged back: the tree is as it was.
        self.version = version;
        found
    }

    /// Moves with every change to usage or queues; equal versions answer every check the same.
    pub(crate) fn version(&self) -> u64 {
        self.version
    }

    /// Takes the version back to `version`, read before refunds that were all charged back
    /// since (a what-if), so that the what-if counts as no change.
    pub(crate) fn restore_version(&mut self, version: u64) {
        self.version = version;
    }

    /// Charges back, last first, refunds made for a what-if.
    pub(crate) fn recharge(&mut self, refunded: Vec<(QueueIdx, Resources)>) {
        for (leaf, amount) in refunded.into_iter().rev() {
            self.charge(leaf, amount);
        }
    }

    /// Records that gangs of `leaf` released `amount`. Panics if that is more than it holds.
    pub fn refund(&mut self, leaf: QueueIdx, amount: Resources) {
        self.version += 1;
        self.shift(leaf, amounts(amount), false);
    }

    fn shift(&mut self, leaf: QueueIdx, x: Amounts, up: bool) {
        assert!(self.is_leaf(leaf), "queue `{}` is not a leaf and holds no gangs", self.name(leaf));
        let apply = |v: u64, by: u64| {
            if up {
                v.checked_add(by).expect("queue usage cannot overflow u64")
            } else {
                v.checked_sub(by).expect("a queue never releases more than it holds")
            }
        };
        let mut at = Some(leaf);
        while let Some(q) = at {
            let n = &mut self.nodes[q.0];
            n.usage = std::array::from_fn(|r| apply(n.usage[r], x[r]));
            at = n.parent;
        }
        for (r, x) in x.into_iter().enumerate() {
            if x == 0 || !self.nodes[leaf.0].accounted[r] {
                continue;
            }
            let n = &mut self.nodes[leaf.0];
            let before = n.e(r);
            n.demand[r] = apply(n.demand[r], x);
            let (mut q, mut change) = (leaf, n.e(r).abs_diff(before));
            while change > 0 {
                let Some(p) = self.nodes[q.0].parent else { break };
                let n = &mut self.nodes[p.0];
                let before = n.e(r);
                n.demand[r] = apply(n.demand[r], change);
                (q, change) = (p, n.e(r).abs_diff(before));
            }
        }
    }

    /// Per resource, `U(q) / capacity`, the largest of them (0 for a resource of capacity 0).
    pub fn dominant_share(&self, q: QueueIdx, capacity: Resources) -> f64 {
        dominant(self.nodes[q.0].usage.map(|u| u as f64), amounts(capacity))
    }

    /// The dominant share divided by the queue's weight.
    pub fn weighted_share(&self, q: QueueIdx, capacity: Resources) -> f64 {
        self.dominant_share(q, capacity) / self.weight(q)
    }
}

/// The largest `value / capacity` over the resources, skipping those of capacity 0.
fn dominant(values: [f64; R], capacity: Amounts) -> f64 {
    values.iter().zip(capacity).filter(|&(_, c)| c > 0).map(|(v, c)| v / c as f64).fold(0.0, f64::max)
}
