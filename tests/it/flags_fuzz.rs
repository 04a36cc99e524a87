//! The commands' flags fuzzed through this build's binary (`trainyard-fuzz`'s generator): every
//! invocation ends in a success, a refusal or a usage error, never a panic, an abort or a run
//! without end; and every invocation a fuzz run kept (`fuzz/regressions/flags.txt`) now does.

use std::path::Path;
use std::time::Duration;

use trainyard_fuzz::flags;
use trainyard_fuzz::mutate::Mutator;

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_trainyard"))
}

#[test]
fn the_commands_flags_end_in_success_refusal_or_usage_error() {
    let mut m = Mutator::new(1);
    let runs = std::env::var("TRAINYARD_FUZZ_FLAG_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(60);
    let mut problems = Vec::new();
    for _ in 0..runs {
        let args = flags::arguments(&mut m);
        let run = flags::invoke(binary(), &args, Duration::from_secs(300));
        if let Some(why) = run.failure {
            problems.push(format!("trainyard {}: {why}", args.join(" ")));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_kept_invocation_now_ends_well() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions/flags.txt");
    let list = std::fs::read_to_string(&path).expect("fuzz/regressions/flags.txt");
    let mut problems = Vec::new();
    for line in list.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let args: Vec<String> = line.split(' ').map(str::to_string).collect();
        let run = flags::invoke(binary(), &args, Duration::from_secs(300));
        if let Some(why) = run.failure {
            problems.push(format!("trainyard {line}: {why}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
