//! Devices for one pod's claims on one host, and for a whole gang (all pods or none).
//!
//! The rules are the upstream allocator's: a device serves a request when it is free, meets the
//! class's and then the request's CEL selectors, has every `NoSchedule` / `NoExecute` taint
//! tolerated, offers the requested capacity, and its shared counters stay within what the pool
//! has; constraints are checked as devices are added, so a branch that breaks one is cut at once.
//! `firstAvailable` alternatives are tried in order and the earliest that lets every claim of the
//! pod succeed wins, as upstream. `All` takes every matching device of the host (an untolerated
//! tainted device does not match) and fails when one of them is in use, when none matches, when
//! more than 32 match, or when a pool the host reaches is incomplete or invalid. A selector that
//! fails to evaluate fails the pod's allocation (upstream aborts), naming claim and request.
//! `adminAccess` is refused when claims are resolved.
//!
//! Unlike upstream, the first solution does not end the search: devices are picked as
//! combinations in index order (never permutations), and among the solutions found within
//! [`SEARCH_BUDGET`] devices tried (and [`IMPROVE_BUDGET`] after the first solution), the one
//! whose requests and whole pod span the fewest PCIe roots wins (GPU+NIC pairs on one root),
//! ties going to the lowest device ids. Everything is deterministic: the same inputs give the
//! same devices.

use std::collections::{BTreeMap, HashSet};

use super::cel::{CelError, Selectors};
use super::claims::Claim;
use super::pools::{Device, DeviceId, HostDevices, PoolView};
use super::search::Search;

/// Devices tried per pod before the search settles for the best solution found (or gives up).
pub const SEARCH_BUDGET: u64 = 100_000;

/// Devices tried after the first solution, looking for one on fewer PCIe roots. Keeps the
/// preference cheap when no better solution exists (8 GPU+NIC pairs cannot share one root):
/// searching the whole budget for it would cost about 0.2 s per pod.
pub const IMPROVE_BUDGET: u64 = 2_000;

/// A shared counter: (driver, pool, counter set, counter).
pub type CounterId = (String, String, String, String);

/// Devices and shared counters already taken (by running pods, other claims, earlier gang pods).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InUse {
    /// Allocated devices (hashed: a cluster holds tens of thousands, looked up per candidate).
    pub devices: HashSet<DeviceId>,
    /// Counters consumed, in thousandths.
    pub counters: BTreeMap<CounterId, u64>,
}

impl InUse {
    /// Marks a device and its counters as taken.
    pub fn take(&mut self, device: &Device) {
        self.devices.insert(device.id.clone());
        self.take_counters(device);
    }

    /// Takes `device` unless it is in use already; whether it was free.
    pub fn take_first(&mut self, device: &Device) -> bool {
        if !self.devices.insert(device.id.clone()) {
            return false;
        }
        self.take_counters(device);
        true
    }

    /// Gives `device` back if it is in use; whether it was.
    pub fn give_back_held(&mut self, device: &Device) -> bool {
        if !self.devices.contains(&device.id) {
            return false;
        }
        self.give_back(device);
        true
    }

    fn take_counters(&mut self, device: &Device) {
        for ((set, counter), amount) in &device.consumes {
            let id = (device.id.driver.clone(), device.id.pool.clone(), set.clone(), counter.clone());
            let taken = self.counters.entry(id).or_default();
            *taken = taken.saturating_add(*amount);
        }
    }

    /// Gives back what [`InUse::take`] took for `device`.
    pub fn give_back(&mut self, device: &Device) {
        self.devices.remove(&device.id);
        for ((set, counter), amount) in &device.consumes {
            let id = (device.id.driver.clone(), device.id.pool.clone(), set.clone(), counter.clone());
            if let Some(taken) = self.counters.get_mut(&id) {
                *taken = taken.saturating_sub(*amount);
                if *taken == 0 {
                    self.counters.remove(&id);
                }
            }
        }
    }

    pub(super) fn consumed(&self, device: &Device, set: &str, counter: &str) -> u64 {
        let id = (device.id.driver.clone(), device.id.pool.clone(), set.to_string(), counter.to_string());
        self.counters.get(&id).copied().unwrap_or(0)
    }
}

/// One device given to one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceResult {
    /// `request` or `request/subrequest`, as in `status.allocation.devices.results[].request`.
    pub request: String,
    /// The device.
    pub device: DeviceId,
}

/// The devices of one claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimResult {
    /// Claim.
    pub claim: String,
    /// Devices, request by request.
    pub results: Vec<DeviceResult>,
}

/// Every claim of one pod, allocated on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodAllocation {
    /// The node.
    pub node: String,
    /// Claims in the order given.
    pub claims: Vec<ClaimResult>,
}

/// Why a pod's claims cannot be allocated on a node.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocationError {
    /// No devices meet the request together with the rest of the pod's claims.
    #[error("claim {claim} request {request}: {reason}")]
    Unsatisfiable {
        /// Claim.
        claim: String,
        /// The request the search could not get past.
        request: String,
        /// Why, in numbers.
        reason: String,
    },
    /// A selector failed to evaluate: fatal for the claim, as upstream.
    #[error("claim {claim} request {request}: {error}")]
    Cel {
        /// Claim.
        claim: String,
        /// Request (`request/subrequest` for alternatives).
        request: String,
        /// The evaluation error.
        error: Box<CelError>,
    },
    /// The budget ran out before any solution was found.
    #[error("claim {claim} request {request}: no devices found within the search budget of {budget} devices tried")]
    BudgetExhausted {
        /// Claim of the deepest request reached.
        claim: String,
        /// That request.
        request: String,
        /// The budget.
        budget: u64,
    },
}

/// One gang pod: its node and its claims.
#[derive(Clone, Debug, PartialEq)]
pub struct PodClaims {
    /// Pod name (named in failures).
    pub pod: String,
    /// Node chosen for it.
    pub node: String,
    /// Its claims.
    pub claims: Vec<Claim>,
}

/// A gang pod whose claims do not fit; nothing was allocated for the gang.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("pod {pod} on node {node}: {error}")]
pub struct GangAllocationError {
    /// The pod.
    pub pod: String,
    /// Its node.
    pub node: String,
    /// Why.
    pub error: Box<AllocationError>,
}

/// Allocates every pod of a gang in order, each seeing the devices earlier pods took. On success
/// `in_use` holds every device given; on failure it is left exactly as it was.
pub fn allocate_gang(
    view: &PoolView,
    pods: &[PodClaims],
    in_use: &mut InUse,
    selectors: &mut Selectors,
) -> Result<Vec<PodAllocation>, GangAllocationError> {
    // What earlier pods took is given back on failure: cheaper than copying a cluster's worth
    // of devices in use for every gang.
    let mut taken: Vec<&Device> = Vec::new();
    let mut allocations = Vec::with_capacity(pods.len());
    for pod in pods {
        let host = view.host(&pod.node);
        let allocation = match allocate_on(&host, view, &pod.claims, in_use, selectors) {
            Ok(allocation) => allocation,
            Err(error) => {
                taken.iter().for_each(|d| in_use.give_back(d));
                let (pod, node) = (pod.pod.clone(), pod.node.clone());
                return Err(GangAllocationError { pod, node, error: Box::new(error) });
            }
        };
        for result in allocation.claims.iter().flat_map(|c| &c.results) {
            if let Some(device) = host.devices.iter().copied().find(|d| d.id == result.device) {
                in_use.take(device);
                taken.push(device);
            }
        }
        allocations.push(allocation);
    }
    Ok(allocations)
}

/// Devices for every request of every claim of one pod on `node`.
pub fn allocate_pod(
    view: &PoolView,
    node: &str,
    claims: &[Claim],
    in_use: &InUse,
    selectors: &mut Selectors,
) -> Result<PodAllocation, AllocationError> {
    allocate_on(&view.host(node), view, claims, in_use, selectors)
}

/// [`allocate_pod`] on devices already gathered for the node (see [`PoolView::host_in`]).
pub fn allocate_on(
    host: &HostDevices<'_>,
    view: &PoolView,
    claims: &[Claim],
    in_use: &InUse,
    selectors: &mut Selectors,
) -> Result<PodAllocation, AllocationError> {
    let slots: Vec<(usize, usize)> =
        claims.iter().enumerate().flat_map(|(c, claim)| (0..claim.requests.len()).map(move |r| (c, r))).collect();
    let mut search = Search::new(host, view, claims, in_use, selectors, &slots);
    search.slot(0)?;
    let Some(best) = search.best.take() else {
        let (c, r) = slots.get(search.deepest).copied().unwrap_or_default();
        let claim = &claims[c];
        let request = claim.requests[r].name.clone();
        if search.tried > SEARCH_BUDGET {
            return Err(AllocationError::BudgetExhausted { claim: claim.name.clone(), request, budget: SEARCH_BUDGET });
        }
        let reason = search.reason(c, r);
        return Err(AllocationError::Unsatisfiable { claim: claim.name.clone(), request, reason });
    };
    let mut results: Vec<ClaimResult> =
        claims.iter().map(|c| ClaimResult { claim: c.name.clone(), results: Vec::new() }).collect();
    for &(slot, device) in &best.chosen {
        let (c, r) = slots[slot];
        let alternative = &claims[c].requests[r].alternatives[best.alts[slot]];
        results[c]
            .results
            .push(DeviceResult { request: alternative.name.clone(), device: host.devices[device].id.clone() });
    }
    Ok(PodAllocation { node: host.node.clone(), claims: results })
}
