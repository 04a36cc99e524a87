//! What the queue looked like over a replay, for the HTML report: gangs waiting and running,
//! GPUs down, and how many waiting gangs each kind of pending reason held, time-weighted in
//! the bounded buckets of [`crate::series`].
//!
//! Counts come free after every cycle; reasons cost one look per waiting gang, so they are
//! sampled at most once per [`Timeline::reason_step_s`] of virtual time and held until the next
//! sample. Taking a timeline reads the engine and changes nothing it decides.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use trainyard_policies::{Engine, PendingReason};

use crate::series::{Bucket, Series};

/// The pending-reason kinds a timeline counts, in the order charts stack them.
pub const REASON_KINDS: [&str; 10] = [
    "quota",
    "capacity",
    "topology",
    "reservation",
    "queued behind",
    "devices",
    "TPU slices",
    "backoff",
    "node lost",
    "not yet looked at",
];

/// The kind of a pending reason, one of [`REASON_KINDS`].
pub fn reason_kind(reason: &PendingReason) -> &'static str {
    match reason {
        PendingReason::Quota { .. } => "quota",
        PendingReason::Capacity { .. } => "capacity",
        PendingReason::Topology { .. } | PendingReason::BadSlice { .. } => "topology",
        PendingReason::Reservation { .. } => "reservation",
        PendingReason::QueuedBehind { .. } => "queued behind",
        PendingReason::Devices { .. } => "devices",
        PendingReason::TpuSlices { .. } => "TPU slices",
        PendingReason::Backoff { .. } => "backoff",
        PendingReason::NodeLost { .. } => "node lost",
        PendingReason::NotYetScheduled => "not yet looked at",
    }
}

/// One bucket of the timeline: time-weighted means over `[t, t + duration_s)`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimelinePoint {
    /// Start of the bucket, seconds of virtual time.
    pub t: u64,
    /// Seconds of the bucket the replay covered.
    pub duration_s: u64,
    /// Gangs waiting, mean.
    pub pending_gangs: f64,
    /// Gangs running, mean.
    pub running_gangs: f64,
    /// GPUs on hosts that were down (failed and not yet repaired), mean.
    pub down_gpus: f64,
    /// Waiting gangs per reason kind (only kinds seen), mean.
    pub reasons: BTreeMap<String, f64>,
}

/// A whole replay's timeline.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// Virtual seconds between two samples of the pending reasons.
    pub reason_step_s: u64,
    /// At most [`crate::series::MAX_POINTS`] buckets, in time order.
    pub series: Vec<TimelinePoint>,
}

/// What holds from one cycle to the next.
#[derive(Clone, Debug, Default)]
struct State {
    pending: u64,
    running: u64,
    down_gpus: u64,
    reasons: [u64; REASON_KINDS.len()],
}

/// Integrals of one bucket.
#[derive(Clone, Debug, Default)]
struct Integral {
    seconds: u64,
    pending: u128,
    running: u128,
    down_gpus: u128,
    reasons: [u128; REASON_KINDS.len()],
}

impl Bucket for Integral {
    fn merge(&mut self, other: &Integral) {
        self.seconds += other.seconds;
        self.pending += other.pending;
        self.running += other.running;
        self.down_gpus += other.down_gpus;
        for (a, b) in self.reasons.iter_mut().zip(&other.reasons) {
            *a += b;
        }
    }
}

impl Integral {
    fn add(&mut self, seconds: u64, state: &State) {
        let s = u128::from(seconds);
        self.seconds += seconds;
        self.pending += s * u128::from(state.pending);
        self.running += s * u128::from(state.running);
        self.down_gpus += s * u128::from(state.down_gpus);
        for (a, b) in self.reasons.iter_mut().zip(&state.reasons) {
            *a += s * u128::from(*b);
        }
    }
}

/// Builds a [`Timeline`] from the engine after each cycle.
#[derive(Clone, Debug)]
pub struct TimelineTracker {
    reason_step_s: u64,
    next_reasons: u64,
    last: Option<(u64, State)>,
    series: Series<Integral>,
}

impl TimelineTracker {
    /// A tracker sampling reasons every `reason_step_s` seconds (at least 1).
    pub fn new(reason_step_s: u64) -> TimelineTracker {
        TimelineTracker { reason_step_s: reason_step_s.max(1), next_reasons: 0, last: None, series: Series::default() }
    }

    /// A reason step giving about 400 samples over the arrivals of a trace whose submissions
    /// span `first..=last` seconds (at least a minute apart).
    pub fn step_for_span(first: u64, last: u64) -> u64 {
        (last.saturating_sub(first) / 400).max(60)
    }

    /// Records the engine as the cycle at `now` left it, with `down_gpus` GPUs down.
    pub fn observe(&mut self, now: u64, engine: &Engine, down_gpus: u64) {
        let now = self.last.as_ref().map_or(now, |(then, _)| now.max(*then));
        let mut state = State {
            pending: engine.pending_len() as u64,
            running: engine.running_len() as u64,
            down_gpus,
            reasons: self.last.as_ref().map_or([0; REASON_KINDS.len()], |(_, s)| s.reasons),
        };
        if now >= self.next_reasons || state.pending == 0 {
            state.reasons = [0; REASON_KINDS.len()];
            for id in engine.pending() {
                if let Some(status) = engine.pending_status(id) {
                    let kind = reason_kind(&status.reason);
                    let i = REASON_KINDS.iter().position(|k| *k == kind).expect("every kind is listed");
                    state.reasons[i] += 1;
                }
            }
            if now >= self.next_reasons {
                self.next_reasons = now.saturating_add(self.reason_step_s);
            }
        }
        if let Some((then, previous)) = self.last.take() {
            self.series.spread(then, now.max(then), |bucket, seconds| bucket.add(seconds, &previous));
        }
        self.last = Some((now, state));
    }

    /// The timeline of everything observed.
    pub fn finish(&self) -> Timeline {
        let mean = |total: u128, seconds: u64| {
            if seconds == 0 { 0.0 } else { (total as f64 / seconds as f64 * 1000.0).round() / 1000.0 }
        };
        let series = self
            .series
            .buckets
            .iter()
            .enumerate()
            .map(|(i, b)| TimelinePoint {
                t: self.series.time_of(i),
                duration_s: b.seconds,
                pending_gangs: mean(b.pending, b.seconds),
                running_gangs: mean(b.running, b.seconds),
                down_gpus: mean(b.down_gpus, b.seconds),
                reasons: REASON_KINDS
                    .iter()
                    .zip(&b.reasons)
                    .filter(|(_, total)| **total > 0)
                    .map(|(kind, total)| (kind.to_string(), mean(*total, b.seconds)))
                    .collect(),
            })
            .collect();
        Timeline { reason_step_s: self.reason_step_s, series }
    }
}

#[cfg(test)]
mod tests {
    use trainyard_policies::{GangId, GangRequest, PolicyConfig};
    use trainyard_topology::{Cluster, GangShape, Resources, TopologyRequest};

    use super::*;

    fn engine() -> Engine {
        let yaml = "name: t\nlevels: [host]\ngenerate:\n  counts: [2]\n  node: {gpus: 8, cpus: 64}\n";
        let cluster = Cluster::from_yaml(yaml, "t.yaml").unwrap();
        Engine::try_new(cluster, PolicyConfig::builtin("fifo").unwrap()).unwrap()
    }

    fn gang(id: u64, pods: u32) -> GangRequest {
        let pod = Resources { gpus: 8, cpu_milli: 1000, memory_mib: 0 };
        GangRequest {
            id: GangId(id),
            queue: "default".into(),
            priority: 0,
            submit: 0,
            shape: GangShape::single(pods, pod, TopologyRequest::Unconstrained),
            runtime_estimate: None,
            hosts: Default::default(),
            order: 0,
        }
    }

    #[test]
    fn counts_and_reasons_are_time_weighted() {
        let mut e = engine();
        let mut t = TimelineTracker::new(1);
        e.submit(gang(1, 2)).unwrap();
        e.submit(gang(2, 1)).unwrap();
        e.schedule(0).unwrap();
        // Gang 1 runs on both hosts; gang 2 waits for capacity.
        t.observe(0, &e, 0);
        e.finish(GangId(1), 30).unwrap();
        e.schedule(30).unwrap();
        t.observe(30, &e, 8);
        t.observe(40, &e, 8);
        let timeline = t.finish();
        let total_s: u64 = timeline.series.iter().map(|p| p.duration_s).sum();
        assert_eq!(total_s, 40);
        let weighted = |f: &dyn Fn(&TimelinePoint) -> f64| {
            timeline.series.iter().map(|p| f(p) * p.duration_s as f64).sum::<f64>() / 40.0
        };
        // Pending: 1 gang for 30 s, none for 10 s. Running: 1 for 40 s. Down: 8 GPUs for 10 s.
        assert!((weighted(&|p| p.pending_gangs) - 0.75).abs() < 1e-9);
        assert!((weighted(&|p| p.running_gangs) - 1.0).abs() < 1e-9);
        assert!((weighted(&|p| p.down_gpus) - 2.0).abs() < 1e-9);
        let capacity = weighted(&|p| p.reasons.get("capacity").copied().unwrap_or(0.0));
        assert!((capacity - 0.75).abs() < 1e-9, "capacity reasons {capacity}");
    }

    #[test]
    fn reasons_are_sampled_at_most_once_per_step() {
        let mut e = engine();
        let mut t = TimelineTracker::new(100);
        e.submit(gang(1, 2)).unwrap();
        e.schedule(0).unwrap();
        t.observe(0, &e, 0);
        // A gang arriving at 10 s waits, but the next reason sample is due at 100 s.
        e.submit(GangRequest { submit: 10, ..gang(2, 1) }).unwrap();
        e.schedule(10).unwrap();
        t.observe(10, &e, 0);
        t.observe(100, &e, 0);
        t.observe(110, &e, 0);
        let timeline = t.finish();
        let reason_s: f64 = timeline.series.iter().map(|p| p.reasons.values().sum::<f64>() * p.duration_s as f64).sum();
        // Counted from 100 s to 110 s only.
        assert!((reason_s - 10.0).abs() < 1e-9, "{reason_s}");
        assert_eq!(timeline.reason_step_s, 100);
    }
}
