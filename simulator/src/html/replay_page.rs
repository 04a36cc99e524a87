//! The HTML report of one replay: GPU utilisation and the queue over time, queueing-delay
//! CDFs per size class and per tenant, fragmentation, pending reasons, and each queue's usage
//! against its quota.

use std::collections::BTreeMap;

use super::charts::{self, Axes, Bar, Line};
use super::{Page, number};
use crate::metrics::{SIZE_CLASSES, size_class};
use crate::report::{Report, human_duration};
use crate::timeline::REASON_KINDS;
use crate::{Fate, JobOutcome, ReplayResult};

/// Tenants drawn in the per-tenant CDF: the ones with the most jobs.
const MAX_TENANTS: usize = 8;
/// Queues drawn over time in the quota section: the ones with the largest quotas.
const MAX_QUEUES_OVER_TIME: usize = 6;
/// Queues in the usage bar chart.
const MAX_QUEUE_BARS: usize = 24;

/// The report of a replay as one HTML document. `report` must be the one built from `result`
/// (it brings the context and the summary; `result` the series).
pub fn replay_page(report: &Report, result: &ReplayResult) -> String {
    let ctx = &report.context;
    let mut page = Page::new(&format!("trainyard simulation: {} on {}", ctx.trace, ctx.cluster));
    page.paragraph(&format!(
        "Cluster {} ({} hosts, {} GPUs); trace {} ({}); policy {}.",
        ctx.cluster, ctx.cluster_hosts, ctx.cluster_gpus, ctx.trace, ctx.trace_format, ctx.policy
    ));
    summary(&mut page, report);
    over_time(&mut page, report, result);
    waits(&mut page, &result.outcomes);
    fragmentation(&mut page, result);
    reasons(&mut page, result);
    quotas(&mut page, report);
    failures(&mut page, report);
    page.finish()
}

fn summary(page: &mut Page, report: &Report) {
    let s = &report.summary;
    let d = &s.queueing_delay;
    page.heading("Summary");
    page.table(
        &["jobs", "finished", "unschedulable", "backfilled", "GPU utilisation", "makespan"],
        &[vec![
            s.jobs.to_string(),
            s.finished.to_string(),
            s.unschedulable.to_string(),
            s.backfilled.to_string(),
            format!("{:.1}%", s.gpu_utilisation * 100.0),
            human_duration(s.makespan_s as f64),
        ]],
    );
    page.table(
        &["queueing delay", "mean", "p50", "p95", "p99", "max"],
        &[
            vec![
                "all jobs".into(),
                human_duration(d.mean),
                human_duration(d.p50),
                human_duration(d.p95),
                human_duration(d.p99),
                human_duration(d.max),
            ],
            vec![
                "job completion time".into(),
                human_duration(s.jct.mean),
                human_duration(s.jct.p50),
                human_duration(s.jct.p95),
                human_duration(s.jct.p99),
                human_duration(s.jct.max),
            ],
        ],
    );
}

/// Hours since the first observation, the x of every time chart.
fn hours(t: u64, t0: u64) -> f64 {
    t.saturating_sub(t0) as f64 / 3600.0
}

const OVER_TIME: Axes<'static> = Axes { x: "hours since the first arrival", y: "" };

fn over_time(page: &mut Page, report: &Report, result: &ReplayResult) {
    page.heading("GPU utilisation and the queue over time");
    let series = &result.fragmentation.series;
    let total = report.context.cluster_gpus.max(1) as f64;
    let t0 = series.first().map_or(0, |p| p.t);
    let down: BTreeMap<u64, f64> =
        result.timeline.iter().flat_map(|t| t.series.iter().map(|p| (p.t, p.down_gpus))).collect();
    let busy: Vec<(f64, f64)> = series
        .iter()
        .map(|p| {
            let down = down.get(&p.t).copied().unwrap_or(0.0);
            (hours(p.t, t0), ((total - p.free_gpus - down) / total * 100.0).max(0.0))
        })
        .collect();
    let axes = Axes { y: "% of the cluster's GPUs", ..OVER_TIME };
    let mut lines = vec![Line { name: "GPUs busy".into(), points: busy, dashed: false }];
    if down.values().any(|d| *d > 0.0) {
        let points = series.iter().map(|p| (hours(p.t, t0), down.get(&p.t).copied().unwrap_or(0.0) / total * 100.0));
        lines.push(Line { name: "GPUs down (failed hosts)".into(), points: points.collect(), dashed: true });
    }
    page.chart(
        charts::lines("GPU utilisation", &axes, &lines),
        "Time-weighted mean of the GPUs gangs held in each interval, as a share of all the cluster's GPUs.",
    );
    let Some(timeline) = &result.timeline else { return };
    let points = |f: fn(&crate::timeline::TimelinePoint) -> f64| -> Vec<(f64, f64)> {
        timeline.series.iter().map(|p| (hours(p.t, t0), f(p))).collect()
    };
    let lines = [
        Line { name: "waiting".into(), points: points(|p| p.pending_gangs), dashed: false },
        Line { name: "running".into(), points: points(|p| p.running_gangs), dashed: false },
    ];
    page.chart(
        charts::lines("Gangs waiting and running", &Axes { y: "gangs", ..OVER_TIME }, &lines),
        "Time-weighted mean number of gangs in the queue and running in each interval.",
    );
}

/// Queueing delay of every finished job, grouped by `key`, in the order of first appearance.
fn delays_by(outcomes: &[JobOutcome], key: impl Fn(&JobOutcome) -> String) -> Vec<(String, Vec<u64>)> {
    let mut groups: Vec<(String, Vec<u64>)> = Vec::new();
    for o in outcomes {
        if let Fate::Finished { start, .. } = o.fate {
            let k = key(o);
            let wait = start.saturating_sub(o.job.submit);
            match groups.iter_mut().find(|(g, _)| *g == k) {
                Some((_, v)) => v.push(wait),
                None => groups.push((k, vec![wait])),
            }
        }
    }
    groups
}

fn waits(page: &mut Page, outcomes: &[JobOutcome]) {
    page.heading("Queueing delay");
    let axes = Axes { x: "queueing delay (log scale)", y: "share of jobs" };
    let mut classes = delays_by(outcomes, |o| size_class(o.job.gpus()).to_string());
    classes.sort_by_key(|(c, _)| SIZE_CLASSES.iter().position(|k| k == c));
    let named: Vec<(String, Vec<u64>)> =
        classes.into_iter().map(|(c, v)| (if c == "cpu-only" { c } else { format!("{c} GPUs") }, v)).collect();
    page.chart(
        charts::cdfs("Queueing delay by job size", &axes, &named),
        "Share of finished jobs that waited at most the time on the x axis, per size class (jobs in brackets); \
         jobs that did not wait count at one second.",
    );
    let mut tenants = delays_by(outcomes, |o| o.job.tenant.clone());
    if tenants.len() < 2 {
        page.paragraph("One tenant only: no per-tenant comparison.");
        return;
    }
    let count = tenants.len();
    tenants.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(&b.0)));
    tenants.truncate(MAX_TENANTS);
    let caption = if count > MAX_TENANTS {
        format!("The {MAX_TENANTS} tenants with the most finished jobs, of {count}.")
    } else {
        "Every tenant.".to_string()
    };
    page.chart(charts::cdfs("Queueing delay by tenant", &axes, &tenants), &caption);
}

fn fragmentation(page: &mut Page, result: &ReplayResult) {
    page.heading("Fragmentation");
    let f = &result.fragmentation;
    page.paragraph(&format!(
        "Mean {} free GPUs, of which {} (share {:.1}%) could not take a pod of the smallest waiting gang; \
         a gang waited with its GPUs free {:.1}% of the time.",
        number(f.mean_free_gpus, 1),
        number(f.mean_fragmented_gpus, 1),
        f.fragmented_share_of_free * 100.0,
        f.blocked_with_free_gpus_share * 100.0
    ));
    let t0 = f.series.first().map_or(0, |p| p.t);
    let lines = [
        Line {
            name: "free".into(),
            points: f.series.iter().map(|p| (hours(p.t, t0), p.free_gpus)).collect(),
            dashed: false,
        },
        Line {
            name: "fragmented (free, but no waiting pod fits)".into(),
            points: f.series.iter().map(|p| (hours(p.t, t0), p.fragmented_gpus)).collect(),
            dashed: false,
        },
    ];
    page.chart(
        charts::lines("Free and fragmented GPUs", &Axes { y: "GPUs", ..OVER_TIME }, &lines),
        "Time-weighted means per interval.",
    );
}

fn reasons(page: &mut Page, result: &ReplayResult) {
    let Some(timeline) = &result.timeline else { return };
    page.heading("Why gangs waited");
    let t0 = result.fragmentation.series.first().map_or(0, |p| p.t);
    let layers: Vec<Line> = REASON_KINDS
        .iter()
        .filter(|kind| timeline.series.iter().any(|p| p.reasons.contains_key(**kind)))
        .map(|kind| Line {
            name: kind.to_string(),
            points: timeline
                .series
                .iter()
                .map(|p| (hours(p.t, t0), p.reasons.get(*kind).copied().unwrap_or(0.0)))
                .collect(),
            dashed: false,
        })
        .collect();
    if layers.is_empty() {
        page.paragraph("No gang ever waited.");
        return;
    }
    page.chart(
        charts::stacked("Waiting gangs by pending reason", &Axes { y: "gangs", ..OVER_TIME }, &layers),
        &format!(
            "Each waiting gang's reason, sampled every {} of simulated time and held until the next sample.",
            human_duration(timeline.reason_step_s as f64)
        ),
    );
}

fn quotas(page: &mut Page, report: &Report) {
    page.heading("Queues against their quotas");
    let Some(usage) = &report.quota_usage else {
        page.paragraph("No queue has a finite GPU quota.");
        return;
    };
    // Queues with a quota first (largest first), then the busiest: what a reader compares.
    let mut queues: Vec<&crate::quota_usage::QueueUsage> = usage.queues.iter().collect();
    queues.sort_by(|a, b| {
        b.quota_gpus
            .unwrap_or(0)
            .cmp(&a.quota_gpus.unwrap_or(0))
            .then_with(|| b.mean_used_gpus.total_cmp(&a.mean_used_gpus))
            .then_with(|| a.name.cmp(&b.name))
    });
    let bars: Vec<Bar> = queues
        .iter()
        .take(MAX_QUEUE_BARS)
        .map(|q| Bar {
            label: q.name.clone(),
            value: q.mean_used_gpus,
            ci95: None,
            limit: q.quota_gpus.map(|g| g as f64),
        })
        .collect();
    let shown = if queues.len() > MAX_QUEUE_BARS {
        format!(" The {MAX_QUEUE_BARS} of {} leaf queues with the largest quotas, then the busiest.", queues.len())
    } else {
        String::new()
    };
    page.chart(
        charts::bars("Mean GPUs used per queue", "GPUs", &bars),
        &format!(
            "Bars: time-weighted mean GPUs each leaf queue's gangs held; red marks: the queue's GPU quota \
             (above it, the queue borrowed).{shown}"
        ),
    );
    queues.truncate(MAX_QUEUES_OVER_TIME);
    let t0 = usage.queues.iter().filter_map(|q| q.series.first()).map(|p| p.t).min().unwrap_or(0);
    let lines: Vec<Line> = queues
        .iter()
        .map(|q| Line {
            name: match q.quota_gpus {
                Some(g) => format!("{} (quota {g})", q.name),
                None => q.name.clone(),
            },
            points: q.series.iter().map(|p| (hours(p.t, t0), p.used_gpus)).collect(),
            dashed: false,
        })
        .collect();
    page.chart(
        charts::lines("GPUs used over time, largest quotas", &Axes { y: "GPUs", ..OVER_TIME }, &lines),
        &format!("The {} queues with the largest quotas.", queues.len()),
    );
    page.table(
        &["queue", "quota GPUs", "mean used", "max used", "mean borrowed", "time borrowing", "time at quota"],
        &usage
            .queues
            .iter()
            .map(|q| {
                vec![
                    q.name.clone(),
                    q.quota_gpus.map_or_else(|| "-".into(), |g| g.to_string()),
                    number(q.mean_used_gpus, 1),
                    q.max_used_gpus.to_string(),
                    number(q.mean_borrowed_gpus, 1),
                    format!("{:.1}%", q.borrowing_share * 100.0),
                    format!("{:.1}%", q.at_quota_share * 100.0),
                ]
            })
            .collect::<Vec<_>>(),
    );
}

fn failures(page: &mut Page, report: &Report) {
    let Some(f) = &report.failures else { return };
    page.heading("Host failures");
    page.paragraph(&format!(
        "Each host failed after a mean {} and was repaired after a mean {} (exponential draws); gangs \
         checkpointed every {} and spent {} restoring after a crash.",
        human_duration(f.mtbf_s as f64),
        human_duration(f.repair_s as f64),
        human_duration(f.checkpoint_interval_s as f64),
        human_duration(f.restart_s as f64)
    ));
    page.table(
        &["host failures", "gangs crashed", "resumed in place", "replaced", "requeued", "work lost", "GPUs down"],
        &[vec![
            f.host_failures.to_string(),
            f.gang_interruptions.to_string(),
            f.resumed_in_place.to_string(),
            f.replaced.to_string(),
            f.requeued.to_string(),
            format!("{} GPU-h", number(f.lost_gpu_hours, 1)),
            format!("{} GPU-h ({:.2}%)", number(f.down_gpu_hours, 1), f.down_share * 100.0),
        ]],
    );
}
