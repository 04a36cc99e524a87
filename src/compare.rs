//! `trainyard compare`: every placement policy on one trace, per gang on the same free
//! capacity and in full replays; prints the tables and optionally writes JSON.

use std::fs;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use trainyard_simulator::Slowdown;
use trainyard_simulator::compare::{CompareOptions, compare, default_slowdown};

use crate::cli::ReplayArgs;
use crate::cluster_source::ClusterArgs;
use crate::inputs;

/// Flags of `trainyard compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub replay: ReplayArgs,
    /// Runtime factors by span, `LEVEL=FACTOR,...`. Default: 1.05 for the level above hosts,
    /// 1.15 for the next, 1.25 beyond (e.g. `host=1,rack=1.05,block=1.15,cluster=1.25`).
    #[arg(long, value_name = "LEVEL=FACTOR,...")]
    pub slowdown: Option<Slowdown>,
    /// Write the comparison as JSON to this file (byte-identical for identical inputs).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// Runs the comparison. Inputs are read and checked first; nothing is printed or written
/// unless every replay succeeds.
pub fn run(args: &CompareArgs) -> Result<()> {
    let cluster = args.cluster.load()?;
    let policy = inputs::load_policy(&args.replay.policy)?;
    let topo = cluster.topology();
    let slowdown = match &args.slowdown {
        Some(s) => s.clone(),
        None => default_slowdown(topo).context("the cluster's level names do not make a default --slowdown")?,
    };
    slowdown.resolve(topo).context("--slowdown")?;
    let read = inputs::read_options(topo, false);
    let trace = inputs::load_trace(args.replay.trace.as_deref(), args.replay.format.as_deref(), &read)?;
    let mut options = CompareOptions::new(policy, slowdown);
    options.estimates = args.replay.estimates.into();
    let mut comparison = compare(cluster, &trace.jobs, &options, &mut |_, _| {}).context("replay failed")?;
    comparison.trace = trace.name;
    if let Some(path) = &args.out {
        fs::write(path, comparison.to_json()).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let mut text = comparison.render_table();
    if let Some(path) = &args.out {
        text.push_str(&format!("\nJSON comparison written to {}\n", path.display()));
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()).context("cannot write to standard output")
}
