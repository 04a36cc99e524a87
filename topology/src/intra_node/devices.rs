//! Hands out the GPUs of one host so that a pod's GPUs share the smallest possible group.
//!
//! Rule for a request of `k` GPUs:
//! 1. Pick the innermost kind of group that can hold it: a PCIe switch with `k` free GPUs,
//!    else a NUMA node with `k` free, else the whole host.
//! 2. Among groups of that kind, take the one with the fewest free GPUs that still suffices
//!    (best fit), ties by lowest index (NUMA nodes and switches in file order). Best fit keeps
//!    whole switches free for later 2- and 4-GPU pods instead of nibbling at every switch.
//! 3. When the request spans several groups (switches inside a NUMA node, NUMA nodes inside
//!    the host), fill them one at a time: if one group can hold the rest, best fit as above;
//!    otherwise take every free GPU of the group with the most free (ties by lowest index)
//!    and go on. Taking the fullest first puts the GPUs on as few switches as possible.
//! 4. Inside the chosen switch, the lowest-numbered free GPUs.
//!
//! The result's [`Locality`] is the innermost group that holds every assigned GPU; by step 1 a
//! request gets [`Locality::Switch`] whenever some switch has `k` free GPUs.

use std::sync::Arc;

use super::HostLayout;
use crate::request::GpuLayout;

/// The innermost group holding every GPU of an assignment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Locality {
    /// All GPUs below one PCIe switch.
    Switch,
    /// All GPUs in one NUMA node, below several switches.
    Numa,
    /// GPUs in several NUMA nodes.
    Host,
}

/// GPUs given to one pod on one host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceAssignment {
    /// GPU numbers, ascending (usable as `CUDA_VISIBLE_DEVICES` with `CUDA_DEVICE_ORDER=PCI_BUS_ID`).
    pub gpus: Vec<u8>,
    /// NICs the pod should use: [`HostLayout::nics_near`] of each GPU, without repeats, in
    /// GPU order. On the shipped layouts these are the NICs of the switches used.
    pub nics: Vec<String>,
    /// The innermost group holding every GPU.
    pub locality: Locality,
}

/// A release that does not match what was assigned: an accounting bug in the caller.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReleaseError {
    /// The host has no such GPU.
    #[error("GPU {gpu} does not exist on this host ({gpu_count} GPUs)")]
    UnknownGpu {
        /// The GPU number released.
        gpu: u8,
        /// How many GPUs the host has.
        gpu_count: u8,
    },
    /// The GPU is free already (a double release) or listed twice in the assignment.
    #[error("GPU {gpu} is not assigned (released twice?)")]
    NotAssigned {
        /// The GPU number released.
        gpu: u8,
    },
}

/// The GPUs of one host and which of them are free.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostDevices {
    groups: GpuGroups,
    /// Bit `i` set = GPU `i` free.
    free: u64,
}

impl HostDevices {
    /// A host with every GPU free.
    pub fn new(layout: HostLayout) -> HostDevices {
        let groups = GpuGroups::new(Arc::new(layout));
        let free = groups.all();
        HostDevices { groups, free }
    }

    /// The host's layout.
    pub fn layout(&self) -> &HostLayout {
        self.groups.layout()
    }

    /// Free GPUs as a bit mask (bit `i` = GPU `i`).
    pub fn free_mask(&self) -> u64 {
        self.free
    }

    /// How many GPUs are free.
    pub fn free_count(&self) -> u8 {
        count(self.free)
    }

    /// Whether GPU `gpu` exists and is free.
    pub fn is_free(&self, gpu: u8) -> bool {
        gpu < self.layout().gpu_count() && self.free & bit(gpu) != 0
    }

    /// Free GPUs of switch `switch` of NUMA node `numa` (indices into [`HostLayout::numa`]);
    /// 0 for indices out of range.
    pub fn free_on_switch(&self, numa: usize, switch: usize) -> u8 {
        self.groups.switch_mask(numa, switch).map_or(0, |m| count(self.free & m))
    }

    /// Free GPUs of NUMA node `numa` (index into [`HostLayout::numa`]); 0 when out of range.
    pub fn free_on_numa(&self, numa: usize) -> u8 {
        self.groups.numa_masks.get(numa).map_or(0, |m| count(self.free & m))
    }

    /// Assigns `gpus` GPUs by the rule in the module docs. `None` when fewer are free, or
    /// when `gpus` is 0 (a pod without GPUs needs no device assignment); nothing changes then.
    pub fn assign(&mut self, gpus: u8) -> Option<DeviceAssignment> {
        let chosen = self.groups.pick(self.free, gpus)?;
        self.free &= !chosen;
        Some(self.groups.describe(chosen))
    }

    /// Frees the GPUs of `a`. Checks every GPU first, so on error nothing changes.
    pub fn release(&mut self, a: &DeviceAssignment) -> Result<(), ReleaseError> {
        let gpu_count = self.layout().gpu_count();
        let mut mask = 0u64;
        for &gpu in &a.gpus {
            if gpu >= gpu_count {
                return Err(ReleaseError::UnknownGpu { gpu, gpu_count });
            }
            if (self.free | mask) & bit(gpu) != 0 {
                return Err(ReleaseError::NotAssigned { gpu });
            }
            mask |= bit(gpu);
        }
        self.free |= mask;
        Ok(())
    }
}

/// The groups of one host's GPUs as bit masks, for choosing GPUs out of any free set: what a
/// cluster keeps per host (shared by every host of one layout) to give pods GPU indices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuGroups {
    layout: Arc<HostLayout>,
    /// Every switch's GPUs, NUMA node after NUMA node.
    switch_masks: Vec<u64>,
    /// Where each NUMA node's switches start in `switch_masks` (one more entry at the end).
    switch_start: Vec<usize>,
    /// Per NUMA node: its GPUs.
    numa_masks: Vec<u64>,
}

impl GpuGroups {
    /// The groups of a layout.
    pub fn new(layout: Arc<HostLayout>) -> GpuGroups {
        let mut switch_masks = Vec::new();
        let mut switch_start = vec![0];
        let mut numa_masks = Vec::new();
        for numa in layout.numa() {
            let masks: Vec<u64> = numa.switches.iter().map(|s| s.gpus.iter().fold(0, |m, &g| m | bit(g))).collect();
            numa_masks.push(masks.iter().fold(0, |m, x| m | x));
            switch_masks.extend(masks);
            switch_start.push(switch_masks.len());
        }
        GpuGroups { layout, switch_masks, switch_start, numa_masks }
    }

    /// The layout.
    pub fn layout(&self) -> &HostLayout {
        &self.layout
    }

    /// Every GPU of the host as a mask.
    pub fn all(&self) -> u64 {
        (0..self.layout.gpu_count()).fold(0, |m, g| m | bit(g))
    }

    fn switch_mask(&self, numa: usize, switch: usize) -> Option<u64> {
        let start = *self.switch_start.get(numa)?;
        let end = *self.switch_start.get(numa + 1)?;
        (start + switch < end).then(|| self.switch_masks[start + switch])
    }

    fn switches_of(&self, numa: usize) -> &[u64] {
        &self.switch_masks[self.switch_start[numa]..self.switch_start[numa + 1]]
    }

    /// `gpus` GPUs out of `free` by the rule in the module docs; `None` when fewer are free or
    /// `gpus` is 0.
    pub fn pick(&self, free: u64, gpus: u8) -> Option<u64> {
        let want = u32::from(gpus);
        let free = free & self.all();
        if want == 0 || want > free.count_ones() {
            return None;
        }
        let chosen = if let Some(i) = best_fit(&self.switch_masks, free, want) {
            take_lowest(free & self.switch_masks[i], want)
        } else if let Some(n) = best_fit(&self.numa_masks, free, want) {
            self.fill_numa(free, n, want)
        } else {
            spread(&self.numa_masks, free, want, |n, rest| self.fill_numa(free, n, rest))
        };
        // Unreachable when the free count covers the request; refuse rather than hand out a
        // wrong set.
        (chosen.count_ones() == want && chosen & !free == 0).then_some(chosen)
    }

    /// `gpus` GPUs out of `free`, all inside one group of `within` (best fit among such groups,
    /// as [`GpuGroups::pick`]); `None` when no such group has them.
    pub fn pick_within(&self, free: u64, gpus: u8, within: GpuLayout) -> Option<u64> {
        let want = u32::from(gpus);
        let free = free & self.all();
        if want == 0 {
            return None;
        }
        let chosen = match within {
            GpuLayout::Switch => take_lowest(free & self.switch_masks[best_fit(&self.switch_masks, free, want)?], want),
            GpuLayout::Numa => self.fill_numa(free, best_fit(&self.numa_masks, free, want)?, want),
        };
        (chosen.count_ones() == want).then_some(chosen)
    }

    /// How many pods of `gpus` GPUs each fit in `free` with every pod inside one group of
    /// `within`: exact, since each group holds its share independently.
    pub fn packable(&self, free: u64, gpus: u8, within: GpuLayout) -> u64 {
        let want = u32::from(gpus);
        if want == 0 {
            return 0;
        }
        let groups = match within {
            GpuLayout::Switch => &self.switch_masks,
            GpuLayout::Numa => &self.numa_masks,
        };
        groups.iter().map(|m| u64::from((free & m).count_ones() / want)).sum()
    }

    /// The assignment a mask of GPUs stands for: its GPUs, the NICs near them, its locality.
    pub fn describe(&self, mask: u64) -> DeviceAssignment {
        let gpus: Vec<u8> = (0..self.layout.gpu_count()).filter(|&g| mask & bit(g) != 0).collect();
        let mut nics: Vec<String> = Vec::new();
        for &g in &gpus {
            for nic in self.layout.nics_near(g) {
                if !nics.contains(nic) {
                    nics.push(nic.clone());
                }
            }
        }
        let locality = self.locality(mask);
        DeviceAssignment { gpus, nics, locality }
    }

    /// The innermost group holding every GPU of `mask` (`Switch` for an empty mask).
    pub fn locality(&self, mask: u64) -> Locality {
        if mask == 0 || self.switch_masks.iter().any(|s| mask & !s == 0) {
            Locality::Switch
        } else if self.numa_masks.iter().any(|n| mask & !n == 0) {
            Locality::Numa
        } else {
            Locality::Host
        }
    }

    /// `want` free GPUs of NUMA node `numa`, spread over as few of its switches as possible.
    fn fill_numa(&self, free: u64, numa: usize, want: u32) -> u64 {
        let switches = self.switches_of(numa);
        spread(switches, free, want, |s, rest| take_lowest(free & switches[s], rest))
    }
}

fn bit(gpu: u8) -> u64 {
    1u64.checked_shl(u32::from(gpu)).unwrap_or(0)
}

fn count(mask: u64) -> u8 {
    // count_ones of a u64 is at most 64.
    mask.count_ones() as u8
}

/// The group with the fewest free GPUs that still has `want`, ties by lowest index.
fn best_fit(groups: &[u64], free: u64, want: u32) -> Option<usize> {
    groups
        .iter()
        .enumerate()
        .map(|(i, m)| ((free & m).count_ones(), i))
        .filter(|&(n, _)| n >= want)
        .min()
        .map(|(_, i)| i)
}

/// `want` GPUs from disjoint `groups`: whole groups, fullest first, until one group can hold
/// the rest, which `part(group, rest)` then picks from.
fn spread(groups: &[u64], free: u64, want: u32, part: impl Fn(usize, u32) -> u64) -> u64 {
    let mut free = free;
    let mut rest = want;
    let mut taken = 0u64;
    while rest > 0 {
        if let Some(i) = best_fit(groups, free, rest) {
            return taken | part(i, rest);
        }
        // Fullest first; `min` over (fewest missing, index) = most free, lowest index.
        let fullest = groups
            .iter()
            .enumerate()
            .map(|(i, m)| (u32::MAX - (free & m).count_ones(), i, free & m))
            .filter(|&(_, _, f)| f != 0)
            .min();
        let Some((_, _, whole)) = fullest else { break };
        taken |= whole;
        free &= !whole;
        rest -= whole.count_ones();
    }
    taken
}

/// The `want` lowest-numbered GPUs of `mask`.
fn take_lowest(mask: u64, want: u32) -> u64 {
    let mut rest = mask;
    let mut taken = 0u64;
    for _ in 0..want {
        if rest == 0 {
            break;
        }
        let low = rest & rest.wrapping_neg();
        taken |= low;
        rest &= !low;
    }
    taken
}
