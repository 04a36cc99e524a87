//! Passing over settled gangs within a cycle (`next_open`): once a reservation stands, the walk
//! goes from a gang that only heard again why it waits straight to the next gang whose request
//! could still start (see `cycle/early_stop.rs` for which gangs may be passed).
//!
//! A cycle asks after nearly every gang it visits, and a look at every request each time (a
//! few hash lookups and a search of its gangs per request) was a fifth of an EASY cycle. What a
//! look finds changes only in a few ways within a cycle, so the answers are kept between calls:
//! - a request passed over for good is dropped: it failed or was refused (both are only added
//!   to within a cycle, and a refused request's shortest estimate only grows as its gangs
//!   leave) and every queue it waits in is unlimited (a limited one may run out of quota);
//! - the others are looked at again only when something that can change their look happened:
//!   a gang of the request was visited (which may add its failure or refusal, or start it, so
//!   that its group loses a gang) or the request was probed (`nothing_left_starts`), or a gang
//!   started anywhere (quota moved) for those passed for their quota alone; a failure known
//!   from an earlier cycle counts as the cycle's own from the first look on, so the
//!   free-capacity epoch moving changes nothing;
//! - each request's first gang after the last gang passed is kept while it stays ahead of the
//!   walk: the walk goes forward, and a request's gangs only leave (a gang ahead of the walk
//!   is not visited yet, so it is still there);
//! - a gang filed anew (`ByRequest::additions`) starts the list over.
//!
//! The answer is the one a look at every request gives; debug builds check every answer
//! against that look.

use std::sync::Arc;

use trainyard_topology::Demand;

use crate::backfill::ReservationPlan;
use crate::cycle::blanket::ShapeFailures;
use crate::gangs::by_request::Group;
use crate::gangs::record::OrderKey;
use crate::state::State;

/// Queues whose quota is looked at for one request passed over; more are not checked (one
/// quota check per queue and request would cost more than passing saves).
const MAX_QUOTA_PROBES: usize = 8;

/// What the last `next_open` of a cycle found, kept for the next call.
#[derive(Debug, Default)]
pub(crate) struct PassMemo {
    /// Whether the requests are listed (`next_open` ran in this cycle).
    listed: bool,
    /// `ByRequest::additions` when the list was made.
    additions: u64,
    /// Requests whose look may have changed since the last call (see the module documentation),
    /// by hash: comparing words is cheaper than comparing requests, and a collision only looks
    /// at a request once more.
    touched: Vec<u64>,
    /// A gang started since the last call: quota moved.
    started: bool,
    /// The gang the last call passed after: a call for a gang before it starts over.
    after: Option<OrderKey>,
    /// The requests not passed over for good, in the order the request index lists them.
    requests: Vec<Kept>,
}

/// One request `next_open` may still stop at.
#[derive(Debug)]
struct Kept {
    demand: Demand,
    /// The request's hash, as `touched` holds it.
    hash: u64,
    /// Passed over at the last look (for its queues' quota alone; for good ones are dropped).
    passed: bool,
    /// Its first gang after the gang some call passed after (`Some(None)`: none after it);
    /// `None` until a call needs it.
    first_after: Option<Option<OrderKey>>,
}

/// What a look at one request found.
enum Look {
    /// Passed over, and will be for the rest of the cycle.
    PassedForGood,
    /// Passed over now: its queues' quota may run out.
    Passed,
    /// The walk must visit its next gang.
    Open,
}

impl PassMemo {
    /// A gang of `demand` was visited or the request probed: its next look may differ.
    pub(crate) fn touch(&mut self, demand: &Demand) {
        if self.listed {
            let hash = hash_of(demand);
            if !self.touched.contains(&hash) {
                self.touched.push(hash);
            }
        }
    }

    /// A gang started: the quota of its queues moved.
    pub(crate) fn started(&mut self) {
        self.started = self.listed;
    }
}

/// The pending-order key of the first gang after `after` whose visit could do more than say
/// again why it waits (see `cycle/early_stop.rs`), once a reservation stands; `None` when there
/// is none (or no reservation stands). Failures known from earlier cycles at today's free
/// capacity join the cycle's, so that the gangs passed over read them from the blanket.
pub(crate) fn next_open(
    s: &mut State,
    kept: &mut PassMemo,
    reservation: Option<&ReservationPlan>,
    failed_shapes: &mut ShapeFailures,
    after: OrderKey,
    now: u64,
) -> Option<OrderKey> {
    let reservation = reservation?;
    let additions = s.gangs.by_request().additions();
    let mut memo = std::mem::take(kept);
    let fresh = !memo.listed || memo.additions != additions || memo.after.is_none_or(|last| after < last);
    if fresh {
        memo.requests.clear();
        let mut requests: Vec<Kept> = std::mem::take(&mut memo.requests);
        let listed: Vec<Demand> = s.gangs.by_request().requests().map(|(d, _)| d.clone()).collect();
        for demand in listed {
            let Some(look) = look(s, reservation, failed_shapes, &demand, now) else { continue };
            if !matches!(look, Look::PassedForGood) {
                let passed = matches!(look, Look::Passed);
                requests.push(Kept { hash: hash_of(&demand), demand, passed, first_after: None });
            }
        }
        memo.requests = requests;
    } else if !memo.touched.is_empty() || memo.started {
        let (mut requests, touched) = (std::mem::take(&mut memo.requests), &memo.touched);
        requests.retain_mut(|kept| {
            // Only a request touched since, or passed for its quota alone once quota moved.
            let stale = touched.contains(&kept.hash) || (memo.started && kept.passed);
            if !stale {
                return true;
            }
            match look(s, reservation, failed_shapes, &kept.demand, now) {
                None | Some(Look::PassedForGood) => false,
                Some(look) => {
                    kept.passed = matches!(look, Look::Passed);
                    true
                }
            }
        });
        memo.requests = requests;
    }
    memo.touched.clear();
    memo.started = false;
    let by_request = s.gangs.by_request();
    let mut next: Option<OrderKey> = None;
    for kept in memo.requests.iter_mut().filter(|k| !k.passed) {
        // The first gang after an earlier call's gang is still the first after this one
        // when it stands after it (`after` only grows); none then means none now.
        let first = match kept.first_after {
            Some(Some(first)) if first > after => Some(first),
            Some(None) => None,
            _ => by_request.group(&kept.demand).and_then(|g| g.first_after(after)),
        };
        kept.first_after = Some(first);
        if let Some(first) = first {
            next = Some(next.map_or(first, |n| n.min(first)));
        }
    }
    memo.listed = true;
    memo.additions = additions;
    memo.after = Some(after);
    *kept = memo;
    #[cfg(debug_assertions)]
    {
        // Tests check every kept answer against a look at every request.
        let full = next_open_by_looking(s, reservation, failed_shapes, after, now);
        assert_eq!(next, full, "a kept pass-over differs from a look at every request");
    }
    next
}

/// Looks at one request (see the module documentation); `None` when no gang of it waits.
fn look(
    s: &mut State,
    reservation: &ReservationPlan,
    failed_shapes: &mut ShapeFailures,
    demand: &Demand,
    now: u64,
) -> Option<Look> {
    let group = s.gangs.by_request().group(demand)?;
    let failed = failed_shapes.contains_key(demand)
        || match s.failed_at.get(demand).filter(|(e, _)| *e == s.cluster.epoch()) {
            Some((_, failure)) => {
                failed_shapes.insert(demand.clone(), Arc::clone(failure));
                true
            }
            None => false,
        };
    let refused = reservation.refused.contains(demand) && now.saturating_add(group.shortest()) > reservation.at;
    if !(failed || refused) {
        return Some(Look::Open);
    }
    Some(match passes_quota(&mut s.unlimited_queues, &s.quotas, group, demand) {
        None => Look::Open,
        Some(false) => Look::PassedForGood,
        Some(true) => Look::Passed,
    })
}

/// `next_open` as a look at every request, without keeping anything (debug builds check
/// the kept answers against it).
#[cfg(debug_assertions)]
fn next_open_by_looking(
    s: &mut State,
    reservation: &ReservationPlan,
    failed_shapes: &ShapeFailures,
    after: OrderKey,
    now: u64,
) -> Option<OrderKey> {
    let epoch = s.cluster.epoch();
    let mut next: Option<OrderKey> = None;
    for (demand, group) in s.gangs.by_request().requests() {
        let failed = failed_shapes.contains_key(demand) || s.failed_at.get(demand).is_some_and(|(e, _)| *e == epoch);
        let refused = reservation.refused.contains(demand) && now.saturating_add(group.shortest()) > reservation.at;
        if (failed || refused) && passes_quota(&mut s.unlimited_queues, &s.quotas, group, demand).is_some() {
            continue;
        }
        if let Some(first) = group.first_after(after) {
            next = Some(next.map_or(first, |n| n.min(first)));
        }
    }
    next
}

/// A request's hash under the engine's hasher.
fn hash_of(demand: &Demand) -> u64 {
    use std::hash::BuildHasher;
    crate::gangs::by_id::FastHash::default().hash_one(demand)
}

/// Whether every queue the request's gangs wait in has quota for it (a quota block would set a
/// hold, so the gang must be visited): `Some(limited)`, saying whether some queue is limited,
/// or `None` when one has none. Unlimited queues pass at once (kept per queue in
/// `unlimited`); the others take a quota check each, for a few.
fn passes_quota(
    unlimited: &mut Vec<Option<bool>>,
    quotas: &crate::quota::QuotaTree,
    group: &Group,
    demand: &Demand,
) -> Option<bool> {
    let total = demand.total();
    let (mut checks, mut limited) = (0, false);
    for q in group.queues() {
        if unlimited.len() <= q.0 {
            unlimited.resize(q.0 + 1, None);
        }
        if *unlimited[q.0].get_or_insert_with(|| quotas.ceiling(q) == crate::quota::UNLIMITED_CEILING) {
            continue;
        }
        limited = true;
        checks += 1;
        if checks > MAX_QUOTA_PROBES || quotas.check(q, total).is_err() {
            return None;
        }
    }
    Some(limited)
}
