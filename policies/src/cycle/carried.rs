//! What one cycle's walk carries from gang to gang: the reservation, quota holds, queues
//! blocked behind their head, shapes known not to fit, what the walk learnt about whether
//! anything left can start, and what the cycle did so far. The stages (`walk.rs`,
//! `early_stop.rs`, `pass_over.rs`, `inferred_failures.rs`) read and change it; it calls none
//! of them.

use std::collections::{BTreeMap, HashMap, HashSet};

use trainyard_topology::Demand;

use crate::backfill::{Holds, ReservationPlan};
use crate::cycle::blanket::ShapeFailures;
use crate::cycle::inferred_failures::Searched;
use crate::cycle::pass_over::PassMemo;
use crate::gangs::by_id::FastHash;
use crate::quota::QueueIdx;
use crate::{BackfillMode, Cycle, GangId};

/// What the walk carries from one gang to the next within a cycle.
pub(crate) struct Walk {
    pub(crate) mode: BackfillMode,
    /// Shapes that did not fit earlier in this cycle.
    pub(crate) failed_shapes: ShapeFailures,
    /// Strict FIFO: queues whose head could not start, with that head.
    pub(crate) blocked_queues: BTreeMap<QueueIdx, GangId>,
    /// EASY backfill: the first gang that could not start, and when and where it will.
    pub(crate) reservation: Option<ReservationPlan>,
    /// Quota set aside for gangs blocked by quota while a reservation stands.
    pub(crate) holds: Holds,
    /// What the walk learnt about whether anything left in it can start.
    pub(crate) stop: StopCheck,
    /// The last gang visited only heard again why it waits (its request failed or was refused):
    /// the gangs after it may be passed over up to the next one that could start.
    pub(crate) settled_visit: bool,
    /// Gangs were passed over: they read their reason from the blanket.
    pub(crate) passed: bool,
    /// Failures found by search, for a what-if copy to infer others from (`cycle/inferred_failures.rs`).
    pub(crate) searched: Searched,
    /// What the cycle did so far.
    pub(crate) cycle: Cycle,
}

impl Walk {
    pub(crate) fn new(mode: BackfillMode, cycle: Cycle) -> Walk {
        Walk {
            mode,
            failed_shapes: HashMap::default(),
            blocked_queues: BTreeMap::new(),
            reservation: None,
            holds: Holds::default(),
            stop: Default::default(),
            settled_visit: false,
            passed: false,
            searched: Default::default(),
            cycle,
        }
    }
}

/// Whether the walk goes on to the next gang.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    Next,
    Stop,
}

/// What a cycle's walk learnt about whether anything left in it can start.
#[derive(Debug, Default)]
pub(crate) struct StopCheck {
    /// Requests for which none of the queues of their gangs has quota left.
    pub(crate) quota_settled: HashSet<Demand, FastHash>,
    /// Requests found to fit (room and some queue's quota), with the gangs admitted then:
    /// while none more is admitted, they still fit.
    pub(crate) open: HashMap<Demand, usize, FastHash>,
    /// The open request the last check stopped at: while it is still open and not settled, the
    /// check answers at once, as its walk over every request would (see `nothing_left_starts`).
    pub(crate) witness: Option<Demand>,
    /// The requests a check is about to probe (kept only for its buffer).
    pub(crate) untried: Vec<Demand>,
    /// What `next_open` found, for its next call in the cycle (`cycle/pass_over.rs`).
    pub(crate) pass: PassMemo,
}
