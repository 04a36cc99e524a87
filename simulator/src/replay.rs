//! The discrete-event loop: trace arrivals and gang completions on a virtual clock,
//! with one engine cycle after each batch of simultaneous events. A search's trials enter
//! only while it has a slot free ([`crate::searches`]).

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, VecDeque};

use trainyard_policies::{Cycle, Engine, Explanation, GangId, GangRequest, NodeLossAction, PolicyConfig, Submitted};
use trainyard_topology::Cluster;

use crate::failures::{Change, FailureModel, FailureSummary, Failures};
use crate::fragmentation::{Fragmentation, Sample, Tracker};
use crate::quota_usage::{QuotaUsage, UNLIMITED, UsageTracker};
use crate::runs::Runs;
use crate::searches::SearchSummary;
use crate::searches::gate::Gate;
use crate::slowdown::{Slowdown, SlowdownTable};
use crate::timeline::TimelineTracker;
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

/// How far past the last submission a replay may run by default, simulated seconds (10 years):
/// far beyond what a contended trace needs to drain, near enough that a replay which cannot
/// drain (failures faster than work, a queue that never empties) ends in seconds.
pub const DEFAULT_HORIZON_S: u64 = 10 * 365 * 86_400;

/// Replay knobs beyond the cluster, the policy and the trace.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// Where runtime estimates come from.
    pub estimates: EstimateSource,
    /// How much longer gangs run when spread over wider domains. Only actual runtimes grow;
    /// estimates (what backfill plans with) stay what the users said.
    pub slowdown: Slowdown,
    /// Jobs (by index) whose explanation is recorded whenever it changes while they wait.
    pub explain: Vec<usize>,
    /// Whether to keep the queue's [`crate::timeline::Timeline`] (for the HTML report).
    pub timeline: bool,
    /// Hosts fail and are repaired; gangs on them crash and restart from their checkpoint.
    pub failures: Option<FailureModel>,
    /// The replay stops with [`SimError::Horizon`] if work remains this many simulated seconds
    /// after the last submission.
    pub horizon_s: u64,
}

impl Default for ReplayOptions {
    fn default() -> ReplayOptions {
        ReplayOptions {
            estimates: EstimateSource::default(),
            slowdown: Slowdown::default(),
            explain: Vec::new(),
            timeline: false,
            failures: None,
            horizon_s: DEFAULT_HORIZON_S,
        }
    }
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
    /// What each hyperparameter search of the trace came to, in the order their first trials
    /// arrived; empty when the trace has none.
    pub searches: Vec<SearchSummary>,
    /// Per member cluster, when the cluster is a fleet.
    pub fleet: Option<crate::fleet::FleetUsage>,
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
    /// Gangs waiting and running and why they waited, over time, when asked for.
    pub timeline: Option<crate::timeline::Timeline>,
    /// What host failures cost, with a failure model.
    pub failures: Option<FailureSummary>,
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
/// when `options.slowdown` names a level the cluster does not have. Jobs handed over by value
/// move into the outcomes; borrowed ones are copied there.
pub fn replay<'a>(
    cluster: Cluster,
    policy: PolicyConfig,
    jobs: impl Into<Cow<'a, [TraceJob]>>,
    options: ReplayOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<ReplayResult, SimError> {
    replay_observed(cluster, policy, jobs, options, progress, &mut |_, _| {})
}

/// [`replay`], calling `observer` after every scheduling cycle with the engine as the cycle
/// left it (its admissions already committed) and the cycle itself. The observer sees the
/// engine read-only, so observing cannot change what the replay does.
pub fn replay_observed<'a>(
    cluster: Cluster,
    policy: PolicyConfig,
    jobs: impl Into<Cow<'a, [TraceJob]>>,
    options: ReplayOptions,
    progress: &mut dyn FnMut(Progress),
    observer: &mut dyn FnMut(&Engine, &Cycle),
) -> Result<ReplayResult, SimError> {
    /// Watches the cycles only.
    struct Cycles<'o>(&'o mut dyn FnMut(&Engine, &Cycle));
    impl Watch for Cycles<'_> {
        fn cycle(&mut self, engine: &Engine, cycle: &Cycle, _now: u64) {
            (self.0)(engine, cycle);
        }
    }
    replay_watched(cluster, policy, jobs, options, progress, &mut Cycles(observer))
}

/// What a caller inside the crate may watch a replay do. Every call sees the engine (if at
/// all) read-only, so watching cannot change what the replay does.
pub(crate) trait Watch {
    /// The jobs (by index) whose gangs were queued at `now`, after every arrival of that
    /// instant and before its cycle.
    fn arrived(&mut self, _engine: &Engine, _now: u64, _jobs: &[usize]) {}
    /// A job's gang ended at `end`, having last started at `start`.
    fn finished(&mut self, _job: usize, _start: u64, _end: u64) {}
    /// The cycle at `now`, with the engine as it left it.
    fn cycle(&mut self, _engine: &Engine, _cycle: &Cycle, _now: u64) {}
}

/// [`replay_observed`] with a [`Watch`].
pub(crate) fn replay_watched<'a>(
    cluster: Cluster,
    policy: PolicyConfig,
    jobs: impl Into<Cow<'a, [TraceJob]>>,
    options: ReplayOptions,
    progress: &mut dyn FnMut(Progress),
    watch: &mut dyn Watch,
) -> Result<ReplayResult, SimError> {
    let owned: Cow<'a, [TraceJob]> = jobs.into();
    let jobs: &[TraceJob] = &owned;
    let slowdown = options.slowdown.resolve(cluster.topology())?;
    let mut tracker = Tracker::new();
    let mut engine = Engine::try_new(cluster, policy)?;
    engine.ignore_changes();
    // Only a failure model asks which gangs run on a host.
    engine.file_gangs_by_host(options.failures.is_some());
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
    // A fleet's member cluster of each gang's last start (none on a single cluster).
    let fleet = crate::fleet::is_fleet(engine.cluster().topology());
    let mut placed_in: Vec<Option<u32>> = vec![None; if fleet { jobs.len() } else { 0 }];
    let mut first_reservation: Vec<Option<u64>> = vec![None; jobs.len()];
    let mut runs = Runs::new(jobs.len());
    let mut preemptions: Vec<u32> = vec![0; jobs.len()];
    let mut explanations = Vec::new();
    let mut gpu_locality = crate::gpu_locality::GpuLocality::default();
    let mut device_locality = crate::device_locality::DeviceLocality::default();
    let mut last_explained: std::collections::BTreeMap<usize, String> = std::collections::BTreeMap::new();
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&i| (jobs[i].submit, jobs[i].line, i));
    // Trials wait for a slot of their search; `released` holds those a completion of this
    // instant let in, to submit with the instant's arrivals.
    let mut gate = Gate::new(jobs, &order);
    let mut released: VecDeque<usize> = VecDeque::new();
    let first_submit = order.first().map_or(0, |&i| jobs[i].submit);
    let horizon = order.last().map_or(0, |&i| jobs[i].submit).saturating_add(options.horizon_s);
    if let Some(model) = &options.failures {
        model.check(&crate::failures::SettingNames::FLAGS).map_err(SimError::Failures)?;
    }
    let mut failures = options.failures.map(|m| Failures::new(m, engine.cluster(), first_submit));
    // Crashed gangs still holding their hosts (waiting for a repair, a spare or the grace).
    let mut crashed: BTreeSet<usize> = BTreeSet::new();
    // Times the engine must look at hosts lost past the grace.
    let mut wakes: BinaryHeap<Reverse<u64>> = BinaryHeap::new();
    // Failure events since a gang last arrived, started or ended: a replay whose pending gangs
    // can never start stops instead of following failures forever.
    let mut idle_changes: u64 = 0;
    let idle_limit = 1_000 + 10 * engine.cluster().topology().host_count() as u64;
    let mut last_now = first_submit;
    let mut timeline = options.timeline.then(|| {
        let first = order.first().map_or(0, |&i| jobs[i].submit);
        let last = order.last().map_or(0, |&i| jobs[i].submit);
        TimelineTracker::new(TimelineTracker::step_for_span(first, last))
    });
    let mut next_arrival = 0;
    // The jobs queued at the instant under way, for the watch.
    let mut queued_now: Vec<usize> = Vec::new();
    let (mut events, mut cycles, mut done) = (0u64, 0u64, 0u64);
    let total = jobs.len() as u64;
    loop {
        let arrival_at = order.get(next_arrival).map(|&i| jobs[i].submit);
        let completion_at = runs.next_end();
        let work_remains = next_arrival < order.len() || engine.pending_len() > 0 || engine.running_len() > 0;
        let failure_at = failures.as_ref().filter(|_| work_remains).and_then(Failures::next_at);
        let wake_at = wakes.peek().map(|Reverse(t)| *t);
        let Some(now) = [arrival_at, completion_at, failure_at, wake_at].into_iter().flatten().min() else { break };
        if now > horizon {
            let left = total - done;
            return Err(SimError::Horizon { horizon_s: options.horizon_s, at: horizon, left, total });
        }
        last_now = now;
        while wakes.peek().is_some_and(|Reverse(t)| *t <= now) {
            wakes.pop();
        }
        while let Some(i) = runs.pop_ended(now) {
            engine.finish(GangId(i as u64), now)?;
            let (start, backfilled, depth) = starts[i];
            watch.finished(i, start, now);
            let span_level = slowdown.at_depth(depth).level.clone();
            fates[i] = Some(Fate::Finished { start, end: now, backfilled, span_level });
            released.extend(gate.end(i, now));
            events += 1;
            done += 1;
            idle_changes = 0;
        }
        while let Some((host, change)) = failures.as_mut().and_then(|f| f.take_due(now)) {
            let f = failures.as_mut().expect("a change came from it");
            events += 1;
            idle_changes += 1;
            match change {
                Change::Fail => {
                    let mut victims: Vec<GangId> = engine.gangs_on(host).collect();
                    victims.sort_unstable();
                    engine.set_host_ready(host, false, now)?;
                    for id in victims {
                        let i = id.0 as usize;
                        if !crashed.insert(i) {
                            continue;
                        }
                        // The run stops computing now; what it saved at its last checkpoint stays.
                        let factor = slow_factor(&slowdown, starts[i].2);
                        let lost = runs.crash(i, now, f.model().checkpoint_interval_s, factor, jobs[i].runtime);
                        f.lost_gpu_s += u128::from(lost) * u128::from(jobs[i].gpus());
                        f.summary.gang_interruptions += 1;
                    }
                    let node_loss = engine.config().node_loss;
                    if node_loss.action != NodeLossAction::Wait {
                        wakes.push(Reverse(now.saturating_add(node_loss.grace_s)));
                    }
                }
                Change::Repair => {
                    engine.set_host_ready(host, true, now)?;
                    // Gangs that lost no other host run again where they were.
                    let back: Vec<usize> =
                        crashed.iter().copied().filter(|&i| engine.lost_hosts(GangId(i as u64)).is_empty()).collect();
                    for i in back {
                        crashed.remove(&i);
                        f.summary.resumed_in_place += 1;
                        let runtime = slowdown.apply(runs.work_left(i, jobs[i].runtime), starts[i].2).max(1);
                        runs.start(i, now, f.model().restart_s, runtime);
                    }
                }
            }
        }
        queued_now.clear();
        // Held trials a slot freed for first (they have waited longest), then the trace's
        // arrivals of this instant, of which a trial whose search is full is held.
        loop {
            let i = match released.pop_front() {
                Some(i) => i,
                None => match order.get(next_arrival) {
                    Some(&i) if jobs[i].submit == now => {
                        next_arrival += 1;
                        events += 1;
                        if !gate.arrive(i, now) {
                            continue;
                        }
                        i
                    }
                    _ => break,
                },
            };
            let job = &jobs[i];
            idle_changes = 0;
            let runtime_estimate = match options.estimates {
                EstimateSource::Trace => job.runtime_estimate,
                EstimateSource::Actual => Some(job.runtime),
            };
            let request = GangRequest {
                id: GangId(i as u64),
                queue: job.tenant.clone(),
                priority: job.priority,
                // A held trial's TrainJob is created when its search releases it.
                submit: now,
                shape: job.gang.clone(),
                runtime_estimate,
                hosts: Default::default(),
                order: 0,
            };
            match engine.submit(request)? {
                Submitted::Unschedulable(why) => {
                    fates[i] = Some(Fate::Unschedulable { reason: why.to_string() });
                    done += 1;
                    // Its search creates the next trial at once.
                    released.extend(gate.end(i, now));
                }
                Submitted::Queued if track_usage => {
                    queued_now.push(i);
                    if let Some(q) = engine.quotas().find(&job.tenant) {
                        queue_of[i] = q.0;
                        if pending_by_queue.len() <= q.0 {
                            pending_by_queue.resize(q.0 + 1, 0);
                        }
                        pending_by_queue[q.0] += 1;
                    }
                }
                Submitted::Queued => queued_now.push(i),
            }
        }
        if !queued_now.is_empty() {
            watch.arrived(&engine, now, &queued_now);
        }
        let cycle = engine.schedule(now)?;
        cycles += 1;
        watch.cycle(&engine, &cycle, now);
        for p in &cycle.preempted {
            let i = p.victim.0 as usize;
            preemptions[i] += 1;
            // What survived the last checkpoint, converted back from the slowed-down clock.
            runs.stop(i, p.ran_s - p.lost_s, slow_factor(&slowdown, starts[i].2), jobs[i].runtime);
            if let Some(n) = pending_by_queue.get_mut(queue_of[i]) {
                *n += 1;
            }
        }
        for loss in &cycle.requeued {
            let i = loss.gang.0 as usize;
            crashed.remove(&i);
            runs.drop_end(i);
            if let Some(f) = &mut failures {
                f.summary.requeued += 1;
            }
            if let Some(n) = pending_by_queue.get_mut(queue_of[i]) {
                *n += 1;
            }
        }
        for moved in &cycle.replaced {
            let i = moved.gang.0 as usize;
            // Running again once every lost host has a replacement.
            if !engine.lost_hosts(moved.gang).is_empty() || !crashed.remove(&i) {
                continue;
            }
            let f = failures.as_mut().expect("only failures lose hosts in a replay");
            f.summary.replaced += 1;
            let depth = engine.cluster().topology().depth(moved.placement.domain);
            starts[i].2 = depth;
            if fleet {
                placed_in[i] = crate::fleet::member_of(engine.cluster().topology(), moved.placement.domain);
            }
            let runtime = slowdown.apply(runs.work_left(i, jobs[i].runtime), depth).max(1);
            runs.start(i, now, f.model().restart_s, runtime);
        }
        if !cycle.admitted.is_empty() {
            idle_changes = 0;
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
            if !admission.placement.gpus.is_empty() {
                gpu_locality.observe(engine.cluster(), &admission.placement);
            }
            if !admission.placement.devices.is_empty() {
                device_locality.observe(engine.cluster(), &admission.placement);
            }
            let depth = engine.cluster().topology().depth(admission.placement.domain);
            starts[i] = (now, admission.backfilled, depth);
            if fleet {
                placed_in[i] = crate::fleet::member_of(engine.cluster().topology(), admission.placement.domain);
            }
            let restart = match &failures {
                Some(f) if runs.needs_restart(i) => f.model().restart_s,
                _ => 0,
            };
            // Whatever completion the gang still had queued goes stale.
            let runtime = slowdown.apply(runs.work_left(i, jobs[i].runtime), depth).max(1);
            runs.start(i, now, restart, runtime);
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
        if let Some(timeline) = &mut timeline {
            timeline.observe(now, &engine, failures.as_ref().map_or(0, Failures::down_gpus));
        }
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
        let repairs_may_help =
            !crashed.is_empty() || (failures.as_ref().is_some_and(Failures::any_down) && idle_changes < idle_limit);
        if !runs.any_queued() && next_arrival == order.len() && engine.pending_len() > 0 && !repairs_may_help {
            let first = engine.pending().next().expect("pending is not empty");
            let reason = engine.pending_status(first).map(|s| s.reason.to_string()).unwrap_or_default();
            return Err(SimError::Stuck { count: engine.pending_len(), first, reason });
        }
    }
    progress(Progress { done, total, now: runs.last_queued().unwrap_or(0) });
    let mut outcomes: Vec<JobOutcome> = owned
        .into_owned()
        .into_iter()
        .zip(fates)
        .map(|(job, fate)| JobOutcome { job, fate: fate.expect("every job either finished or was rejected") })
        .collect();
    gate.move_submits(&mut outcomes);
    let fleet = fleet.then(|| {
        let span = outcomes
            .iter()
            .filter_map(|o| match o.fate {
                Fate::Finished { end, .. } => Some(end),
                Fate::Unschedulable { .. } => None,
            })
            .max()
            .unwrap_or(first_submit)
            .saturating_sub(first_submit);
        crate::fleet::usage(engine.cluster().topology(), &outcomes, &placed_in, span)
    });
    Ok(ReplayResult {
        fleet,
        searches: gate.summaries(&outcomes),
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
        timeline: timeline.map(|t| t.finish()),
        failures: failures.map(|f| f.finish(first_submit, last_now, engine.cluster().total_capacity().gpus)),
    })
}

/// How much slower a gang spanning a domain at `depth` runs.
fn slow_factor(slowdown: &SlowdownTable, depth: u8) -> f64 {
    slowdown.apply(1_000_000, depth) as f64 / 1_000_000.0
}
