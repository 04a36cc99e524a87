//! trainyard: topology-aware gang scheduling for distributed training (CLI entry point).

mod api_cmd;
mod cli;
mod cli_docs;
mod cluster_source;
mod compare;
mod controller_cmd;
mod import_cmd;
mod inputs;
mod output;
mod place;
mod render_cmd;
mod simulate;
mod slurm_cmd;
mod sweep_cmd;
mod synth;

use clap::Parser;

/// The allocator the benchmarks measure too (`simulator/benches/contended.rs`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    match args.run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // A reader that stopped listening (`trainyard simulate | head`) is not a failure.
        Err(err) if is_broken_pipe(&err) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain()
        .any(|cause| cause.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe))
}
