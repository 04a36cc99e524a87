//! Usable hosts by free GPUs: one bit set over host domains per count of free GPUs, kept up to
//! date in O(1) per host change, so that the best-fit host of a one-pod gang is found by
//! looking at the hosts with the fewest free GPUs that could hold it, not at every host with
//! room (greedy's count walks all of them; most gangs of a trace are one pod).

use crate::Resources;

/// Hosts with more free GPUs than this are not indexed; while one exists the index answers
/// nothing and searches walk the tree as before (bounds the buckets' memory).
pub(crate) const MAX_BUCKET: u64 = 1024;

/// Usable hosts with some free GPU, by their count of free GPUs.
#[derive(Clone, Debug, Default)]
pub(crate) struct FreeGpuIndex {
    /// `buckets[g]`: a bit per host domain (by domain id) with exactly `g` free GPUs.
    buckets: Vec<Vec<u64>>,
    /// Hosts with more than [`MAX_BUCKET`] free GPUs, which no bucket holds.
    oversized: usize,
}

impl FreeGpuIndex {
    /// Moves a host domain from the bucket of `before` free GPUs to that of `after` (0: none).
    pub(crate) fn moved(&mut self, domain: u32, before: u64, after: u64) {
        if before == after {
            return;
        }
        self.remove(domain, before);
        self.insert(domain, after);
    }

    fn insert(&mut self, domain: u32, gpus: u64) {
        if gpus == 0 {
            return;
        }
        if gpus > MAX_BUCKET {
            self.oversized += 1;
            return;
        }
        let g = gpus as usize;
        if self.buckets.len() <= g {
            self.buckets.resize_with(g + 1, Vec::new);
        }
        let (word, bit) = (domain as usize / 64, domain % 64);
        let set = &mut self.buckets[g];
        if set.len() <= word {
            set.resize(word + 1, 0);
        }
        debug_assert_eq!(set[word] & (1 << bit), 0, "a host is in one bucket");
        set[word] |= 1 << bit;
    }

    fn remove(&mut self, domain: u32, gpus: u64) {
        if gpus == 0 {
            return;
        }
        if gpus > MAX_BUCKET {
            self.oversized -= 1;
            return;
        }
        let (word, bit) = (domain as usize / 64, domain % 64);
        let set = &mut self.buckets[gpus as usize];
        debug_assert_ne!(set[word] & (1 << bit), 0, "the host was in this bucket");
        set[word] &= !(1 << bit);
    }

    /// The host domain greedy's best fit picks for one pod of `pod` (which asks for GPUs) over
    /// the base view `free`: among hosts that hold the pod, the fewest free GPUs, then the fewest
    /// such pods, then the lowest domain id. `None` when no host holds it or the index cannot
    /// tell (an oversized host).
    pub(crate) fn best_fit(&self, free: &[Resources], pod: &Resources) -> Option<u32> {
        if self.oversized > 0 || pod.gpus == 0 {
            return None;
        }
        // Without CPU or memory asked, every host of a bucket holds the pod equally often.
        let gpus_only = pod.cpu_milli == 0 && pod.memory_mib == 0;
        for set in self.buckets.iter().skip(usize::try_from(pod.gpus).ok()?) {
            let mut best: Option<(u64, u32)> = None;
            for (w, &word) in set.iter().enumerate() {
                let mut bits = word;
                while bits != 0 {
                    let d = (w * 64) as u32 + bits.trailing_zeros();
                    bits &= bits - 1;
                    let f = free[d as usize];
                    if !f.covers(pod) {
                        continue;
                    }
                    let candidate = (f.fit_count(pod), d);
                    if best.is_none_or(|b| candidate < b) {
                        best = Some(candidate);
                    }
                    if gpus_only || candidate.0 == 1 {
                        // Domains come in ascending order: no later one beats this.
                        return best.map(|(_, d)| d);
                    }
                }
            }
            if let Some((_, d)) = best {
                return Some(d);
            }
        }
        None
    }

    /// Every indexed host as `(domain, free GPUs)`, in domain order (for audits).
    pub(crate) fn entries(&self) -> Vec<(u32, u64)> {
        let mut out: Vec<(u32, u64)> = Vec::new();
        for (g, set) in self.buckets.iter().enumerate() {
            for (w, &word) in set.iter().enumerate() {
                let mut bits = word;
                while bits != 0 {
                    out.push(((w * 64) as u32 + bits.trailing_zeros(), g as u64));
                    bits &= bits - 1;
                }
            }
        }
        out.sort_unstable();
        out
    }

    /// Hosts with more free GPUs than any bucket (for audits).
    pub(crate) fn oversized(&self) -> usize {
        self.oversized
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(g: u64) -> Resources {
        Resources { gpus: g, cpu_milli: 0, memory_mib: 0 }
    }

    #[test]
    fn best_fit_takes_the_fewest_free_gpus_then_the_lowest_domain() {
        let mut index = FreeGpuIndex::default();
        let mut free = vec![Resources::ZERO; 200];
        for (d, g) in [(5u32, 8u64), (70, 3), (130, 3), (9, 2)] {
            free[d as usize] = gpus(g);
            index.moved(d, 0, g);
        }
        assert_eq!(index.best_fit(&free, &gpus(1)), Some(9));
        assert_eq!(index.best_fit(&free, &gpus(3)), Some(70));
        assert_eq!(index.best_fit(&free, &gpus(4)), Some(5));
        assert_eq!(index.best_fit(&free, &gpus(9)), None);
        free[70] = gpus(8);
        index.moved(70, 3, 8);
        assert_eq!(index.best_fit(&free, &gpus(3)), Some(130));
        assert_eq!(index.entries(), vec![(5, 8), (9, 2), (70, 8), (130, 3)]);
    }

    #[test]
    fn with_cpu_asked_the_host_holding_fewest_such_pods_wins_within_a_bucket() {
        let mut index = FreeGpuIndex::default();
        let mut free = vec![Resources::ZERO; 4];
        free[1] = Resources { gpus: 4, cpu_milli: 8_000, memory_mib: 0 };
        free[2] = Resources { gpus: 4, cpu_milli: 2_000, memory_mib: 0 };
        free[3] = Resources { gpus: 4, cpu_milli: 500, memory_mib: 0 };
        for d in 1..4 {
            index.moved(d, 0, 4);
        }
        let pod = Resources { gpus: 1, cpu_milli: 1_000, memory_mib: 0 };
        // Host 3 lacks the CPU; host 2 holds two such pods, host 1 four.
        assert_eq!(index.best_fit(&free, &pod), Some(2));
    }
}
