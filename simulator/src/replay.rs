//! The discrete-event loop: trace arrivals and gang completions on a virtual clock,
//! with one engine cycle after each batch of simultaneous events.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use trainyard_policies::{Cycle, Engine, Explanation, GangId, GangRequest, PolicyConfig, Submitted};
use trainyard_topology::Cluster;

use crate::fragmentation::{Fragmentation, Sample, Tracker};
use crate::quota_usage::{QuotaUsage, UNLIMITED, UsageTracker};
use crate::slowdown::{Slowdown, SlowdownTable};
use crate::{Fate, JobOutcome, SimError, TraceJob};

/// Where runtime estimates come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EstimateSource {
    /// The trace's own estimate; the policy's default when the trace has none.
    #[default]
    Trace,
    /// The job's actual runtime: users who know exactly how long their jobs run.
    Actual,
}

/// Replay knobs beyond the cluster, the policy and the trace.
#[derive(Clone, Debug, Default)]
pub struct ReplayOptions {
    /// Where runtime estimates come from.
    pub estimates: EstimateSource,
    /// How much longer gangs run when spread over wider domains. Only actual runtimes grow;
    /// estimates (what backfill plans with) stay what the users said.
    pub slowdown: Slowdown,
    /// Jobs (by index) whose explanation is recorded whenever it changes while they wait.
    pub explain: Vec<usize>,
}

/// How far a replay has got, for progress bars.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Jobs that have finished or were found unschedulable.
    pub done: u64,
    /// Jobs in the trace.
    pub total: u64,
    /// Virtual time, seconds.
    pub now: u64,
}

/// Everything a replay produced.
#[derive(Clone, Debug)]
pub struct ReplayResult {
    /// One outcome per input job, in input order.
    pub outcomes: Vec<JobOutcome>,
    /// Arrivals plus completions processed.
    pub events: u64,
    /// Scheduling cycles run.
    pub cycles: u64,
    /// For each job, the first reservation it was given (EASY backfill), if any.
    pub first_reservation: Vec<Option<u64>>,
    /// For each job, how many times it was preempted.
    pub preemptions: Vec<u32>,
    /// `(time, job index, explanation)` for the jobs named in [`ReplayOptions::explain`],
    /// each time their explanation changed.
    pub explanations: Vec<(u64, usize, Explanation)>,
    /// The slowdown factors in force, resolved against the cluster.
    pub slowdown: SlowdownTable,
    /// Free GPUs the smallest waiting gang could not use, over the replay.
    pub fragmentation: Fragmentation,
    /// Per leaf queue, GPUs used and borrowed and gangs waiting, over the replay; `None`
    /// when no queue has a finite GPU quota.
    pub quota_usage: Option<QuotaUsage>,
    /// How close each pod's GPUs sat in its host; `None` when no host has a GPU layout.
    pub gpu_locality: Option<crate::gpu_locality::GpuLocality>,
    /// The PCIe roots each pod's DRA devices span, when pods carried claims.
    pub device_locality: Option<crate::device_locality::DeviceLocality>,
}

impl ReplayResult {
    /// Jobs that started later than the first reservation they were given.
    pub fn late_reserved_starts(&self) -> Vec<(usize, u64, u64)> {
        self.outcomes
            .iter()
            .zip(&self.first_reservation)
            .enumerate()
            .filter_map(|(i, (o, r))| match (&o.fate, r) {
                (Fate::Finished { start, .. }, Some(at)) if start > at => Some((i, *at, *start)),
                _ => None,
            })
            .collect()
    }
}

/// How often the progress callback is called, in processed events.
const PROGRESS_EVERY: u64 = 4096;

/// Replays `jobs` (sorted by submit time) through a fresh engine. Fails before anything runs
/// when `options.slowdown` names a level the cluster does not have.
pub fn replay(
    cluster: Cluster,
    policy: PolicyConfig,
    jobs: &[TraceJob],
    options: ReplayOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<ReplayResult, SimError> {
    replay_observed(cluster, policy, jobs, options, progress, &mut |_, _| {})
}

/// [`replay`], calling `observer` after every scheduling cycle with the engine as the cycle
/// left it (its admissions already committed) and the cycle itself. The observer sees the
/// engine read-only, so observing cannot change what the replay does.
pub fn replay_observed(
    cluster: Cluster,
    policy: PolicyConfig,
    jobs: &[TraceJob],
    options: ReplayOptions,
    progress: &mut dyn FnMut(Progress),
    observer: &mut dyn FnMut(&Engine, &Cycle),
) -> Result<ReplayResult, SimError> {
    let slowdown = options.slowdown.resolve(cluster.topology())?;
    let mut tracker = Tracker::new();
    let mut engine = Engine::try_new(cluster, policy)?;
    // Undeclared queues never have a quota, so the declared ones decide whether to track.
    let quotas = engine.quotas();
    let track_usage = quotas.leaves().any(|q| quotas.subtree_quota(q).gpus != UNLIMITED);
    let mut usage = UsageTracker::new();
    // Waiting gangs per queue index, kept up to date from the events: the engine does not
    // say which queue a pending gang is in, the trace does.
    let mut pending_by_queue: Vec<u64> = Vec::new();
    let mut queue_of: Vec<usize> = vec![usize::MAX; jobs.len()];
    let mut fates: Vec<Option<Fate>> = vec![None; jobs.len()];
    // Start time, backfilled, and the depth of the domain the gang spans.
    let mut starts: Vec<(u64, bool, u8)> = vec![(0, false, 0); jobs.len()];
    let mut first_reservation: Vec<Option<u64>> = vec![None; jobs.len()];
    // (end, job, generation): a preempted job's pending completion goes stale when its
    // generation moves on.
    let mut completions: BinaryHeap<Reverse<(u64, usize, u32)>> = BinaryHeap::new();
    let mut generation: Vec<u32> = vec![0; jobs.len()];
    // Work a job has saved at checkpoints before being preempted, in seconds of its runtime.
    let mut saved_work: Vec<u64> = vec![0; jobs.len()];
    let mut preemptions: Vec<u32> = vec![0; jobs.len()];
    let mut explanations = Vec::new();
    let mut gpu_locality = crate::gpu_locality::GpuLocality::default();
    let mut device_locality = crate::device_locality::DeviceLocality::default();
    let mut last_explained: std::collections::BTreeMap<usize, String> = std::collections::BTreeMap::new();
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&i| (jobs[i].submit, jobs[i].line, i));
    let mut next_arrival = 0;
    let (mut events, mut cycles, mut done) = (0u64, 0u64, 0u64);
    let total = jobs.len() as u64;
    loop {
        let arrival_at = order.get(next_arrival).map(|&i| jobs[i].submit);
        while completions.peek().is_some_and(|Reverse((_, i, g))| generation[*i] != *g) {
            completions.pop();
        }
        let completion_at = completions.peek().map(|Reverse((t, _, _))| *t);
        let now = match (arrival_at, completion_at) {
            (None, None) => break,
            (Some(a), None) => a,
            (None, Some(c)) => c,
            (Some(a), Some(c)) => a.min(c),
        };
        while let Some(&Reverse((t, i, g))) = completions.peek() {
            if t != now {
                break;
            }
            completions.pop();
            if generation[i] != g {
                continue;
            }
            engine.finish(GangId(i as u64), now)?;
            let (start, backfilled, depth) = starts[i];
            let span_level = slowdown.at_depth(depth).level.clone();
            fates[i] = Some(Fate::Finished { start, end: now, backfilled, span_level });
            events += 1;
            done += 1;
        }
        while let Some(&i) = order.get(next_arrival) {
            let job = &jobs[i];
            if job.submit != now {
                break;
            }
            next_arrival += 1;
            events += 1;
            let runtime_estimate = match options.estimates {
                EstimateSource::Trace => job.runtime_estimate,
                EstimateSource::Actual => Some(job.runtime),
            };
            let request = GangRequest {
                id: GangId(i as u64),
                queue: job.tenant.clone(),
                priority: job.priority,
                submit: job.submit,
                shape: job.gang.clone(),
                runtime_estimate,
                hosts: Default::default(),
                order: 0,
            };
            match engine.submit(request)? {
                Submitted::Unschedulable(why) => {
                    fates[i] = Some(Fate::Unschedulable { reason: why.to_string() });
                    done += 1;
                }
                Submitted::Queued if track_usage => {
                    if let Some(q) = engine.quotas().find(&job.tenant) {
                        queue_of[i] = q.0;
                        if pending_by_queue.len() <= q.0 {
                            pending_by_queue.resize(q.0 + 1, 0);
                        }
                        pending_by_queue[q.0] += 1;
                    }
                }
                Submitted::Queued => {}
            }
        }
        let cycle = engine.schedule(now)?;
        cycles += 1;
        observer(&engine, &cycle);
        for p in &cycle.preempted {
            let i = p.victim.0 as usize;
            generation[i] += 1;
            preemptions[i] += 1;
            // What survived the last checkpoint, converted back from the slowed-down clock.
            let kept = p.ran_s - p.lost_s;
            let factor = slowdown.apply(1_000_000, starts[i].2) as f64 / 1_000_000.0;
            saved_work[i] = (saved_work[i] + (kept as f64 / factor) as u64).min(jobs[i].runtime);
            if let Some(n) = pending_by_queue.get_mut(queue_of[i]) {
                *n += 1;
            }
        }
        for admission in &cycle.admitted {
            let i = admission.id.0 as usize;
            if let Some(n) = pending_by_queue.get_mut(queue_of[i]) {
                *n = n.saturating_sub(1);
            }
            // A gang may start and be preempted again in the same cycle; it then runs nowhere.
            if engine.pending_status(admission.id).is_some() {
                continue;
            }
            // Whatever completion the gang still had queued is stale now.
            generation[i] += 1;
            if !admission.placement.gpus.is_empty() {
                gpu_locality.observe(engine.cluster(), &admission.placement);
            }
            if !admission.placement.devices.is_empty() {
                device_locality.observe(engine.cluster(), &admission.placement);
            }
            let depth = engine.cluster().topology().depth(admission.placement.domain);
            starts[i] = (now, admission.backfilled, depth);
            let runtime = slowdown.apply(jobs[i].runtime - saved_work[i], depth).max(1);
            completions.push(Reverse((now.saturating_add(runtime), i, generation[i])));
        }
        for &i in &options.explain {
            if let Some(x) = engine.explain(GangId(i as u64)) {
                let text = x.to_string();
                if last_explained.get(&i) != Some(&text) {
                    last_explained.insert(i, text);
                    explanations.push((now, i, x));
                }
            }
        }
        let smallest = if engine.pending_len() == 0 { None } else { engine.smallest_pending_gpu_gang() };
        tracker.observe(now, Sample::measure(engine.cluster(), smallest));
        if track_usage {
            debug_assert_eq!(pending_by_queue.iter().sum::<u64>(), engine.pending_len() as u64);
            usage.observe_tree(now, engine.quotas(), &pending_by_queue);
        }
        if let Some(r) = cycle.reservation {
            first_reservation[r.holder.0 as usize].get_or_insert(r.at);
        }
        if events % PROGRESS_EVERY < 2 {
            progress(Progress { done, total, now });
        }
        if completions.is_empty() && next_arrival == order.len() && engine.pending_len() > 0 {
            let first = engine.pending().next().expect("pending is not empty");
            let reason = engine.pending_status(first).map(|s| s.reason.to_string()).unwrap_or_default();
            return Err(SimError::Stuck { count: engine.pending_len(), first, reason });
        }
    }
    progress(Progress { done, total, now: completions.peek().map_or(0, |Reverse((t, _, _))| *t) });
    let outcomes = jobs
        .iter()
        .zip(fates)
        .map(|(job, fate)| JobOutcome {
            job: job.clone(),
            fate: fate.expect("every job either finished or was rejected"),
        })
        .collect();
    Ok(ReplayResult {
        outcomes,
        events,
        cycles,
        first_reservation,
        slowdown,
        fragmentation: tracker.finish(),
        quota_usage: usage.finish(),
        preemptions,
        explanations,
        gpu_locality: gpu_locality.if_any(),
        device_locality: device_locality.finish(engine.cluster()),
    })
}
