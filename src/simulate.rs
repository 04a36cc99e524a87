//! `trainyard simulate`: load inputs, replay with a progress bar, print and write the report.

use std::fs;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use trainyard_policies::Explanation;
use trainyard_simulator::placement::PlacementSummary;
use trainyard_simulator::report::{Report, ReportContext};
use trainyard_simulator::{Progress, ReplayOptions, ReplayResult, replay};

use crate::cli::SimulateArgs;
use crate::inputs;
use crate::output::{Output, structured};

/// Runs one simulation. Inputs are fully read and checked before the replay starts, and
/// nothing is printed or written unless the whole replay succeeds.
pub fn run(args: &SimulateArgs) -> Result<()> {
    let cluster = args.cluster.load()?;
    let mut policy = inputs::load_policy(&args.replay.policy)?;
    if let Some(placement) = args.placement {
        policy.placement = placement;
    }
    let topo = cluster.topology();
    let slowdown = args.slowdown.clone().unwrap_or_default();
    // Checked here, before the trace is read, so that a typo fails fast.
    slowdown.resolve(topo).context("--slowdown")?;
    let options = inputs::read_options(topo, args.skip_bad_rows);
    let mut trace = inputs::load_trace(args.replay.trace.as_deref(), args.replay.format.as_deref(), &options)?;
    for warning in &trace.skipped {
        eprintln!("warning: {}: line {}: {} (row skipped)", trace.name, warning.line, warning.message);
    }
    let context = ReportContext {
        cluster: topo.name().to_string(),
        cluster_gpus: cluster.total_capacity().gpus,
        cluster_hosts: topo.host_count() as u64,
        trace: trace.name.clone(),
        trace_format: trace.format.clone(),
        policy: format!("{} (placement {})", policy.name, policy.placement),
        skipped_rows: trace.skipped.len() as u64,
    };
    let estimates = args.replay.estimates.into();
    let explain = explain_indices(&args.explain, &trace.jobs)?;
    let bar =
        progress_bar(args.quiet, trace.jobs.len() as u64, "replaying [{bar:40}] {pos}/{len} jobs {msg} ({elapsed})");
    let mut on_progress = |p: Progress| {
        bar.set_position(p.done);
        bar.set_message(format!("t={}", trainyard_simulator::report::human_duration(p.now as f64)));
    };
    let result = replay(
        cluster,
        policy,
        // The jobs move into the outcomes: no copy of the trace.
        std::mem::take(&mut trace.jobs),
        ReplayOptions {
            estimates,
            slowdown,
            explain,
            timeline: args.html.is_some(),
            failures: args.failures.model(),
            horizon_s: args.horizon,
        },
        &mut on_progress,
    );
    bar.finish_and_clear();
    let result = result.context("replay failed")?;
    let cluster_gpus = context.cluster_gpus;
    let report = Report::new(context, &result.outcomes, cluster_gpus)
        .with_placement(PlacementSummary::of(&result))
        .with_quota_usage(result.quota_usage.clone())
        .with_failures(result.failures.clone())
        .with_searches(result.searches.clone())
        .with_fleet(result.fleet.clone());
    if let Some(path) = &args.out {
        fs::write(path, report.to_json()).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = &args.html {
        let page = trainyard_simulator::html::replay_page(&report, &result);
        fs::write(path, page).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if !args.quiet {
        let text = summary(&report, &result, args)?;
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()).context("cannot write to standard output")?;
    }
    Ok(())
}

/// The summary in the format of `-o`. The structured formats carry the report exactly as `--out`
/// writes it, the explanations after it, and nothing else, so that a script can read them.
fn summary(report: &Report, result: &ReplayResult, args: &SimulateArgs) -> Result<String> {
    let explanations = result.explanations.iter().map(|(at, i, explanation)| ExplanationOut {
        at: *at,
        job: &result.outcomes[*i].job.id,
        text: explanation.to_string(),
        explanation,
    });
    if matches!(args.output, Output::Json | Output::Yaml) {
        let document = SummaryOut { report, explanations: explanations.collect() };
        return structured(&document, args.output);
    }
    let mut text = if args.output == Output::Wide { report.render_wide() } else { report.render_table() };
    if !result.explanations.is_empty() {
        text.push_str("\nExplanations (each time they changed)\n");
        for x in explanations {
            text.push_str(&format!("  t={}s {}: {}\n", x.at, x.job, x.text));
        }
    }
    text.push_str(&format!("\n{} events, {} scheduling cycles\n", result.events, result.cycles));
    if let Some(path) = &args.out {
        text.push_str(&format!("JSON report written to {}\n", path.display()));
    }
    if let Some(path) = &args.html {
        text.push_str(&format!("HTML report written to {}\n", path.display()));
    }
    Ok(text)
}

/// `simulate -o json|yaml`: the report's own fields, then the explanations.
#[derive(Serialize)]
struct SummaryOut<'a> {
    #[serde(flatten)]
    report: &'a Report,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    explanations: Vec<ExplanationOut<'a>>,
}

/// One explanation of a job, as it stood at time `at`.
#[derive(Serialize)]
struct ExplanationOut<'a> {
    at: u64,
    job: &'a str,
    /// As the table prints it.
    text: String,
    explanation: &'a Explanation,
}

/// Indices of the jobs named by `--explain`; an unknown id is an error.
fn explain_indices(ids: &[String], jobs: &[trainyard_simulator::TraceJob]) -> Result<Vec<usize>> {
    ids.iter()
        .map(|id| {
            jobs.iter()
                .position(|j| &j.id == id)
                .ok_or_else(|| anyhow::anyhow!("--explain: no job `{id}` in the trace"))
        })
        .collect()
}

/// A progress bar on a terminal, drawn as `template` after a spinner; hidden when stderr is
/// not one, `--quiet` is set or there is nothing to do.
pub(crate) fn progress_bar(quiet: bool, total: u64, template: &str) -> ProgressBar {
    if quiet || total == 0 || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(&format!("{{spinner}} {template}"))
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}
