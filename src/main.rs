//! trainyard: topology-aware gang scheduling for distributed training (CLI entry point).

mod cli;
mod inputs;
mod simulate;
mod synth;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    match args.run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
