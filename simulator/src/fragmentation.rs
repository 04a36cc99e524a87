//! Fragmentation over virtual time: free GPUs that the smallest waiting gang cannot use.
//!
//! After every scheduling cycle the replay takes a [`Sample`]: with the smallest pending gang
//! that asks for GPUs, the fragmented GPUs are the free GPUs on hosts where not even one of its
//! pods fits. The state holds until the next cycle, so the [`Tracker`] weights each sample by
//! the time to the next one. A bounded time series is kept alongside: buckets of equal width
//! that double (merging neighbours) whenever the replay outgrows [`MAX_POINTS`] of them, which
//! needs no knowledge of the replay's length and gives the same points for the same samples.

use serde::{Deserialize, Serialize};
use trainyard_topology::{Cluster, DomainId, GangShape};

pub use crate::series::MAX_POINTS;
use crate::series::Series;

/// The fragmentation state right after one scheduling cycle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// Free GPUs on hosts that cannot take one pod of the smallest waiting gang (0 if none waits).
    pub fragmented_gpus: u64,
    /// Free GPUs in the whole cluster.
    pub free_gpus: u64,
    /// Total GPUs of the smallest waiting gang, if a gang asking for GPUs waits.
    pub smallest_waiting_gpus: Option<u64>,
}

impl Sample {
    /// Measures `cluster` against `smallest`, the smallest pending gang asking for GPUs.
    ///
    /// Walks the domain tree and skips subtrees without a free GPU, so a busy cluster (the
    /// case where gangs wait) costs far less than a scan of every host.
    pub fn measure(cluster: &Cluster, smallest: Option<&GangShape>) -> Sample {
        let free_gpus = cluster.total_free().gpus;
        let Some(gang) = smallest else {
            return Sample { fragmented_gpus: 0, free_gpus, smallest_waiting_gpus: None };
        };
        let topo = cluster.topology();
        let mut fragmented_gpus = 0u64;
        let mut stack = vec![DomainId::ROOT];
        while let Some(d) = stack.pop() {
            let free = cluster.free(d);
            if free.gpus == 0 {
                continue;
            }
            if topo.as_host(d).is_some() {
                if free.fit_count(&gang.largest_pod()) == 0 {
                    fragmented_gpus += free.gpus;
                }
            } else {
                stack.extend(topo.children(d).iter().map(|&c| DomainId(c)));
            }
        }
        Sample { fragmented_gpus, free_gpus, smallest_waiting_gpus: Some(gang.total().gpus) }
    }

    /// A gang waits although the cluster has at least as many free GPUs as it needs.
    pub fn blocked_with_free_gpus(&self) -> bool {
        self.smallest_waiting_gpus.is_some_and(|g| g <= self.free_gpus)
    }
}

/// One point of the fragmentation time series: means over `[t, t + duration_s)`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Start of the bucket, seconds of virtual time.
    pub t: u64,
    /// Length of the bucket that the replay covered, seconds.
    pub duration_s: u64,
    /// Time-weighted mean of fragmented GPUs in the bucket, rounded to 3 decimals.
    pub fragmented_gpus: f64,
    /// Time-weighted mean of free GPUs in the bucket, rounded to 3 decimals.
    pub free_gpus: f64,
}

/// Fragmentation of a whole replay, time-weighted from the first cycle to the last.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Fragmentation {
    /// Seconds from the first scheduling cycle to the last.
    pub observed_s: u64,
    /// Time-weighted mean of fragmented GPUs, rounded to 3 decimals.
    pub mean_fragmented_gpus: f64,
    /// Time-weighted mean of free GPUs, rounded to 3 decimals.
    pub mean_free_gpus: f64,
    /// Fragmented GPU-seconds over free GPU-seconds, rounded to 6 decimals (0 without free GPUs).
    pub fragmented_share_of_free: f64,
    /// Most fragmented GPUs after any cycle.
    pub max_fragmented_gpus: u64,
    /// Share of the observed time with a gang asking for GPUs waiting, rounded to 6 decimals.
    pub waiting_share: f64,
    /// Share of the observed time with a gang waiting although the cluster had at least its
    /// GPUs free (fragmentation, quota, a reservation or strict FIFO kept it out), 6 decimals.
    pub blocked_with_free_gpus_share: f64,
    /// At most [`MAX_POINTS`] buckets of equal width covering the observed time, in time order.
    pub series: Vec<Point>,
}

/// Integrals of one bucket, or of the whole replay.
#[derive(Clone, Copy, Debug, Default)]
struct Integral {
    seconds: u64,
    fragmented: u128,
    free: u128,
}

impl crate::series::Bucket for Integral {
    fn merge(&mut self, other: &Integral) {
        Integral::merge(self, other);
    }
}

impl Integral {
    fn add(&mut self, seconds: u64, sample: &Sample) {
        self.seconds += seconds;
        self.fragmented += u128::from(seconds) * u128::from(sample.fragmented_gpus);
        self.free += u128::from(seconds) * u128::from(sample.free_gpus);
    }

    fn merge(&mut self, other: &Integral) {
        self.seconds += other.seconds;
        self.fragmented += other.fragmented;
        self.free += other.free;
    }

    fn mean(total: u128, seconds: u64, decimals: i32) -> f64 {
        if seconds == 0 { 0.0 } else { round_to(total as f64 / seconds as f64, decimals) }
    }
}

/// Accumulates samples taken at increasing times into a [`Fragmentation`].
#[derive(Clone, Debug, Default)]
pub struct Tracker {
    start: Option<u64>,
    last: Option<(u64, Sample)>,
    total: Integral,
    waiting_s: u64,
    blocked_s: u64,
    max_fragmented: u64,
    series: Series<Integral>,
}

impl Tracker {
    /// An empty tracker.
    pub fn new() -> Tracker {
        Tracker::default()
    }

    /// Records the state after the cycle at `now`; it holds until the next call. Times must
    /// not decrease; an earlier time is treated as `now` equal to the previous one.
    pub fn observe(&mut self, now: u64, sample: Sample) {
        let now = self.last.map_or(now, |(then, _)| now.max(then));
        match self.last {
            Some((then, previous)) => self.hold(then, now, &previous),
            None => self.start = Some(now),
        }
        self.max_fragmented = self.max_fragmented.max(sample.fragmented_gpus);
        self.last = Some((now, sample));
    }

    /// Adds `sample` over `[from, to)`.
    fn hold(&mut self, from: u64, to: u64, sample: &Sample) {
        let seconds = to - from;
        if seconds == 0 {
            return;
        }
        self.total.add(seconds, sample);
        if sample.smallest_waiting_gpus.is_some() {
            self.waiting_s += seconds;
        }
        if sample.blocked_with_free_gpus() {
            self.blocked_s += seconds;
        }
        self.series.spread(from, to, |bucket, seconds| bucket.add(seconds, sample));
    }

    /// The statistics of everything observed.
    pub fn finish(&self) -> Fragmentation {
        if self.start.is_none() {
            return Fragmentation::default();
        }
        let total = &self.total;
        let share = |part: u64| if total.seconds == 0 { 0.0 } else { round_to(part as f64 / total.seconds as f64, 6) };
        let series = self
            .series
            .buckets
            .iter()
            .enumerate()
            .map(|(i, b)| Point {
                t: self.series.time_of(i),
                duration_s: b.seconds,
                fragmented_gpus: Integral::mean(b.fragmented, b.seconds, 3),
                free_gpus: Integral::mean(b.free, b.seconds, 3),
            })
            .collect();
        Fragmentation {
            observed_s: total.seconds,
            mean_fragmented_gpus: Integral::mean(total.fragmented, total.seconds, 3),
            mean_free_gpus: Integral::mean(total.free, total.seconds, 3),
            fragmented_share_of_free: if total.free == 0 {
                0.0
            } else {
                round_to(total.fragmented as f64 / total.free as f64, 6)
            },
            max_fragmented_gpus: self.max_fragmented,
            waiting_share: share(self.waiting_s),
            blocked_with_free_gpus_share: share(self.blocked_s),
            series,
        }
    }
}

/// Rounds `x` to `decimals` decimal places (for readable, stable JSON).
fn round_to(x: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (x * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use trainyard_topology::{HostId, Resources, TopologyRequest};

    use super::*;

    /// Two racks of two hosts, 8 GPUs and 8 CPUs each.
    fn cluster() -> Cluster {
        let yaml = "name: t\nlevels: [rack, host]\ngenerate:\n  counts: [2, 2]\n  node: {gpus: 8, cpus: 8}\n";
        Cluster::from_yaml(yaml, "t.yaml").unwrap()
    }

    fn shape(pods: u32, pod: Resources) -> GangShape {
        GangShape::single(pods, pod, TopologyRequest::Unconstrained)
    }

    fn sample(fragmented: u64, free: u64, smallest: Option<u64>) -> Sample {
        Sample { fragmented_gpus: fragmented, free_gpus: free, smallest_waiting_gpus: smallest }
    }

    #[test]
    fn fragmented_gpus_are_free_gpus_on_hosts_that_take_no_pod() {
        let mut c = cluster();
        let cpu = |gpus: u64, cores: u64| Resources { gpus, cpu_milli: cores * 1000, memory_mib: 0 };
        // Host 0: 2 GPUs free. Host 1: 5 GPUs free but no CPU. Host 2: full. Host 3: empty.
        c.allocate(HostId(0), cpu(6, 1)).unwrap();
        c.allocate(HostId(1), cpu(3, 8)).unwrap();
        c.allocate(HostId(2), cpu(8, 0)).unwrap();
        let four = shape(2, cpu(4, 1));
        let s = Sample::measure(&c, Some(&four));
        assert_eq!(s, sample(2 + 5, 15, Some(8)));
        assert!(s.blocked_with_free_gpus());
        // A 2-GPU pod fits host 0 but still not host 1, which has no CPU left.
        assert_eq!(Sample::measure(&c, Some(&shape(1, cpu(2, 1)))).fragmented_gpus, 5);
        // Nothing waits: nothing is fragmented.
        assert_eq!(Sample::measure(&c, None), sample(0, 15, None));
        // A gang bigger than what is free is waiting, but not "with free GPUs"; its 8-GPU pods
        // still fit the empty host 3.
        let big = Sample::measure(&c, Some(&shape(2, cpu(8, 1))));
        assert_eq!(big, sample(2 + 5, 15, Some(16)));
        assert!(!big.blocked_with_free_gpus());
    }

    #[test]
    fn time_weighted_statistics_by_hand() {
        let mut t = Tracker::new();
        t.observe(10, sample(8, 8, Some(4))); // holds 20 s
        t.observe(30, sample(0, 8, Some(2))); // holds 70 s
        t.observe(100, sample(0, 26, None)); // holds 50 s
        t.observe(150, sample(3, 32, Some(40))); // last: no duration, but counts for the max
        let f = t.finish();
        assert_eq!(f.observed_s, 140);
        // 8 x 20 = 160 fragmented GPU-s over 140 s; free: 160 + 560 + 1300 = 2020.
        assert_eq!(f.mean_fragmented_gpus, 1.143);
        assert_eq!(f.mean_free_gpus, 14.429);
        assert_eq!(f.fragmented_share_of_free, 0.079208);
        assert_eq!(f.max_fragmented_gpus, 8);
        assert_eq!(f.waiting_share, 0.642857);
        assert_eq!(f.blocked_with_free_gpus_share, 0.642857);
        // 140 s at one-second buckets is 140 points, each a plain sample.
        assert_eq!(f.series.len(), 140);
        assert_eq!((f.series[0].t, f.series[0].duration_s, f.series[0].fragmented_gpus), (10, 1, 8.0));
        assert_eq!((f.series[20].t, f.series[20].fragmented_gpus, f.series[139].free_gpus), (30, 0.0, 26.0));
    }

    #[test]
    fn an_empty_or_instant_replay_is_all_zero() {
        assert_eq!(Tracker::new().finish(), Fragmentation::default());
        let mut t = Tracker::new();
        t.observe(5, sample(4, 4, Some(8)));
        let f = t.finish();
        assert_eq!((f.observed_s, f.mean_fragmented_gpus, f.max_fragmented_gpus), (0, 0.0, 4));
        assert!(f.series.is_empty());
    }

    #[test]
    fn the_series_is_bounded_and_keeps_the_integral() {
        let mut t = Tracker::new();
        let mut now = 1000;
        let mut fragmented_s = 0u128;
        for i in 0..5000u64 {
            let s = sample(i % 7, 10 + i % 3, Some(1));
            let hold = 1 + i % 13;
            fragmented_s += u128::from(hold) * u128::from(s.fragmented_gpus);
            t.observe(now, s);
            now += hold;
        }
        t.observe(now, sample(0, 0, None));
        let f = t.finish();
        assert!(f.series.len() <= MAX_POINTS && f.series.len() > MAX_POINTS / 2, "{}", f.series.len());
        assert_eq!(f.series[0].t, 1000);
        let width = f.series[1].t - f.series[0].t;
        assert!(width.is_power_of_two());
        for pair in f.series.windows(2) {
            assert_eq!(pair[1].t - pair[0].t, width);
            assert_eq!(pair[0].duration_s, width, "only the last bucket is partial");
        }
        let covered: u64 = f.series.iter().map(|p| p.duration_s).sum();
        assert_eq!(covered, f.observed_s);
        assert_eq!(f.observed_s, now - 1000);
        // Bucket means are rounded to 3 decimals, so the re-summed integral is close, not exact.
        let resummed: f64 = f.series.iter().map(|p| p.fragmented_gpus * p.duration_s as f64).sum();
        assert!((resummed - fragmented_s as f64).abs() < 0.001 * f.series.len() as f64 * width as f64);
        assert_eq!(f.mean_fragmented_gpus, round_to(fragmented_s as f64 / f.observed_s as f64, 3));
        // The same samples give the same series.
        let mut again = Tracker::new();
        let mut now = 1000;
        for i in 0..5000u64 {
            again.observe(now, sample(i % 7, 10 + i % 3, Some(1)));
            now += 1 + i % 13;
        }
        again.observe(now, sample(0, 0, None));
        assert_eq!(again.finish(), f);
    }

    #[test]
    fn one_long_gap_spreads_over_many_buckets() {
        let mut t = Tracker::new();
        t.observe(0, sample(2, 4, Some(8)));
        t.observe(1_000_000, sample(0, 4, None));
        let f = t.finish();
        assert!(f.series.len() <= MAX_POINTS);
        assert!(f.series.iter().all(|p| p.fragmented_gpus == 2.0));
        assert_eq!(f.series.iter().map(|p| p.duration_s).sum::<u64>(), 1_000_000);
        assert_eq!((f.mean_fragmented_gpus, f.waiting_share, f.blocked_with_free_gpus_share), (2.0, 1.0, 0.0));
    }
}
