//! How good are start-time estimates? A normal replay, in which every k-th gang queued is asked
//! its estimate ([`Engine::eta`]) right after its submission, before the instant's cycle,
//! as a researcher would ask; the estimate is then held against the start the replay gives it.
//!
//! The estimates know what the engine would know at that moment: the trace's own runtime
//! estimates (`EstimateSource::Trace`: never the actual runtimes, unless the trace records
//! estimates) and, for gangs without one, their queue's mean (or the statistic asked for) over
//! the gangs that finished so far in the replay ([`RuntimeHistory`]). Asking runs on a copy of
//! the engine, so the replay is the one it would be without asking (a test holds every job's
//! fate equal).

use serde::Serialize;
use trainyard_policies::{Cycle, Engine, EtaAnswer, EtaLimits, GangId, PolicyConfig, RuntimeHistory, RuntimeStatistic};
use trainyard_topology::Cluster;

use crate::replay::{Watch, replay_watched};
use crate::{EstimateSource, ReplayOptions, ReplayResult, SimError, Slowdown, TraceJob};

/// Upper ends of the error bands, seconds (the last band is everything above).
pub const ERROR_BANDS_S: [u64; 4] = [60, 600, 3_600, 21_600];

/// Knobs of an accuracy run.
#[derive(Clone, Debug)]
pub struct EtaAccuracyOptions {
    /// Every `every`-th gang queued (in submission order, from the first) is asked; at least 1.
    pub every: usize,
    /// Runtimes kept per queue by the learned history.
    pub history_window: usize,
    /// Runtimes a queue needs before what it learnt stands in for a missing estimate.
    pub history_min_samples: usize,
    /// What the learned history estimates with.
    pub statistic: RuntimeStatistic,
    /// Where the engine's runtime estimates come from: the trace's own ([`EstimateSource::Trace`],
    /// the default, what a real engine knows). [`EstimateSource::Actual`] is an oracle for
    /// diagnosis only: every gang's estimate is its actual runtime (which also changes the
    /// replay, as backfill plans with them), so the error left is the method's own (gangs
    /// submitted after the question, later gangs backfilling, coarse steps, slowdown).
    pub estimates: EstimateSource,
    /// How far each estimate runs the engine forward.
    pub limits: EtaLimits,
    /// How much longer gangs run when spread wider (the replay's; estimates know nothing of it).
    pub slowdown: Slowdown,
}

impl Default for EtaAccuracyOptions {
    fn default() -> EtaAccuracyOptions {
        EtaAccuracyOptions {
            every: 20,
            history_window: trainyard_policies::DEFAULT_HISTORY_WINDOW,
            history_min_samples: trainyard_policies::DEFAULT_HISTORY_MIN_SAMPLES,
            statistic: RuntimeStatistic::default(),
            estimates: EstimateSource::Trace,
            limits: EtaLimits::default(),
            slowdown: Slowdown::none(),
        }
    }
}

/// One asked gang: what it was told and what happened.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EtaSample {
    /// The job, by index in the input.
    pub job: usize,
    /// When it was submitted (and asked), seconds.
    pub submit: u64,
    /// The answer.
    pub answer: EtaAnswer,
    /// When the replay first started it.
    pub actual: Option<u64>,
}

impl EtaSample {
    /// `(earliest, likely)` when the answer gave a start.
    pub fn estimate(&self) -> Option<(u64, u64)> {
        match &self.answer {
            EtaAnswer::Estimated(eta) => Some((eta.earliest, eta.likely)),
            EtaAnswer::Running { start } => Some((*start, *start)),
            _ => None,
        }
    }
}

/// How far estimates fell from the actual starts, over some of the asked gangs.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ErrorBands {
    /// Gangs with an estimate and an actual start.
    pub jobs: usize,
    /// Of those, started within `[earliest, likely]`.
    pub within_range: usize,
    /// Counts by |actual - likely|: at most 60 s, 10 min, 1 h, 6 h, and above.
    pub bands: [usize; 5],
    /// Started after the likely time / before it.
    pub later: usize,
    /// Started before the likely time.
    pub earlier: usize,
    /// Median |actual - likely|, seconds.
    pub median_abs_error_s: u64,
    /// 90th percentile of |actual - likely|, seconds.
    pub p90_abs_error_s: u64,
    /// Median actual wait (actual - submit), seconds: the scale the errors are read against.
    pub median_wait_s: u64,
}

impl ErrorBands {
    fn of<'a>(samples: impl Iterator<Item = &'a EtaSample>) -> ErrorBands {
        let mut b = ErrorBands::default();
        let (mut errors, mut waits) = (Vec::new(), Vec::new());
        for s in samples {
            let (Some((earliest, likely)), Some(actual)) = (s.estimate(), s.actual) else { continue };
            b.jobs += 1;
            b.within_range += usize::from(earliest <= actual && actual <= likely);
            b.later += usize::from(actual > likely);
            b.earlier += usize::from(actual < likely);
            let error = actual.abs_diff(likely);
            b.bands[ERROR_BANDS_S.iter().position(|&top| error <= top).unwrap_or(ERROR_BANDS_S.len())] += 1;
            errors.push(error);
            waits.push(actual.saturating_sub(s.submit));
        }
        b.median_abs_error_s = quantile(&mut errors, 0.5);
        b.p90_abs_error_s = quantile(&mut errors, 0.9);
        b.median_wait_s = quantile(&mut waits, 0.5);
        b
    }

    /// The share of gangs started within `[earliest, likely]`.
    pub fn within_range_share(&self) -> f64 {
        self.within_range as f64 / self.jobs.max(1) as f64
    }
}

/// Nearest-rank quantile (0 for none).
fn quantile(xs: &mut [u64], q: f64) -> u64 {
    if xs.is_empty() {
        return 0;
    }
    xs.sort_unstable();
    let rank = ((q * xs.len() as f64).ceil() as usize).clamp(1, xs.len());
    xs[rank - 1]
}

/// The accuracy of start-time estimates over one replay.
#[derive(Clone, Debug)]
pub struct EtaAccuracy {
    /// The policy's name.
    pub policy: String,
    /// What the learned history estimated with.
    pub statistic: RuntimeStatistic,
    /// Where the runtime estimates came from.
    pub estimates: EstimateSource,
    /// Every asked gang.
    pub samples: Vec<EtaSample>,
    /// Over every asked gang with an estimate.
    pub all: ErrorBands,
    /// Over those that actually waited (started after their submission): the ones a
    /// researcher asks about.
    pub waited: ErrorBands,
    /// Asked gangs answered otherwise: beyond the horizon, stalled, unschedulable, unknown.
    pub unanswered: usize,
    /// The replay itself, as it would be without asking.
    pub replay: ReplayResult,
}

/// Replays `jobs` (sorted by submit time) on `cluster` under `policy`, asking every
/// `options.every`-th queued gang its start-time estimate (see the module documentation).
pub fn eta_accuracy(
    cluster: Cluster,
    policy: PolicyConfig,
    jobs: &[TraceJob],
    options: &EtaAccuracyOptions,
) -> Result<EtaAccuracy, SimError> {
    let name = policy.name.clone();
    let mut asker = Asker {
        jobs,
        every: options.every.max(1),
        queued: 0,
        limits: options.limits,
        history: RuntimeHistory::new(options.history_window, options.history_min_samples)
            .with_statistic(options.statistic),
        sample_of: vec![None; jobs.len()],
        samples: Vec::new(),
    };
    // The trace's estimates only (unless the oracle is asked for): actual runtimes are what
    // the estimates are measured against.
    let replay_options =
        ReplayOptions { estimates: options.estimates, slowdown: options.slowdown.clone(), ..ReplayOptions::default() };
    let replay = replay_watched(cluster, policy, jobs, replay_options, &mut |_| {}, &mut asker)?;
    let samples = asker.samples;
    let unanswered = samples.iter().filter(|s| s.estimate().is_none()).count();
    let all = ErrorBands::of(samples.iter());
    let waited = ErrorBands::of(samples.iter().filter(|s| s.actual.is_some_and(|a| a > s.submit)));
    let (statistic, estimates) = (options.statistic, options.estimates);
    Ok(EtaAccuracy { policy: name, statistic, estimates, samples, all, waited, unanswered, replay })
}

/// The watch that asks: it learns runtimes as gangs finish, asks the sampled gangs as they
/// arrive, and notes when they first start.
struct Asker<'j> {
    jobs: &'j [TraceJob],
    every: usize,
    /// Gangs queued so far.
    queued: usize,
    limits: EtaLimits,
    history: RuntimeHistory,
    /// Per job, its sample's index.
    sample_of: Vec<Option<usize>>,
    samples: Vec<EtaSample>,
}

impl Watch for Asker<'_> {
    fn arrived(&mut self, engine: &Engine, now: u64, jobs: &[usize]) {
        for &i in jobs {
            self.queued += 1;
            if !(self.queued - 1).is_multiple_of(self.every) {
                continue;
            }
            let answer = engine.eta_within(GangId(i as u64), now, Some(&self.history), self.limits);
            self.sample_of[i] = Some(self.samples.len());
            self.samples.push(EtaSample { job: i, submit: now, answer, actual: None });
        }
    }

    fn finished(&mut self, job: usize, start: u64, end: u64) {
        self.history.record(&self.jobs[job].tenant, end.saturating_sub(start));
    }

    fn cycle(&mut self, _engine: &Engine, cycle: &Cycle, now: u64) {
        for admission in &cycle.admitted {
            if let Some(s) = self.sample_of.get(admission.id.0 as usize).copied().flatten() {
                self.samples[s].actual.get_or_insert(now);
            }
        }
    }
}

impl EtaAccuracy {
    /// A Markdown table: one row for every asked gang with an estimate, one for those that
    /// waited.
    pub fn render_table(&self) -> String {
        render_table(&[self])
    }
}

/// A Markdown table of several accuracy runs (one per policy, say), two rows each.
pub fn render_table(runs: &[&EtaAccuracy]) -> String {
    let mut out = String::from(
        "| policy, learned runtimes | gangs | asked | in [earliest, likely] | <=60 s | <=10 min | <=1 h | <=6 h | >6 h | later / earlier | median abs error | p90 abs error | median wait |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for run in runs {
        for (which, b) in [("all asked", &run.all), ("that waited", &run.waited)] {
            let pct = |n: usize| format!("{:.1}%", 100.0 * n as f64 / b.jobs.max(1) as f64);
            let bands: Vec<String> = b.bands.iter().map(|&n| pct(n)).collect();
            let statistic = match (run.estimates, run.statistic) {
                (EstimateSource::Actual, _) => "actual runtimes (oracle)",
                (EstimateSource::Trace, RuntimeStatistic::Median) => "median",
                (EstimateSource::Trace, RuntimeStatistic::Mean) => "mean",
            };
            out.push_str(&format!(
                "| {}, {statistic} | {which} | {} | {} | {} | {} / {} | {} | {} | {} |\n",
                run.policy,
                b.jobs,
                pct(b.within_range),
                bands.join(" | "),
                pct(b.later),
                pct(b.earlier),
                duration(b.median_abs_error_s),
                duration(b.p90_abs_error_s),
                duration(b.median_wait_s),
            ));
        }
    }
    if runs.iter().any(|r| r.unanswered > 0) {
        let counts: Vec<String> = runs.iter().map(|r| format!("{} {}", r.policy, r.unanswered)).collect();
        out.push_str(&format!(
            "\nasked gangs without an estimate (beyond the horizon, stalled): {}\n",
            counts.join(", ")
        ));
    }
    out
}

/// Seconds as the largest whole unit that reads well.
fn duration(s: u64) -> String {
    match s {
        0..120 => format!("{s} s"),
        120..7_200 => format!("{:.0} min", s as f64 / 60.0),
        _ => format!("{:.1} h", s as f64 / 3_600.0),
    }
}

#[cfg(test)]
mod tests;
