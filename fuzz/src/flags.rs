//! The commands' numeric and structured flags, fuzzed through the real binary: each invocation
//! names one to three flags of a command with values drawn from the absurd and the ordinary,
//! and must end in a success, a refusal (exit 1) or a usage error (exit 2), never a panic, an
//! abort or a run without end.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::mutate::Mutator;

/// Values every numeric flag is given.
const NUMBERS: [&str; 14] = [
    "0",
    "1",
    "2",
    "-1",
    "18446744073709551615",
    "18446744073709551616",
    "4294967296",
    "NaN",
    "1e308",
    "0.5",
    "abc",
    "",
    "1h",
    "7",
];

/// Values every duration flag is given.
const DURATIONS: [&str; 10] = ["0", "1s", "7m", "2000h", "90d", "1h30m", "-5m", "1e9d", "18446744073709551615s", "x"];

/// A command, its fixed arguments, and its flags with their kinds of value.
struct CommandSpec {
    args: &'static [&'static str],
    flags: &'static [(&'static str, Kind)],
}

#[derive(Clone, Copy)]
enum Kind {
    Number,
    Duration,
    Share,
    Text(&'static [&'static str]),
}

const COMMANDS: [CommandSpec; 3] = [
    CommandSpec {
        args: &["trace", "synth", "--out", "/dev/null"],
        flags: &[
            ("--seed", Kind::Number),
            ("--jobs", Kind::Number),
            ("--tenants", Kind::Number),
            ("--mean-interarrival", Kind::Number),
            ("--gpus-per-host", Kind::Number),
            ("--rich", Kind::Number),
            ("--gpu-layout", Kind::Number),
        ],
    },
    CommandSpec {
        args: &["place"],
        flags: &[
            ("--pods", Kind::Number),
            ("--gpus", Kind::Number),
            ("--cpus", Kind::Number),
            ("--memory-gib", Kind::Number),
            ("--load", Kind::Share),
            ("--seed", Kind::Number),
            ("--time-limit-ms", Kind::Number),
            ("--host-gpus", Kind::Number),
            ("--slice", Kind::Text(&[":4", "rack:0", "rack:4", "nowhere:2", "rack:-1", "rack"])),
            ("--pod-set", Kind::Text(&["w:2x8@rack", "w:0x8", "w:2x8@nowhere", ":1x1", "w:99999999999x8"])),
        ],
    },
    CommandSpec {
        args: &["simulate", "-q", "--policy", "fifo"],
        flags: &[
            ("--mtbf", Kind::Duration),
            ("--repair", Kind::Duration),
            ("--checkpoint-interval", Kind::Duration),
            ("--restart-cost", Kind::Duration),
            ("--failure-seed", Kind::Number),
            ("--horizon", Kind::Duration),
            ("--host-gpus", Kind::Number),
            ("--slowdown", Kind::Text(&["rack=1.1", "rack=0.5", "rack=NaN", "=1", "cluster=1e308", "host=1,host=2"])),
        ],
    },
];

/// What one invocation did.
#[derive(Clone, Debug)]
pub struct Invocation {
    /// The arguments.
    pub args: Vec<String>,
    /// Exit code (`None` when a signal ended it or it was stopped).
    pub code: Option<i32>,
    /// How long it ran.
    pub took: Duration,
    /// Why it failed the contract, if it did.
    pub failure: Option<String>,
}

/// One invocation's arguments.
pub fn arguments(m: &mut Mutator) -> Vec<String> {
    let spec = &COMMANDS[m.below(COMMANDS.len())];
    let mut args: Vec<String> = spec.args.iter().map(|a| a.to_string()).collect();
    // `--mtbf` only with the flags that need it: the others require it.
    for _ in 0..1 + m.below(3) {
        let (flag, kind) = spec.flags[m.below(spec.flags.len())];
        let value = match kind {
            Kind::Number => *m.pick(&NUMBERS),
            Kind::Duration => *m.pick(&DURATIONS),
            Kind::Share => *m.pick(&["0", "0.5", "0.99", "1", "-0.1", "NaN", "2"]),
            Kind::Text(values) => *m.pick(values),
        };
        args.push(format!("{flag}={value}"));
    }
    if spec.args[0] == "simulate"
        && args.iter().any(|a| {
            a.starts_with("--repair")
                || a.starts_with("--checkpoint")
                || a.starts_with("--restart")
                || a.starts_with("--failure")
        })
        && !args.iter().any(|a| a.starts_with("--mtbf"))
        && m.chance(70)
    {
        args.push(format!("--mtbf={}", m.pick(&DURATIONS)));
    }
    args
}

/// Runs `binary` with `args`, stopping it after `limit`.
pub fn invoke(binary: &Path, args: &[String], limit: Duration) -> Invocation {
    let started = Instant::now();
    let child =
        Command::new(binary).args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            let failure = Some(format!("cannot run {}: {e}", binary.display()));
            return Invocation { args: args.to_vec(), code: None, took: started.elapsed(), failure };
        }
    };
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if started.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(_) => break None,
        }
    };
    let took = started.elapsed();
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        use std::io::Read;
        let _ = pipe.read_to_string(&mut stderr);
    }
    let code = status.and_then(|s| s.code());
    let failure = match (status, code) {
        (None, _) => Some(format!("still running after {limit:?}")),
        (Some(_), None) => Some("ended by a signal (an abort?)".to_string()),
        _ if stderr.contains("panicked") => Some(format!("panicked: {}", stderr.lines().next().unwrap_or_default())),
        (Some(_), Some(0..=2)) => None,
        (Some(_), Some(other)) => Some(format!("exit status {other}: {}", stderr.lines().next().unwrap_or_default())),
    };
    Invocation { args: args.to_vec(), code, took, failure }
}
