//! `trainyard-fuzz`: runs the fuzz targets for a while and reports what each found.
//!
//! `trainyard-fuzz [--seconds N] [--inputs N] [--target NAME] [--seed N] [--save DIR]
//! [--trainyard BINARY]`: every target (or the one named) for N seconds or N inputs, whichever
//! ends first; failing inputs are kept under DIR (default `fuzz/regressions`). With
//! `--trainyard`, the commands' flags too, for as long again (target `flags`). Exits 1 when
//! anything failed.

use std::path::PathBuf;
use std::time::Duration;

use trainyard_fuzz::driver::{self, Budget};
use trainyard_fuzz::targets;

fn main() {
    match run() {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(message) => {
            eprintln!("error: {message}");
            std::process::exit(2);
        }
    }
}

/// Parses the flags and runs; `Ok(false)` when something failed.
fn run() -> Result<bool, String> {
    let mut budget = Budget { inputs: u64::MAX, time: Duration::from_secs(5), per_input: Duration::from_secs(2) };
    let (mut only, mut seed, mut save) = (None, 1u64, Some(PathBuf::from("fuzz/regressions")));
    let mut binary: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        let number = |text: String| text.parse::<u64>().map_err(|_| format!("{flag}: `{text}` is not a whole number"));
        match flag.as_str() {
            "--seconds" => budget.time = Duration::from_secs(number(value()?)?),
            "--inputs" => budget.inputs = number(value()?)?,
            "--seed" => seed = number(value()?)?,
            "--target" => only = Some(value()?),
            "--save" => save = Some(PathBuf::from(value()?)),
            "--no-save" => save = None,
            "--trainyard" => binary = Some(PathBuf::from(value()?)),
            "-h" | "--help" => {
                println!(
                    "trainyard-fuzz [--seconds N] [--inputs N] [--target NAME] [--seed N] [--save DIR | --no-save] \
                     [--trainyard BINARY]\n\
                     targets: {}",
                    targets::all().iter().map(|t| t.name).collect::<Vec<_>>().join(", ")
                );
                return Ok(true);
            }
            other => return Err(format!("unknown flag {other}; see --help")),
        }
    }
    let all = targets::all();
    if let Some(name) = &only
        && !all.iter().any(|t| t.name == name)
        && name != "flags"
    {
        return Err(format!("--target {name}: no such target; see --help"));
    }
    let mut clean = true;
    println!(
        "{:<16} {:>9} {:>9} {:>9} {:>7} {:>9} {:>9}",
        "target", "inputs", "read", "refused", "failed", "inputs/s", "slowest"
    );
    for target in all.iter().filter(|t| only.as_ref().is_none_or(|n| n == t.name)) {
        let report = driver::run(target, seed, &budget, save.as_deref());
        let rate = report.inputs as f64 / report.elapsed.as_secs_f64().max(1e-9);
        println!(
            "{:<16} {:>9} {:>9} {:>9} {:>7} {:>9.0} {:>8.1?}",
            report.target, report.inputs, report.accepted, report.refused, report.failed, rate, report.slowest
        );
        for failure in &report.failures {
            clean = false;
            let shown = String::from_utf8_lossy(&failure.input[..failure.input.len().min(300)]).to_string();
            println!("  {:?}: {}\n    input: {shown:?}", failure.kind, failure.detail);
        }
        clean &= report.failed == 0;
    }
    if let Some(binary) = binary.filter(|_| only.as_ref().is_none_or(|n| n == "flags")) {
        clean &= fuzz_flags(&binary, seed, &budget, save.as_deref());
    }
    if let Some(mib) = driver::peak_memory_mib() {
        println!("peak resident memory: {mib} MiB");
    }
    Ok(clean)
}

/// Fuzzes the commands' flags through `binary` within `budget`; `false` when any failed.
fn fuzz_flags(binary: &std::path::Path, seed: u64, budget: &Budget, save: Option<&std::path::Path>) -> bool {
    let mut m = trainyard_fuzz::mutate::Mutator::new(seed);
    let started = std::time::Instant::now();
    let (mut runs, mut failed, mut slowest) = (0u64, 0u64, Duration::ZERO);
    while runs < budget.inputs && started.elapsed() < budget.time {
        let args = trainyard_fuzz::flags::arguments(&mut m);
        let run = trainyard_fuzz::flags::invoke(binary, &args, Duration::from_secs(120));
        runs += 1;
        slowest = slowest.max(run.took);
        if let Some(why) = run.failure {
            failed += 1;
            println!("  flags: trainyard {}: {why}", run.args.join(" "));
            // Kept for the flag test to run again (`fuzz/regressions/flags.txt`).
            if let Some(dir) = save {
                use std::io::Write;
                let file = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("flags.txt"));
                let _ = file.and_then(|mut f| writeln!(f, "{}", run.args.join(" ")));
            }
        }
    }
    let rate = runs as f64 / started.elapsed().as_secs_f64().max(1e-9);
    println!("{:<16} {:>9} {:>9} {:>9} {:>7} {:>9.1} {:>8.1?}", "flags", runs, "", "", failed, rate, slowest);
    failed == 0
}
