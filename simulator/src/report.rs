//! The replay report: what was replayed, the [`Summary`] metrics, every unschedulable job,
//! the placement section, the tenants' fairness and their quota usage, as versioned JSON or
//! as a plain-text table.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize, Serializer};

use crate::failures::FailureSummary;
use crate::fairness::TenantFairness;
use crate::job::{Fate, JobOutcome};
use crate::metrics::{Distribution, GroupStats, Summary};
use crate::placement::PlacementSummary;
use crate::quota_usage::QuotaUsage;
use crate::searches::SearchSummary;

/// Version of the JSON layout written by [`Report::to_json`].
pub const REPORT_VERSION: u32 = 1;

/// At most this many unschedulable jobs are listed in [`Report::render_table`].
const TABLE_UNSCHEDULABLE_LIMIT: usize = 10;

/// What was replayed, and how: the header of a report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportContext {
    /// Cluster name (or the path of its description).
    pub cluster: String,
    /// GPUs in the whole cluster.
    pub cluster_gpus: u64,
    /// Hosts in the whole cluster.
    pub cluster_hosts: u64,
    /// Trace name or path.
    pub trace: String,
    /// Trace format the file was read as.
    pub trace_format: String,
    /// Scheduling policy of the replay.
    pub policy: String,
    /// Rows of the trace that were skipped rather than replayed.
    pub skipped_rows: u64,
}

/// One job that could never run, with the engine's reason.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnschedulableJob {
    /// Job identifier from the trace.
    pub id: String,
    /// Tenant the job was submitted to.
    pub tenant: String,
    /// Total GPUs the gang asked for.
    pub gpus: u64,
    /// Why it could not run.
    pub reason: String,
}

/// The full result of a replay. Serialises (see [`Report::to_json`]) with a
/// top-level `"report_version"` key.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// What was replayed.
    pub context: ReportContext,
    /// The metrics.
    pub summary: Summary,
    /// Every unschedulable job, in input order.
    pub unschedulable: Vec<UnschedulableJob>,
    /// Slowdown, span levels and fragmentation; absent unless added by
    /// [`Report::with_placement`] (and then after `unschedulable` in the JSON).
    pub placement: Option<PlacementSummary>,
    /// Fairness across tenants; present when the outcomes name at least two tenants (and
    /// then after `placement` in the JSON).
    pub tenants: Option<TenantFairness>,
    /// Per leaf queue, GPUs used and borrowed over time; absent unless added by
    /// [`Report::with_quota_usage`], and then the very last section of the JSON.
    pub quota_usage: Option<QuotaUsage>,
    /// What host failures cost; absent without a failure model (and then after `quota_usage`).
    pub failures: Option<FailureSummary>,
    /// The hyperparameter searches of the trace; absent from the JSON and the table when there
    /// are none (so reports of other traces stay as they were), else the JSON's last section.
    pub searches: Vec<SearchSummary>,
    /// Per member cluster of a fleet; absent on a single cluster.
    pub fleet: Option<crate::fleet::FleetUsage>,
}

/// The JSON layout of a [`Report`].
#[derive(Serialize)]
struct VersionedReport<'a> {
    report_version: u32,
    context: &'a ReportContext,
    summary: &'a Summary,
    unschedulable: &'a [UnschedulableJob],
    #[serde(skip_serializing_if = "Option::is_none")]
    placement: Option<&'a PlacementSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tenants: Option<&'a TenantFairness>,
    #[serde(skip_serializing_if = "Option::is_none")]
    quota_usage: Option<&'a QuotaUsage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failures: Option<&'a FailureSummary>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    searches: &'a [SearchSummary],
    #[serde(skip_serializing_if = "Option::is_none")]
    fleet: Option<&'a crate::fleet::FleetUsage>,
}

impl Serialize for Report {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        VersionedReport {
            report_version: REPORT_VERSION,
            context: &self.context,
            summary: &self.summary,
            unschedulable: &self.unschedulable,
            placement: self.placement.as_ref(),
            tenants: self.tenants.as_ref(),
            quota_usage: self.quota_usage.as_ref(),
            failures: self.failures.as_ref(),
            searches: &self.searches,
            fleet: self.fleet.as_ref(),
        }
        .serialize(serializer)
    }
}

impl Report {
    /// Builds the report of a replay on a cluster with `cluster_gpus` GPUs.
    pub fn new(context: ReportContext, outcomes: &[JobOutcome], cluster_gpus: u64) -> Self {
        let unschedulable = outcomes
            .iter()
            .filter_map(|o| match &o.fate {
                Fate::Unschedulable { reason } => Some(UnschedulableJob {
                    id: o.job.id.clone(),
                    tenant: o.job.tenant.clone(),
                    gpus: o.job.gpus(),
                    reason: reason.clone(),
                }),
                Fate::Finished { .. } => None,
            })
            .collect();
        let tenants = TenantFairness::when_shared(outcomes, cluster_gpus);
        let summary = Summary::new(outcomes, cluster_gpus);
        Report {
            context,
            summary,
            unschedulable,
            placement: None,
            tenants,
            quota_usage: None,
            failures: None,
            searches: Vec::new(),
            fleet: None,
        }
    }

    /// The same report with a placement section.
    pub fn with_placement(mut self, placement: PlacementSummary) -> Self {
        self.placement = Some(placement);
        self
    }

    /// The same report with a quota usage section, when there is one (a replay has one when
    /// some queue has a finite GPU quota: [`crate::ReplayResult::quota_usage`]).
    pub fn with_quota_usage(mut self, usage: Option<QuotaUsage>) -> Self {
        self.quota_usage = usage;
        self
    }

    /// The same report with what failures cost, when the replay had a failure model.
    pub fn with_failures(mut self, failures: Option<FailureSummary>) -> Self {
        self.failures = failures;
        self
    }

    /// The same report with the fleet's clusters, when the replay ran on a fleet.
    pub fn with_fleet(mut self, fleet: Option<crate::fleet::FleetUsage>) -> Self {
        self.fleet = fleet;
        self
    }

    /// The same report with the replay's searches ([`crate::ReplayResult::searches`]).
    pub fn with_searches(mut self, searches: Vec<SearchSummary>) -> Self {
        self.searches = searches;
        self
    }

    /// Pretty-printed JSON with a top-level `"report_version": 1` and a
    /// trailing newline. The same report always gives the same bytes.
    pub fn to_json(&self) -> String {
        // Only string-keyed structs and sequences: serialisation cannot fail.
        let mut json = serde_json::to_string_pretty(self).expect("a report always serialises to JSON");
        json.push('\n');
        json
    }

    /// A plain-text report for a terminal (no colours): a header block, the
    /// queueing-delay and job-completion-time tables, the placement, tenants and quota usage
    /// sections when there are, and the first unschedulable jobs.
    pub fn render_table(&self) -> String {
        self.render(TABLE_UNSCHEDULABLE_LIMIT)
    }

    /// The same report with every unschedulable job listed (`simulate -o wide`).
    pub fn render_wide(&self) -> String {
        self.render(usize::MAX)
    }

    /// The plain-text report, listing at most `unschedulable_rows` unschedulable jobs.
    fn render(&self, unschedulable_rows: usize) -> String {
        let ctx = &self.context;
        let s = &self.summary;
        let mut out = String::new();

        out.push_str("trainyard replay report\n\n");
        let backfilled_share = if s.finished == 0 { 0.0 } else { 100.0 * s.backfilled as f64 / s.finished as f64 };
        let header = [
            ("cluster", format!("{} ({} GPUs, {} hosts)", clean(&ctx.cluster), ctx.cluster_gpus, ctx.cluster_hosts)),
            ("trace", format!("{} ({})", clean(&ctx.trace), clean(&ctx.trace_format))),
            ("policy", clean(&ctx.policy)),
            ("jobs", format!("{} ({} finished, {} unschedulable)", s.jobs, s.finished, s.unschedulable)),
            ("skipped rows", ctx.skipped_rows.to_string()),
            ("backfilled", format!("{} ({backfilled_share:.1}% of finished)", s.backfilled)),
            ("makespan", format!("{} s ({})", s.makespan_s, human_duration_long(s.makespan_s))),
            ("GPU utilisation", format!("{:.2}%", s.gpu_utilisation * 100.0)),
            ("GPU-hours", format!("{:.3}", s.gpu_hours)),
        ];
        let key_width = header.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        for (key, value) in &header {
            let _ = writeln!(out, "{key:<key_width$}  {value}");
        }

        out.push_str("\nQueueing delay (submit to start, finished jobs)\n");
        out.push_str(&self.distribution_table(|g| &g.queueing_delay, &s.queueing_delay));
        out.push_str("\nJob completion time (submit to end, finished jobs)\n");
        out.push_str(&self.distribution_table(|g| &g.jct, &s.jct));
        if let Some(placement) = &self.placement {
            out.push_str(&placement_section(placement));
        }
        if let Some(tenants) = &self.tenants {
            out.push_str(&crate::fairness::render_table(tenants));
        }
        if let Some(failures) = &self.failures {
            out.push('\n');
            out.push_str(&failures.render());
        }
        if let Some(usage) = &self.quota_usage {
            out.push_str(&crate::quota_usage::render_table(usage));
        }

        if let Some(fleet) = &self.fleet {
            out.push('\n');
            out.push_str(&crate::fleet::table(fleet));
        }
        if !self.searches.is_empty() {
            out.push_str(&crate::searches::render_table(&self.searches));
        }

        if !self.unschedulable.is_empty() {
            let _ = writeln!(out, "\nUnschedulable jobs ({})", self.unschedulable.len());
            let rows: Vec<Vec<String>> = self
                .unschedulable
                .iter()
                .take(unschedulable_rows)
                .map(|u| vec![clean(&u.id), clean(&u.tenant), u.gpus.to_string(), clean(&u.reason)])
                .collect();
            out.push_str(&render_rows(&["id", "tenant", "GPUs", "reason"], &[false, false, true, false], &rows));
            let more = self.unschedulable.len().saturating_sub(unschedulable_rows);
            if more > 0 {
                let _ = writeln!(out, "  … and {more} more");
            }
        }
        out
    }

    /// One distribution table: `all`, each size class, each tenant.
    fn distribution_table(&self, pick: impl Fn(&GroupStats) -> &Distribution, all: &Distribution) -> String {
        let s = &self.summary;
        let mut rows = vec![distribution_row("all".to_string(), all)];
        rows.extend(s.by_size_class.iter().map(|g| distribution_row(format!("size {}", g.name), pick(g))));
        rows.extend(s.by_tenant.iter().map(|g| distribution_row(format!("tenant {}", clean(&g.name)), pick(g))));
        rows.extend(s.by_gang_shape.iter().map(|g| distribution_row(format!("gangs: {}", g.name), pick(g))));
        let header = ["group", "jobs", "mean", "p50", "p95", "p99", "p99.9", "max"];
        let mut right = [true; 8];
        right[0] = false;
        render_rows(&header, &right, &rows)
    }
}

/// The placement section: one row per span level, then slowdown and fragmentation lines.
fn placement_section(p: &PlacementSummary) -> String {
    let mut out = String::from("\nPlacement (finished gangs by the smallest domain holding all their pods)\n");
    let rows: Vec<Vec<String>> = p
        .levels
        .iter()
        .map(|l| {
            vec![
                clean(&l.level),
                factor(l.factor),
                clean(&l.from),
                l.gangs.to_string(),
                percent(l.gang_share),
                l.gpus.to_string(),
                percent(l.gpu_share),
            ]
        })
        .collect();
    let header = ["span", "slowdown", "from", "gangs", "share", "GPUs", "GPU share"];
    out.push_str(&render_rows(&header, &[false, true, false, true, true, true, true], &rows));
    let f = &p.fragmentation;
    let lines = [
        ("mean slowdown", format!("{:.3} (GPU-weighted {:.3})", p.mean_factor, p.gpu_weighted_mean_factor)),
        (
            "fragmented GPUs",
            format!(
                "mean {:.1} ({} of free GPUs), max {}",
                f.mean_fragmented_gpus,
                percent(f.fragmented_share_of_free),
                f.max_fragmented_gpus
            ),
        ),
        (
            "waiting gang",
            format!(
                "{} of the time; {} with its GPUs free",
                percent(f.waiting_share),
                percent(f.blocked_with_free_gpus_share)
            ),
        ),
    ];
    let key_width = lines.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (key, value) in &lines {
        let _ = writeln!(out, "  {key:<key_width$}  {value}");
    }
    if let Some(locality) = &p.gpu_locality {
        out.push_str(&locality.render());
    }
    if let Some(devices) = &p.device_locality {
        out.push_str(&devices.render());
    }
    out
}

/// A slowdown factor with two to six decimals: `1.00`, `1.05`, `1.0375`.
fn factor(x: f64) -> String {
    let text = format!("{x:.6}");
    let trimmed = text.trim_end_matches('0');
    let decimals = trimmed.split_once('.').map_or(0, |(_, d)| d.len());
    if decimals >= 2 { trimmed.to_string() } else { format!("{x:.2}") }
}

/// A share as a percentage with one decimal.
fn percent(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

/// Cells of one distribution row; `-` for statistics of an empty group.
fn distribution_row(label: String, d: &Distribution) -> Vec<String> {
    let mut row = vec![label, d.count.to_string()];
    for v in [d.mean, d.p50, d.p95, d.p99, d.p999, d.max] {
        row.push(if d.count == 0 { "-".to_string() } else { human_duration(v) });
    }
    row
}

/// Renders an indented table with a header, a rule and columns as wide as
/// their widest cell; `right[i]` right-aligns column `i`. Trailing blanks are
/// trimmed from every line.
pub(crate) fn render_rows(header: &[&str], right: &[bool], rows: &[Vec<String>]) -> String {
    let width = |s: &str| s.chars().count();
    let mut widths: Vec<usize> = header.iter().map(|h| width(h)).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(width(cell));
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| -> String {
        let mut l = String::from(" ");
        for ((cell, w), r) in cells.zip(&widths).zip(right) {
            let pad = " ".repeat(w - width(cell));
            l.push(' ');
            if *r {
                l.push_str(&pad);
                l.push_str(cell);
            } else {
                l.push_str(cell);
                l.push_str(&pad);
            }
            l.push(' ');
        }
        let mut l = l.trim_end().to_string();
        l.push('\n');
        l
    };
    let mut out = line(&mut header.iter().copied());
    let rule_width = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
    let _ = writeln!(out, "  {}", "-".repeat(rule_width));
    for row in rows {
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}

/// Control characters (a newline in a tenant name, an escape sequence in a
/// reason) would break the layout or the terminal: show them escaped.
pub(crate) fn clean(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

/// A duration in its two most significant units: `45s`, `1m 05s`, `1h 02m`,
/// `3d 04h`. Below a minute, fractional seconds keep one decimal (`2.5s`);
/// from a minute on, seconds are rounded to whole. Negative input is shown
/// as `0s`, non-finite input as `n/a`.
pub fn human_duration(secs: f64) -> String {
    if !secs.is_finite() {
        return "n/a".to_string();
    }
    let secs = if secs > 0.0 { secs } else { 0.0 };
    let tenths = (secs * 10.0).round();
    if tenths < 600.0 {
        return if tenths % 10.0 == 0.0 { format!("{}s", tenths / 10.0) } else { format!("{:.1}s", tenths / 10.0) };
    }
    // Saturates for absurdly large input, which is fine for display.
    let total = secs.round() as u64;
    let (d, h, m, s) = (total / 86_400, total / 3600 % 24, total / 60 % 60, total % 60);
    if d > 0 {
        format!("{d}d {h:02}h")
    } else if h > 0 {
        format!("{h}h {m:02}m")
    } else {
        format!("{m}m {s:02}s")
    }
}

/// A whole number of seconds in its three most significant units:
/// `12d 03h 14m`, `2h 01m 40s`, `1m 05s`, `45s`.
pub fn human_duration_long(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d}d {h:02}h {m:02}m")
    } else if h > 0 {
        format!("{h}h {m:02}m {s:02}s")
    } else if m > 0 {
        format!("{m}m {s:02}s")
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use trainyard_topology::Resources;

    use super::*;
    use crate::job::TraceJob;

    fn job(id: &str, tenant: &str, gpus: u64, submit: u64) -> TraceJob {
        TraceJob::recorded(id.to_string(), submit, 1, tenant.to_string(), (1, Resources::gpus(gpus)), 0)
    }

    fn outcomes() -> Vec<JobOutcome> {
        let done = |j, start, end, backfilled| JobOutcome {
            job: j,
            fate: Fate::Finished { start, end, backfilled, span_level: "host".to_string() },
        };
        let mut v = vec![
            done(job("j1", "vision", 8, 0), 0, 3600, false),
            done(job("j2", "a-very-long-tenant-name-for-speech", 1, 30), 75, 120, true),
            done(job("j3", "vision", 64, 100), 90_000, 400_000, false),
        ];
        for i in 0..12 {
            v.push(JobOutcome {
                job: job(&format!("big{i}"), "vision", 1024, 200 + i),
                fate: Fate::Unschedulable { reason: "needs 1024 GPUs, cluster has 128".to_string() },
            });
        }
        v
    }

    fn context() -> ReportContext {
        ReportContext {
            cluster: "dgx-a100".to_string(),
            cluster_gpus: 128,
            cluster_hosts: 16,
            trace: "traces/sample.csv".to_string(),
            trace_format: "trainyard-csv".to_string(),
            policy: "fifo-backfill".to_string(),
            skipped_rows: 2,
        }
    }

    fn report() -> Report {
        Report::new(context(), &outcomes(), 128)
    }

    #[test]
    fn unschedulable_jobs_are_listed_in_input_order() {
        let r = report();
        assert_eq!(r.unschedulable.len(), 12);
        assert_eq!(r.unschedulable[0].id, "big0");
        assert_eq!(r.unschedulable[11].id, "big11");
        assert_eq!(r.unschedulable[3].gpus, 1024);
        assert_eq!(r.unschedulable[3].reason, "needs 1024 GPUs, cluster has 128");
        assert_eq!(r.summary.unschedulable, 12);
    }

    #[test]
    fn json_is_deterministic_and_versioned() {
        let a = report().to_json();
        let b = report().to_json();
        assert_eq!(a, b);
        assert!(a.ends_with("}\n"));
        assert_eq!(serde_json::to_string_pretty(&report()).unwrap() + "\n", a);
        let v: serde_json::Value = serde_json::from_str(&a).unwrap();
        assert_eq!(v["report_version"], 1);
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 5);
        for key in ["report_version", "context", "summary", "unschedulable", "tenants"] {
            assert!(keys.contains(&key), "missing {key}");
        }
        assert!(a.find("\"report_version\"").unwrap() < a.find("\"context\"").unwrap());
        assert_eq!(v["context"]["skipped_rows"], 2);
        for key in ["makespan_s", "gpu_utilisation", "gpu_hours", "backfilled", "by_size_class", "by_tenant"] {
            assert!(v["summary"].get(key).is_some(), "missing summary.{key}");
        }
        assert!(v["summary"]["jct"].get("p99_9").is_some());
        assert_eq!(v["unschedulable"].as_array().unwrap().len(), 12);
        assert_eq!(v["unschedulable"][0]["id"], "big0");
        assert_eq!(v["summary"]["by_tenant"][0]["name"], "a-very-long-tenant-name-for-speech");
    }

    #[test]
    fn table_has_header_block_and_aligned_tables() {
        let t = report().render_table();
        for needle in [
            "dgx-a100 (128 GPUs, 16 hosts)",
            "traces/sample.csv (trainyard-csv)",
            "fifo-backfill",
            "15 (3 finished, 12 unschedulable)",
            "skipped rows     2",
            "backfilled       1 (33.3% of finished)",
            "makespan         400000 s (4d 15h 06m)",
            "GPU utilisation",
            "Queueing delay",
            "Job completion time",
            "tenant vision",
            "tenant a-very-long-tenant-name-for-speech",
            "size 9-64",
            "size 257+",
            "… and 2 more",
        ] {
            assert!(t.contains(needle), "missing {needle:?} in\n{t}");
        }
        assert!(!t.contains('\x1b'));
        // Every line of a distribution table has the same length as its header:
        // all columns are right-aligned after the first.
        let lines: Vec<&str> = t.lines().collect();
        let start = lines.iter().position(|l| l.starts_with("Queueing delay")).unwrap();
        let header = lines[start + 1];
        assert!(header.trim_start().starts_with("group"));
        assert!(header.ends_with("max"));
        let table: Vec<&str> = lines[start + 1..].iter().take_while(|l| !l.is_empty()).copied().collect();
        assert_eq!(table.len(), 2 + 1 + 4 + 2, "header, rule, all, 4 classes, 2 tenants:\n{t}");
        for l in &table {
            assert_eq!(l.chars().count(), header.chars().count(), "misaligned {l:?}");
        }
        let max_col = header.find("max").unwrap();
        let all_row = table.iter().find(|l| l.trim_start().starts_with("all")).unwrap();
        assert!(all_row.ends_with(&human_duration(89_900.0)), "{all_row}");
        assert!(all_row.len() >= max_col);
        // Only ten unschedulable jobs are listed.
        assert!(t.contains("big9 ") && !t.contains("big10"));
    }

    fn placed() -> Report {
        use crate::fragmentation::{Fragmentation, Point};
        use crate::placement::PlacementSummary;
        use crate::slowdown::SlowdownTable;
        let fragmentation = Fragmentation {
            observed_s: 400_000,
            mean_fragmented_gpus: 12.345,
            mean_free_gpus: 40.0,
            fragmented_share_of_free: 0.308625,
            max_fragmented_gpus: 56,
            waiting_share: 0.4,
            blocked_with_free_gpus_share: 0.032,
            series: vec![Point { t: 0, duration_s: 400_000, fragmented_gpus: 12.345, free_gpus: 40.0 }],
        };
        report().with_placement(PlacementSummary::new(&outcomes(), &SlowdownTable::default(), fragmentation))
    }

    #[test]
    fn placement_comes_last_in_the_json_and_only_when_added() {
        assert!(!report().to_json().contains("\"placement\""));
        let json = placed().to_json();
        assert_eq!(json, placed().to_json());
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 6, "the two tenants add a tenants section after the placement");
        assert!(json.find("\"unschedulable\"").unwrap() < json.find("\"placement\"").unwrap());
        assert!(json.find("\"placement\"").unwrap() < json.find("\"tenants\"").unwrap());
        let p = &v["placement"];
        assert_eq!(p["mean_factor"], 0.0, "the outcomes span `host`, which a level-less table lacks");
        assert_eq!(p["levels"][0]["level"], "cluster");
        assert_eq!(p["fragmentation"]["max_fragmented_gpus"], 56);
        assert_eq!(p["fragmentation"]["series"][0]["free_gpus"], 40.0);
        // Everything before the new section is what the report without it writes.
        let without = Report { tenants: None, ..report() }.to_json();
        assert_eq!(json[..without.len() - 3], without[..without.len() - 3]);
        let untouched = Report { tenants: None, ..placed() }.to_json();
        assert_eq!(json[..untouched.len() - 3], untouched[..untouched.len() - 3]);
    }

    #[test]
    fn table_shows_the_placement_section() {
        assert!(!report().render_table().contains("Placement"));
        let t = placed().render_table();
        for needle in [
            "\nPlacement (finished gangs by the smallest domain holding all their pods)\n",
            "  span     slowdown  from     gangs  share  GPUs  GPU share\n",
            "  cluster      1.00  default      0   0.0%     0       0.0%\n",
            "  mean slowdown    0.000 (GPU-weighted 0.000)\n",
            "  fragmented GPUs  mean 12.3 (30.9% of free GPUs), max 56\n",
            "  waiting gang     40.0% of the time; 3.2% with its GPUs free\n",
        ] {
            assert!(t.contains(needle), "missing {needle:?} in\n{t}");
        }
        assert!(t.find("Placement").unwrap() < t.find("Unschedulable jobs").unwrap());
        assert_eq!(factor(1.0), "1.00");
        assert_eq!(factor(1.05), "1.05");
        assert_eq!(factor(1.0375), "1.0375");
        assert_eq!(factor(1.000001), "1.000001");
    }

    #[test]
    fn table_of_an_empty_replay() {
        let t = Report::new(ReportContext::default(), &[], 0).render_table();
        assert!(t.contains("0 (0 finished, 0 unschedulable)"));
        assert!(t.contains("makespan         0 s (0s)"));
        assert!(!t.contains("Unschedulable jobs"));
    }

    #[test]
    fn control_characters_are_escaped() {
        let mut outcomes = outcomes();
        outcomes[0].job.tenant = "evil\n\x1b[31m".to_string();
        let t = Report::new(context(), &outcomes, 128).render_table();
        assert!(!t.contains('\x1b'));
        assert!(t.contains("tenant evil\\n\\u{1b}[31m"));
    }

    #[test]
    fn human_durations() {
        assert_eq!(human_duration(0.0), "0s");
        assert_eq!(human_duration(59.0), "59s");
        assert_eq!(human_duration(60.0), "1m 00s");
        assert_eq!(human_duration(3599.0), "59m 59s");
        assert_eq!(human_duration(3600.0), "1h 00m");
        assert_eq!(human_duration(3720.0), "1h 02m");
        assert_eq!(human_duration(90_061.0), "1d 01h");
        assert_eq!(human_duration(273_600.0), "3d 04h");
        assert_eq!(human_duration(2.5), "2.5s");
        assert_eq!(human_duration(59.96), "1m 00s");
        assert_eq!(human_duration(-3.0), "0s");
        assert_eq!(human_duration(f64::NAN), "n/a");
        assert_eq!(human_duration_long(0), "0s");
        assert_eq!(human_duration_long(65), "1m 05s");
        assert_eq!(human_duration_long(7300), "2h 01m 40s");
        assert_eq!(human_duration_long(90_061), "1d 01h 01m");
        assert_eq!(human_duration_long(12 * 86_400 + 3 * 3600 + 14 * 60 + 59), "12d 03h 14m");
    }
}
