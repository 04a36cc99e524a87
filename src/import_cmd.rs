//! `trainyard import kueue`: Kueue's queues, cohorts and topology as trainyard objects, with
//! what has no equivalent listed first.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use trainyard::kueue_import::{ImportOptions, Sourced, import};

use crate::inputs::read_objects;

/// What `trainyard import` carries over.
#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// Turn Kueue's ResourceFlavors, ClusterQueues, Cohorts, LocalQueues and Topology into
    /// trainyard Queue and Topology objects (YAML on stdout, ready for `kubectl apply -f -`),
    /// listing in comments first what has no equivalent.
    Kueue(KueueArgs),
}

/// Flags of `trainyard import kueue`.
#[derive(Debug, Args)]
pub struct KueueArgs {
    /// A YAML file of Kueue objects (several documents, or a `List`); repeat for more files.
    #[arg(short = 'f', long = "filename", value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,
    /// Resource names counted as GPUs; repeat for more (default: nvidia.com/gpu).
    #[arg(long = "gpu-resource", value_name = "NAME")]
    pub gpu_resources: Vec<String>,
}

/// Runs `trainyard import ...`.
pub fn run(command: &ImportCommand) -> Result<()> {
    let ImportCommand::Kueue(args) = command;
    let mut objects = Vec::new();
    for file in &args.files {
        for (line, value) in read_objects(file)? {
            objects.push(Sourced { origin: format!("{}:{line}", file.display()), value });
        }
    }
    if objects.is_empty() {
        bail!("no objects in {}", args.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", "));
    }
    let mut options = ImportOptions::default();
    if !args.gpu_resources.is_empty() {
        options.gpu_resources.clone_from(&args.gpu_resources);
    }
    let imported = import(&objects, &options)?;
    let text = imported.to_yaml()?;
    std::io::stdout().lock().write_all(text.as_bytes())?;
    let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    eprintln!(
        "{}{}; {} on what has no equivalent (the comments at the top)",
        plural(imported.queues.len(), "queue"),
        if imported.topology.is_some() { " and a Topology" } else { "" },
        plural(imported.notes.len(), "note")
    );
    Ok(())
}
