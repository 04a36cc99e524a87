//! Devices for one pod's claims on one host, and for a whole gang (all pods or none).
//!
//! The rules are the upstream allocator's: a device serves a request when it is free, meets the
//! class's and the request's CEL selectors, tolerates-wise is usable (every `NoSchedule` /
//! `NoExecute` taint tolerated), offers the requested capacity, and its shared counters stay
//! within what the pool has; constraints are checked as devices are added, so a branch that
//! breaks one is cut at once. `firstAvailable` alternatives are tried in order and the earliest
//! that lets every claim of the pod succeed wins, as upstream. `All` takes every matching device
//! of the host and fails when one of them is in use or a pool the host reaches is incomplete.
//!
//! Unlike upstream, the first solution does not end the search: devices are picked as
//! combinations in index order (never permutations), and among the solutions found within
//! [`SEARCH_BUDGET`] devices tried, the one whose requests and whole pod span the fewest PCIe
//! roots wins (GPU+NIC pairs on one root), ties going to the lowest device ids. Everything is
//! deterministic: the same inputs give the same devices.

use std::collections::{BTreeMap, BTreeSet};

use super::cel::{CelError, Selectors};
use super::claims::{Alternative, Claim, ConstraintKind, MAX_DEVICES_PER_CLAIM};
use super::objects::DeviceTaintEffect;
use super::pools::{Device, DeviceId, HostDevices, PoolView, qualify};

/// Devices tried per pod before the search settles for the best solution found (or gives up).
pub const SEARCH_BUDGET: u64 = 100_000;

/// A shared counter: (driver, pool, counter set, counter).
pub type CounterId = (String, String, String, String);

/// Devices and shared counters already taken (by running pods, other claims, earlier gang pods).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InUse {
    /// Allocated devices.
    pub devices: BTreeSet<DeviceId>,
    /// Counters consumed, in thousandths.
    pub counters: BTreeMap<CounterId, u64>,
}

impl InUse {
    /// Marks a device and its counters as taken.
    pub fn take(&mut self, device: &Device) {
        self.devices.insert(device.id.clone());
        for ((set, counter), amount) in &device.consumes {
            let id = (device.id.driver.clone(), device.id.pool.clone(), set.clone(), counter.clone());
            *self.counters.entry(id).or_default() += amount;
        }
    }

    fn consumed(&self, device: &Device, set: &str, counter: &str) -> u64 {
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
    let mut working = in_use.clone();
    let mut allocations = Vec::with_capacity(pods.len());
    for pod in pods {
        let host = view.host(&pod.node);
        let allocation = allocate_on(&host, view, &pod.claims, &working, selectors).map_err(|error| {
            GangAllocationError { pod: pod.pod.clone(), node: pod.node.clone(), error: Box::new(error) }
        })?;
        for result in allocation.claims.iter().flat_map(|c| &c.results) {
            if let Some(device) = host.devices.iter().find(|d| d.id == result.device) {
                working.take(device);
            }
        }
        allocations.push(allocation);
    }
    *in_use = working;
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

fn allocate_on(
    host: &HostDevices<'_>,
    view: &PoolView,
    claims: &[Claim],
    in_use: &InUse,
    selectors: &mut Selectors,
) -> Result<PodAllocation, AllocationError> {
    let slots: Vec<(usize, usize)> =
        claims.iter().enumerate().flat_map(|(c, claim)| (0..claim.requests.len()).map(move |r| (c, r))).collect();
    let mut search = Search {
        host,
        view,
        claims,
        in_use,
        selectors,
        slots: &slots,
        candidates: BTreeMap::new(),
        alts: vec![0; slots.len()],
        chosen: Vec::new(),
        counters: BTreeMap::new(),
        tried: 0,
        deepest: 0,
        best: None,
    };
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

/// Devices an alternative may use on this host (before counters and constraints), with numbers
/// for the failure message.
struct Candidates {
    devices: Vec<usize>,
    matching: usize,
    /// For All: why it cannot be met at all.
    refused: Option<String>,
}

struct Best {
    alts: Vec<usize>,
    penalty: usize,
    chosen: Vec<(usize, usize)>,
}

struct Search<'a, 'h> {
    host: &'a HostDevices<'h>,
    view: &'a PoolView,
    claims: &'a [Claim],
    in_use: &'a InUse,
    selectors: &'a mut Selectors,
    slots: &'a [(usize, usize)],
    candidates: BTreeMap<(usize, usize, usize), Candidates>,
    alts: Vec<usize>,
    /// (slot, device index), in the order chosen.
    chosen: Vec<(usize, usize)>,
    /// Counters taken by `chosen`.
    counters: BTreeMap<CounterId, u64>,
    tried: u64,
    deepest: usize,
    best: Option<Best>,
}

impl Search<'_, '_> {
    fn slot(&mut self, slot: usize) -> Result<(), AllocationError> {
        self.deepest = self.deepest.max(slot);
        if slot == self.slots.len() {
            self.record();
            return Ok(());
        }
        let (c, r) = self.slots[slot];
        for alt in 0..self.claims[c].requests[r].alternatives.len() {
            self.alts[slot] = alt;
            if !self.can_improve(slot) || self.tried > SEARCH_BUDGET || self.perfect() {
                break;
            }
            self.ensure_candidates(c, r, alt)?;
            let candidates = &self.candidates[&(c, r, alt)];
            if candidates.refused.is_some() {
                continue;
            }
            let devices = candidates.devices.clone();
            match self.claims[c].requests[r].alternatives[alt].count {
                Some(count) => self.choose(slot, &devices, 0, count)?,
                None => self.take_all(slot, &devices)?,
            }
        }
        self.alts[slot] = 0;
        Ok(())
    }

    /// Combinations of `need` devices out of `devices[from..]`, in index order.
    fn choose(&mut self, slot: usize, devices: &[usize], from: usize, need: usize) -> Result<(), AllocationError> {
        if need == 0 {
            return self.slot(slot + 1);
        }
        for i in from..devices.len() {
            if devices.len() - i < need || self.tried > SEARCH_BUDGET || self.perfect() || !self.can_improve(slot) {
                break;
            }
            self.tried += 1;
            if !self.fits(slot, devices[i]) {
                continue;
            }
            self.push(slot, devices[i]);
            self.choose(slot, devices, i + 1, need - 1)?;
            self.pop();
        }
        Ok(())
    }

    fn take_all(&mut self, slot: usize, devices: &[usize]) -> Result<(), AllocationError> {
        let before = self.chosen.len();
        let mut fits = true;
        for &device in devices {
            self.tried += 1;
            if !self.fits(slot, device) {
                fits = false;
                break;
            }
            self.push(slot, device);
        }
        if fits {
            self.slot(slot + 1)?;
        }
        while self.chosen.len() > before {
            self.pop();
        }
        Ok(())
    }

    fn push(&mut self, slot: usize, device: usize) {
        let device_ref = self.host.devices[device];
        for ((set, counter), amount) in &device_ref.consumes {
            let id = (device_ref.id.driver.clone(), device_ref.id.pool.clone(), set.clone(), counter.clone());
            *self.counters.entry(id).or_default() += amount;
        }
        self.chosen.push((slot, device));
    }

    fn pop(&mut self) {
        if let Some((_, device)) = self.chosen.pop() {
            let device_ref = self.host.devices[device];
            for ((set, counter), amount) in &device_ref.consumes {
                let id = (device_ref.id.driver.clone(), device_ref.id.pool.clone(), set.clone(), counter.clone());
                if let Some(taken) = self.counters.get_mut(&id) {
                    *taken -= amount;
                }
            }
        }
    }

    /// Whether `device` can join the partial solution: not already chosen, counters within the
    /// pool's, the claim's constraints still met.
    fn fits(&self, slot: usize, device: usize) -> bool {
        if self.chosen.iter().any(|&(_, d)| d == device) {
            return false;
        }
        let candidate = self.host.devices[device];
        for ((set, counter), amount) in &candidate.consumes {
            let key = (set.clone(), counter.clone());
            let Some(available) = self.view.counter(&candidate.id.driver, &candidate.id.pool, &key) else {
                return false;
            };
            let id = (candidate.id.driver.clone(), candidate.id.pool.clone(), set.clone(), counter.clone());
            let taken = self.in_use.consumed(candidate, set, counter) + self.counters.get(&id).copied().unwrap_or(0);
            if taken + amount > available {
                return false;
            }
        }
        let (c, _) = self.slots[slot];
        let claim = &self.claims[c];
        let name_of = |s: usize| {
            let (_, r) = self.slots[s];
            claim.requests[r].alternatives[self.alts[s]].name.as_str()
        };
        let same_claim: Vec<(usize, usize)> =
            self.chosen.iter().copied().filter(|&(s, _)| self.slots[s].0 == c).collect();
        if same_claim.len() >= MAX_DEVICES_PER_CLAIM {
            return false;
        }
        for constraint in claim.constraints.iter().filter(|k| k.covers(name_of(slot))) {
            let Some(value) = candidate.attribute(constraint.attribute()) else {
                return false;
            };
            for &(_, other) in same_claim.iter().filter(|&&(s, _)| constraint.covers(name_of(s))) {
                let other = self.host.devices[other].attribute(constraint.attribute());
                let ok = match constraint.kind {
                    ConstraintKind::Match(_) => other == Some(value),
                    ConstraintKind::Distinct(_) => other != Some(value),
                };
                if !ok {
                    return false;
                }
            }
        }
        true
    }

    /// PCIe roots spanned beyond one, per request and for the whole pod.
    fn penalty(&self) -> usize {
        let spread = |roots: BTreeSet<&str>| roots.len().saturating_sub(1);
        let roots_of = |filter: &dyn Fn(usize) -> bool| -> BTreeSet<&str> {
            self.chosen
                .iter()
                .filter(|&&(s, _)| filter(s))
                .filter_map(|&(_, d)| self.host.devices[d].pcie_root())
                .collect()
        };
        let per_slot: usize = (0..self.slots.len()).map(|slot| spread(roots_of(&|s| s == slot))).sum();
        per_slot + spread(roots_of(&|_| true))
    }

    fn record(&mut self) {
        let penalty = self.penalty();
        let better = match &self.best {
            None => true,
            Some(best) => self.alts < best.alts || (self.alts == best.alts && penalty < best.penalty),
        };
        if better {
            self.best = Some(Best { alts: self.alts.clone(), penalty, chosen: self.chosen.clone() });
        }
    }

    /// Nothing can beat the best: earliest alternatives everywhere and no spread.
    fn perfect(&self) -> bool {
        self.best.as_ref().is_some_and(|b| b.penalty == 0 && b.alts.iter().all(|&a| a == 0))
    }

    /// Whether a partial solution (alternatives fixed up to `slot`) may still beat the best.
    fn can_improve(&self, slot: usize) -> bool {
        let Some(best) = &self.best else { return true };
        match self.alts[..=slot].cmp(&best.alts[..=slot]) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Greater => false,
            // Later slots can only pick later alternatives than best's zeros; then only a smaller
            // spread helps, and spread only grows as devices are added.
            std::cmp::Ordering::Equal => best.alts[slot + 1..].iter().any(|&a| a > 0) || self.penalty() < best.penalty,
        }
    }

    fn ensure_candidates(&mut self, c: usize, r: usize, alt: usize) -> Result<(), AllocationError> {
        if self.candidates.contains_key(&(c, r, alt)) {
            return Ok(());
        }
        let claim = &self.claims[c];
        let alternative = &claim.requests[r].alternatives[alt];
        let mut matching = Vec::new();
        for (index, device) in self.host.devices.iter().enumerate() {
            let mut selected = true;
            for &expr in &alternative.selectors {
                let hit = self.selectors.matches(expr, device).map_err(|error| AllocationError::Cel {
                    claim: claim.name.clone(),
                    request: alternative.name.clone(),
                    error: Box::new(error),
                })?;
                if !hit {
                    selected = false;
                    break;
                }
            }
            if selected && tolerated(alternative, device) && has_capacity(alternative, device) {
                matching.push(index);
            }
        }
        let free: Vec<usize> =
            matching.iter().copied().filter(|&d| !self.in_use.devices.contains(&self.host.devices[d].id)).collect();
        let refused = if alternative.count.is_some() {
            None
        } else if let Some(pool) = self.host.incomplete.first() {
            Some(format!("All needs every pool complete, and pool {pool} is incomplete"))
        } else if matching.is_empty() {
            Some("All matched no device".to_string())
        } else if free.len() < matching.len() {
            let busy = matching.iter().find(|&&d| !free.contains(&d)).map(|&d| self.host.devices[d].id.to_string());
            Some(format!("All needs every matching device and {} is in use", busy.unwrap_or_default()))
        } else if matching.len() > MAX_DEVICES_PER_CLAIM {
            Some(format!("All matched {} devices, more than {MAX_DEVICES_PER_CLAIM}", matching.len()))
        } else {
            None
        };
        self.candidates.insert((c, r, alt), Candidates { devices: free, matching: matching.len(), refused });
        Ok(())
    }

    /// Why the request at (claim, request) could not be met, alternative by alternative.
    fn reason(&self, c: usize, r: usize) -> String {
        let request = &self.claims[c].requests[r];
        let parts: Vec<String> = request
            .alternatives
            .iter()
            .enumerate()
            .map(|(alt, alternative)| describe(alternative, self.candidates.get(&(c, r, alt))))
            .collect();
        parts.join("; ")
    }
}

fn describe(alternative: &Alternative, candidates: Option<&Candidates>) -> String {
    let Some(candidates) = candidates else {
        return format!("{}: not tried (an earlier request cannot be met)", alternative.name);
    };
    if let Some(refused) = &candidates.refused {
        return format!("{}: {refused}", alternative.name);
    }
    let need = alternative.count.unwrap_or(candidates.matching);
    let (free, matching, class) = (candidates.devices.len(), candidates.matching, &alternative.class);
    if free < need {
        format!(
            "{}: needs {need} devices of class {class}, {matching} match and {free} of those are free",
            alternative.name
        )
    } else {
        format!(
            "{}: {free} free devices of class {class} match, but no {need} of them meet the constraints and shared counters together with the pod's other requests",
            alternative.name
        )
    }
}

fn tolerated(alternative: &Alternative, device: &Device) -> bool {
    device
        .taints
        .iter()
        .filter(|t| t.effect != DeviceTaintEffect::None)
        .all(|taint| alternative.tolerations.iter().any(|t| t.tolerates(taint)))
}

fn has_capacity(alternative: &Alternative, device: &Device) -> bool {
    alternative.capacity.iter().all(|(name, asked)| {
        let name = qualify(&device.id.driver, name);
        device.capacity.get(&name).is_some_and(|offered| offered.compare(asked).is_ge())
    })
}
