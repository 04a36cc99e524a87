//! `trainyard trace synth`: write a deterministic synthetic trace.

use std::fs;
use std::io::{self, BufWriter, Write};

use anyhow::{Context, Result, bail};
use trainyard_simulator::trace::{self, SynthConfig};

use crate::cli::{SynthArgs, SynthFormat};

/// Generates the trace and writes it to the file or standard output.
pub fn run(args: &SynthArgs) -> Result<()> {
    if args.jobs == 0 || args.tenants == 0 || args.gpus_per_host == 0 {
        bail!("--jobs, --tenants and --gpus-per-host must be at least 1");
    }
    if !(args.mean_interarrival.is_finite() && args.mean_interarrival > 0.0) {
        bail!("--mean-interarrival must be a positive number of seconds, not {}", args.mean_interarrival);
    }
    let config = SynthConfig {
        seed: args.seed,
        jobs: args.jobs,
        tenants: args.tenants,
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
