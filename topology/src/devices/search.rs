//! The branch-and-bound search behind [`super::allocate`]: combinations of devices per request
//! in index order, constraints and shared counters checked as devices are added, the best
//! solution kept by (earliest alternatives, fewest PCIe roots spanned, lowest device ids).

use std::collections::BTreeMap;

use super::allocate::{AllocationError, CounterId, IMPROVE_BUDGET, InUse, SEARCH_BUDGET};
use super::cel::Selectors;
use super::claims::{Alternative, Claim, ConstraintKind, MAX_DEVICES_PER_CLAIM};
use super::objects::DeviceTaintEffect;
use super::pools::{Device, HostDevices, PoolView, qualify};

/// Devices an alternative may use on this host (before counters and constraints), with numbers
/// for the failure message.
pub(super) struct Candidates {
    devices: Vec<usize>,
    matching: usize,
    /// For All: why it cannot be met at all.
    refused: Option<String>,
}

pub(super) struct Best {
    /// Alternative per slot.
    pub(super) alts: Vec<usize>,
    penalty: usize,
    /// (slot, device index), in the order chosen.
    pub(super) chosen: Vec<(usize, usize)>,
}

pub(super) struct Search<'a, 'h> {
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
    /// Devices tried so far.
    pub(super) tried: u64,
    /// The furthest slot reached.
    pub(super) deepest: usize,
    /// The best solution so far.
    pub(super) best: Option<Best>,
    /// `tried` when the first solution was found.
    first_found: Option<u64>,
}

impl<'a, 'h> Search<'a, 'h> {
    pub(super) fn new(
        host: &'a HostDevices<'h>,
        view: &'a PoolView,
        claims: &'a [Claim],
        in_use: &'a InUse,
        selectors: &'a mut Selectors,
        slots: &'a [(usize, usize)],
    ) -> Self {
        Search {
            host,
            view,
            claims,
            in_use,
            selectors,
            slots,
            candidates: BTreeMap::new(),
            alts: vec![0; slots.len()],
            chosen: Vec::new(),
            counters: BTreeMap::new(),
            tried: 0,
            deepest: 0,
            best: None,
            first_found: None,
        }
    }

    /// Explores every slot from `slot` on, keeping the best solution.
    pub(super) fn slot(&mut self, slot: usize) -> Result<(), AllocationError> {
        self.deepest = self.deepest.max(slot);
        if slot == self.slots.len() {
            self.record();
            return Ok(());
        }
        let (c, r) = self.slots[slot];
        for alt in 0..self.claims[c].requests[r].alternatives.len() {
            self.alts[slot] = alt;
            if !self.can_improve(slot) || self.exhausted() || self.perfect() {
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
            if devices.len() - i < need || self.exhausted() || self.perfect() || !self.can_improve(slot) {
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
            let taken = self.counters.entry(id).or_default();
            *taken = taken.saturating_add(*amount);
        }
        self.chosen.push((slot, device));
    }

    fn pop(&mut self) {
        if let Some((_, device)) = self.chosen.pop() {
            let device_ref = self.host.devices[device];
            for ((set, counter), amount) in &device_ref.consumes {
                let id = (device_ref.id.driver.clone(), device_ref.id.pool.clone(), set.clone(), counter.clone());
                if let Some(taken) = self.counters.get_mut(&id) {
                    *taken = taken.saturating_sub(*amount);
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
            let taken = self
                .in_use
                .consumed(candidate, set, counter)
                .saturating_add(self.counters.get(&id).copied().unwrap_or(0));
            if taken.saturating_add(*amount) > available {
                return false;
            }
        }
        let (c, _) = self.slots[slot];
        let claim = &self.claims[c];
        let name_of = |s: usize| {
            let (_, r) = self.slots[s];
            claim.requests[r].alternatives[self.alts[s]].name.as_str()
        };
        let same_claim = || self.chosen.iter().filter(|&&(s, _)| self.slots[s].0 == c);
        if same_claim().count() >= MAX_DEVICES_PER_CLAIM {
            return false;
        }
        for constraint in claim.constraints.iter().filter(|k| k.covers(name_of(slot))) {
            let Some(value) = candidate.attribute(constraint.attribute()) else {
                return false;
            };
            for &(_, other) in same_claim().filter(|&&(s, _)| constraint.covers(name_of(s))) {
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

    /// PCIe roots spanned beyond one, per request and for the whole pod. `chosen` holds each
    /// slot's devices together (slots are filled in order), so one pass with small lists does.
    fn penalty(&self) -> usize {
        let (mut pod, mut group): (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
        let (mut total, mut current) = (0, usize::MAX);
        for &(slot, device) in &self.chosen {
            if slot != current {
                total += group.len().saturating_sub(1);
                group.clear();
                current = slot;
            }
            if let Some(root) = self.host.devices[device].pcie_root() {
                if !group.contains(&root) {
                    group.push(root);
                }
                if !pod.contains(&root) {
                    pod.push(root);
                }
            }
        }
        total + group.len().saturating_sub(1) + pod.len().saturating_sub(1)
    }

    /// Out of budget: in all, or for improving on the first solution.
    fn exhausted(&self) -> bool {
        self.tried > SEARCH_BUDGET || self.first_found.is_some_and(|first| self.tried > first + IMPROVE_BUDGET)
    }

    fn record(&mut self) {
        self.first_found.get_or_insert(self.tried);
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
    pub(super) fn reason(&self, c: usize, r: usize) -> String {
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
    let devices = if need == 1 { "1 device".to_string() } else { format!("{need} devices") };
    if free < need {
        format!("{}: needs {devices} of class {class}, {matching} match and {free} of those are free", alternative.name)
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
