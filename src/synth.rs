//! `trainyard trace synth`: write a deterministic synthetic trace.

use std::fs;
use std::io::{self, BufWriter, Write};

use anyhow::{Context, Result, bail};
use trainyard_simulator::trace::{self, SynthConfig};

use crate::cli::{SynthArgs, SynthFormat};

/// Generates the trace and writes it to the file or standard output.
pub fn run(args: &SynthArgs) -> Result<()> {
    // The ranges of --jobs, --tenants and --gpus-per-host are the flags' own (clap says them).
    if !(args.mean_interarrival.is_finite() && args.mean_interarrival > 0.0 && args.mean_interarrival <= 1e9) {
        bail!(
            "--mean-interarrival must be a number of seconds above 0 and at most 1e9 (31 years), not {}",
            args.mean_interarrival
        );
    }
    let config = SynthConfig {
        seed: args.seed,
        jobs: args.jobs as usize,
        tenants: args.tenants as usize,
        mean_interarrival_s: args.mean_interarrival,
        gpus_per_host: args.gpus_per_host,
        rack_level: args.rack_level.clone(),
        rich_percent: args.rich,
        gpu_layout_percent: args.gpu_layout,
    };
    let jobs = trace::synthesize(&config);
    let mut out: Box<dyn Write> = match &args.out {
        Some(path) => Box::new(BufWriter::new(
            fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => Box::new(BufWriter::new(io::stdout().lock())),
    };
    match args.format {
        SynthFormat::Csv => trace::write_csv(&jobs, &mut out)?,
        SynthFormat::Jsonl => trace::write_jsonl(&jobs, &mut out)?,
    }
    out.flush().context("cannot write the trace")?;
    Ok(())
}
